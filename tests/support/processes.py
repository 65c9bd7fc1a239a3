"""Run ``loopwarden`` as a real process, the way a user does."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import httpx

from tests.support.waiting import PATIENCE_SECS, wait_for


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawn(
    args: Sequence[str], env: dict[str, str] | None = None, log: Path | None = None, cwd: Path | None = None
) -> subprocess.Popen[str]:
    """``python -m proxy ARGS`` with the test's interpreter; stderr captured. Its metrics
    listener takes a free port (``LOOPWARDEN_METRICS_PORT=0``) unless ``env`` or ARGS say otherwise.

    Under load a proxy logs more than a pipe holds, and a full pipe would block it: pass
    ``log`` to send stderr to that file instead.
    """
    stderr = subprocess.PIPE if log is None else log.open("w")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "proxy", *args],
            env={**os.environ, "LOOPWARDEN_METRICS_PORT": "0", **(env or {})},
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            cwd=cwd,
        )
    finally:
        if log is not None:
            stderr.close()  # type: ignore[union-attr]


def wait_healthy(
    url: str, process: subprocess.Popen[str], log: Path | None = None, within: float = PATIENCE_SECS
) -> None:
    """Poll ``{url}/healthz`` until it answers 200 (up to a minute: a busy machine starts a
    process slowly). A process that exits or never gets healthy fails the test with its log
    (its stderr, or the ``log`` file :func:`spawn` was given)."""

    def healthy_or_gone() -> bool:
        if process.poll() is not None:
            return True
        try:
            return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    if wait_for(healthy_or_gone, within=within, interval=0.05) and process.poll() is None:
        return
    exited = process.poll() is not None
    what = f"exited early with {process.returncode}" if exited else f"was not healthy in {within:g} s"
    raise RuntimeError(f"proxy {what}; its log:\n{_log_of(process, log)}")


def _log_of(process: subprocess.Popen[str], log: Path | None) -> str:
    """What the process wrote to stderr, stopping it first when it still runs (the pipe ends then)."""
    if process.poll() is None:
        process.kill()
    if log is not None:
        process.wait(10)
        return log.read_text() if log.exists() else "(no log file)"
    _, stderr = process.communicate(timeout=10)
    return stderr or "(nothing on stderr)"


FAST_UPSTREAM = Path(__file__).parents[1] / "bench" / "fast_upstream.py"


def serve_over_fast_upstream(
    processes: list[subprocess.Popen[str]],
    args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    log: Path | None = None,
) -> str:
    """The benchmark's fast upstream and ``loopwarden serve ARGS`` in front of it, as real
    processes (added to ``processes`` to be killed after the test); returns the proxy's URL."""
    upstream_port = proxy_port = free_port()
    while proxy_port == upstream_port:
        proxy_port = free_port()
    fast = subprocess.Popen(
        [sys.executable, str(FAST_UPSTREAM), "--port", str(upstream_port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    processes.append(fast)
    upstream = f"http://127.0.0.1:{upstream_port}/v1"
    proxy = spawn(
        ["serve", "--upstream", upstream, "--port", str(proxy_port), "--log-level", "warning", *args], env, log
    )
    processes.append(proxy)
    url = f"http://127.0.0.1:{proxy_port}"
    wait_healthy(url, proxy, log)
    return url

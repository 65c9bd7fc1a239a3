"""Run ``loopwarden`` as a real process, the way a user does."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import httpx

from tests.support.waiting import PATIENCE_SECS, wait_for

_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
_SPAN = 12_000  # ports below the kernel's ephemeral range that tests pick from
_WORKERS = 8  # the span is cut in this many slices, one per xdist worker


def free_port() -> int:
    """A port free now, below the kernel's ephemeral range and in this xdist worker's own slice.

    A port the kernel hands out for ``bind(0)`` is handed out again: a process started
    meanwhile (another proxy's metrics listener on port 0, an outgoing connection) can take it
    before the server meant for it binds, and the test then talks to the wrong server. No port
    of the ephemeral range is ever picked here, and no two workers share a slice."""
    low = int(_EPHEMERAL.read_text().split()[0]) if _EPHEMERAL.exists() else 32768
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    width = _SPAN // _WORKERS
    first = low - _SPAN + (int(worker) if worker.isdigit() else 0) % _WORKERS * width
    for port in random.sample(range(first, first + width), width):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {first}..{first + width - 1}")


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
            answer = httpx.get(f"{url}/healthz", timeout=2)
        except httpx.TransportError:
            return False
        # Another server on the port (a metrics listener answers any path) is not this proxy.
        return answer.status_code == 200 and answer.headers.get("content-type") == "application/json"

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

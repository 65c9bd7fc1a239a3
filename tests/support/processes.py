"""Run ``loopwarden`` as a real process, the way a user does."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawn(args: Sequence[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``python -m proxy ARGS`` with the test's interpreter; stderr captured."""
    return subprocess.Popen(
        [sys.executable, "-m", "proxy", *args],
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_healthy(url: str, process: subprocess.Popen[str], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"proxy exited early: {process.stderr.read() if process.stderr else ''}")
        try:
            if httpx.get(f"{url}/healthz", timeout=0.5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError("proxy did not become healthy")

"""Time to first byte of a streamed reply: direct to the upstream vs. through the proxy.

Starts ``fast_upstream.py`` and ``loopwarden serve`` (memory state, or Redis state with
``--redis-url``) as separate processes, then sends sequential streamed requests over one
keep-alive connection each and times the first body byte. Two cases: a plain text stream
(nothing to hold: the proxy should add almost nothing) and a tool-call stream (held back
until the call is checked).

    .venv/bin/python tests/bench/ttfb.py --requests 2000
"""

from __future__ import annotations

import argparse
import http.client
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from run_bench import BODIES, REQUEST_HEADERS, path_of  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def start_upstream(port: int) -> subprocess.Popen[bytes]:
    """The fast fake upstream, as its own process."""
    return subprocess.Popen([sys.executable, str(BENCH_DIR / "fast_upstream.py"), "--port", str(port)])


def start_proxy(
    upstream_port: int,
    port: int,
    wrapper: Sequence[str] = (),
    redis_url: str | None = None,
    *,
    log_level: str = "info",
    tree: Path | None = None,
) -> subprocess.Popen[bytes]:
    """``loopwarden serve`` in front of it (at ``log_level``, by default the default setting;
    its log to /dev/null, as a service's goes to a collector), under ``wrapper`` if any; memory
    state, or Redis state at ``redis_url``; run from ``tree`` (default: this one)."""
    tree = tree or BENCH_DIR.parents[1]
    return subprocess.Popen(
        [
            *wrapper,
            sys.executable,
            "-m",
            "proxy",
            "serve",
            "--upstream",
            f"http://127.0.0.1:{upstream_port}/v1",
            "--port",
            str(port),
            "--log-level",
            log_level,
            "--metrics-port",
            "0",
            *(("--redis-url", redis_url) if redis_url else ()),
        ],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        stderr=subprocess.DEVNULL,
    )


def first_byte_times(port: int, name: str, count: int) -> list[float]:
    """Seconds from sending each request (body ``name``) to reading the first byte of its body."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    body, path = BODIES[name], path_of(name)
    times = []
    for _ in range(count):
        started = time.perf_counter()
        connection.request("POST", path, body=body, headers=REQUEST_HEADERS)
        response = connection.getresponse()
        first = response.read1(1)
        times.append(time.perf_counter() - started)
        if not first:
            raise RuntimeError("empty body")
        response.read()
    connection.close()
    return times


def summary(times: list[float]) -> str:
    ordered = sorted(times)
    p50 = statistics.median(ordered) * 1000
    p99 = ordered[int(len(ordered) * 0.99) - 1] * 1000
    return f"p50 {p50:.3f} ms  p99 {p99:.3f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--redis-url", help="Serve with Redis state here (default: memory state).")
    parser.add_argument("--bodies", default="stream,stream-tools,responses-stream,responses-stream-tools")
    parser.add_argument("--log-level", default="info", help="The proxy's --log-level (default: info, the default).")
    parser.add_argument("--tree", type=Path, help="Run the proxy from this tree (default: this one).")
    args = parser.parse_args()
    upstream_port, proxy_port = free_port(), free_port()
    upstream = start_upstream(upstream_port)
    proxy = start_proxy(upstream_port, proxy_port, redis_url=args.redis_url, log_level=args.log_level, tree=args.tree)
    try:
        wait_ready(upstream_port)
        wait_ready(proxy_port)
        for name in args.bodies.split(","):
            first_byte_times(proxy_port, name, 200)  # warm-up
            direct = first_byte_times(upstream_port, name, args.requests)
            proxied = first_byte_times(proxy_port, name, args.requests)
            added = (statistics.median(proxied) - statistics.median(direct)) * 1000
            print(f"{name:13s} direct {summary(direct)} | proxy {summary(proxied)} | added p50 {added:.3f} ms")
    finally:
        for process in (proxy, upstream):
            process.send_signal(signal.SIGTERM)
            process.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

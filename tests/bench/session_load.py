"""A long load of distinct sessions: the proxy's memory and whether its throughput holds.

Every request carries a new ``X-Session-Id`` (as one session per request is the worst case
for a store), sent by ``wrk`` in ``--rounds`` rounds of ``--duration`` seconds each. After
each round it prints req/s, p50 and p99, and the proxy's resident memory (VmRSS, and the
peak VmHWM at the end), so a store that keeps every session (or slows down as it fills)
shows up as a growing RSS or a third round slower than the first.

    .venv/bin/python tests/bench/session_load.py                          # memory state, 3 x 20 s
    .venv/bin/python tests/bench/session_load.py --redis-url redis://127.0.0.1:6390/0
    .venv/bin/python tests/bench/session_load.py --control   # each round against the floor's, just before
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from run_bench import (  # noqa: E402
    BODIES,
    HOST,
    PYTHON,
    REQUEST_HEADERS,
    REQUEST_PATH,
    Processes,
    cpu_seconds,
    free_port,
    proxy_target,
    wait_ready,
)

_MARKER = "SESSION_LOAD "
_SCRIPT = """\
wrk.method = "POST"
wrk.body = [==[{body}]==]
{headers}
local prefix, n = "{prefix}", 0

request = function()
  n = n + 1
  wrk.headers["X-Session-Id"] = prefix .. n
  return wrk.format()
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("{marker}{{\\"requests\\":%d,\\"duration_us\\":%d,\\"p50_us\\":%d,\\"p99_us\\":%d,"
    .. "\\"errors\\":%d}}\\n", summary.requests, summary.duration, latency:percentile(50),
    latency:percentile(99), e.status + e.connect + e.read + e.write + e.timeout))
end
"""


def memory_kib(pid: int, field: str) -> int:
    """A field of /proc/PID/status in KiB (VmRSS: resident now, VmHWM: the peak)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def wrk_round(
    script_dir: Path, port: int, body: bytes, prefix: str, concurrency: int, seconds: int
) -> dict[str, float]:
    headers = "\n".join(f'wrk.headers["{name}"] = "{value}"' for name, value in REQUEST_HEADERS.items())
    script = script_dir / f"{prefix}.lua"
    script.write_text(_SCRIPT.format(body=body.decode(), headers=headers, prefix=prefix, marker=_MARKER))
    argv = ["wrk", "-t1", f"-c{concurrency}", f"-d{seconds}s", "--latency", "-s", str(script)]
    done = subprocess.run(
        [*argv, f"http://{HOST}:{port}{REQUEST_PATH}"], capture_output=True, text=True, timeout=seconds + 30, check=True
    )
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith(_MARKER))
    raw: dict[str, float] = json.loads(line.removeprefix(_MARKER))
    return raw


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", help="Serve with Redis state here (default: memory state).")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=20, help="Seconds per round.")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--body", choices=tuple(BODIES), default="plain")
    parser.add_argument(
        "--control",
        action="store_true",
        help="Before each round, the same load on the stateless lean floor (lean_floor_app.py, needs '.[bench]'): "
        "the proxy's req/s and p99 are also given as ratios to it, so a machine whose speed drifts "
        "between rounds does not pass for a proxy that slows down.",
    )
    args = parser.parse_args()
    flags = ("--redis-url", args.redis_url) if args.redis_url else ()
    target = proxy_target("proxy", "loopwarden serve", *flags)
    assert target.command is not None
    with tempfile.TemporaryDirectory() as work, Processes(Path(work)) as processes:
        upstream_port, port = free_port(), free_port()
        upstream = processes.start(
            "upstream", [PYTHON, str(BENCH_DIR / "fast_upstream.py"), "--port", str(upstream_port)]
        )
        wait_ready(upstream, upstream_port)
        proxy = processes.start("proxy", target.command(f"http://{HOST}:{upstream_port}/v1", port))
        wait_ready(proxy, port)
        control_port = free_port() if args.control else 0
        if control_port:
            upstream_url = f"http://{HOST}:{upstream_port}/v1"
            floor_argv = [PYTHON, str(BENCH_DIR / "lean_floor_app.py"), "--upstream", upstream_url]
            floor = processes.start("floor", [*floor_argv, "--port", str(control_port)])
            wait_ready(floor, control_port)
        store = "Redis" if args.redis_url else "memory"
        print(f"{store} state, c={args.concurrency}, {args.rounds} x {args.duration} s of distinct sessions")
        print(f"start: RSS {memory_kib(proxy.pid, 'VmRSS') / 1024:.0f} MB")
        sessions = 0
        for round_ in range(1, args.rounds + 1):
            control = None
            if control_port:
                control = wrk_round(
                    Path(work), control_port, BODIES[args.body], f"c{round_}-", args.concurrency, args.duration
                )
            cpu = cpu_seconds(proxy.pid)
            load = wrk_round(Path(work), port, BODIES[args.body], f"r{round_}-", args.concurrency, args.duration)
            requests = int(load["requests"])
            sessions += requests
            cpu_us = (cpu_seconds(proxy.pid) - cpu) / max(1, requests) * 1e6
            rps = requests / (load["duration_us"] / 1e6)
            print(
                f"round {round_}: {rps:7.0f} req/s  p50 {load['p50_us'] / 1000:6.2f} ms"
                f"  p99 {load['p99_us'] / 1000:6.2f} ms  {cpu_us:5.0f} µs CPU/req  errors {int(load['errors'])}"
                f"  | {sessions:,} sessions so far, RSS {memory_kib(proxy.pid, 'VmRSS') / 1024:.0f} MB",
                flush=True,
            )
            if control is not None:
                floor_rps = control["requests"] / (control["duration_us"] / 1e6)
                print(
                    f"         the floor just before: {floor_rps:7.0f} req/s  p99 {control['p99_us'] / 1000:6.2f} ms"
                    f"  -> proxy/floor: req/s {rps / floor_rps:.2f}, p99 {load['p99_us'] / control['p99_us']:.2f}",
                    flush=True,
                )
        print(f"peak RSS {memory_kib(proxy.pid, 'VmHWM') / 1024:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""One worker process against two (`loopwarden serve --reuse-port`, Redis state), interleaved.

Starts the fast fake upstream once, then for each round runs the proxy as 1 and as 2
processes sharing one port (SO_REUSEPORT, metrics merged through PROMETHEUS_MULTIPROC_DIR),
puts ``wrk`` on it, and prints req/s, p50, p99 and the workers' CPU per request. Rounds
alternate 1 and 2 workers, so a machine shared with other work slows both alike; read the
medians. Needs a Redis for the workers to share (give it a private one: sessions are written).

    .venv/bin/python tests/bench/workers.py --redis-url redis://127.0.0.1:6390/0 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import run_bench  # noqa: E402
from run_bench import HOST, PYTHON, Processes, Server, cpu_seconds, free_port, proxy_target, wait_ready  # noqa: E402


def start_workers(
    processes: Processes,
    count: int,
    upstream: str,
    port: int,
    redis_url: str,
    metrics_dir: Path,
    cpus: list[str] | None = None,
) -> list[Server]:
    """``count`` workers on one port; worker n pinned to ``cpus[n % len(cpus)]`` when given."""
    target = proxy_target("proxy", "loopwarden serve", "--reuse-port", "--redis-url", redis_url)
    assert target.command is not None
    for stale in metrics_dir.glob("*.db"):
        stale.unlink()
    env = {"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    workers = [
        processes.start(
            f"worker{n}", run_bench.pinned(target.command(upstream, port), cpus[n % len(cpus)] if cpus else None), env
        )
        for n in range(count)
    ]
    for worker in workers:
        wait_ready(worker, port)
    return workers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--sessions", choices=("derived", "unique"), default="unique")
    parser.add_argument("--body", choices=tuple(run_bench.BODIES), default="plain")
    parser.add_argument(
        "--worker-cpus", help="taskset -c list per worker, ';'-separated (e.g. '0;1': worker 0 on CPU 0, worker 1 on 1)"
    )
    parser.add_argument("--load-cpus", help="taskset -c list for wrk and the fake upstream (e.g. 1).")
    args = parser.parse_args()
    run_bench.REQUEST_BODY = run_bench.BODIES[args.body]
    run_bench.REQUEST_PATH = run_bench.path_of(args.body)
    cpus = args.worker_cpus.split(";") if args.worker_cpus else None
    results: dict[int, list[tuple[float, float, float, float]]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory() as work, Processes(Path(work)) as processes:
        metrics_dir = Path(work) / "metrics"
        metrics_dir.mkdir()
        generator = run_bench.wrk_generator(Path(work), args.sessions, args.load_cpus)
        upstream_port = free_port()
        upstream = processes.start(
            "upstream",
            run_bench.pinned(
                [PYTHON, str(BENCH_DIR / "fast_upstream.py"), "--port", str(upstream_port)], args.load_cpus
            ),
        )
        wait_ready(upstream, upstream_port)
        print(
            f"c={args.concurrency}, {args.duration} s per run, {args.sessions} sessions, body {args.body}, "
            f"Redis state, workers on {cpus or 'any CPU'}, wrk and upstream on {args.load_cpus or 'any CPU'}"
        )
        for round_ in range(1, args.rounds + 1):
            for count in (1, 2):
                port = free_port()
                workers = start_workers(
                    processes, count, f"http://{HOST}:{upstream_port}/v1", port, args.redis_url, metrics_dir, cpus
                )
                generator(port, args.concurrency, 1)  # warm-up
                before = sum(cpu_seconds(w.pid) for w in workers)
                load = generator(port, args.concurrency, args.duration)
                cpu_us = (sum(cpu_seconds(w.pid) for w in workers) - before) / max(1, load.requests) * 1e6
                for worker in workers:
                    processes.stop(worker)
                failed = load.non_2xx + load.socket_errors
                results[count].append((load.rps, load.p50_ms, load.p99_ms, cpu_us))
                print(
                    f"round {round_}, {count} worker(s): {load.rps:7.0f} req/s  p50 {load.p50_ms:6.2f} ms  "
                    f"p99 {load.p99_ms:6.2f} ms  {cpu_us:5.0f} µs CPU/req  failed {failed}",
                    flush=True,
                )
    medians = {
        count: [statistics.median(column) for column in zip(*rows, strict=True)] for count, rows in results.items()
    }
    for count, (rps, p50, p99, cpu) in medians.items():
        print(
            f"median, {count} worker(s): {rps:7.0f} req/s  p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  {cpu:5.0f} µs CPU/req"
        )
    print(f"2 workers / 1 worker: {medians[2][0] / medians[1][0]:.2f}x req/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

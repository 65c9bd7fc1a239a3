"""Several `loopwarden serve --reuse-port` processes share one API port and one metrics port:
the kernel spreads connections over them, and any of them answers a scrape with every
worker's counts (PROMETHEUS_MULTIPROC_DIR)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from prometheus_client.multiprocess import MultiProcessCollector

from tests.support.processes import free_port, spawn, wait_healthy
from tests.support.waiting import PATIENCE_SECS, wait_for

pytestmark = pytest.mark.slow  # starts loopwarden as a process of its own

REQUESTS = 60


def _served(metrics_port: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
    return sum(
        float(value)
        for value in re.findall(r'^loopwarden_requests_total\{[^}]*status="2xx"[^}]*\} (\S+)$', text, re.MULTILINE)
    )


def _served_by(directory: Path, pid: int) -> float:
    """The requests one worker answered, from its own file of samples."""
    metrics = MultiProcessCollector.merge([str(directory / f"counter_{pid}.db")], accumulate=True)
    return sum(
        sample.value
        for metric in metrics
        for sample in metric.samples
        if sample.name == "loopwarden_requests_total" and sample.labels.get("status") == "2xx"
    )


def test_two_workers_share_the_port_and_a_scrape_counts_both(upstream, private_redis, processes, tmp_path):
    port, metrics_port = free_port(), free_port()
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "LOOPWARDEN_METRICS_PORT": str(metrics_port)}
    argv = ["serve", "--upstream", upstream.url, "--port", str(port), "--redis-url", private_redis.url, "--reuse-port"]
    workers = [spawn(argv, env) for _ in range(2)]
    processes.extend(workers)
    url = f"http://127.0.0.1:{port}"
    for worker in workers:
        wait_healthy(url, worker)

    statuses = [
        httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": f"task {n}"}]},
            headers={"Authorization": "Bearer sk-w", "X-Session-Id": f"w{n}"},
            timeout=10,
        ).status_code
        for n in range(REQUESTS)  # a new connection each: the kernel picks a worker each time
    ]
    # A request is counted just after its response is sent: let the last count land first.
    wait_for(lambda: _served(metrics_port) >= REQUESTS, interval=0.05)
    shares = [_served_by(tmp_path, worker.pid) for worker in workers]

    assert statuses == [200] * REQUESTS
    assert min(shares) > 0  # both served (all 60 on one: odds of 2 in 10^18)
    assert sum(shares) == _served(metrics_port) == REQUESTS
    workers[0].terminate()
    workers[0].wait(PATIENCE_SECS)
    after = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "one more"}]},
        headers={"Authorization": "Bearer sk-w"},
        timeout=10,
    )
    assert after.status_code == 200  # the other worker still holds the port

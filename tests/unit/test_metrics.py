"""Metrics exposition."""

from __future__ import annotations

import subprocess
import sys

from proxy.metrics import Metrics


def test_metrics_merge_worker_processes_in_multiprocess_mode(tmp_path):
    script = (
        "from proxy.metrics import Metrics\n"
        "m = Metrics()\n"
        "m.terminations.labels('t', 'p', 'loop').inc()\n"
        "print(m.exposition().decode())\n"
    )
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    runs = [
        subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        for _ in range(2)
    ]

    assert 'loopwarden_terminations_total{policy="p",reason="loop",tenant="t"} 2.0' in runs[-1].stdout


def test_a_remembered_child_is_the_same_series_as_labels():
    metrics = Metrics()

    metrics.of(metrics.upstream_calls, "acme", "default", "agent").inc()
    metrics.of(metrics.upstream_calls, "acme", "default", "agent").inc()

    assert metrics.upstream_calls.labels("acme", "default", "agent")._value.get() == 2

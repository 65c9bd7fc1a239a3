"""Metrics exposition."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.metrics import MetricWrapperBase

from proxy.observe.metrics import Metrics


@pytest.mark.timeout(300)  # two interpreters importing the proxy: seconds idle, most of a minute on a busy machine
def test_metrics_merge_worker_processes_in_multiprocess_mode(tmp_path):
    script = (
        "from proxy.observe.metrics import Metrics\n"
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


OBSERVABILITY = (Path(__file__).parents[3] / "docs" / "observability.md").read_text()
_DOCUMENTED = re.compile(r"`(loopwarden_[a-z_]+)(?:\{([a-z_,]*)\})?`")


def _documented_series() -> dict[str, tuple[str, ...]]:
    table = OBSERVABILITY.split("**Metrics**", 1)[1].split("\n\n", 2)[1]
    return {name: tuple(labels.split(",")) if labels else () for name, labels in _DOCUMENTED.findall(table)}


def _exposed_series() -> dict[str, tuple[str, ...]]:
    metrics = Metrics()
    exposed = {}
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            suffix = "_total" if value._type == "counter" else ""
            exposed[value._name + suffix] = tuple(value._labelnames)
    return exposed


def test_the_observability_page_documents_every_metric_with_its_exact_labels():
    documented, exposed = _documented_series(), _exposed_series()

    assert {name: sorted(labels) for name, labels in documented.items()} == {
        name: sorted(labels) for name, labels in exposed.items()
    }


def test_a_scrape_carries_no_created_series():
    metrics = Metrics()
    metrics.terminations.labels("acme", "default", "loop").inc()
    metrics.overhead.labels("chat").observe(0.001)

    scraped = metrics.exposition().decode()

    assert "loopwarden_terminations_total{" in scraped
    assert "_created" not in scraped

"""Metrics exposition."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
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


def _samples(registry: CollectorRegistry) -> list[tuple[str, list[tuple[str, str]], str]]:
    return sorted(
        (sample.name, sorted(sample.labels.items()), repr(sample.value))
        for family in registry.collect()
        for sample in family.samples
    )


def test_the_proxy_series_count_what_prometheus_client_counts():
    """The series' quick sampling paths (straight to the value, the bucket by bisection) add
    up to what the library's own counters, gauges and histograms add up to, bucket by bucket."""
    ours, library = Metrics(), CollectorRegistry()
    counter = Counter("loopwarden_upstream_calls", "c", ["tenant", "policy", "purpose"], registry=library)
    gauge = Gauge("loopwarden_in_flight_requests", "g", registry=library, multiprocess_mode="livesum")
    histogram = Histogram(
        "loopwarden_overhead_seconds", "h", ["route"], buckets=ours.overhead._kwargs["buckets"], registry=library
    )
    amounts = [0, 0.0001, 0.0002, 0.00021, 0.001, 0.0049, 0.005, 0.25, 0.2500001, 7, math.inf, -1]
    for route, observed in (("chat", amounts), ("nan", [math.nan, 0.001])):
        for amount in observed:
            ours.of(ours.overhead, route).observe(amount)
            histogram.labels(route).observe(amount)
    for amount in (1, 2.5, 0):
        ours.of(ours.upstream_calls, "t", "p", "agent").inc(amount)
        counter.labels("t", "p", "agent").inc(amount)
    for change in (1, 1, -1, 3):
        (ours.in_flight.inc if change > 0 else ours.in_flight.dec)(abs(change))
        (gauge.inc if change > 0 else gauge.dec)(abs(change))

    mine = [
        s
        for s in _samples(ours.registry)
        if s[0].startswith(("loopwarden_upstream_calls", "loopwarden_in_", "loopwarden_overhead"))
    ]
    assert mine == _samples(library)


@pytest.mark.parametrize("metric", ["upstream_calls", "overhead"])
def test_a_labelled_series_sampled_without_its_labels_fails_as_in_prometheus_client(metric):
    series = getattr(Metrics(), metric)

    with pytest.raises(ValueError, match="missing label values"):
        series.inc() if metric == "upstream_calls" else series.observe(1)


def test_a_counter_refuses_a_negative_amount_as_in_prometheus_client():
    metrics = Metrics()

    with pytest.raises(ValueError, match="non-negative"):
        metrics.of(metrics.upstream_calls, "t", "p", "agent").inc(-1)

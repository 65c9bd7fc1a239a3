"""Every Prometheus object of the proxy, in one place.

Labels are bounded: tenant, policy, kind or reason, never session ids or free text.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from threading import Lock
from typing import TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
    multiprocess,
)
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.values import MutexValue

__all__ = ["Metrics"]


_Metric = TypeVar("_Metric", bound=MetricWrapperBase)

# No ``*_created`` series: one more series per counter and histogram child, holding a start
# time nobody graphs (rate() needs none), doubling what every scrape carries and stores.
# prometheus_client decides it process-wide, at every scrape.
disable_created_metrics()  # type: ignore[no-untyped-call]
_MAX_CHILDREN = 10_000

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_OVERHEAD_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)


def _lock_of(value: object) -> Lock | None:
    """The lock of a value held in this process (``MutexValue``), whose amount a sample may add
    to under that lock itself, as ``MutexValue.inc`` does; None for any other kind (the
    multiprocess mode's files), which is left to the library."""
    return value._lock if type(value) is MutexValue else None


class _Counter(Counter):
    """A counter whose :meth:`inc` adds under its value's lock at once: prometheus_client
    checks that the series is observable in two calls more, then calls the value's ``inc``,
    on every sample. The unusual cases (a labelled parent, a negative amount, an exemplar,
    multiprocess mode) take the library's own path, and its errors."""

    _lock_: Lock | None = None

    def _metric_init(self) -> None:
        super()._metric_init()
        self._lock_ = _lock_of(self._value)

    def inc(self, amount: float = 1, exemplar: dict[str, str] | None = None) -> None:
        lock = self._lock_
        if lock is None or exemplar or amount < 0:
            super().inc(amount, exemplar)
            return
        with lock:
            self._value._value += amount


class _Gauge(Gauge):
    """A gauge whose :meth:`inc` and :meth:`dec` add under its value's lock (see :class:`_Counter`)."""

    _lock_: Lock | None = None

    def _metric_init(self) -> None:
        super()._metric_init()
        if self._multiprocess_mode not in self._MOST_RECENT_MODES:
            self._lock_ = _lock_of(self._value)

    def inc(self, amount: float = 1) -> None:
        lock = self._lock_
        if lock is None:
            super().inc(amount)
            return
        with lock:
            self._value._value += amount

    def dec(self, amount: float = 1) -> None:
        if self._lock_ is None:  # the library's own checks and errors
            super().dec(amount)
        else:
            self.inc(-amount)  # as the library's dec: an inc of the negative


class _Histogram(Histogram):
    """A histogram whose :meth:`observe` finds its bucket by bisection and adds under the
    values' locks (see :class:`_Counter`): the bucket is the first whose bound is not below
    the amount, as the library's loop finds it (none for NaN, as there)."""

    _locks: tuple[Lock, list[Lock]] | None = None

    def _metric_init(self) -> None:
        super()._metric_init()
        locks = [_lock_of(value) for value in (self._sum, *self._buckets)]
        if all(lock is not None for lock in locks):
            self._locks = (locks[0], locks[1:])  # type: ignore[assignment]

    def observe(self, amount: float, exemplar: dict[str, str] | None = None) -> None:
        locks = self._locks
        if locks is None or exemplar:
            super().observe(amount, exemplar)
            return
        with locks[0]:
            self._sum._value += amount
        bounds = self._upper_bounds
        bucket = bisect_left(bounds, amount)
        if bucket < len(bounds) and amount <= bounds[bucket]:
            with locks[1][bucket]:
                self._buckets[bucket]._value += 1


class Metrics:
    """The proxy's series, on a registry of their own (so tests and apps do not collide).

    With ``PROMETHEUS_MULTIPROC_DIR`` set (several worker processes), values go to that
    directory and :meth:`exposition` merges every process's samples.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self._children: dict[tuple[MetricWrapperBase, tuple[str, ...]], MetricWrapperBase] = {}
        self.requests = _Counter(
            "loopwarden_requests",
            "Requests answered, by route and status class (2xx, 4xx, 5xx).",
            ["tenant", "route", "status"],
            registry=self.registry,
        )
        self.upstream_attempts = _Counter(
            "loopwarden_upstream_attempts",
            "Upstream attempts, by outcome: ok, retried (a transient fault, tried again), failed; exhausted: "
            "a request whose retry budget (shared with the client's retries of it) ran out.",
            ["outcome"],
            registry=self.registry,
        )
        self.upstream_latency = _Histogram(
            "loopwarden_upstream_latency_seconds",
            "Time from sending a request upstream to its answer (headers, or the whole body).",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.overhead = _Histogram(
            "loopwarden_overhead_seconds",
            "The proxy's own time per request: wall time minus waiting on upstream and judge.",
            ["route"],
            buckets=_OVERHEAD_BUCKETS,
            registry=self.registry,
        )
        self.stream_ttfb = _Histogram(
            "loopwarden_stream_first_byte_seconds",
            "Time to the first byte of a streamed reply.",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.state_latency = _Histogram(
            "loopwarden_state_latency_seconds",
            "State store round trips, by operation.",
            ["operation"],
            buckets=(*_OVERHEAD_BUCKETS, 0.5, 1.0),
            registry=self.registry,
        )
        self.cost = _Counter(
            "loopwarden_cost_usd",
            "Cost of model calls in USD (priced models only), all kinds of call.",
            ["tenant", "policy"],
            registry=self.registry,
        )
        self.interventions = _Counter(
            "loopwarden_interventions",
            "Guard interventions that changed traffic, by the guard that decided and the kind of intervention.",
            ["tenant", "policy", "guard", "kind"],
            registry=self.registry,
        )
        self.terminations = _Counter(
            "loopwarden_terminations",
            "Sessions ended gracefully, by reason.",
            ["tenant", "policy", "reason"],
            registry=self.registry,
        )
        self.shadow_decisions = _Counter(
            "loopwarden_shadow_decisions",
            "Decisions taken in shadow mode (counted, not enforced), by guard and kind.",
            ["tenant", "policy", "guard", "kind"],
            registry=self.registry,
        )
        self.flags = _Counter(
            "loopwarden_flags",
            "Replies that passed despite a problem the guards could not fix (e.g. tool_args_invalid).",
            ["tenant", "policy", "kind"],
            registry=self.registry,
        )
        self.judge_verdicts = _Counter(
            "loopwarden_judge_verdicts",
            "Completion-judge outcomes: done, not_done, error, skipped, remembered (a recent verdict reused, no call).",
            ["policy", "verdict"],
            registry=self.registry,
        )
        self.judge_errors = _Counter(
            "loopwarden_judge_errors",
            "Judge calls that gave no verdict, by cause: timeout, upstream_error, unparseable, ambiguous, "
            "missing_nonce (a mock or small model that does not echo the nonce), wrong_nonce, invalid_verdict.",
            ["policy", "cause"],
            registry=self.registry,
        )
        self.judge_latency = _Histogram(
            "loopwarden_judge_latency_seconds",
            "Time the completion judge took to answer.",
            ["policy"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.tokens = _Counter(
            "loopwarden_tokens",
            "Tokens used, by direction (prompt, completion) and whose call: agent (first attempt), "
            "nudge (retries the guards asked for), judge, finalize, passthrough (what a pass-through reply "
            "reported; tenants with daily caps).",
            ["tenant", "policy", "kind", "direction"],
            registry=self.registry,
        )
        self.permission_decisions = _Counter(
            "loopwarden_permission_decisions",
            "Tool-permission decisions by rule id and action (allow, deny, deny_session).",
            ["policy", "rule", "action"],
            registry=self.registry,
        )
        self.unpriced_calls = _Counter(
            "loopwarden_unpriced_calls",
            "Calls to a model missing from pricing.yaml (counted at cost 0).",
            ["tenant", "policy"],
            registry=self.registry,
        )
        self.state_errors = _Counter(
            "loopwarden_state_errors",
            "State store failures, by operation and how the policy handled them.",
            ["operation", "fail_mode"],
            registry=self.registry,
        )
        self.state_resets = _Counter(
            "loopwarden_state_store_resets",
            "State store data losses detected (Redis restarted empty or was flushed): one per scope, "
            "the server or a Cluster slot, that found its sentinel key gone or replaced.",
            registry=self.registry,
        )
        self.upstream_calls = _Counter(
            "loopwarden_upstream_calls",
            "Upstream model calls made by the pipeline, by purpose.",
            ["tenant", "policy", "purpose"],
            registry=self.registry,
        )
        self.goal_events = _Counter(
            "loopwarden_goal_events",
            "Goal mode: goals started, continued, completed, blocked, limit_reached, updated, invalid calls.",
            ["tenant", "policy", "event"],
            registry=self.registry,
        )
        self.in_flight = _Gauge(
            "loopwarden_in_flight_requests",
            "Requests being handled right now (summed over worker processes).",
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        self.upstream_websockets = _Counter(
            "loopwarden_upstream_websockets",
            "Upstream WebSockets of client Responses sockets, by outcome: opened; refused (the upstream "
            "refused the upgrade) or unreachable: that client socket served over HTTP.",
            ["outcome"],
            registry=self.registry,
        )
        self.stream_failures = _Counter(
            "loopwarden_stream_unfinished",
            "Streamed replies that did not complete (cut, stalled, malformed, or the client left), by reason.",
            ["tenant", "policy", "reason"],
            registry=self.registry,
        )

        self.usage_estimated = _Counter(
            "loopwarden_usage_estimated",
            "Streamed replies metered by an estimate (about 4 bytes a token) because the upstream "
            "reported no usage, by reason: unfinished (cut before its usage chunk) or no_usage_chunk "
            "(complete, from an upstream that ignores stream_options.include_usage).",
            ["tenant", "policy", "reason"],
            registry=self.registry,
        )

        self.endings_shared = _Counter(
            "loopwarden_endings_shared",
            "Requests that ended while another request of their session made the ending (no summary call "
            "of their own), by answer: stored (that ending) or local (a summary built here).",
            ["tenant", "policy", "answer"],
            registry=self.registry,
        )
        self.telemetry_kept = _Counter(
            "loopwarden_telemetry_answered_locally",
            "Claude Code telemetry batches answered by the proxy instead of forwarded (the tenant does not "
            "allow forwarding; see forward_telemetry).",
            ["tenant"],
            registry=self.registry,
        )
        self.budget_grants = _Counter(
            "loopwarden_budget_grants",
            "Budget grants the sessions API made (PATCH /v1/loopwarden/sessions/{id}), by budget: steps, "
            "tokens, cost_usd, active_secs.",
            ["tenant", "policy", "budget"],
            registry=self.registry,
        )
        self.sessions_evicted = _Counter(
            "loopwarden_sessions_evicted",
            "In-memory sessions dropped because their tenant held more than the cap (least recently used first).",
            ["tenant"],
            registry=self.registry,
        )
        self.timeline_dropped = _Counter(
            "loopwarden_timeline_dropped",
            "Timeline events over a session's cap (what=timeline) and sessions over a tenant's list cap "
            "(what=sessions), dropped oldest first.",
            ["tenant", "what"],
            registry=self.registry,
        )

    def of(self, metric: _Metric, *labels: str) -> _Metric:
        """``metric.labels(*labels)``, remembered: ``labels`` validates and takes a lock on
        every call (about 3 µs), and the proxy touches a dozen series per request."""
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            if len(self._children) >= _MAX_CHILDREN:
                self._children.clear()
            child = self._children[key] = metric.labels(*labels)
        return child  # type: ignore[return-value]

    def scrape_registry(self) -> CollectorRegistry:
        """What a scrape reads: this registry, or in multiprocess mode every worker's samples merged."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            merged = CollectorRegistry()
            multiprocess.MultiProcessCollector(merged)  # type: ignore[no-untyped-call]
            return merged
        return self.registry

    def exposition(self) -> bytes:
        """The text format of a scrape (every worker's samples in multiprocess mode)."""
        return generate_latest(self.scrape_registry())

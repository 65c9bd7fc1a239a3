"""Every Prometheus object of the proxy, in one place.

Labels are bounded: tenant, policy, kind or reason, never session ids or free text.
"""

from __future__ import annotations

import os
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

__all__ = ["Metrics"]


_Metric = TypeVar("_Metric", bound=MetricWrapperBase)

# No ``*_created`` series: one more series per counter and histogram child, holding a start
# time nobody graphs (rate() needs none), doubling what every scrape carries and stores.
# prometheus_client decides it process-wide, at every scrape.
disable_created_metrics()  # type: ignore[no-untyped-call]
_MAX_CHILDREN = 10_000

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_OVERHEAD_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)


class Metrics:
    """The proxy's series, on a registry of their own (so tests and apps do not collide).

    With ``PROMETHEUS_MULTIPROC_DIR`` set (several worker processes), values go to that
    directory and :meth:`exposition` merges every process's samples.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self._children: dict[tuple[int, tuple[str, ...]], MetricWrapperBase] = {}
        self.requests = Counter(
            "loopwarden_requests",
            "Requests answered, by route and status class (2xx, 4xx, 5xx).",
            ["tenant", "route", "status"],
            registry=self.registry,
        )
        self.upstream_attempts = Counter(
            "loopwarden_upstream_attempts",
            "Upstream attempts, by outcome: ok, retried (a transient fault, tried again), failed; exhausted: "
            "a request whose retry budget (shared with the client's retries of it) ran out.",
            ["outcome"],
            registry=self.registry,
        )
        self.upstream_latency = Histogram(
            "loopwarden_upstream_latency_seconds",
            "Time from sending a request upstream to its answer (headers, or the whole body).",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.overhead = Histogram(
            "loopwarden_overhead_seconds",
            "The proxy's own time per request: wall time minus waiting on upstream and judge.",
            ["route"],
            buckets=_OVERHEAD_BUCKETS,
            registry=self.registry,
        )
        self.stream_ttfb = Histogram(
            "loopwarden_stream_first_byte_seconds",
            "Time to the first byte of a streamed reply.",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.state_latency = Histogram(
            "loopwarden_state_latency_seconds",
            "State store round trips, by operation.",
            ["operation"],
            buckets=(*_OVERHEAD_BUCKETS, 0.5, 1.0),
            registry=self.registry,
        )
        self.cost = Counter(
            "loopwarden_cost_usd",
            "Cost of model calls in USD (priced models only), all kinds of call.",
            ["tenant", "policy"],
            registry=self.registry,
        )
        self.interventions = Counter(
            "loopwarden_interventions",
            "Guard interventions that changed traffic, by the guard that decided and the kind of intervention.",
            ["tenant", "policy", "guard", "kind"],
            registry=self.registry,
        )
        self.terminations = Counter(
            "loopwarden_terminations",
            "Sessions ended gracefully, by reason.",
            ["tenant", "policy", "reason"],
            registry=self.registry,
        )
        self.shadow_decisions = Counter(
            "loopwarden_shadow_decisions",
            "Decisions taken in shadow mode (counted, not enforced), by guard and kind.",
            ["tenant", "policy", "guard", "kind"],
            registry=self.registry,
        )
        self.flags = Counter(
            "loopwarden_flags",
            "Replies that passed despite a problem the guards could not fix (e.g. tool_args_invalid).",
            ["tenant", "policy", "kind"],
            registry=self.registry,
        )
        self.judge_verdicts = Counter(
            "loopwarden_judge_verdicts",
            "Completion-judge outcomes: done, not_done, error, skipped, remembered (a recent verdict reused, no call).",
            ["policy", "verdict"],
            registry=self.registry,
        )
        self.judge_errors = Counter(
            "loopwarden_judge_errors",
            "Judge calls that gave no verdict, by cause: timeout, upstream_error, unparseable, ambiguous, "
            "missing_nonce (a mock or small model that does not echo the nonce), wrong_nonce, invalid_verdict.",
            ["policy", "cause"],
            registry=self.registry,
        )
        self.judge_latency = Histogram(
            "loopwarden_judge_latency_seconds",
            "Time the completion judge took to answer.",
            ["policy"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.tokens = Counter(
            "loopwarden_tokens",
            "Tokens used, by direction (prompt, completion) and whose call: agent (first attempt), "
            "nudge (retries the guards asked for), judge, finalize, passthrough (what a pass-through reply "
            "reported; tenants with daily caps).",
            ["tenant", "policy", "kind", "direction"],
            registry=self.registry,
        )
        self.permission_decisions = Counter(
            "loopwarden_permission_decisions",
            "Tool-permission decisions by rule id and action (allow, deny, deny_session).",
            ["policy", "rule", "action"],
            registry=self.registry,
        )
        self.unpriced_calls = Counter(
            "loopwarden_unpriced_calls",
            "Calls to a model missing from pricing.yaml (counted at cost 0).",
            ["tenant", "policy"],
            registry=self.registry,
        )
        self.state_errors = Counter(
            "loopwarden_state_errors",
            "State store failures, by operation and how the policy handled them.",
            ["operation", "fail_mode"],
            registry=self.registry,
        )
        self.state_resets = Counter(
            "loopwarden_state_store_resets",
            "State store data losses detected (Redis restarted empty or was flushed): one per scope, "
            "the server or a Cluster slot, that found its sentinel key gone or replaced.",
            registry=self.registry,
        )
        self.upstream_calls = Counter(
            "loopwarden_upstream_calls",
            "Upstream model calls made by the pipeline, by purpose.",
            ["tenant", "policy", "purpose"],
            registry=self.registry,
        )
        self.goal_events = Counter(
            "loopwarden_goal_events",
            "Goal mode: goals started, continued, completed, blocked, limit_reached, updated, invalid calls.",
            ["tenant", "policy", "event"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "loopwarden_in_flight_requests",
            "Requests being handled right now (summed over worker processes).",
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        self.upstream_websockets = Counter(
            "loopwarden_upstream_websockets",
            "Upstream WebSockets of client Responses sockets, by outcome: opened; refused (the upstream "
            "refused the upgrade) or unreachable: that client socket served over HTTP.",
            ["outcome"],
            registry=self.registry,
        )
        self.stream_failures = Counter(
            "loopwarden_stream_unfinished",
            "Streamed replies that did not complete (cut, stalled, malformed, or the client left), by reason.",
            ["tenant", "policy", "reason"],
            registry=self.registry,
        )

        self.usage_estimated = Counter(
            "loopwarden_usage_estimated",
            "Streamed replies metered by an estimate (about 4 bytes a token) because the upstream "
            "reported no usage, by reason: unfinished (cut before its usage chunk) or no_usage_chunk "
            "(complete, from an upstream that ignores stream_options.include_usage).",
            ["tenant", "policy", "reason"],
            registry=self.registry,
        )

        self.endings_shared = Counter(
            "loopwarden_endings_shared",
            "Requests that ended while another request of their session made the ending (no summary call "
            "of their own), by answer: stored (that ending) or local (a summary built here).",
            ["tenant", "policy", "answer"],
            registry=self.registry,
        )
        self.telemetry_kept = Counter(
            "loopwarden_telemetry_answered_locally",
            "Claude Code telemetry batches answered by the proxy instead of forwarded (the tenant does not "
            "allow forwarding; see forward_telemetry).",
            ["tenant"],
            registry=self.registry,
        )
        self.budget_grants = Counter(
            "loopwarden_budget_grants",
            "Budget grants the sessions API made (PATCH /v1/loopwarden/sessions/{id}), by budget: steps, "
            "tokens, cost_usd, active_secs.",
            ["tenant", "policy", "budget"],
            registry=self.registry,
        )
        self.sessions_evicted = Counter(
            "loopwarden_sessions_evicted",
            "In-memory sessions dropped because their tenant held more than the cap (least recently used first).",
            ["tenant"],
            registry=self.registry,
        )
        self.timeline_dropped = Counter(
            "loopwarden_timeline_dropped",
            "Timeline events over a session's cap (what=timeline) and sessions over a tenant's list cap "
            "(what=sessions), dropped oldest first.",
            ["tenant", "what"],
            registry=self.registry,
        )

    def of(self, metric: _Metric, *labels: str) -> _Metric:
        """``metric.labels(*labels)``, remembered: ``labels`` validates and takes a lock on
        every call (about 3 µs), and the proxy touches a dozen series per request."""
        key = (id(metric), labels)
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

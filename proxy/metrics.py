"""Every Prometheus object of the proxy, in one place.

Labels are bounded: tenant, policy, kind or reason, never session ids or free text.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

__all__ = ["Metrics"]


class Metrics:
    """The proxy's series, on a registry of their own (so tests and apps do not collide)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.interventions = Counter(
            "loopwarden_interventions",
            "Guard interventions that changed traffic, by kind.",
            ["tenant", "policy", "kind"],
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
            "Decisions taken in shadow mode (counted, not enforced), by kind.",
            ["tenant", "policy", "kind"],
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
            "Completion-judge outcomes: done, not_done, error, skipped.",
            ["policy", "verdict"],
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
            "Tokens used, by whose call: agent (the model's own), judge, finalize.",
            ["tenant", "policy", "kind"],
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
        self.upstream_calls = Counter(
            "loopwarden_upstream_calls",
            "Upstream model calls made by the pipeline, by purpose.",
            ["tenant", "policy", "purpose"],
            registry=self.registry,
        )

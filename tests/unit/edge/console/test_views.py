"""What the console's pages are made of: the "why was this run stopped" card, budgets against
their limits, and the fleet's counts read from the proxy's own registry, per viewer."""

from __future__ import annotations

import pytest

from proxy.edge.console.views import budgets, ending_card, fleet
from proxy.observe.metrics import Metrics
from proxy.policy.models import Policy
from proxy.session.base import FIELDS, SessionState, TimelineEvent


def state(**values: str) -> SessionState:
    return SessionState(values={name: str(value) for name, value in values.items()})


def event(kind: str, **fields: object) -> TimelineEvent:
    return TimelineEvent(kind, 1_000, fields)  # type: ignore[arg-type]


def test_a_running_session_has_no_card():
    assert ending_card("s1", state(steps="3"), [event("step", step=1)]) is None


def test_the_card_takes_guard_evidence_notice_and_continuation_from_the_ending_event():
    ending = event(
        "ending",
        reason="loop",
        guard="loop",
        evidence="get_weather was called 5 times with the same arguments",
        notice="LoopWarden stopped this run (loop).",
        summary_via="upstream",
        **{"continue": "Send a new instruction to continue."},
    )

    card = ending_card("s1", state(**{FIELDS.TERMINATION: "loop"}), [event("step"), ending])

    assert card == {
        "reason": "loop",
        "guard": "loop",
        "evidence": "get_weather was called 5 times with the same arguments",
        "notice": "LoopWarden stopped this run (loop).",
        "summary_via": "upstream",
        "continue": "Send a new instruction to continue.",
    }


def test_without_an_ending_event_the_card_reads_the_last_intervention_and_says_how_to_go_on():
    history = [
        event("intervention", guard="shadowed", reason="only watched", shadow=True),
        event("intervention", guard="tool_loop", reason="get_weather 5 times", shadow=False),
        event("intervention", guard="noted", reason="shadow after", shadow=True),
    ]

    card = ending_card("s1", state(**{FIELDS.TERMINATION: "loop"}), history)

    assert card is not None
    assert (card["reason"], card["guard"], card["evidence"]) == ("loop", "tool_loop", "get_weather 5 times")
    assert "DELETE /v1/loopwarden/sessions/s1" in card["continue"]


def test_the_card_names_the_reason_as_guard_when_nothing_else_is_known():
    card = ending_card("s1", state(**{FIELDS.TERMINATION: "budget_steps"}), [])

    assert card is not None
    assert (card["guard"], card["evidence"], card["notice"]) == ("budget_steps", "", "")


def test_a_budget_ending_names_the_budget_and_its_use_not_the_last_intervention():
    policy = Policy.model_validate({"name": "p", "max_steps": 2})
    ended = state(**{FIELDS.TERMINATION: "budget_steps", FIELDS.STEPS: "2"})
    nudge = event("intervention", guard="tool_args_retry", reason="1 argument error", shadow=False)

    card = ending_card("s1", ended, [nudge], budgets(ended, policy, 0.0))

    assert card is not None
    assert (card["guard"], card["evidence"]) == ("budget", "the steps budget is spent (2 of 2 steps)")


def test_budgets_show_use_against_limits_and_none_for_unlimited():
    policy = Policy.model_validate({"name": "p", "max_steps": 4, "budgets": {"max_tokens": 1000}})
    used = state(**{FIELDS.STEPS: "3", FIELDS.TOKENS_IN: "200", FIELDS.TOKENS_OUT: "50"})

    shown = {budget.name: (budget.used, budget.limit, budget.percent) for budget in budgets(used, policy, 0.0)}

    assert shown["steps"] == (3, 4, 75)
    assert shown["tokens"] == (250, 1000, 25)
    assert shown["cost"] == (0.0, None, None)


@pytest.fixture
def metrics() -> Metrics:
    series = Metrics()
    series.terminations.labels("acme", "default", "loop").inc(3)
    series.terminations.labels("acme", "strict", "budget_steps").inc()
    series.terminations.labels("other", "default", "loop").inc()
    series.of(series.interventions, "acme", "default", "tool_loop", "loop_warning").inc(2)
    series.of(series.interventions, "acme", "default", "tool_loop", "loop_warning_result").inc()
    series.overhead.labels("chat.completions").observe(0.002)
    series.overhead.labels("chat.completions").observe(0.004)
    return series


def test_the_fleet_counts_endings_per_tenant_policy_and_reason(metrics):
    assert fleet(metrics.registry, None).endings == [
        ("acme", "default", "loop", 3.0),
        ("acme", "strict", "budget_steps", 1.0),
        ("other", "default", "loop", 1.0),
    ]


def test_the_fleet_counts_interventions_per_guard_summing_its_kinds(metrics):
    assert fleet(metrics.registry, None).interventions == [("acme", "default", "tool_loop", 3.0)]


def test_a_tenant_sees_only_its_own_counts(metrics):
    seen = fleet(metrics.registry, ("other",))

    assert (seen.endings, seen.interventions) == ([("other", "default", "loop", 1.0)], [])


def test_the_fleet_shows_overhead_per_request_by_route(metrics):
    [(route, requests, mean, p95)] = fleet(metrics.registry, None).overhead

    assert (route, requests) == ("chat.completions", 2.0)
    assert mean == pytest.approx(0.003)
    assert (p95 or 0.0) >= 0.004


def test_a_viewer_of_no_tenant_sees_no_counts(metrics):
    seen = fleet(metrics.registry, ())

    assert (seen.endings, seen.interventions, seen.overhead) == ([], [], [])

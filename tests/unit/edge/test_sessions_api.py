"""What the sessions API shows of a session: counters by name, budgets left, strikes, the goal the
client set, its ending; never contents (the routes, tenants and 404s: tests/integration)."""

from __future__ import annotations

import pytest

from proxy.edge.sessions_api import describe, listed
from proxy.goal.model import GOAL_FIELD, Goal
from proxy.policy.models import Policy
from proxy.session.base import FIELDS, Listed, SessionState

POLICY = Policy(max_steps=10)
NOW = 1_800_000_000.0


def shown(policy: Policy = POLICY, **values: str) -> dict:
    return describe("s1", SessionState({FIELDS.TURNS: "1", **values}), policy, NOW)


def test_a_session_is_shown_with_its_id_kind_and_policy():
    session = shown()

    assert (session["id"], session["object"], session["policy"]) == ("s1", "loopwarden.session", "default")


@pytest.mark.parametrize(
    ("values", "field", "value"),
    [
        pytest.param({FIELDS.STEPS: "4"}, "steps", 4, id="steps"),
        pytest.param({FIELDS.TURNS: "3"}, "turns", 3, id="turns"),
        pytest.param(
            {FIELDS.TOKENS_IN: "100", FIELDS.TOKENS_OUT: "20"},
            "tokens",
            {"prompt": 100, "completion": 20, "total": 120},
            id="tokens-added-up",
        ),
        pytest.param({FIELDS.COST_MICROS: "1250000"}, "cost_usd", 1.25, id="cost-in-dollars"),
        pytest.param({FIELDS.UNPRICED: "2"}, "unpriced_calls", 2, id="unpriced-calls"),
        pytest.param({FIELDS.FIRST_SEEN: "1700000000"}, "first_seen", 1_700_000_000, id="first-seen"),
        pytest.param({}, "first_seen", None, id="never-seen-is-none"),
        pytest.param({FIELDS.TERMINATION: "budget_steps"}, "termination", "budget_steps", id="the-ending"),
        pytest.param({}, "termination", None, id="running"),
        pytest.param({}, "run", 1, id="the-first-run"),
        pytest.param({FIELDS.RUN: "3"}, "run", 3, id="a-later-run"),
        pytest.param({FIELDS.RUN: "x"}, "run", 1, id="an-unreadable-run-is-the-first"),
        pytest.param({FIELDS.STEPS: "4"}, "budget_remaining", "steps=6", id="budgets-left"),
        pytest.param({FIELDS.STEPS: "4", FIELDS.GRANTED_STEPS: "2"}, "budget_remaining", "steps=8", id="granted"),
        pytest.param({}, "grants", {}, id="no-grants-without-a-ceiling"),
    ],
)
def test_each_counter_is_shown_under_its_name(values, field, value):
    assert shown(**values)[field] == value


def test_strikes_are_shown_by_kind_leaving_out_cleared_and_unreadable_ones():
    strikes = {"strike:empty": "2", "strike:judge": "0", "strike:odd": "x", "strike:neg": "-1"}

    assert shown(**strikes)["strikes"] == {"empty": 2, "neg": -1}


def test_tool_call_fingerprints_are_shown_with_their_counts():
    assert shown(**{"fp:ab12": "3", "fp:cd34": "x"})["tool_call_fingerprints"] == {"ab12": 3}


def test_active_time_leaves_out_idle_gaps():
    assert shown(**{FIELDS.ACTIVE_MS: "90000"})["active_seconds"] == 90.0


def test_nothing_said_is_shown():
    session = shown(**{FIELDS.TASK: "secret task", FIELDS.ENDING: "the summary"})

    assert "secret task" not in repr(session)
    assert "the summary" not in repr(session)


def test_a_goal_is_shown_against_the_policys_allowance():
    goal = Goal("Ship the fix", "tests pass", turns=2, started_active_ms=60_000)
    policy = Policy.model_validate({"goal": {"max_turns": 8, "max_active_minutes": 30}})

    described = shown(policy, **{GOAL_FIELD: goal.dumps(), FIELDS.ACTIVE_MS: "180000"})["goal"]

    assert (described["objective"], described["status"], described["turns_used"], described["turns_allowed"]) == (
        "Ship the fix",
        "active",
        2,
        8,
    )
    assert (described["active_minutes_used"], described["active_minutes_allowed"]) == (2.0, 30)


@pytest.mark.parametrize("stored", [None, "not json"], ids=["no-goal", "unreadable"])
def test_a_session_without_a_readable_goal_shows_none(stored):
    values = {GOAL_FIELD: stored} if stored else {}

    assert shown(**values)["goal"] is None


# -- the list -----------------------------------------------------------------------------

SUMMARY = {
    FIELDS.FIRST_SEEN: "1700000000",
    FIELDS.STEPS: "7",
    FIELDS.TURNS: "4",
    FIELDS.TOKENS_IN: "100",
    FIELDS.TOKENS_OUT: "20",
    FIELDS.COST_MICROS: "250000",
    FIELDS.POLICY: "strict",
    FIELDS.CLIENT: "codex_exec",
    FIELDS.TIMELINE_TOTAL: "12",
    "expires_ms": 1_700_000_600_000,
}


def test_a_listed_session_shows_its_summary_by_name():
    item = listed(Listed("s1", 1_700_000_000_500, SUMMARY))

    assert item == {
        "id": "s1",
        "object": "loopwarden.session.summary",
        "state": "running",
        "termination": None,
        "policy": "strict",
        "client": "codex_exec",
        "first_seen": 1_700_000_000,
        "last_seen": 1_700_000_000.5,
        "steps": 7,
        "turns": 4,
        "tokens": {"prompt": 100, "completion": 20, "total": 120},
        "cost_usd": 0.25,
        "events": 12,
    }


def test_a_listed_session_with_an_ending_is_ended_with_its_reason():
    item = listed(Listed("s1", 1, {**SUMMARY, FIELDS.TERMINATION: "tool_loop"}))

    assert (item["state"], item["termination"]) == ("ended", "tool_loop")


def test_a_summary_with_unreadable_counters_shows_zeros():
    item = listed(Listed("s1", 1, {FIELDS.STEPS: "x", FIELDS.TOKENS_IN: None}))

    assert (item["steps"], item["tokens"]["total"], item["first_seen"], item["policy"]) == (0, 0, None, None)

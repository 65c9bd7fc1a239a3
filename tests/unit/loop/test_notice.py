"""The ending's notice: what the person behind the agent reads about why the run stopped and
how to go on, placed where the policy says."""

from __future__ import annotations

import pytest

from proxy.loop.notice import notice_for, placed
from proxy.policy.models import Policy
from proxy.session.base import SessionState
from proxy.verdict import Finalize

T0 = 1_800_000_000.0
LOOP = Finalize(
    "loop",
    'the model repeated get_weather({"city":"Paris"}) 5 times',
    evidence="get_weather was called 5 times with the same arguments",
)


def test_a_guard_ending_names_the_reason_the_evidence_and_how_to_go_on():
    assert notice_for(LOOP, SessionState(), Policy(), "s1", T0) == (
        "LoopWarden stopped this run (loop): get_weather was called 5 times with the same arguments. "
        "Send a new instruction to continue."
    )


def test_the_notice_never_repeats_the_verdicts_detail_which_may_quote_arguments():
    assert "Paris" not in (notice_for(LOOP, SessionState(), Policy(), "s1", T0) or "")


def test_a_guard_ending_without_evidence_still_names_its_reason():
    told = notice_for(Finalize("empty_response", "three empty replies"), SessionState(), Policy(), "s1", T0)

    assert told == (
        "LoopWarden stopped this run (empty_response): the empty_response guard ended it. "
        "Send a new instruction to continue."
    )


@pytest.mark.parametrize(
    ("reason", "values", "policy", "used"),
    [
        pytest.param(
            "budget_steps",
            {"steps": "9"},
            {"max_steps": 10},
            "steps budget is spent (9 of 10 steps used or in flight)",
            id="steps",
        ),
        pytest.param(
            "budget_tokens",
            {"tokens_in": "700", "tokens_out": "250"},
            {"budgets": {"max_tokens": 1000}},
            "tokens budget is spent (950 of 1000 tokens used)",
            id="tokens",
        ),
        pytest.param(
            "budget_cost",
            {"cost_micros": "990000"},
            {"budgets": {"max_cost_usd": 1.0}},
            "cost budget is spent ($0.9900 of $1.00 used)",
            id="cost",
        ),
    ],
)
def test_a_budget_ending_says_which_budget_how_much_was_used_and_how_to_raise_it(reason, values, policy, used):
    told = notice_for(Finalize(reason, "spent"), SessionState(values), Policy(**policy), "s1", T0) or ""

    assert told.startswith(f"LoopWarden stopped this run ({reason}): the session's {used}.")
    assert told.endswith("through the sessions API (PATCH /v1/loopwarden/sessions/s1).")


def test_the_policy_can_turn_the_notice_off():
    assert notice_for(LOOP, SessionState(), Policy(finalize={"notice": "off"}), "s1", T0) is None


@pytest.mark.parametrize(
    ("placement", "expected"),
    [
        pytest.param("first", "Notice.\n\nSummary.", id="first"),
        pytest.param("last", "Summary.\n\nNotice.", id="last"),
    ],
)
def test_the_notice_goes_before_or_after_the_summary(placement, expected):
    assert placed("Summary.", "Notice.", placement) == expected


def test_an_empty_summary_leaves_the_notice_alone():
    assert placed("  ", "Notice.", "first") == "Notice."


def test_a_budget_ending_that_names_its_run_points_at_the_sessions_list_for_its_id():
    told = notice_for(Finalize("budget_tokens", "spent"), SessionState(), Policy(budgets={"max_tokens": 100}), None, T0)

    assert "grants this session (the sessions list names it) more tokens" in (told or "")
    assert "PATCH /v1/loopwarden/sessions/{id}" in (told or "")

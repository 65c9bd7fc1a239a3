"""The budget guard: the call that would use the last of a budget is the ending (the last step, no
room left for a call and an ending's tokens, less time left than a step takes); one running low
asks the model to converge."""

from __future__ import annotations

import pytest

from proxy.exchange import Note
from proxy.guards import BudgetGuard
from proxy.policy.models import Policy
from proxy.verdict import PASS, Finalize, Nudge
from tests.unit.guards.given import context, session

POLICY = Policy(
    max_steps=10,
    budgets={
        "max_tokens": 1000,
        "reserve_tokens": 100,
        "max_cost_usd": 1.0,
        "max_active_secs": 100,
        "idle_gap_secs": 60,
    },
    finalize={"max_tokens": 16},  # a call reserves 100 tokens, an ending after it 16 more
)
T0 = 1_800_000_000.0


def note(low: str, policy: Policy = POLICY) -> Nudge:
    return Nudge("budget_note", low, (Note(policy.nudges.budget_note.format(remaining=low)),))


LAST_STEP = Finalize("budget_steps", "the session reached the last of its 10 steps")
NO_ROOM = Finalize("budget_tokens", "this call would use the last of the session's 1000 tokens")
NO_TIME = Finalize("budget_time", "a further step would not fit in the session's 100 seconds")

CASES = [
    # the session so far, the verdict
    pytest.param(session(steps=9), LAST_STEP, id="the-call-that-would-use-the-last-step-is-the-ending"),
    pytest.param(session(steps=10), LAST_STEP, id="the-last-step-used-ends-the-session"),
    pytest.param(session(steps=12), LAST_STEP, id="steps-past-the-limit-still-end-it"),
    pytest.param(session(tokens_in=900, tokens_out=100), NO_ROOM, id="prompt-and-completion-tokens-together-end-it"),
    pytest.param(session(tokens_in=890), NO_ROOM, id="no-room-for-a-call-and-an-ending-ends-it"),
    pytest.param(
        session(cost_micros=1_000_000),
        Finalize("budget_cost", "the session spent its budget of $1.00"),
        id="the-cost-budget-spent-ends-it",
    ),
    pytest.param(session(active_ms=100_000), NO_TIME, id="the-active-time-used-ends-it"),
    pytest.param(session(steps=4, active_ms=90_000), NO_TIME, id="less-time-left-than-a-step-takes-ends-it"),
    pytest.param(
        session(active_ms=80_000, last_seen_ms=int(T0 * 1000) - 30_000),
        NO_TIME,
        id="a-short-pause-since-the-last-call-counts-as-active",
    ),
    pytest.param(
        session(steps=10, tokens_in=1000, cost_micros=1_000_000),
        LAST_STEP,
        id="steps-are-named-first-when-several-run-out",
    ),
    pytest.param(session(steps=8), note("1 of 10 steps left"), id="few-steps-left-before-the-ending-asks-to-converge"),
    pytest.param(session(tokens_in=850), note("150 of 1000 tokens left"), id="few-tokens-left-asks-to-converge"),
    pytest.param(session(cost_micros=900_000), note("$0.1000 of $1.00 left"), id="little-money-left-asks-to-converge"),
    pytest.param(session(active_ms=85_000), note("15 of 100 seconds left"), id="little-time-left-asks-to-converge"),
    pytest.param(
        session(steps=7, active_ms=85_000), note("15 of 100 seconds left"), id="time-for-one-more-step-asks-to-converge"
    ),
    pytest.param(
        session(steps=8, tokens_in=850),
        note("1 of 10 steps left; 150 of 1000 tokens left"),
        id="every-budget-running-low-is-named",
    ),
    pytest.param(
        session(active_ms=80_000, last_seen_ms=int(T0 * 1000) - 61_000),
        PASS,
        id="a-human-pause-is-not-active-time",
    ),
    pytest.param(session(steps=2, tokens_in=100), PASS, id="plenty-left-changes-nothing"),
    pytest.param(session(), PASS, id="a-new-session-changes-nothing"),
]


@pytest.mark.parametrize(("state", "expected"), CASES)
def test_budget(state, expected):
    assert BudgetGuard().check_request(context(POLICY, state, now=T0)) == expected


def test_the_converge_note_comes_while_the_next_calls_reservation_still_fits():
    policy = Policy(budgets={"max_tokens": 20_000, "reserve_tokens": 4_096})

    verdict = BudgetGuard().check_request(context(policy, session(tokens_in=13_000), now=T0))

    # 20 % is 4,000, but a call reserves 4,096 and an ending after it 1,024
    assert verdict == note("7000 of 20000 tokens left", policy)


def test_unset_budgets_are_neither_checked_nor_named():
    policy = Policy()  # 50 steps, no token, cost or time budget

    verdict = BudgetGuard().check_request(context(policy, session(steps=45, tokens_in=10**9), now=T0))

    assert verdict == note("4 of 50 steps left", policy)  # the 5th is the ending's


def test_a_larger_request_needs_more_room_for_itself_and_its_ending():
    # 4,000 bytes: a prompt of about 1,000 tokens, sent by the call and again by its ending
    verdict = BudgetGuard().check_request(context(POLICY, session(), now=T0, body_size=4000))

    assert verdict == NO_ROOM

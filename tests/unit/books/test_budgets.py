"""Budget arithmetic, as tables (pricing: test_pricing.py; the budget guard: tests/unit/guards/test_budget.py)."""

from __future__ import annotations

import pytest

from proxy.books.budgets import (
    active_ms,
    estimate_tokens,
    remaining,
    session_limits,
    worst_cost_micros,
    worst_tokens,
)
from proxy.books.pricing import Price, PriceTable
from proxy.policy.models import Policy
from proxy.session.base import SessionState
from proxy.wire.chat.parse import parse_conversation
from tests.support.agent_request import TASK, agent_request

POLICY = Policy(
    max_steps=10,
    budgets={
        "max_tokens": 1000,
        "reserve_tokens": 100,
        "max_cost_usd": 1.0,
        "max_active_secs": 100,
        "idle_gap_secs": 60,
    },
)
T0 = 1_800_000_000.0


def state(**values) -> SessionState:
    return SessionState({k: str(v) for k, v in values.items()})


@pytest.mark.parametrize(
    ("last_seen_offset", "active_before", "now_offset", "expected_ms"),
    [
        (0, 0, 0, 0),
        (0, 5_000, 30, 35_000),  # a 30 s pause counts
        (0, 5_000, 61, 5_000),  # a 61 s pause (a human approving) does not
        (0, 5_000, 3600, 5_000),
    ],
)
def test_active_time_skips_idle_gaps(last_seen_offset, active_before, now_offset, expected_ms):
    session = state(last_seen_ms=int((T0 + last_seen_offset) * 1000), active_ms=active_before)

    assert active_ms(session, T0 + now_offset, idle_gap_secs=60) == expected_ms


def test_remaining_reports_every_configured_budget():
    left = remaining(state(steps=4, tokens_in=300, tokens_out=100, cost_micros=250_000, active_ms=40_000), POLICY, T0)

    assert (left.steps, left.tokens, left.cost_usd, left.seconds) == (6, 600, 0.75, 60.0)
    assert left.header() == "steps=6;tokens=600;cost=0.7500;seconds=60"


def test_remaining_counts_what_the_session_was_granted():
    granted = state(
        steps=10, tokens_in=1000, cost_micros=1_000_000, active_ms=100_000,
        granted_steps=4, granted_tokens=700, granted_cost_micros=500_000, granted_active_ms=60_000,
    )  # fmt: skip

    left = remaining(granted, POLICY, T0)

    assert (left.steps, left.tokens, left.cost_usd, left.seconds) == (4, 700, 0.5, 60.0)


def test_every_session_limit_is_raised_by_its_granted_field():
    call = agent_request({"model": "m", "messages": [{"role": "user", "content": "x"}]}, POLICY)

    limits = session_limits(call, PriceTable({"m": Price(prompt=1.0, completion=1.0)}))

    assert [(limit.name, limit.granted) for limit in limits] == [
        ("budget_steps", "granted_steps"),
        ("budget_tokens", "granted_tokens"),
        ("budget_cost", "granted_cost_micros"),
    ]


def test_remaining_leaves_out_unset_budgets():
    assert remaining(state(steps=1), Policy(), T0).header() == "steps=49"


@pytest.mark.parametrize(
    ("payload", "body_size", "expected"),
    [
        ({"max_tokens": 200}, 400, 300),
        ({"max_completion_tokens": 50, "max_tokens": 999}, 40, 60),
        ({}, 4000, 1000 + 4096),
    ],
)
def test_estimate_is_prompt_bytes_over_four_plus_the_output_cap(payload, body_size, expected):
    assert estimate_tokens(parse_conversation(payload), body_size, Policy()) == expected


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        # the step limit keeps the last step for the ending
        (Policy(max_steps=10), [("budget_steps", 1, 9)]),
        # a call (prompt 100 + output 50) must leave room for a capped summary call (prompt 100 + 200)
        (
            Policy(budgets={"max_tokens": 1000}, finalize={"max_tokens": 200}),
            [("budget_steps", 1, 49), ("budget_tokens", 150, 700)],
        ),
        # an ending built locally costs nothing to keep room for
        (
            Policy(budgets={"max_tokens": 1000}, finalize={"use_upstream": False}),
            [("budget_steps", 1, 49), ("budget_tokens", 150, 1000)],
        ),
        # cost at the model's dearer rate (10 micro-dollars a token): 150 and 300 tokens
        (
            Policy(budgets={"max_cost_usd": 0.01}, finalize={"max_tokens": 200}),
            [("budget_steps", 1, 49), ("budget_cost", 1500, 7000)],
        ),
        (
            Policy(budgets={"max_cost_usd": 0.01, "hard_cost_cap": True}, finalize={"max_tokens": 200}),
            [("budget_steps", 1, 49), ("budget_cost", 1500, 10_000)],
        ),
    ],
)
def test_a_call_is_admitted_only_with_room_left_for_the_ending(policy, expected):
    prices = PriceTable({"gpt-4o": Price(prompt=2.5, completion=10.0)})
    request = agent_request(
        {"model": "gpt-4o", "max_tokens": 50, "messages": [{"role": "user", "content": "x" * 324}]}, policy
    )
    assert len(request.body) == 400  # a prompt of about 100 tokens

    limits = session_limits(request, prices)

    assert [(limit.name, limit.amount, limit.limit) for limit in limits] == expected


ONE_MODEL = PriceTable({"m": Price(prompt=2.0, completion=8.0)})


def test_the_worst_case_in_tokens_is_the_prompt_bytes_over_four_plus_the_output_cap():
    request = agent_request({**TASK, "max_tokens": 100})

    assert worst_tokens(request) == len(request.body) // 4 + 100


def test_the_worst_case_in_tokens_reserves_the_policys_share_without_an_output_cap():
    request = agent_request(TASK, Policy.model_validate({"budgets": {"reserve_tokens": 300}}))

    assert worst_tokens(request) == len(request.body) // 4 + 300


def test_the_worst_case_cost_prices_every_token_at_the_dearer_price():
    request = agent_request({**TASK, "max_tokens": 100})

    assert worst_cost_micros(request, ONE_MODEL) == round(worst_tokens(request) * 8.0)


def test_the_worst_case_cost_of_an_unpriced_model_is_zero():
    request = agent_request({**TASK, "model": "unknown", "max_tokens": 100})

    assert worst_cost_micros(request, ONE_MODEL) == 0


@pytest.mark.parametrize(
    ("payload", "caps", "refused"),
    [
        pytest.param(TASK, {"daily_tokens": 1000}, "daily token cap of 1000 tokens", id="no-output-limit-token-cap"),
        pytest.param({**TASK, "max_tokens": 100}, {"daily_tokens": 1000}, None, id="output-limit-fits"),
        pytest.param(TASK, {"daily_tokens": 5000}, None, id="reserve-fits"),
        pytest.param(
            TASK, {"daily_cost_usd": 0.01}, "daily cost cap of $0.01", id="no-output-limit-cost-cap"
        ),  # 4,096 + a few tokens at $8 per million: about $0.03
        pytest.param({**TASK, "max_tokens": 100}, {"daily_cost_usd": 0.01}, None, id="cost-fits"),
    ],
)
def test_a_request_whose_worst_case_alone_is_over_a_daily_cap_is_a_400_naming_the_cap(payload, caps, refused):
    from proxy.books.budgets import check_request_cap
    from proxy.errors import InvalidRequest

    request = agent_request(payload, Policy(), **caps)

    if refused is None:
        check_request_cap(request, True, ONE_MODEL)
        return
    with pytest.raises(InvalidRequest, match="it can never fit") as failed:
        check_request_cap(request, True, ONE_MODEL)
    assert refused in str(failed.value)
    assert failed.value.param == "max_tokens"

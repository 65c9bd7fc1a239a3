"""Facts about one agent request, asked of the request itself: its usage event, its worst case, its log fields."""

from __future__ import annotations

import pytest

from proxy.books.pricing import Price, PriceTable
from proxy.policy.models import Policy
from tests.support.agent_request import TASK, agent_request

PRICES = PriceTable({"m": Price(prompt=2.0, completion=8.0)})


@pytest.mark.parametrize(
    ("stream_options", "included"),
    [
        ({"include_usage": True}, True),
        ({"include_usage": False}, False),
        ({}, False),
        (None, False),
        ({"include_usage": "yes"}, False),
    ],
    ids=["asked", "declined", "options-without-it", "no-options", "not-a-boolean"],
)
def test_a_streaming_client_gets_the_usage_event_only_when_it_asked_for_it(stream_options, included):
    payload = {**TASK, "stream": True}
    if stream_options is not None:
        payload["stream_options"] = stream_options

    assert agent_request(payload).include_usage() is included


def test_the_worst_case_in_tokens_is_the_prompt_bytes_over_four_plus_the_output_cap():
    call = agent_request({**TASK, "max_tokens": 100})

    assert call.worst_tokens() == len(call.body) // 4 + 100


def test_the_worst_case_in_tokens_reserves_the_policys_share_without_an_output_cap():
    call = agent_request(TASK, Policy.model_validate({"budgets": {"reserve_tokens": 300}}))

    assert call.worst_tokens() == len(call.body) // 4 + 300


def test_the_worst_case_cost_prices_every_token_at_the_dearer_price():
    call = agent_request({**TASK, "max_tokens": 100})

    assert call.worst_cost_micros(PRICES) == round(call.worst_tokens() * 8.0)


def test_the_worst_case_cost_of_an_unpriced_model_is_zero():
    call = agent_request({**TASK, "model": "unknown", "max_tokens": 100})

    assert call.worst_cost_micros(PRICES) == 0


def test_log_fields_name_the_tenant_policy_and_session():
    call = agent_request(TASK, Policy(name="strict"), session="run-7", tenant="acme")

    assert call.log_fields() == {"tenant": "acme", "policy": "strict", "session": "run-7"}

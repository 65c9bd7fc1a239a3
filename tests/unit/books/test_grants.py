"""Budget grants: what a PATCH body may ask for, in which units they are stored, the event they
leave, what is left of each ceiling, and the 409 over it (the routes: tests/integration)."""

from __future__ import annotations

import pytest

from proxy.books.grants import grant_delta, granted, lifted_reasons, over_ceiling, parse_grants
from proxy.errors import GrantOverCeiling, InvalidRequest
from proxy.policy.models import Policy
from proxy.session.base import FIELDS, Grant, SessionState

CEILINGS = {"steps": 20, "tokens": 10_000, "cost_usd": 1.5, "active_secs": 600}
POLICY = Policy.model_validate(
    {
        "max_steps": 10,
        "budgets": {"max_tokens": 5000, "max_cost_usd": 1.0, "max_active_secs": 300, "grant_ceiling": CEILINGS},
    }
)


@pytest.mark.parametrize(
    ("body", "grant"),
    [
        pytest.param({"steps": 5}, Grant("steps", FIELDS.GRANTED_STEPS, 5, 20), id="steps"),
        pytest.param({"tokens": 2000}, Grant("tokens", FIELDS.GRANTED_TOKENS, 2000, 10_000), id="tokens"),
        pytest.param({"tokens": 2e3}, Grant("tokens", FIELDS.GRANTED_TOKENS, 2000, 10_000), id="a-whole-float"),
        pytest.param({"cost_usd": 0.25}, Grant("cost_usd", FIELDS.GRANTED_COST, 250_000, 1_500_000), id="micros"),
        pytest.param({"active_secs": 1.5}, Grant("active_secs", FIELDS.GRANTED_ACTIVE_MS, 1500, 600_000), id="ms"),
    ],
)
def test_each_budget_is_granted_in_its_stored_unit_against_its_ceiling(body, grant):
    assert parse_grants(body, POLICY) == [grant]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        pytest.param([{"steps": 1}], None, id="not-an-object"),
        pytest.param({}, None, id="nothing-granted"),
        pytest.param({"steps": 1, "turns": 2}, "turns", id="an-unknown-budget"),
        pytest.param({"steps": 0}, "steps", id="zero"),
        pytest.param({"tokens": -5}, "tokens", id="negative"),
        pytest.param({"steps": 1.5}, "steps", id="a-fraction-of-a-step"),
        pytest.param({"cost_usd": True}, "cost_usd", id="a-boolean"),
        pytest.param({"active_secs": "60"}, "active_secs", id="a-string"),
        pytest.param({"cost_usd": 1e308}, "cost_usd", id="too-large"),
        pytest.param({"tokens": 10**30}, "tokens", id="too-large-an-integer"),
        pytest.param({"active_secs": float("nan")}, "active_secs", id="not-a-number"),
    ],
)
def test_a_bad_body_is_a_400_naming_the_field(body, param):
    with pytest.raises(InvalidRequest) as raised:
        parse_grants(body, POLICY)

    assert raised.value.param == param


def test_a_budget_the_policy_does_not_set_has_no_room_to_grant():
    unset = Policy.model_validate({"budgets": {"grant_ceiling": {"tokens": 1000}}})

    (grant,) = parse_grants({"tokens": 100}, unset)
    error = over_ceiling("tokens", SessionState(), unset)

    assert grant.ceiling == 0
    assert (error.status, "sets no tokens budget" in error.message) == (409, True)


def test_each_grant_lifts_the_ending_of_its_own_budget():
    grants = parse_grants({"steps": 1, "tokens": 1, "cost_usd": 0.1, "active_secs": 1}, POLICY)

    assert lifted_reasons(grants) == ["budget_steps", "budget_tokens", "budget_cost", "budget_time"]


def test_the_delta_adds_the_grants_and_records_one_grant_event_in_api_units():
    delta = grant_delta(parse_grants({"steps": 3, "cost_usd": 0.5}, POLICY), 1_000, "admin")

    assert delta.increments == {FIELDS.GRANTED_STEPS: 3, FIELDS.GRANTED_COST: 500_000}
    assert [(e.kind, e.at_ms, dict(e.fields)) for e in delta.events] == [
        ("grant", 1_000, {"by": "admin", "steps": 3, "cost_usd": 0.5})
    ]


def test_granted_shows_each_grantable_budget_with_what_is_left_of_its_ceiling():
    state = SessionState({FIELDS.GRANTED_STEPS: "5", FIELDS.GRANTED_COST: "250000"})

    view = granted(state, POLICY)

    assert view["steps"] == {"granted": 5, "ceiling": 20, "left": 15}
    assert view["cost_usd"] == {"granted": 0.25, "ceiling": 1.5, "left": 1.25}


def test_a_policy_without_a_ceiling_shows_no_grants():
    assert granted(SessionState({FIELDS.STEPS: "1"}), Policy()) == {}


def test_over_the_ceiling_is_a_409_saying_what_may_still_be_granted():
    error = over_ceiling("steps", SessionState({FIELDS.GRANTED_STEPS: "18"}), POLICY)

    assert isinstance(error, GrantOverCeiling)
    assert (error.status, error.param) == (409, "steps")
    assert "2 more may be granted" in error.message


def test_a_policy_without_a_ceiling_answers_409_naming_the_setting():
    error = over_ceiling("steps", SessionState(), Policy())

    assert "budgets.grant_ceiling.steps" in error.message

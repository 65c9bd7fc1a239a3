"""Facts about one agent request, asked of the request itself: its usage event, its log fields."""

from __future__ import annotations

import pytest

from proxy.policy.models import Policy
from tests.support.agent_request import TASK, agent_request


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


def test_log_fields_name_the_tenant_policy_and_session():
    request = agent_request(TASK, Policy(name="strict"), session="run-7", tenant="acme")

    assert request.log_fields() == {"tenant": "acme", "policy": "strict", "session": "run-7"}

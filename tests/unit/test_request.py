"""Facts about one agent request, asked of the request itself: its usage event, its log fields, and
its lines held until a derived run's first reply names the session."""

from __future__ import annotations

import time

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


def _lines(log_records) -> list[tuple[str, object]]:
    return [(r.getMessage(), r.fields["session"]) for r in log_records]


def test_a_named_sessions_lines_are_written_at_once(log_records):
    request = agent_request(session="s1")

    request.log("step", {"attempt": 1})

    assert _lines(log_records) == [("step", "s1")]


def test_a_derived_runs_first_lines_wait_for_the_name_its_reply_gives_and_keep_their_time(log_records):
    from proxy.session.identity import named_run

    request = agent_request(session=None)
    recorded: list[str] = []
    request.log("step", {"attempt": 1})
    request.when_named(lambda: recorded.append(request.session.id))
    happened = log_records[:]
    written = time.time()

    request.name_session(named_run(request.session, "the first reply"))

    assert happened == []
    assert recorded == [request.session.id]
    assert _lines(log_records) == [("step", request.session.id)]
    assert log_records[0].created <= written


def test_lines_of_a_first_request_no_reply_named_are_written_when_it_ends(log_records):
    request = agent_request(session=None)
    request.log("state_store_error", {"operation": "load"})

    request.release()
    request.release()

    assert _lines(log_records) == [("state_store_error", request.session.id)]

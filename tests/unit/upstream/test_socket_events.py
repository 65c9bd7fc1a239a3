"""An upstream socket's messages read as an HTTP call's events: which type each has, which
end a call, and their SSE framing (the socket's calls themselves: test_socket.py and
tests/integration/test_responses_upstream_socket.py)."""

from __future__ import annotations

import msgspec
import pytest

from proxy.upstream.socket_events import (
    ENDINGS,
    TERMINAL,
    ended_response,
    event_type,
    is_terminal,
    sse_event,
    sse_events,
)

EVENTS = [
    b'{"type":"response.completed","response":{}}',
    b'{"type":"response.incomplete"}',
    b'{"type":"response.failed","response":{}}',
    b'{"type":"response.completed.extra"}',  # another type that begins like a terminal one
    b'{"type":"response.output_text.delta","delta":"response.completed"}',
    b'{"sequence_number":3,"type":"response.completed"}',  # the type not first: decoded
    b'{"sequence_number":3,"type":"response.created"}',
    b'{"type":"response.completed',  # no closing quote: not JSON
    b'{"type":"error","code":"x"}',
    b'{"type": "response.completed"}',  # spaced: decoded
    b"not json",
    b"",
]


@pytest.mark.parametrize("data", EVENTS)
def test_a_terminal_event_is_told_as_its_type_says(data):
    assert is_terminal(data) is (event_type(data) in TERMINAL)


@pytest.mark.parametrize("data", EVENTS)
def test_an_event_that_opens_as_no_ending_has_no_ending_type(data):
    if not data.startswith(ENDINGS) and data.startswith(b'{"type":"'):
        assert event_type(data) not in {*TERMINAL, b"error"}


def test_events_framed_together_are_framed_as_each_alone():
    compact = [b'{"type":"a"}', b'{"type":"b"}']
    pretty = [b'{"type":"a"}', b'{\n "type": "b"\n}', b'{"type":"c"}\r\n']

    assert sse_events(compact) == b'data: {"type":"a"}\n\ndata: {"type":"b"}\n\n'
    assert sse_events(pretty) == b"".join(map(sse_event, pretty))


def test_a_terminal_events_response_is_read_for_its_id_status_and_output_only():
    data = (
        b'{"type":"response.completed","response":{"id":"resp_1","status":"completed",'
        b'"instructions":"long","tools":[{"type":"function"}],"output":[{"type":"message"}]}}'
    )

    assert ended_response(data) == {"id": "resp_1", "status": "completed", "output": [{"type": "message"}]}


def test_a_terminal_events_response_keeps_only_the_fields_it_has():
    assert ended_response(b'{"response":{"id":"resp_1"},"type":"response.incomplete"}') == {"id": "resp_1"}


@pytest.mark.parametrize(
    "data",
    [
        b'{"type":"response.output_text.delta","response":{"id":"resp_1"}}',
        b'{"type":"response.completed"}',
        b'{"type":"response.completed","response":null}',
        b'{"type":"response.completed","response":"resp_1"}',
        b'["response.completed"]',
    ],
)
def test_no_response_is_read_from_an_event_that_is_not_a_terminal_one_with_a_response(data):
    assert ended_response(data) is None


@pytest.mark.parametrize("data", [b'{"type":"response.completed","response":{"id":', b'["a", {"b": }]'])
def test_bytes_that_are_not_json_are_an_error_whatever_their_shape(data):
    with pytest.raises(msgspec.DecodeError):
        ended_response(data)

"""The upstream sockets of client sockets: when there are any, what a refusal leaves behind,
and how the socket's answers read as HTTP ones (the wire itself: tests/integration/
test_responses_upstream_socket.py, against a real WebSocket upstream)."""

from __future__ import annotations

import logging

import httpx
import pytest

from proxy.errors import UpstreamReplyTooLarge
from proxy.observe.metrics import Metrics
from proxy.settings import Settings
from proxy.upstream.socket import UpstreamSockets, _Error, _error_response, _Events, _frame, _frames, current, through
from proxy.upstream.transport import UpstreamTransport

URL = "wss://api.example/v1/responses"


def sockets(**settings) -> UpstreamSockets:
    return UpstreamSockets(Settings(**settings), UpstreamTransport(), Metrics())


def test_a_client_socket_gets_an_upstream_socket_by_default():
    assert sockets().open() is not None


def test_none_when_off_or_when_the_transport_speaks_no_websocket():
    assert sockets(upstream_websocket="off").open() is None
    assert UpstreamSockets(Settings(), httpx.MockTransport(lambda r: httpx.Response(200)), None).open() is None


def test_a_refusal_is_logged_once_per_upstream_and_counted_every_time(caplog):
    owner = sockets()
    with caplog.at_level(logging.INFO, logger="loopwarden"):
        for _ in range(3):
            owner.unavailable(URL + "?api-version=1", 426)

    said = [record for record in caplog.records if record.getMessage() == "upstream_websocket_unavailable"]
    assert len(said) == 1
    assert owner.refused(URL + "?api-version=1")


@pytest.mark.parametrize(
    ("status", "remembered"),
    [
        (426, True),
        (404, True),
        (400, False),
        (200, True),
        (401, False),
        (403, False),
        (429, False),
        (503, False),
        (501, True),
    ],
)
def test_only_a_refusal_about_the_route_is_remembered(status, remembered):
    owner = sockets()
    owner.unavailable(URL, status)

    assert owner.refused(URL) is remembered


def test_a_refusal_is_remembered_for_the_upstream_whatever_the_query():
    owner = sockets()
    owner.unavailable(URL + "?client=a", 426)

    assert owner.refused(URL + "?client=b")
    assert owner.refused(URL)


def test_an_unreachable_upstream_is_not_remembered():
    owner = sockets()
    owner.unavailable(URL, None)

    assert not owner.refused(URL)


def test_a_message_is_one_sse_event_even_when_pretty_printed():
    assert _frame(b'{"type":"x"}') == b'data: {"type":"x"}\n\n'
    assert _frame(b'{\n "type": "x"\n}') == b'data: {\ndata:  "type": "x"\ndata: }\n\n'


def test_messages_taken_together_are_the_sse_events_each_would_be():
    compact = [b'{"type":"a"}', b'{"type":"b"}', b'{"type":"c"}']
    pretty = [b'{"type":"a"}', b'{\n "type": "b"\n}', b'{"type":"c"}\r\n']

    assert _frames(compact) == b"".join(map(_frame, compact))
    assert _frames(pretty) == b"".join(map(_frame, pretty))
    assert _frames([b"x"]) == _frame(b"x")


def test_an_error_event_reads_as_the_http_error_of_its_status():
    request = httpx.Request("POST", "https://api.example/v1/responses")
    error = {"type": "invalid_request_error", "code": "rate_limit_exceeded", "message": "Slow down."}

    response = _error_response(_Error(status=429, error=error), request)
    unsure = _error_response(_Error(code="x", message="?"), request)

    assert (response.status_code, response.json()) == (429, {"error": error})
    assert unsure.status_code == 500
    assert unsure.json()["error"]["code"] == "x"


def test_calls_go_through_a_socket_only_inside_through():
    socket = sockets().open()

    with through(socket):
        assert current() is socket
    assert current() is None


def test_the_socket_takes_the_calls_of_its_first_url_and_key_only_whatever_the_headers_case():
    socket = sockets().open()
    assert socket is not None

    def call(key: str, path: str = "/v1/responses", name: str = "Authorization") -> httpx.Request:
        return httpx.Request("POST", f"https://api.example{path}", headers={name: key}, content=b"{}")

    assert socket._takes(call("Bearer a"))
    assert socket._takes(call("Bearer a", name="authorization"))
    assert not socket._takes(call("Bearer b"))
    assert not socket._takes(call("Bearer a", path="/v1/other/responses"))


def test_a_call_of_exactly_a_turns_bytes_is_read_as_the_turns_payload_not_decoded_again():
    socket = sockets().open()
    assert socket is not None
    payload = {"model": "m", "input": "hi"}
    socket.expect(b'{"model":"m","input":"hi"}', payload)

    assert socket._payload(b'{"model":"m","input":"hi"}') is payload
    assert socket._payload(b'{"model":"m","input":"a nudge"}') == {"model": "m", "input": "a nudge"}


class Received:
    """An upstream socket whose messages have all arrived."""

    def __init__(self, *messages: bytes) -> None:
        self.messages = list(messages)

    def ready(self) -> bool:
        return bool(self.messages)

    def take_all(self) -> list[bytes]:
        taken, self.messages = self.messages, []
        return taken

    def give_back(self, messages: list[bytes]) -> None:
        self.messages[:0] = messages


DONE = b'{"type":"response.completed","response":{"id":"resp_1","status":"completed","output":[]}}'


async def test_the_messages_received_go_as_one_chunk_that_ends_at_the_calls_terminal_event():
    socket = sockets().open()
    received = Received(b'{"type":"b"}', DONE, b'{"type":"the next call\'s"}')
    events = _Events(socket, received, b'{"type":"a"}', [], None, None)

    chunk = await events.__anext__()

    assert chunk == _frames([b'{"type":"a"}', b'{"type":"b"}', DONE])
    assert events.last == DONE
    assert received.messages == [b'{"type":"the next call\'s"}']
    assert socket.chain.last == "resp_1"
    with pytest.raises(StopAsyncIteration):
        await events.__anext__()


async def test_messages_received_past_the_read_limit_fail_the_reply_as_too_large():
    socket = sockets().open()
    events = _Events(socket, Received(b'{"type":"b"}' * 10), b'{"type":"a"}', [], None, 64)

    with pytest.raises(UpstreamReplyTooLarge):
        await events.__anext__()

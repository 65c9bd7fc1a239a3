"""The client's side of a guarded stream: what goes out when, and what never does."""

from __future__ import annotations

import json

from proxy.errors import UpstreamDisconnected
from proxy.exchange import Channel
from proxy.streaming.client import ClientStream
from proxy.wire.chat.format import CHAT_COMPLETIONS
from proxy.wire.responses.format import RESPONSES
from proxy.wire.responses.stream import event_frame
from proxy.wire.sse import frame
from tests.support.fake_responses import message, response, stream_events

ROLE = {"id": "c", "created": 1, "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}


def chunk(**delta) -> dict:
    return {"id": "c", "created": 1, "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


def raw(value: dict) -> bytes:
    return frame(json.dumps(value).encode())


class Client:
    """Collects what the ASGI server would have sent."""

    def __init__(self) -> None:
        self.messages: list[dict] = []

    async def __call__(self, message: dict) -> None:
        self.messages.append(message)

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages if m["type"] == "http.response.body")

    @property
    def started(self) -> bool:
        return any(m["type"] == "http.response.start" for m in self.messages)

    def events(self) -> list[dict]:
        out = []
        for line in self.body.split(b"\n"):
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                out.append(json.loads(line[6:]))
        return out


def stream(include_usage: bool = False) -> tuple[ClientStream, Client]:
    client = Client()
    sink = ClientStream(
        client, lambda: [(b"x-test", b"1")], include_usage=include_usage, keepalive=0, stream=CHAT_COMPLETIONS.stream
    )
    return sink, client


async def test_released_events_go_out_as_the_upstream_framed_them():
    sink, client = stream()
    sink.release(Channel.TEXT)
    text = chunk(content="Hello")

    sink.push(raw(text), text, Channel.TEXT)
    await sink.flush()

    assert client.body == raw(text)


async def test_held_events_wait_and_go_out_in_order_once_released():
    sink, client = stream()
    first, second = chunk(content="Hel"), chunk(content="lo")
    sink.push(raw(first), first, Channel.TEXT)
    sink.push(raw(second), second, Channel.TEXT)
    await sink.flush()
    assert not client.started

    sink.release(Channel.TEXT)
    await sink.flush()

    assert client.body == raw(first) + raw(second)


async def test_the_role_chunk_waits_for_something_to_say():
    sink, client = stream()
    sink.release(Channel.TEXT)
    sink.push(raw(ROLE), ROLE, Channel.NONE)
    await sink.flush()
    assert not client.started

    text = chunk(content="Hi")
    sink.push(raw(text), text, Channel.TEXT)
    await sink.flush()

    assert client.body == raw(ROLE) + raw(text)


async def test_a_mixed_event_is_split_when_only_part_of_it_may_go():
    sink, client = stream()
    mixed = chunk(content="Looking.", tool_calls=[{"index": 0, "id": "t", "function": {"name": "s"}}])
    sink.push(raw(mixed), mixed, Channel.TEXT | Channel.TOOL_CALLS)

    sink.release(Channel.TEXT)
    await sink.flush()

    assert [e["choices"][0]["delta"] for e in client.events()] == [{"content": "Looking."}]
    await sink.finish()
    assert client.events()[-1]["choices"][0]["delta"]["tool_calls"][0]["id"] == "t"


async def test_the_usage_chunk_reaches_only_a_client_that_asked():
    usage = {"id": "c", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}
    for asked in (False, True):
        sink, client = stream(include_usage=asked)
        sink.defer(raw(usage), usage_only=True)
        await sink.finish()

        assert (b'"usage"' in client.body) is asked
        assert client.body.endswith(b"data: [DONE]\n\n")


async def test_a_new_attempt_drops_what_was_held_but_not_what_was_let_through():
    sink, client = stream()
    sink.release(Channel.TEXT)
    text, call = chunk(content="Let me check."), chunk(tool_calls=[{"index": 0, "id": "bad"}])
    sink.push(raw(text), text, Channel.TEXT)
    sink.push(raw(call), call, Channel.TOOL_CALLS)

    sink.new_attempt()
    await sink.finish()

    assert client.body == raw(text) + b"data: [DONE]\n\n"


async def test_an_ending_after_streamed_text_is_set_apart_by_a_blank_line():
    sink, client = stream()
    sink.release(Channel.TEXT)
    text = chunk(content="Partial answer.")
    sink.push(raw(text), text, Channel.TEXT)
    await sink.flush()
    ending = {
        "id": "e",
        "created": 2,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Summary."}, "finish_reason": "stop"}],
    }

    await sink.replace(ending)

    contents = [e["choices"][0]["delta"].get("content") for e in client.events() if e["choices"]]
    assert "\n\nSummary." in contents


async def test_an_error_after_the_start_is_an_error_event_and_the_end():
    sink, client = stream()
    sink.release(Channel.TEXT)
    text = chunk(content="Half")
    sink.push(raw(text), text, Channel.TEXT)
    await sink.flush()

    await sink.fail(UpstreamDisconnected("The upstream model API broke off the stream."))

    assert client.events()[-1]["error"]["code"] == "upstream_disconnected"
    assert client.messages[-1]["more_body"] is False


async def test_the_response_carries_the_headers_of_the_moment_it_starts():
    sink, client = stream()

    await sink.finish()

    start = next(m for m in client.messages if m["type"] == "http.response.start")
    assert (b"x-test", b"1") in start["headers"]
    assert (b"content-type", b"text/event-stream") in start["headers"]


def _responses_stream() -> tuple[ClientStream, Client]:
    client = Client()
    return ClientStream(client, list, include_usage=False, keepalive=0, stream=RESPONSES.stream), client


def _numbered_message() -> list[dict]:
    events = stream_events(response(message("Hi.")))
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


async def test_an_event_that_may_pass_goes_out_unread_when_nothing_waits_before_it():
    sink, client = _responses_stream()
    sink.release(Channel.ALL)
    events = _numbered_message()
    at = next(n for n, e in enumerate(events) if e["type"] == "response.content_part.added")
    for event in events[:at]:
        sink.push(event_frame(event), event, Channel.TEXT if "output_index" in event else Channel.NONE)
    data = json.dumps(events[at], separators=(",", ":")).encode()

    assert sink.passes(b"event: response.content_part.added\ndata: " + data + b"\n\n", events[at])
    await sink.flush()
    assert client.body.endswith(b"event: response.content_part.added\ndata: " + data + b"\n\n")


async def test_an_event_that_may_pass_waits_its_turn_behind_a_held_one():
    sink, _ = _responses_stream()
    events = _numbered_message()
    sink.push(event_frame(events[0]), events[0], Channel.NONE)  # held: nothing substantive has gone

    assert not sink.passes(event_frame(events[3]), events[3])


def test_a_format_without_a_relay_lets_nothing_pass_unread():
    sink, _ = stream()

    assert sink.passing == frozenset()

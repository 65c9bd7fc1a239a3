"""Reading a streamed reply ends where its format says the stream ends, and nowhere else."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

from proxy.errors import UpstreamDisconnected, UpstreamError, UpstreamMalformed
from proxy.exchange import Channel, Reply, Usage
from proxy.streaming.client import ClientStream
from proxy.streaming.reader import read_streamed_reply
from proxy.wire.chat.format import CHAT_COMPLETIONS
from proxy.wire.chat.stream import ChatAssembler
from proxy.wire.responses.format import RESPONSES


class Events(httpx.AsyncByteStream):
    def __init__(self, *chunks: bytes) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


def response(*chunks: bytes) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Events(*chunks))


class Sink:
    def __init__(self) -> None:
        self.sent: list[dict] = []

    async def __call__(self, message: dict) -> None:
        self.sent.append(message)

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent)


def client(sink: Sink | None = None) -> ClientStream:
    return ClientStream(sink or Sink(), list, include_usage=False, keepalive=0, stream=CHAT_COMPLETIONS.stream)


class TerminalEventAssembler:
    """A format whose last event carries data and completes the stream (like Messages' ``message_stop``)."""

    def __init__(self) -> None:
        self.model: str | None = None
        self.usage: Usage | None = None
        self.produced_chars = 0
        self.complete = False
        self.content = ""
        self.text_length = 0
        self.has_text = False
        self.has_reasoning = False
        self.has_tool_calls = False
        self.taken: list[str] = []

    def ends(self, data: bytes) -> bool:
        return False

    def add(self, event: Mapping[str, Any]) -> int:
        self.taken.append(event["type"])
        if event["type"] == "message_stop":
            self.usage = Usage(3, 1)
            self.complete = True
            return Channel.FINISH
        self.content += event["text"]
        return Channel.TEXT

    def reply(self) -> Reply:
        return Reply(self.content, None, (), "stop", self.usage or Usage())

    def completion(self) -> dict[str, Any]:
        return {}


async def test_a_chat_stream_ends_with_the_done_sentinel():
    assembler = ChatAssembler()
    chunk = b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n'

    failure = await read_streamed_reply(response(chunk, b"data: [DONE]\n\n"), assembler, client(), lambda _: 0)

    assert failure is None
    assert assembler.reply().content == "hi"


async def test_a_chat_stream_without_the_sentinel_is_cut():
    chunk = b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n'

    failure = await read_streamed_reply(response(chunk), ChatAssembler(), client(), lambda _: 0)

    assert isinstance(failure, UpstreamDisconnected)


async def test_a_stream_whose_last_event_carries_data_ends_once_that_event_is_taken():
    assembler = TerminalEventAssembler()
    events = b'data: {"type":"text","text":"hi"}\n\ndata: {"type":"message_stop"}\n\n'

    failure = await read_streamed_reply(response(events), assembler, client(), lambda _: 0)

    assert failure is None
    assert assembler.taken == ["text", "message_stop"]
    assert assembler.usage == Usage(3, 1)


TEXT_IN_ONE_READ = (
    b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


async def test_a_stream_read_in_one_piece_lets_what_is_released_go_before_its_verdict():
    sink = Sink()
    stream = client(sink)

    failure = await read_streamed_reply(response(TEXT_IN_ONE_READ), ChatAssembler(), stream, lambda _: 0)

    assert failure is None
    assert b'"content":"hi"' in sink.body
    assert b"finish_reason" not in sink.body  # the finish chunk waits for the verdict
    assert not stream.finished


async def test_a_stream_read_in_one_piece_that_a_guard_holds_waits_whole_for_its_verdict():
    sink = Sink()

    failure = await read_streamed_reply(
        response(TEXT_IN_ONE_READ), ChatAssembler(), client(sink), lambda _: Channel.TEXT
    )

    assert failure is None
    assert sink.sent == []


def test_event_types_an_upstream_invents_are_named_but_not_kept_past_a_bound(monkeypatch):
    from proxy.streaming import reader

    monkeypatch.setattr(reader, "_NAMES", {})
    names = [reader._as_name(f"invented.{n}") for n in range(1000)]

    assert names == [f"invented.{n}".encode() for n in range(1000)]
    assert len(reader._NAMES) == reader._KEPT_NAMES


def test_a_long_event_type_is_named_but_never_kept(monkeypatch):
    from proxy.streaming import reader

    monkeypatch.setattr(reader, "_NAMES", {})

    assert reader._as_name("x" * 100_000) == b"x" * 100_000
    assert reader._NAMES == {}


def test_an_event_type_that_breaks_a_line_is_no_name(monkeypatch):
    from proxy.streaming import reader

    monkeypatch.setattr(reader, "_NAMES", {})

    assert reader._as_name("response.created\nevent: forged") is None
    assert reader._NAMES == {}


def _named_events(events: list[dict[str, Any]]) -> bytes:
    numbered = ({**event, "sequence_number": n} for n, event in enumerate(events))
    return b"".join(b"event: %b\ndata: %b\n\n" % (e["type"].encode(), json.dumps(e).encode()) for e in numbered)


async def test_a_call_whose_index_had_events_before_its_item_is_held_with_the_calls():
    call = {"id": "fc", "type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    events = [
        {"type": "response.created", "response": {"id": "r", "object": "response", "output": []}},
        {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "x"},
        {"type": "response.output_item.added", "output_index": 0, "item": {**call, "arguments": ""}},
        {"type": "response.function_call_arguments.delta", "output_index": 0, "delta": "{}"},
        {"type": "response.function_call_arguments.done", "output_index": 0, "arguments": "{}"},
        {"type": "response.output_item.done", "output_index": 0, "item": call},
        {"type": "response.completed", "response": {"id": "r", "object": "response", "output": [call]}},
    ]
    sink = Sink()
    stream = ClientStream(sink, list, include_usage=False, keepalive=0, stream=RESPONSES.stream)

    failure = await read_streamed_reply(
        response(_named_events(events)), RESPONSES.stream.assembler(), stream, lambda _: Channel.TOOL_CALLS
    )

    assert failure is None
    assert b"function_call" not in sink.body


def _passing_stream(part: bytes, name: bytes = b"response.content_part.added") -> bytes:
    """A Responses text stream whose content part (the event that may pass unread) is ``part``."""
    head = {"type": "response.created", "response": {"id": "r", "object": "response", "output": []}}
    item = {"id": "m", "type": "message", "role": "assistant", "content": []}
    opened = _named_events([head, {"type": "response.output_item.added", "output_index": 0, "item": item}])
    return opened + b"event: %b\ndata: %b\n\n" % (name, part)


PART = (
    b'{"type":"response.content_part.added","output_index":0,"content_index":0,'
    b'"part":{"text":"%b"},"sequence_number":2}'
)


async def _read_responses(body: bytes) -> tuple[object, bytes]:
    sink = Sink()
    stream = ClientStream(sink, list, include_usage=False, keepalive=0, stream=RESPONSES.stream)
    failure = await read_streamed_reply(response(body), RESPONSES.stream.assembler(), stream, lambda _: 0)
    await stream.flush()
    return failure, sink.body


async def test_an_event_that_may_pass_unread_but_is_not_valid_json_ends_the_stream():
    failure, body = await _read_responses(_passing_stream(PART % b"\xc3\x28"))

    assert isinstance(failure, UpstreamMalformed)
    assert b"\xc3\x28" not in body


async def test_an_event_that_may_pass_unread_but_carries_an_error_ends_the_stream_with_it():
    with_error = PART.replace(b'"sequence_number"', b'"error":{"message":"overloaded"},"sequence_number"')

    failure, _ = await _read_responses(_passing_stream(with_error % b""))

    assert isinstance(failure, UpstreamError)
    assert "overloaded" in failure.message


async def test_an_unnamed_event_that_may_pass_unread_goes_out_as_the_upstream_framed_it():
    failure, body = await _read_responses(_passing_stream(PART % b"", name=b"").replace(b"event: \ndata: ", b"data: "))

    assert isinstance(failure, UpstreamDisconnected)  # no terminal event: the stream was cut
    assert body.endswith(b"\n\ndata: " + PART % b"" + b"\n\n")


async def test_an_unnamed_event_that_may_pass_unread_but_is_not_valid_json_ends_the_stream():
    unnamed = _passing_stream(PART % b"\xc3\x28", name=b"").replace(b"event: \ndata: ", b"data: ")

    failure, body = await _read_responses(unnamed)

    assert isinstance(failure, UpstreamMalformed)
    assert b"\xc3\x28" not in body


async def test_an_event_that_may_pass_unread_goes_out_named_by_its_type():
    failure, body = await _read_responses(_passing_stream(PART % b"", name=b"response.output_text.done"))

    assert isinstance(failure, UpstreamDisconnected)  # no terminal event: the stream was cut
    assert b"event: response.content_part.added\ndata: " + PART % b"" in body

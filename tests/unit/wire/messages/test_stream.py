"""Streamed Anthropic Messages: the assembler, the event channels, and the client's sequence."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from proxy.exchange import Channel
from proxy.streaming.client import ClientStream
from proxy.wire.messages.format import MESSAGES
from proxy.wire.messages.parse import parse_reply
from proxy.wire.messages.relay import MessagesRelay
from proxy.wire.messages.stream import MessagesAssembler, event_frame
from tests.support.fake_messages import (
    check_stream,
    message_body,
    said,
    stream_events,
    streamed_message,
    text,
    thinking,
    tool_use,
)

PAYLOAD: dict[str, Any] = {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}


def events_of(*blocks: dict[str, Any], stop_reason: str | None = None) -> list[dict[str, Any]]:
    return [data for _, data in stream_events(message_body(said(*blocks, stop_reason=stop_reason), PAYLOAD))]


def assembled(events: list[dict[str, Any]]) -> MessagesAssembler:
    assembler = MessagesAssembler()
    for event in events:
        assembler.add(event)
    return assembler


def test_the_assembled_reply_equals_the_same_message_read_whole():
    blocks = (thinking("Plan."), text("Reading."), tool_use("read", {"path": "a", "n": [1, 2]}))
    body = message_body(said(*blocks), PAYLOAD)

    streamed = assembled(events_of(*blocks)).reply()
    whole = parse_reply(json.dumps(body).encode())

    assert whole is not None
    assert dataclasses.replace(streamed, tool_calls=()) == dataclasses.replace(whole, tool_calls=())
    assert [c.parsed_arguments() for c in streamed.tool_calls] == [c.parsed_arguments() for c in whole.tool_calls]
    assert streamed.source == whole.source


def test_the_completion_is_the_message_a_json_call_returns():
    blocks = (thinking("Plan."), text("Done."))
    body = message_body(said(*blocks), PAYLOAD)

    completion = assembled(events_of(*blocks)).completion()

    assert completion["content"] == body["content"]
    assert (completion["stop_reason"], completion["usage"]) == ("end_turn", body["usage"])


def test_message_stop_completes_the_stream_and_nothing_before_it_does():
    assembler = MessagesAssembler()
    events = events_of(text("Hi"))

    flags = [assembler.add(event) for event in events[:-1]]

    assert not assembler.complete
    assert assembler.add(events[-1]) == Channel.FINISH
    assert assembler.complete
    assert flags[-1] == Channel.FINISH  # message_delta waits for the verdict too


@pytest.mark.parametrize(
    ("block", "channel"),
    [
        (text("Hi"), Channel.TEXT),
        (thinking("Hmm"), Channel.REASONING),
        (tool_use("read", {"path": "a"}), Channel.TOOL_CALLS),
        ({"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {"q": "x"}}, Channel.TEXT),
    ],
)
def test_every_event_of_a_block_carries_the_blocks_channel(block: dict[str, Any], channel: int):
    assembler = MessagesAssembler()
    events = events_of(block)

    flags = [assembler.add(e) for e in events if e["type"].startswith("content_block")]

    assert set(flags) == {channel}


def test_pings_and_unknown_events_carry_nothing():
    assembler = MessagesAssembler()

    assert assembler.add({"type": "ping"}) == Channel.NONE
    assert assembler.add({"type": "content_block_future", "index": 0}) == Channel.NONE


def test_partial_json_is_kept_as_written_for_the_argument_checks():
    assembler = MessagesAssembler()
    assembler.add({"type": "message_start", "message": {"id": "m", "model": "x", "usage": {"input_tokens": 3}}})
    assembler.add({"type": "content_block_start", "index": 0, "content_block": tool_use("run", {})})
    for part in ['{"cmd": "rm -rf /",', ' "cmd": "ls"}']:
        assembler.add(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": part}}
        )

    [call] = assembler.reply().tool_calls

    assert call.parsed_arguments()[1] == "arguments give the key 'cmd' more than once"


def test_usage_from_message_start_and_message_delta_is_merged():
    assembler = MessagesAssembler()
    assembler.add(
        {
            "type": "message_start",
            "message": {"usage": {"input_tokens": 5, "cache_read_input_tokens": 100, "output_tokens": 1}},
        }
    )
    assembler.add({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 42}})

    assert assembler.usage is not None
    assert (assembler.usage.prompt_tokens, assembler.usage.cached_tokens, assembler.usage.completion_tokens) == (
        105,
        100,
        42,
    )


def test_the_partial_reply_tells_text_from_reasoning_and_calls():
    assembler = MessagesAssembler()
    events = events_of(thinking("Hmm"), text("Hi there"), tool_use("read", {}))
    for event in events[:8]:
        assembler.add(event)

    assert assembler.has_reasoning
    assert not assembler.has_tool_calls
    for event in events[8:]:
        assembler.add(event)
    assert (assembler.has_text, assembler.has_tool_calls, assembler.content) == (True, True, "Hi there")


def test_a_citations_delta_is_added_to_its_text_block():
    assembler = MessagesAssembler()
    assembler.add(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "", "citations": None}}
    )
    assembler.add({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Cited."}})
    citation = {"type": "char_location", "cited_text": "x"}
    assembler.add(
        {"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta", "citation": citation}}
    )

    assert assembler.completion()["content"] == [{"type": "text", "text": "Cited.", "citations": [citation]}]


@pytest.mark.parametrize(
    ("event", "released", "going"),
    [
        ({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}, Channel.TEXT, True),
        (
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}},
            Channel.REASONING,
            False,
        ),
        ({"type": "content_block_start", "index": 1, "content_block": tool_use("a", {})}, Channel.TOOL_CALLS, True),
        ({"type": "content_block_stop", "index": 1}, Channel.ALL, False),
    ],
)
def test_an_event_is_split_whole_one_way_or_the_other(event: dict[str, Any], released: int, going: bool):
    out, kept = MESSAGES.stream.split_event(event, released)

    assert (out, kept) == ((event, None) if going else (None, event))


# -- what the client receives -------------------------------------------------------------


def test_an_ending_streams_as_one_well_formed_message():
    body = MESSAGES.codec.ending("Stopping here.", model="m")

    events = check_stream(MESSAGES.stream.streamed(body, include_usage=True))

    assert streamed_message(events)["content"] == body["content"]
    assert events[0]["message"]["id"].startswith("msg_lw")


def test_a_reply_with_every_block_kind_streams_back_as_it_was():
    body = message_body(said(thinking("Plan."), text("Reading."), tool_use("read", {"path": "a"})), PAYLOAD)

    events = check_stream(MESSAGES.stream.streamed(body, include_usage=True))

    assert streamed_message(events)["content"] == body["content"]


def test_the_error_event_is_named_and_in_anthropics_shape():
    from proxy.errors import UpstreamError

    raw = MESSAGES.stream.error_event(UpstreamError("gone"))

    assert raw.startswith(b"event: error\ndata: ")
    assert json.loads(raw.split(b"data: ", 1)[1]) == {
        "type": "error",
        "error": {"type": "api_error", "message": "gone"},
    }


def frames(events: list[dict[str, Any]]) -> list[tuple[bytes, dict[str, Any]]]:
    return [(event_frame(e), e) for e in events]


def test_a_second_attempt_continues_the_first_ones_message():
    sequencer = MessagesRelay()
    first = events_of(thinking("Hmm"), text("Let me look."))
    second = events_of(text("Here it is."))
    out = [sequencer.event(raw, e) for raw, e in frames(first[:-2])]  # the reply went out, its finish was held
    sequencer.new_attempt()
    out += [sequencer.event(raw, e) for raw, e in frames(second)]

    events = check_stream(b"".join(out))

    assert [b["text"] for b in streamed_message(events)["content"] if b["type"] == "text"] == [
        "Let me look.",
        "Here it is.",
    ]


def test_an_ending_after_part_of_a_reply_continues_its_message():
    sequencer = MessagesRelay()
    out = [sequencer.event(raw, e) for raw, e in frames(events_of(text("Partial answer."))[:-2])]
    out.append(sequencer.ending(MESSAGES.codec.ending("Stopping.", model="m")))

    events = check_stream(b"".join(out))

    assert [b["text"] for b in streamed_message(events)["content"]] == ["Partial answer.", "Stopping."]


def test_the_sequencer_passes_the_upstreams_own_bytes_when_nothing_changes():
    sequencer = MessagesRelay()
    pairs = frames(events_of(text("Hi")))

    assert [sequencer.event(raw, e) for raw, e in pairs] == [raw for raw, _ in pairs]


# -- the client's side: events go out in order, one message across attempts --------------------


CLIENT_PAYLOAD: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


class Client:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def __call__(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages if m["type"] == "http.response.body")


def stream() -> tuple[ClientStream, Client]:
    client = Client()
    return ClientStream(client, list, include_usage=True, keepalive=0, stream=MESSAGES.stream), client


def feed(sink: ClientStream, *blocks: dict[str, Any], release: int = Channel.NONE) -> None:
    """One attempt's events through the stream as the reader hands them over."""
    assembler = MessagesAssembler()
    sink.new_attempt()
    sink.release(release)
    for _, event in stream_events(message_body(said(*blocks), CLIENT_PAYLOAD)):
        channels = assembler.add(event)
        if channels & Channel.FINISH:
            sink.defer(event_frame(event), usage_only=False)
        else:
            sink.push(event_frame(event), event, channels)


async def test_a_released_block_waits_behind_a_held_one():
    sink, client = stream()

    feed(sink, thinking("Plan."), text("Answer."), release=Channel.TEXT)
    await sink.flush()

    assert client.body == b""  # the text follows held thinking: nothing may overtake it
    await sink.finish()
    message = streamed_message(check_stream(client.body))
    assert [b["type"] for b in message["content"]] == ["thinking", "text"]


async def test_a_second_attempt_continues_the_first_ones_message_on_the_client():
    sink, client = stream()
    feed(sink, thinking("Plan."), tool_use("search", {"query": "x"}), release=Channel.REASONING)
    await sink.flush()

    feed(sink, thinking("Fixed."), tool_use("search", {"q": "x"}, "toolu_2"), release=Channel.REASONING)
    await sink.finish()

    message = streamed_message(check_stream(client.body))
    assert [b["type"] for b in message["content"]] == ["thinking", "thinking", "tool_use"]
    assert message["content"][2]["input"] == {"q": "x"}


async def test_an_ending_replacing_a_partly_sent_attempt_continues_its_message():
    sink, client = stream()
    feed(sink, thinking("Plan."), text("Partial."), release=Channel.REASONING)
    await sink.flush()

    await sink.replace(MESSAGES.codec.ending("Stopping here.", model="m"))

    message = streamed_message(check_stream(client.body))
    assert [b["type"] for b in message["content"]] == ["thinking", "text"]
    assert message["content"][1]["text"] == "Stopping here."


async def test_an_attempt_held_whole_and_replaced_is_as_if_never_streamed():
    sink, client = stream()
    feed(sink, thinking("Plan."), text("Wrong."))

    await sink.replace(MESSAGES.codec.ending("Ending.", model="m"))

    events = check_stream(client.body)
    assert events[0]["message"]["id"].startswith("msg_lw")
    assert [b["text"] for b in streamed_message(events)["content"]] == ["Ending."]

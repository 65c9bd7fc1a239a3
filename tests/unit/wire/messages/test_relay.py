"""The Messages relay: the client's stream stays one well-formed message across attempts and
endings, the upstream's own bytes pass untouched when nothing changes, and a released block
never overtakes a held one."""

from __future__ import annotations

import json
from typing import Any

from proxy.exchange import Channel
from proxy.streaming.client import ClientStream
from proxy.wire.messages.format import MESSAGES
from proxy.wire.messages.relay import MessagesRelay
from proxy.wire.messages.stream import MessagesAssembler, event_frame
from tests.support.fake_messages import (
    check_stream,
    events_of,
    message_body,
    said,
    stream_events,
    streamed_message,
    text,
    thinking,
    tool_use,
)


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


def test_a_later_attempts_deltas_and_stops_are_renumbered_after_the_blocks_sent():
    sequencer = MessagesRelay()
    for raw, e in frames(events_of(text("One."), text("Two."))[:-2]):
        sequencer.event(raw, e)
    sequencer.new_attempt()

    sent = [sequencer.event(raw, e) for raw, e in frames(events_of(text("Three.")))]
    out = [json.loads(raw.split(b"data: ", 1)[1]) for raw in sent if raw]  # the second message_start is dropped

    assert [(e["type"], e.get("index")) for e in out if e["type"].startswith("content_block")] == [
        ("content_block_start", 2),
        ("content_block_delta", 2),
        ("content_block_delta", 2),
        ("content_block_delta", 2),
        ("content_block_stop", 2),
    ]


def test_an_event_cut_by_the_holdback_is_framed_by_the_relay():
    sequencer = MessagesRelay()
    event = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}

    assert sequencer.event(None, event) == event_frame(event)


def test_a_block_index_that_is_no_number_passes_as_it_came():
    sequencer = MessagesRelay()
    sequencer.event(None, {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}})
    sequencer.new_attempt()
    odd = {"type": "content_block_delta", "index": "0", "delta": {"type": "text_delta", "text": "x"}}

    assert sequencer.event(b"raw", odd) == b"raw"


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

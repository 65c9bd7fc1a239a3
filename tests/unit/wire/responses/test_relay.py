"""The Responses relay: the client's view of one stream across attempts, numbered and closed
consistently (every stream checked by the strict validator)."""

from __future__ import annotations

import json

from proxy.errors import UpstreamError
from proxy.exchange import Channel
from proxy.wire.responses.format import RESPONSES
from proxy.wire.responses.relay import ResponsesRelay
from proxy.wire.responses.stream import event_frame
from tests.support.fake_responses import function_call, message, reasoning, response, stream_events
from tests.support.responses_events import validate_stream


def _through(relay: ResponsesRelay, events: list[dict]) -> bytes:
    return b"".join(relay.event(event_frame(e), e) for e in events)


def test_an_untouched_stream_passes_byte_for_byte():
    events = stream_events(response(message("Hello."), function_call("f", "{}")))
    raw = b"".join(event_frame(e) for e in events)

    assert _through(ResponsesRelay(), events) == raw


def test_a_second_attempt_continues_the_stream_the_client_already_has():
    first = stream_events(response(message("Let me look."), function_call("f", "{}")))
    second = stream_events(response(message("Found it.")))
    relay = ResponsesRelay()
    sent = _through(relay, [e for e in first if e.get("output_index") != 1 and e["type"] != "response.completed"])
    relay.new_attempt()  # the call was rejected; the next attempt streams on

    sent += _through(relay, second)

    parsed = validate_stream(sent)
    assert [item["content"][0]["text"] for item in parsed.items] == ["Let me look.", "Found it."]
    assert parsed.final is not None
    assert parsed.final["id"] == first[0]["response"]["id"]
    assert relay.upstream_id == second[0]["response"]["id"]


def test_an_item_released_after_a_later_one_is_numbered_in_the_order_it_reached_the_client():
    events = stream_events(response(function_call("f", "{}"), message("Text.")))
    call = [e for e in events if e.get("output_index") == 0]
    text = [e for e in events if e.get("output_index") == 1]

    parsed = validate_stream(_through(ResponsesRelay(), [*events[:2], *text, *call, events[-1]]))

    assert [item["type"] for item in parsed.items] == ["message", "function_call"]


def test_a_reasoning_item_waits_for_its_follower_and_is_dropped_with_its_attempt():
    first = stream_events(response(reasoning("think"), function_call("f", "{}")))
    relay = ResponsesRelay()
    reasoning_events = [e for e in first if e.get("output_index") == 0]

    sent = _through(relay, first[:2])
    assert _through(relay, reasoning_events) == b""  # waits: its follower may be rejected
    relay.new_attempt()
    second = stream_events(response(reasoning("again"), message("Done.")))
    parsed = validate_stream(sent + _through(relay, second))

    assert [item["type"] for item in parsed.items] == ["reasoning", "message"]
    assert parsed.items[0]["summary"][0]["text"] == "again"


def test_an_ending_after_part_of_a_stream_closes_open_items_and_completes_with_everything():
    events = stream_events(response(message("Half an answer")))
    relay = ResponsesRelay()
    opened = [e for e in events if e["type"] not in ("response.output_text.done", "response.content_part.done")]
    sent = _through(relay, [e for e in opened if e["type"] not in ("response.output_item.done", "response.completed")])

    sent += relay.ending(RESPONSES.stream.appended(RESPONSES.codec.ending("I have to stop here.", model="m")))

    parsed = validate_stream(sent)
    assert [item["content"][0]["text"] for item in parsed.items] == ["Half an answer", "\n\nI have to stop here."]


def test_an_ending_before_anything_went_out_is_a_stream_of_its_own():
    ending = RESPONSES.codec.ending("Stopped.", model="m")

    parsed = validate_stream(ResponsesRelay().ending(ending))

    assert parsed.final == ending


def test_an_error_continues_the_numbering_and_ends_the_stream():
    events = stream_events(response(message("Hello.")))
    relay = ResponsesRelay()
    sent = _through(relay, events[:4]) + relay.error(UpstreamError("The upstream broke off."))

    parsed = validate_stream(sent, allow_error=True)

    assert parsed.error is not None
    assert parsed.error["message"] == "The upstream broke off."
    assert json.loads(sent.split(b"data: ")[-1])["sequence_number"] == 4


def _numbered(events: list[dict]) -> list[dict]:
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


def _data(event: dict) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode()


def _passes(relay: ResponsesRelay, event: dict, released: int = Channel.ALL) -> tuple[bytes, int] | None:
    raw = b"event: %b\ndata: %b\n\n" % (event["type"].encode(), _data(event))
    return relay.passes(raw, event, released)


def _opened_message() -> tuple[ResponsesRelay, list[dict], bytes]:
    """A numbered text stream, through the relay up to its message's first passing event."""
    events = _numbered(stream_events(response(message("Hello there."))))
    relay = ResponsesRelay()
    at = next(n for n, e in enumerate(events) if e["type"] == "response.content_part.added")
    return relay, events[at:], _through(relay, events[:at])


def test_an_event_that_carries_nothing_for_the_guards_passes_as_the_upstream_framed_it():
    relay, rest, sent = _opened_message()

    passed = _passes(relay, rest[0])

    assert passed == (b"event: response.content_part.added\ndata: " + _data(rest[0]) + b"\n\n", Channel.TEXT)
    parsed = validate_stream(sent + passed[0] + _through(relay, rest[1:]))
    assert parsed.items[0]["content"][0]["text"] == "Hello there."


def test_every_event_of_a_text_stream_that_may_pass_does_and_the_stream_stays_whole():
    relay, rest, sent = _opened_message()

    for event in rest:
        passed = _passes(relay, event) if event["type"].encode() in relay.passing else None
        sent += passed[0] if passed is not None else relay.event(event_frame(event), event)

    assert validate_stream(sent).final is not None


def test_a_passing_event_numbered_other_than_the_clients_next_goes_the_long_way():
    relay, rest, _ = _opened_message()

    assert _passes(relay, {**rest[0], "sequence_number": rest[0]["sequence_number"] + 1}) is None


def test_a_passing_event_of_a_channel_still_held_goes_the_long_way():
    relay, rest, _ = _opened_message()

    assert _passes(relay, rest[0], released=Channel.REASONING | Channel.TOOL_CALLS) is None


def test_a_passing_event_of_an_item_the_relay_has_not_seen_goes_the_long_way():
    relay, rest, _ = _opened_message()

    assert _passes(relay, {**rest[0], "output_index": 1}) is None


def test_a_passing_event_while_a_reasoning_item_waits_goes_the_long_way():
    events = _numbered(stream_events(response(message("Hi."), reasoning("think"), message("Bye."))))
    relay = ResponsesRelay()
    reasoning_added = next(n for n, e in enumerate(events) if e.get("output_index") == 1)
    _through(relay, events[:reasoning_added])
    _through(relay, [e for e in events if e.get("output_index") == 1])  # waits for its follower

    late = {"type": "response.output_text.done", "item_id": "m", "output_index": 0, "content_index": 0, "text": "Hi."}

    assert _passes(relay, {**late, "sequence_number": relay._seq}) is None


def test_an_ending_after_passed_events_closes_what_the_client_has():
    relay, rest, sent = _opened_message()
    sent += _passes(relay, rest[0])[0] + _through(relay, [rest[1]])  # the part opened, one delta

    sent += relay.ending(RESPONSES.stream.appended(RESPONSES.codec.ending("Stopping.", model="m")))

    parsed = validate_stream(sent)
    assert parsed.items[0]["content"][0]["text"] == rest[1]["delta"]


def test_a_passing_event_counts_under_the_channel_of_the_first_item_at_its_index():
    opening = {"type": "response.created", "response": {"id": "r", "object": "response", "output": []}}
    call = {"id": "f", "type": "function_call", "name": "f", "arguments": ""}
    events = _numbered(
        [
            opening,
            {"type": "response.output_item.added", "output_index": 0, "item": call},
            {"type": "response.output_item.added", "output_index": 0, "item": message("Hi.")},  # reused
            {"type": "response.content_part.added", "output_index": 0, "content_index": 0, "part": {"text": ""}},
        ]
    )
    relay = ResponsesRelay()
    _through(relay, events[:3])

    assert _passes(relay, events[3], released=Channel.TEXT) is None  # the call's channel is held
    assert _passes(relay, events[3], released=Channel.TOOL_CALLS)[1] == Channel.TOOL_CALLS


def test_a_passing_event_of_an_item_whose_events_came_before_it_goes_the_long_way():
    opening = {"type": "response.created", "response": {"id": "r", "object": "response", "output": []}}
    early = {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "x"}
    call = {"id": "f", "type": "function_call", "name": "f", "arguments": ""}
    events = _numbered(
        [
            opening,
            early,
            {"type": "response.output_item.added", "output_index": 0, "item": call},
            {"type": "response.function_call_arguments.done", "output_index": 0, "arguments": "{}"},
        ]
    )
    relay = ResponsesRelay()
    _through(relay, events[:3])

    assert _passes(relay, events[3]) is None  # which channel it is, the assembler says

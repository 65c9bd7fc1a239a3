"""The Responses relay: the client's view of one stream across attempts, numbered and closed
consistently (every stream checked by the strict validator)."""

from __future__ import annotations

import json

from proxy.errors import UpstreamError
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

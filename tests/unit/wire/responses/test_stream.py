"""Streamed Responses: assembling events into a reply and writing responses as events
(every stream checked by the strict validator; the client's view across attempts: test_relay.py)."""

from __future__ import annotations

import pytest

from proxy.exchange import Channel, ToolCall
from proxy.wire.responses.format import RESPONSES
from proxy.wire.responses.stream import ResponsesAssembler, event_frame
from tests.support.fake_responses import function_call, message, reasoning, response, stream_events
from tests.support.responses_events import StreamInvalid, validate_stream


def _assembled(body: dict) -> tuple[ResponsesAssembler, list[int]]:
    assembler = ResponsesAssembler()
    return assembler, [assembler.add(event) for event in stream_events(body)]


def test_the_fakes_streams_pass_the_validator():
    body = response(reasoning("think"), message("Hello there."), function_call("f", '{"a": 1}'))

    parsed = validate_stream(b"".join(event_frame(e) for e in stream_events(body)))

    assert parsed.final == body
    assert parsed.text == "Hello there."


@pytest.mark.parametrize(
    ("mutate", "why"),
    [
        (lambda events: events[1:], "first event"),
        (lambda events: [*events[:3], events[4], events[3], *events[5:]], "sequence_number"),
        (lambda events: events[:-1], "without response.completed"),
        (lambda events: [e for e in events if e["type"] != "response.output_item.added"], "before it was opened"),
        (lambda events: [e for e in events if e["type"] != "response.output_item.done"], "closed"),
    ],
)
def test_the_validator_rejects_inconsistent_streams(mutate, why):
    events = mutate(stream_events(response(message("Hello there."))))
    renumbered = [{**e, "sequence_number": n} for n, e in enumerate(events)] if why != "sequence_number" else events

    with pytest.raises(StreamInvalid, match=why):
        validate_stream(b"".join(event_frame(e) for e in renumbered))


def test_the_assembler_reads_text_calls_reasoning_and_usage():
    body = response(reasoning("think"), message("Hello."), function_call("f", '{"a": 1}', "c1"), usage=(50, 20))

    assembler, _ = _assembled(body)
    reply = assembler.reply()

    assert assembler.complete
    assert assembler.content == "Hello."
    assert reply.tool_calls == (ToolCall("c1", "f", '{"a": 1}'),)
    assert reply.reasoning == "think"
    assert reply.usage.prompt_tokens == 50
    assert assembler.usage is not None
    assert assembler.completion() == body


def test_each_event_reports_its_items_channel_and_the_terminal_one_finishes():
    body = response(reasoning("think"), message("Hi"), function_call("f", "{}"))

    _, channels = _assembled(body)
    events = stream_events(body)
    by_type = {e["type"]: c for e, c in zip(events, channels, strict=True)}

    assert by_type["response.created"] == Channel.NONE
    assert by_type["response.reasoning_summary_text.delta"] == Channel.REASONING
    assert by_type["response.output_text.delta"] == Channel.TEXT
    assert by_type["response.function_call_arguments.delta"] == Channel.TOOL_CALLS
    assert by_type["response.completed"] == Channel.FINISH


def test_the_partial_reply_shows_what_arrived_so_far():
    events = stream_events(response(reasoning("hmm"), function_call("f", "{}")))
    assembler = ResponsesAssembler()
    for event in events[:4]:
        assembler.add(event)

    assert assembler.has_reasoning
    assert not assembler.has_text
    assert not assembler.has_tool_calls
    for event in events[4:]:
        assembler.add(event)
    assert assembler.has_tool_calls


def test_a_stream_without_output_in_its_terminal_event_is_rebuilt_from_its_items():
    body = response(message("Hello."))
    events = stream_events(body)
    events[-1] = {**events[-1], "response": {**body, "output": []}}
    assembler = ResponsesAssembler()
    for event in events:
        assembler.add(event)

    assert assembler.reply().content == "Hello."


def test_an_incomplete_stream_is_cut_short():
    assembler, _ = _assembled(response(message("Part"), status="incomplete", incomplete="max_output_tokens"))

    assert assembler.reply().cut_short


def test_a_response_streamed_by_the_format_is_consistent_and_carries_it_whole():
    body = response(reasoning("think", encrypted="gAAA-x"), message("Hi."), function_call("f", "{}"))

    parsed = validate_stream(RESPONSES.stream.streamed(body, include_usage=True))

    assert parsed.final == body
    assert parsed.items[0]["encrypted_content"] == "gAAA-x"


def test_a_refusal_ending_streams_consistently():
    ending = RESPONSES.codec.shaped(
        {"text": {"format": {"type": "json_object"}}}, RESPONSES.codec.ending("No.", model="m"), text_started=False
    )

    parsed = validate_stream(RESPONSES.stream.streamed(ending, include_usage=True))

    assert parsed.items[0]["content"] == [{"type": "refusal", "refusal": "No."}]


def test_an_item_that_comes_after_events_of_its_index_takes_their_place():
    assembler = ResponsesAssembler()
    early = {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "x"}
    call = {"id": "fc", "type": "function_call", "call_id": "c", "name": "f", "arguments": ""}
    pieces = {"type": "response.function_call_arguments.delta", "output_index": 0, "delta": "{}"}

    channels = [
        assembler.add(early),
        assembler.add({"type": "response.output_item.added", "output_index": 0, "item": call}),
        assembler.add(pieces),
    ]

    assert channels == [Channel.TEXT, Channel.TOOL_CALLS, Channel.TOOL_CALLS]
    assert assembler.has_tool_calls
    assert assembler.output()[0]["arguments"] == "{}"


def test_an_item_opened_again_at_its_index_does_not_take_the_first_ones_place():
    assembler = ResponsesAssembler()
    call = {"id": "fc", "type": "function_call", "call_id": "c", "name": "f", "arguments": ""}
    text = {"id": "m", "type": "message", "role": "assistant", "content": []}

    assembler.add({"type": "response.output_item.added", "output_index": 0, "item": call})

    assert assembler.add({"type": "response.output_item.added", "output_index": 0, "item": text}) == Channel.TOOL_CALLS

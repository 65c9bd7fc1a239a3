"""One contract, every wire format in the registry: what the loop, the streaming client, the
judge and continuity rely on, checked through the format's own reading of what it wrote.

Where formats differ (a request's shape, where an error's message sits), the difference is a
row of :data:`~tests.unit.wire.table.SPEAKS`, not a branch here: a new format in
:data:`~proxy.wire.registry.FORMATS` gets every test once it has its row.
"""

from __future__ import annotations

import json
import random

import pytest

from proxy.edge.responses_socket import SOCKET_FORMATS, EventRelay
from proxy.errors import InvalidRequest, UpstreamError
from proxy.exchange import Echo, Message, Note, Reply, ReturnCalls, Tool, ToolCall, Usage
from proxy.judge.client import parse_verdict
from proxy.loop.finalize import replayed_ending
from proxy.wire.base import WireFormat
from proxy.wire.registry import FORMATS, format_named
from tests.unit.wire.table import (
    ACTING,
    CALLS,
    SCHEMA,
    SPEAKS,
    TEXT,
    Speaks,
    assembled,
    found,
    parsed,
    sent,
    stored,
    upstream_reply,
)


@pytest.fixture(params=FORMATS, ids=lambda wire: wire.name)
def wire(request: pytest.FixtureRequest) -> WireFormat:
    return request.param


@pytest.fixture
def speaks(wire: WireFormat) -> Speaks:
    return SPEAKS[wire.name]


def test_every_registered_format_has_a_row_in_the_table():
    assert {wire.name for wire in FORMATS} == set(SPEAKS)


def test_formats_have_one_name_and_one_route_each():
    assert len({wire.name for wire in FORMATS}) == len({wire.route for wire in FORMATS}) == len(FORMATS)
    # one fixed route below /v1, or a mount whose path names the call (Gemini's)
    assert all(wire.route == "/v1" + wire.upstream_path or wire.addressing is not None for wire in FORMATS)
    assert all(format_named(wire.name) is wire for wire in FORMATS)


# -- reading and writing bodies --------------------------------------------------------------


def test_a_rendered_request_keeps_the_fields_the_proxy_does_not_know(wire, speaks):
    rendered = json.loads(wire.codec.render_request(speaks.request, (Note("Go on."),)))

    assert rendered["x_top"] == 1
    assert found(rendered, "x_msg") == [2]


def test_a_request_rendered_without_turns_reads_as_it_came(wire, speaks):
    assert sent(wire, speaks.request, ()) == list(wire.codec.parse_request(speaks.request).messages)


def test_a_note_reaches_the_model_as_a_user_turn(wire, speaks):
    messages = sent(wire, speaks.request, (Note("Go on."),))

    assert [m.role for m in messages[:2]] == ["system", "user"]
    assert Message("user", "Go on.") in messages[2:]


def test_an_echo_repeats_the_models_text_as_its_turn_before_the_note(wire, speaks):
    messages = sent(wire, speaks.request, (Echo(upstream_reply(wire, TEXT)), Note("Are you sure?")))

    assert [(m.role, m.text) for m in messages[2:]] == [("assistant", TEXT.content), ("user", "Are you sure?")]


def test_returned_calls_are_each_answered_by_their_result(wire, speaks):
    results = {"call_1": "not run", "call_2": "not run either"}
    messages = sent(wire, speaks.request, (ReturnCalls(upstream_reply(wire, ACTING), results), Note("Go on.")))

    acting = next(i for i, m in enumerate(messages) if m.tool_calls)
    assert [(c.id, c.name, json.loads(c.arguments)) for c in messages[acting].tool_calls] == [
        (c.id, c.name, json.loads(c.arguments)) for c in CALLS
    ]
    assert {m.call_id: m.text for m in messages[acting + 1 :] if m.role == "tool"} == results
    assert Message("user", "Go on.") in messages[acting + 1 :]


@pytest.mark.parametrize("reply", [TEXT, ACTING], ids=["text", "tool_calls"])
def test_a_rendered_reply_reads_back_as_the_same_reply(wire, reply):
    read = upstream_reply(wire, reply)

    assert (read.content, read.tool_calls, read.usage, read.model) == (
        reply.content,
        reply.tool_calls,
        reply.usage,
        reply.model,
    )
    assert read.answered
    assert not read.cut_short


@pytest.mark.parametrize(
    "rewrite",
    [
        lambda wire, body: wire.codec.without_calls(body, "goal_status"),
        lambda wire, body: wire.stream.appended(body),
        lambda wire, body: wire.codec.decode(wire.codec.encode(body)),
    ],
    ids=["without-calls", "set-apart", "stored"],
)
def test_an_upstream_reply_the_proxy_rewrites_keeps_the_fields_it_does_not_know(wire, rewrite):
    body = {**wire.codec.render_reply(ACTING), "x_top": 1}

    rewritten = rewrite(wire, body)

    assert rewritten["x_top"] == 1
    assert wire.codec.parse_reply(wire.codec.encode(rewritten)).tool_calls == ACTING.tool_calls


def test_tool_notes_reach_the_results_they_annotate(wire, speaks):
    history = json.loads(
        wire.codec.render_request(
            speaks.request, (ReturnCalls(upstream_reply(wire, ACTING), {"call_1": "r1", "call_2": "r2"}),)
        )
    )

    amended = wire.codec.amended(history, {"call_2": "[note] it failed twice"}, ())
    results = {m.call_id: m.text for m in wire.codec.parse_request(amended).messages if m.role == "tool"}

    assert results["call_1"] == "r1"
    assert results["call_2"].startswith("r2")
    assert "[note] it failed twice" in results["call_2"]


def test_a_dropped_tool_is_no_longer_offered(wire, speaks):
    amended = wire.codec.amended(speaks.request, {}, ("search",))

    assert not wire.codec.parse_request(amended).tools
    assert amended["x_top"] == 1


def test_a_tool_offered_besides_the_clients_is_read_with_its_schema(wire, speaks):
    offered = wire.codec.with_tool(speaks.request, Tool("goal_status", {"type": "object"}, description="Report."))

    assert [t.name for t in wire.codec.parse_request(offered).tools] == ["search", "goal_status"]
    assert [(name, schema) for _, name, schema in wire.codec.declared_schemas(offered)] == [
        ("search", SCHEMA),
        ("goal_status", {"type": "object"}),
    ]


def test_a_reply_without_one_tools_calls_keeps_the_rest(wire):
    calls = (CALLS[0], ToolCall("call_9", "goal_status", "{}"))
    body = wire.codec.render_reply(Reply("On it.", None, calls, "tool_calls", Usage(1, 1), model="m"))

    kept = wire.codec.parse_reply(wire.codec.encode(wire.codec.without_calls(body, "goal_status")))

    assert [c.name for c in kept.tool_calls] == ["search"]


# -- endings, in the channel the agent reads answers from ------------------------------------


def test_a_text_ending_reads_as_a_finished_text_reply(wire):
    read = wire.codec.parse_reply(wire.codec.encode(wire.codec.ending("The run ended.", model="m", usage=Usage(3, 4))))

    assert (read.content, read.tool_calls, read.usage, read.cut_short) == ("The run ended.", (), Usage(3, 4), False)


def test_a_json_mode_request_asks_for_a_json_answer_and_a_plain_one_does_not(wire, speaks):
    assert wire.codec.parse_request({**speaks.request, **speaks.json_mode}).json_answer
    assert not wire.codec.parse_request(speaks.request).json_answer


def test_an_ending_for_a_json_mode_request_is_a_refusal(wire, speaks):
    payload = {**speaks.request, **speaks.json_mode}
    shaped = wire.codec.shaped(payload, wire.codec.ending("The run ended.", model="m"), text_started=False)

    read = wire.codec.parse_reply(wire.codec.encode(shaped))

    assert wire.codec.wants_structured_output(payload)
    assert (read.refusal, read.has_text) == ("The run ended.", False)


@pytest.mark.parametrize(("json_mode", "text_started"), [(False, False), (True, True)], ids=["prose", "text-streamed"])
def test_an_ending_stays_text_unless_a_json_answer_is_still_possible(wire, speaks, json_mode, text_started):
    payload = {**speaks.request, **(speaks.json_mode if json_mode else {})}
    body = wire.codec.ending("The run ended.", model="m")

    assert wire.codec.shaped(payload, body, text_started=text_started) == body


def test_an_answer_tool_ending_is_that_tools_call(wire):
    answer = ToolCall("call_a", "final_answer", '{"answer":"Lyon"}')
    body = wire.codec.render_reply(Reply(None, None, (answer,), "tool_calls", Usage(2, 2), model="m"))

    read = wire.codec.parse_reply(wire.codec.encode(body))

    assert [(c.name, json.loads(c.arguments)) for c in read.tool_calls] == [("final_answer", {"answer": "Lyon"})]


@pytest.mark.parametrize("answer_tool", [None, "search"], ids=["text", "answer-tool"])
def test_the_summary_call_asks_once_for_prose_or_the_answer_tool(wire, speaks, answer_tool):
    payload = {**speaks.request, **speaks.json_mode, "stream": True}
    body = wire.codec.render_summary_request(payload, (Note("Go on."),), "Summarize.", 50, True, answer_tool)

    summary = json.loads(body)
    conversation = wire.codec.parse_request(summary)
    assert conversation.messages[-2:] == [Message("user", "Go on."), Message("user", "Summarize.")]
    assert not conversation.stream
    assert not wire.codec.wants_structured_output(summary)
    assert conversation.forced_tool == answer_tool
    assert conversation.output_cap is not None
    assert conversation.output_cap[1] <= 50


def test_a_stored_ending_replays_as_it_was_stored(wire):
    body = wire.codec.ending("The run ended.", model="m")

    assert replayed_ending(wire, stored(wire, body), format_named) == body


@pytest.mark.parametrize("source", FORMATS, ids=lambda source: source.name)
def test_an_ending_stored_by_any_format_replays_in_this_ones_shape(wire, source):
    body = replayed_ending(wire, stored(source, source.codec.ending("The run ended.", model="m")), format_named)

    assert wire.codec.parse_reply(wire.codec.encode(body)).content == "The run ended."


# -- errors ---------------------------------------------------------------------------------


def test_an_error_body_is_in_the_formats_error_shape(wire, speaks):
    body = json.loads(wire.codec.error_body(InvalidRequest("The input is too long.", param="input")))

    assert speaks.error_message(body) == "The input is too long."


def test_a_stream_ends_in_error_with_one_event_in_the_formats_shape(wire, speaks):
    events = parsed(iter([wire.stream.error_event(UpstreamError("The upstream broke off the stream."))]))

    assert [event.name for event in events] == [speaks.error_event]
    read = speaks.stream_error_message or speaks.error_message
    assert read(json.loads(events[0].data)) == "The upstream broke off the stream."


# -- streams --------------------------------------------------------------------------------


def test_a_streamed_reply_assembles_into_the_reply(wire):
    body = wire.codec.render_reply(ACTING)
    assembler = assembled(wire, parsed(iter([wire.stream.streamed(body, include_usage=True)])))

    reply = assembler.reply()
    assert (reply.content, reply.tool_calls, reply.usage) == (ACTING.content, ACTING.tool_calls, ACTING.usage)
    whole = wire.codec.parse_reply(wire.codec.encode(assembler.completion()))
    assert (whole.content, whole.tool_calls) == (ACTING.content, ACTING.tool_calls)


def test_a_stream_split_at_any_byte_reads_as_the_same_events(wire):
    stream = wire.stream.streamed(wire.codec.render_reply(ACTING), include_usage=True)
    events = parsed(iter([stream]))

    assert all(parsed(iter([stream[:cut], stream[cut:]])) == events for cut in range(len(stream) + 1))


@pytest.mark.parametrize("seed", range(20))
def test_a_stream_split_in_many_places_assembles_into_the_same_reply(wire, seed):
    stream = wire.stream.streamed(wire.codec.render_reply(ACTING), include_usage=True)
    cuts = sorted(random.Random(seed).sample(range(1, len(stream)), 40))
    pieces = (stream[start:end] for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True))

    reply = assembled(wire, parsed(pieces)).reply()

    assert (reply.content, reply.tool_calls, reply.usage) == (ACTING.content, ACTING.tool_calls, ACTING.usage)


def test_keep_alives_between_events_change_nothing(wire):
    stream = wire.stream.streamed(wire.codec.render_reply(ACTING), include_usage=True)
    frames = [frame + b"\n\n" for frame in stream.split(b"\n\n") if frame]

    kept_alive = assembled(wire, parsed(iter([wire.stream.keepalive, *(p + wire.stream.keepalive for p in frames)])))

    reply = kept_alive.reply()
    assert (reply.content, reply.tool_calls) == (ACTING.content, ACTING.tool_calls)
    assert (kept_alive.produced_chars, kept_alive.usage) == (
        assembled(wire, parsed(iter([stream]))).produced_chars,
        ACTING.usage,
    )


def test_a_complete_stream_ends_as_its_format_ends_one(wire):
    stream = wire.stream.streamed(wire.codec.render_reply(TEXT), include_usage=False)
    events = parsed(iter([stream]))
    assembler = assembled(wire, events)

    assert assembler.complete or assembler.ends(events[-1].data)
    assert stream.endswith(wire.stream.trailer)


# -- the judge ------------------------------------------------------------------------------


def test_the_judge_asks_in_the_formats_dialect(wire):
    body = wire.judge.request("Judge strictly.", "Is it done?", model="judge-m", max_tokens=200, schema=SCHEMA)

    payload = json.loads(body)
    conversation = wire.codec.parse_request(payload)
    assert [(m.role, m.text) for m in conversation.messages] == [("system", "Judge strictly."), ("user", "Is it done?")]
    assert conversation.model == ("judge-m" if wire.addressing is None else None)  # Gemini's is in the path
    assert wire.codec.wants_structured_output(payload)
    assert not conversation.stream


def test_the_judges_verdict_is_read_from_its_formats_reply(wire):
    verdict = json.dumps({"nonce": "n0nce", "done": False, "reason": "tests still fail"})
    body = wire.codec.encode(wire.codec.render_reply(Reply(verdict, None, (), "stop", Usage(9, 9), model="j")))

    answer = wire.judge.answer(body)

    assert parse_verdict(answer.content, "n0nce") == (False, "tests still fail")
    assert answer.usage == Usage(9, 9)


def test_a_judge_with_its_own_endpoint_and_key_is_called_as_the_format_takes_them(wire):
    headers = dict(wire.judge.headers("sk-judge"))

    own = (
        "http://judge:8000/v1" + wire.upstream_path
        if wire.addressing is None
        else "http://judge:8000/v1:generateContent"
    )
    assert wire.judge.url("http://judge:8000/v1/") == own  # Gemini's names the model: its base is the model's URL
    assert headers[wire.key_header].endswith("sk-judge")


# -- what only some formats have --------------------------------------------------------------

HINTED = [wire for wire in FORMATS if SPEAKS[wire.name].session is not None]
UNHINTED = [wire for wire in FORMATS if SPEAKS[wire.name].session is None]


@pytest.mark.parametrize("wire", HINTED, ids=lambda wire: wire.name)
def test_a_session_the_client_names_is_read(wire):
    fields, headers = SPEAKS[wire.name].session
    payload = {**SPEAKS[wire.name].request, **fields}

    assert wire.codec.session_hint(payload, headers.get) == "s-42"


@pytest.mark.parametrize("wire", UNHINTED, ids=lambda wire: wire.name)
def test_a_format_whose_clients_name_no_session_reads_none(wire):
    every = {k: v for row in SPEAKS.values() if row.session for k, v in row.session[1].items()}

    assert wire.codec.session_hint(SPEAKS[wire.name].request, every.get) is None


@pytest.mark.parametrize("wire", [w for w in FORMATS if w.chains is not None], ids=lambda wire: wire.name)
def test_chains_continue_from_what_the_client_holds(wire):
    payload = SPEAKS[wire.name].request
    relayed = upstream_reply(wire, TEXT)
    ending = wire.codec.ending("The run ended.", model="m")
    continued = wire.chains.rechained(payload, "resp_upstream_1", {})

    [(held, target, kept)] = wire.chains.links(payload, [], relayed)
    [(own, own_target, own_body)] = wire.chains.links(continued, [], ending)

    assert (held, kept) == (target, None)  # the upstream's own reply: continued as it is
    assert wire.chains.continues(continued) == own_target == "resp_upstream_1"
    recorded = json.loads(own_body)
    recorded.pop("_lw_carried", None)  # Responses: the ended request's input, carried by a continuation
    assert recorded == ending
    assert own != own_target


@pytest.mark.parametrize("wire", [w for w in FORMATS if w.transcript is not None], ids=lambda wire: wire.name)
def test_a_transcript_gives_the_upstream_back_what_the_proxy_added(wire):
    client = SPEAKS[wire.name].request
    nudge = (Echo(upstream_reply(wire, Reply("Done.", None, (), "stop", Usage(1, 1)))), Note("Check the tests first."))
    reply = upstream_reply(wire, TEXT)
    records = wire.transcript.recorded(client, client, nudge, reply)
    following = json.loads(wire.codec.render_request(client, (Echo(reply), Note("Thanks."))))

    upstream_sees = wire.codec.parse_request(wire.transcript.spliced(following, records)).messages

    assert Message("user", "Check the tests first.") in upstream_sees
    assert [m.text for m in upstream_sees if m.role == "assistant"] == ["Done.", TEXT.content]
    assert wire.transcript.spliced(following, {}) is following


# -- over a WebSocket (the formats whose route takes one) -----------------------------------


@pytest.fixture(params=[w for w in FORMATS if w.name in SOCKET_FORMATS], ids=lambda wire: wire.name)
def socket_wire(request: pytest.FixtureRequest) -> WireFormat:
    return request.param


async def _over_a_socket(status: int, content_type: bytes, pieces: list[bytes]) -> list[dict]:
    messages: list[dict] = []

    async def send(message: dict) -> None:
        messages.append(json.loads(message["text"]))

    relay = EventRelay(send, lambda _: None)
    await relay({"type": "http.response.start", "status": status, "headers": [(b"content-type", content_type)]})
    for piece in pieces:
        await relay({"type": "http.response.body", "body": piece, "more_body": True})
    await relay({"type": "http.response.body", "body": b"", "more_body": False})
    return messages


@pytest.mark.parametrize("seed", range(5))
async def test_over_a_websocket_a_stream_is_its_events_one_message_each(socket_wire, seed):
    stream = socket_wire.stream.streamed(socket_wire.codec.render_reply(ACTING), include_usage=True)
    cuts = sorted(random.Random(seed).sample(range(1, len(stream)), 20))
    pieces = [stream[start:end] for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True)]

    messages = await _over_a_socket(200, b"text/event-stream", pieces)

    assert messages == [json.loads(event.data) for event in parsed(iter([stream])) if event.data != "[DONE]"]


async def test_over_a_websocket_an_error_answer_is_one_error_event_with_its_message(socket_wire):
    body = socket_wire.codec.error_body(InvalidRequest("The input is too long.", param="input"))

    [event] = await _over_a_socket(400, b"application/json", [body])

    assert (event["type"], event["status"], event["param"]) == ("error", 400, "input")
    assert SPEAKS[socket_wire.name].error_message(event) == "The input is too long."

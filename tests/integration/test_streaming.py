"""Guarded streams end to end: every guard family on ``stream=true``, with the openai SDK.

The client must only ever receive what no guard can take back: a retried attempt is never
seen, text flows as soon as no guard needs it, and a stream that fails says so.
"""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from tests.integration.test_loop_guards import TOOLS
from tests.support.assertions import summary_of
from tests.support.fake_upstream import Json, Sse, chat_completion, stream_chunks, streamed, tool_call, verdict
from tests.support.timed import scaled, slowdown
from tests.support.waiting import wait_for

TASK = [{"role": "user", "content": "How many people live in Lyon?"}]
AFTER_TOOLS = [
    *TASK,
    {"role": "assistant", "content": None, "tool_calls": [tool_call("search", '{"q": "Lyon"}', "c0")]},
    {"role": "tool", "tool_call_id": "c0", "content": "Lyon: 522,250 inhabitants (2021)."},
]


def sdk(proxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)


def text_of(chunks) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def reasoning_of(chunks) -> str:
    return "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices)


def stream(proxy, messages=TASK, **kwargs):
    """Run a streamed request; (chunks, response headers)."""
    with sdk(proxy).chat.completions.with_streaming_response.create(
        model="m", messages=messages, tools=TOOLS, stream=True, **kwargs
    ) as response:
        return list(response.parse()), response.headers


def answer(text: str, **kwargs) -> Sse:
    return streamed(chat_completion(text, **kwargs))


def calling(arguments: str, call_id: str = "c1") -> Sse:
    return streamed(chat_completion(None, tool_calls=[tool_call("search", arguments, call_id)]))


# -- what flows, and when ----------------------------------------------------------------


def test_text_streams_chunk_by_chunk_even_with_tools_offered(proxy, upstream):
    pace = slowdown()  # words spaced by the machine's slowdown, so its load cannot bunch them
    upstream.script(Sse(stream_chunks("one two three four", pieces=4), delay=0.4 * pace))

    started = time.monotonic()
    response = sdk(proxy).chat.completions.create(model="m", messages=TASK, tools=TOOLS, stream=True)
    arrivals = [time.monotonic() - started for c in response if c.choices and c.choices[0].delta.content]

    assert arrivals[-1] - arrivals[0] >= 0.8 * pace  # the words arrived as the upstream wrote them


def test_upstream_is_asked_to_stream_with_usage(proxy, upstream):
    upstream.script(answer("Fine."))

    stream(proxy)

    sent = upstream.requests[0].json()
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}


def test_tool_call_stream_assembles_into_one_valid_call(proxy, upstream):
    upstream.script(calling('{"q": "Lyon population"}'))

    with sdk(proxy).chat.completions.stream(model="m", messages=TASK, tools=TOOLS) as events:
        final = events.get_final_completion()

    (call,) = final.choices[0].message.tool_calls
    assert (call.id, call.function.name, call.function.arguments) == ("c1", "search", '{"q": "Lyon population"}')
    assert final.choices[0].finish_reason == "tool_calls"


def test_every_chunk_is_well_formed(proxy, upstream):
    upstream.script(calling('{"q": "Lyon"}'))

    chunks, _ = stream(proxy)

    assert chunks, "no chunks"
    for each in chunks:
        assert each.id
        assert each.created
        assert each.model
        assert each.object == "chat.completion.chunk"
        assert [c.index for c in each.choices] == [0]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_usage_chunk_reaches_only_a_client_that_asked(proxy, upstream):
    upstream.script(answer("Fine."), answer("Fine."))

    plain, _ = stream(proxy)
    asked, _ = stream(proxy, stream_options={"include_usage": True})

    assert all(c.choices for c in plain)
    assert asked[-1].choices == []
    assert asked[-1].usage.total_tokens == 18


def test_upstream_answering_json_to_a_stream_is_replayed_as_a_stream(proxy, upstream):
    upstream.script(Json(chat_completion("Whole answer.")))

    chunks, headers = stream(proxy)

    assert text_of(chunks) == "Whole answer."
    assert headers["content-type"].startswith("text/event-stream")


def test_shadow_mode_streams_without_holding_anything(make_proxy, upstream, write_policies):
    proxy = make_proxy(policies_dir=write_policies(default="mode: shadow\n"))
    upstream.script(answer(""), answer("unused"))

    chunks, _ = stream(proxy)

    assert text_of(chunks) == ""
    assert len(upstream.requests) == 1
    metrics = httpx.get(f"{proxy.metrics_url}/metrics").text
    series = 'guard="empty_reply",kind="empty_nudge",policy="default",tenant="default"'
    assert f"loopwarden_shadow_decisions_total{{{series}}} 1.0" in metrics


# -- each guard family, streamed -----------------------------------------------------------


def test_empty_stream_is_retried_and_the_client_sees_only_the_good_reply(proxy, upstream):
    upstream.script(streamed(chat_completion(None)), answer("Lyon has 522,250 inhabitants."))

    chunks, headers = stream(proxy)

    assert text_of(chunks) == "Lyon has 522,250 inhabitants."
    assert headers["x-loopwarden-interventions"] == "empty_nudge"
    assert len(upstream.requests) == 2


def streamed_steps(proxy, session: str) -> str:
    """The step header of a streamed request without tools (its text flows as it arrives)."""
    with sdk(proxy).chat.completions.with_streaming_response.create(
        model="m", messages=TASK, stream=True, extra_headers={"X-Session-Id": session}
    ) as response:
        list(response.parse())
        return response.headers["x-loopwarden-step"]


def test_a_retried_streams_step_header_counts_the_model_call_it_streams(proxy, upstream):
    upstream.script(streamed(chat_completion(None)), answer("Lyon has 522,250 inhabitants."))

    assert (streamed_steps(proxy, "counted-stream"), len(upstream.requests)) == ("2", 2)


def test_a_streams_step_header_counts_its_one_model_call(proxy, upstream):
    upstream.script(answer("Lyon has 522,250 inhabitants."))

    assert streamed_steps(proxy, "one-stream") == "1"


def test_reasoning_only_stream_is_retried_unseen(proxy, upstream):
    upstream.script(
        streamed(chat_completion(None, reasoning="I should search...")),
        answer("Lyon has 522,250 inhabitants.", reasoning="Found it."),
    )

    chunks, headers = stream(proxy)

    assert reasoning_of(chunks) == "Found it."
    assert text_of(chunks) == "Lyon has 522,250 inhabitants."
    assert headers["x-loopwarden-interventions"] == "reasoning_nudge"


def test_relayed_reasoning_streams_before_the_answer(make_proxy, upstream, write_policies):
    proxy = make_proxy(policies_dir=write_policies(default="streaming: {reasoning: relay}\n"))
    upstream.script(answer("Done.", reasoning="Thinking it over."))

    chunks, _ = stream(proxy)

    assert reasoning_of(chunks) == "Thinking it over."


def test_invalid_tool_arguments_are_retried_before_the_client_sees_a_call(proxy, upstream):
    upstream.script(calling('{"query": 1}', "bad"), calling('{"q": "Lyon"}', "good"))

    chunks, headers = stream(proxy)

    ids = [t.id for c in chunks if c.choices and c.choices[0].delta.tool_calls for t in c.choices[0].delta.tool_calls]
    assert [i for i in ids if i] == ["good"]
    assert headers["x-loopwarden-interventions"] == "tool_args_retry"
    assert "q" in upstream.requests[1].json()["messages"][-1]["content"]


def test_repeated_call_stream_is_warned_and_replaced(proxy, upstream):
    session = {"X-Session-Id": "stream-loop"}
    repeat = '{"q": "Lyon"}'
    upstream.script(calling(repeat, "r1"), calling(repeat, "r2"), calling(repeat, "r3"), answer("522,250."))
    messages = list(TASK)
    for turn in range(2):
        chunks, _ = stream(proxy, messages=messages, extra_headers=session)
        call = tool_call("search", repeat, f"r{turn + 1}")
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "no result"},
        ]

    chunks, headers = stream(proxy, messages=messages, extra_headers=session)

    assert text_of(chunks) == "522,250."
    assert headers["x-loopwarden-interventions"] == "loop_warning"


def test_short_answer_after_tools_is_judged_before_the_client_sees_it(proxy, upstream):
    upstream.script(answer("Done."), answer("Lyon has 522,250 inhabitants (2021)."))
    judged = iter([False, True])
    upstream.judge = lambda request: verdict(request, next(judged), "checked")

    chunks, headers = stream(proxy, messages=AFTER_TOOLS)

    assert text_of(chunks) == "Lyon has 522,250 inhabitants (2021)."
    assert headers["x-loopwarden-interventions"] == "judge_continue"
    assert len(upstream.judge_requests) == 2


def test_long_answer_after_tools_streams_without_waiting_for_the_judge(proxy, upstream):
    long_text = "Lyon is a city in France. " * 20  # over the 256-character skip threshold
    pace = slowdown()  # chunks spaced by the machine's slowdown, so its load cannot bunch them
    upstream.script(Sse(stream_chunks(long_text, pieces=4), delay=0.4 * pace))

    started = time.monotonic()
    response = sdk(proxy).chat.completions.create(model="m", messages=AFTER_TOOLS, tools=TOOLS, stream=True)
    arrivals = [time.monotonic() - started for c in response if c.choices and c.choices[0].delta.content]

    assert arrivals[-1] - arrivals[0] >= 0.4 * pace  # text flowed once past the threshold, before the stream ended
    assert upstream.judge_requests == []


def test_schema_violating_stream_is_retried_with_the_errors(proxy, upstream):
    schema = {"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}
    upstream.script(answer('{"count": "many"}'), answer('{"count": 522250}'))

    chunks, headers = stream(
        proxy,
        response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}},
    )

    assert json.loads(text_of(chunks)) == {"count": 522250}
    assert headers["x-loopwarden-interventions"] == "schema_retry"


def test_exhausted_budget_ends_the_stream_with_a_streamed_summary(make_proxy, upstream, write_policies):
    proxy = make_proxy(policies_dir=write_policies(default="max_steps: 2\n"))
    session = {"X-Session-Id": "stream-budget"}
    upstream.script(calling('{"q": "Lyon"}'), Json(chat_completion("Found: nothing yet. Missing: the number.")))
    stream(proxy, extra_headers=session)

    chunks, headers = stream(proxy, messages=AFTER_TOOLS, extra_headers=session)

    assert headers["x-loopwarden-terminated"] == "budget_steps"
    assert summary_of(text_of(chunks)) == "Found: nothing yet. Missing: the number."
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_keepalive_comments_flow_while_the_judge_decides(make_proxy, upstream):
    proxy = make_proxy(stream_keepalive_secs=0.2)
    upstream.judge = lambda request: Json(verdict(request, True).body, delay=1.0)
    upstream.script(answer("Done."))

    body = {"model": "m", "messages": AFTER_TOOLS, "tools": TOOLS, "stream": True}
    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", json=body, timeout=10) as response:
        raw = b"".join(response.iter_raw())

    assert raw.count(b": keep-alive\n\n") >= 3
    assert raw.index(b": keep-alive") < raw.index(b'"content": "Do')
    assert raw.endswith(b"data: [DONE]\n\n")


# -- streams that fail ------------------------------------------------------------------


def test_stream_cut_after_text_ends_with_an_error_event(proxy, upstream):
    upstream.script(Sse(stream_chunks("one two three four", pieces=4), cut_after=3))

    with pytest.raises(openai.APIError, match="broke off"):
        list(sdk(proxy).chat.completions.create(model="m", messages=TASK, stream=True))


def test_stream_cut_before_anything_was_sent_is_a_502(proxy, upstream):
    upstream.script(Sse(stream_chunks("", pieces=1)[:1], done=False))

    with pytest.raises(openai.APIStatusError) as raised:
        list(sdk(proxy).chat.completions.create(model="m", messages=TASK, tools=TOOLS, stream=True))

    assert raised.value.status_code == 502
    assert raised.value.body["code"] == "upstream_disconnected"


def test_stream_without_done_is_never_a_success(proxy, upstream):
    upstream.script(Sse(stream_chunks("complete-looking answer"), done=False))

    with pytest.raises(openai.APIError, match="without \\[DONE\\]"):
        list(sdk(proxy).chat.completions.create(model="m", messages=TASK, stream=True))

    metrics = httpx.get(f"{proxy.metrics_url}/metrics").text
    assert (
        'loopwarden_stream_unfinished_total{policy="default",reason="upstream_disconnected",tenant="default"} 1.0'
        in metrics
    )


def test_malformed_chunk_ends_the_stream_with_an_error(proxy, upstream):
    upstream.script(Sse([*stream_chunks("Hello there")[:2], "{not json", *stream_chunks("more")[1:]]))

    with pytest.raises(openai.APIError, match="not valid JSON"):
        list(sdk(proxy).chat.completions.create(model="m", messages=TASK, stream=True))


def test_error_event_from_the_upstream_is_passed_on_as_an_error(proxy, upstream):
    upstream.script(Sse([*stream_chunks("Hello")[:2], {"error": {"message": "model overloaded"}}]))

    with pytest.raises(openai.APIError, match="model overloaded"):
        list(sdk(proxy).chat.completions.create(model="m", messages=TASK, stream=True))


def test_a_failed_stream_still_counts_its_step_and_tokens(proxy, upstream):
    upstream.script(Sse(stream_chunks("one two three four", pieces=4), done=False))

    with pytest.raises(openai.APIError):
        list(sdk(proxy).chat.completions.create(model="m", messages=TASK, stream=True, extra_headers=_SESSION))

    session = httpx.get(f"{proxy.base_url}/loopwarden/sessions/stream-cut", headers=_AUTH).json()
    assert session["steps"] == 1
    assert session["tokens"]["prompt"] > 0
    assert session["tokens"]["completion"] > 0


_SESSION = {"X-Session-Id": "stream-cut"}
_AUTH = {"Authorization": "Bearer sk-p"}


# -- clients that leave -----------------------------------------------------------------


def test_client_leaving_mid_stream_cancels_the_upstream_and_records_usage(proxy, upstream):
    upstream.script(Sse(stream_chunks("word " * 50, pieces=50), delay=0.05))
    body = {"model": "m", "messages": TASK, "stream": True}
    headers = {**_AUTH, "X-Session-Id": "stream-leaver"}

    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", json=body, headers=headers) as response:
        for line in response.iter_lines():
            if "word" in line:
                break
        left = time.monotonic()

    wait_for(lambda: upstream.stream_aborts)
    assert upstream.stream_aborts
    assert upstream.stream_aborts[0] - left < scaled(1.0)
    wait_for(lambda: not proxy.readiness.in_flight)
    assert proxy.readiness.in_flight == 0
    assert "loopwarden_in_flight_requests 0.0" in httpx.get(f"{proxy.metrics_url}/metrics").text
    session = httpx.get(f"{proxy.base_url}/loopwarden/sessions/stream-leaver", headers=_AUTH).json()
    assert session["steps"] == 1
    assert session["tokens"]["completion"] > 0


def test_client_leaving_before_the_first_byte_cancels_the_upstream(proxy, upstream):
    upstream.script(Sse(stream_chunks("Short answer.", pieces=5), delay=0.3))  # held for the judge
    held = {"model": "m", "messages": AFTER_TOOLS, "tools": TOOLS, "stream": True}

    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{proxy.base_url}/chat/completions", json=held, headers=_AUTH, timeout=0.5)

    wait_for(lambda: upstream.stream_aborts and not proxy.readiness.in_flight)
    assert upstream.stream_aborts
    assert proxy.readiness.in_flight == 0
    assert upstream.judge_requests == []


# -- edges --------------------------------------------------------------------------------


def test_text_that_already_flowed_is_followed_by_the_retried_reply(proxy, upstream):
    preamble = "Let me look that up for you in the city statistics database first. " * 5  # streams at once
    bad = chat_completion(preamble, tool_calls=[tool_call("search", '{"query": 1}', "bad")])
    upstream.script(streamed(bad), calling('{"q": "Lyon"}', "good"))

    chunks, _ = stream(proxy)

    ids = [t.id for c in chunks if c.choices and c.choices[0].delta.tool_calls for t in c.choices[0].delta.tool_calls]
    assert text_of(chunks) == preamble  # let through once, never taken back, never repeated
    assert [i for i in ids if i] == ["good"]
    assert len(upstream.requests) == 2


def test_an_upstream_error_after_keepalives_ends_the_stream_with_an_error_event(make_proxy, upstream):
    proxy = make_proxy(stream_keepalive_secs=0.1, retry_attempts=1)
    upstream.judge = lambda request: Json(verdict(request, False, "no source").body, delay=0.5)
    error = {"error": {"message": "overloaded", "type": "server_error", "param": None, "code": None}}
    upstream.script(answer("Done."), Json(error, status=500))

    body = {"model": "m", "messages": AFTER_TOOLS, "tools": TOOLS, "stream": True}
    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", json=body, timeout=10) as response:
        raw = b"".join(response.iter_raw())

    assert response.status_code == 200  # the keep-alives had started the response
    assert b": keep-alive" in raw
    assert raw.rstrip().endswith(b'"code":"upstream_error"}}')


def test_a_stream_with_several_choices_passes_whole(proxy, upstream):
    two = [
        {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [choice]}
        for choice in (
            {"index": 0, "delta": {"role": "assistant", "content": "First"}, "finish_reason": None},
            {"index": 1, "delta": {"role": "assistant", "content": "Second"}, "finish_reason": None},
            {"index": 0, "delta": {}, "finish_reason": "stop"},
            {"index": 1, "delta": {}, "finish_reason": "stop"},
        )
    ]
    upstream.script(Sse(two))

    chunks = list(sdk(proxy).chat.completions.create(model="m", messages=TASK, stream=True, n=2))

    by_index: dict[int, str] = {}
    for each in chunks:
        for choice in each.choices:
            by_index[choice.index] = by_index.get(choice.index, "") + (choice.delta.content or "")
    assert by_index == {0: "First", 1: "Second"}


def test_a_stream_that_stalls_past_the_read_timeout_ends_with_an_error_event(make_proxy, upstream):
    proxy = make_proxy(read_timeout=0.3)
    upstream.script(Sse(stream_chunks("one two three four", pieces=4), delay=1.0))

    with pytest.raises(openai.APIError, match="read timeout"):
        list(sdk(proxy).chat.completions.create(model="m", messages=TASK, stream=True))

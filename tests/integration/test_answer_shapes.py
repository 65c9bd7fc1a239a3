"""Answers of every shape, end to end with the openai SDK in both stream modes: a long reply
that only hands the turn back is judged, long legitimate answers never are, and a valid JSON
answer wrapped in a fence or a sentence reaches the SDK's strict ``parse`` as bare JSON."""

from __future__ import annotations

import openai
import pytest
from pydantic import BaseModel

from tests.integration.test_judge import FULL_ANSWER, TOOLS, after_tools
from tests.support.answer_shapes import HAND_BACKS, JSON_REPLIES, LEGITIMATE
from tests.support.fake_upstream import Json, Sse, chat_completion, stream_chunks, verdict

STREAM_MODES = [pytest.param(False, id="json"), pytest.param(True, id="stream")]


class Weather(BaseModel):
    paris_c: float
    berlin_c: float


def sdk(proxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)


def said(text: str, stream: bool) -> Json | Sse:
    return Sse(stream_chunks(text, pieces=4)) if stream else Json(chat_completion(text))


def answer_text(proxy, stream: bool, **kwargs) -> str:
    client = sdk(proxy)
    if not stream:
        return (
            client.chat.completions.create(model="m", messages=after_tools(), tools=TOOLS, **kwargs)
            .choices[0]
            .message.content
        )
    chunks = client.chat.completions.create(model="m", messages=after_tools(), tools=TOOLS, stream=True, **kwargs)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


@pytest.mark.parametrize("stream", STREAM_MODES)
@pytest.mark.parametrize("hand_back", list(HAND_BACKS.values()), ids=list(HAND_BACKS))
def test_a_long_reply_that_hands_the_turn_back_is_judged_and_continued(proxy, upstream, stream, hand_back):
    upstream.judge = lambda request: verdict(request, False, "it asked instead of answering")
    upstream.script(said(hand_back, stream), said(FULL_ANSWER, stream))

    assert answer_text(proxy, stream) == FULL_ANSWER
    assert len(upstream.judge_requests) == 1


@pytest.mark.parametrize("stream", STREAM_MODES)
@pytest.mark.parametrize("text", list(LEGITIMATE.values()), ids=list(LEGITIMATE))
def test_a_long_legitimate_answer_passes_with_no_judge_call(proxy, upstream, stream, text):
    upstream.script(said(text, stream))

    assert answer_text(proxy, stream) == text
    assert upstream.judge_requests == []
    assert len(upstream.requests) == 1


@pytest.mark.parametrize("wrapped", [wrapped for wrapped, _ in JSON_REPLIES.values()], ids=list(JSON_REPLIES))
def test_the_sdks_parse_reads_a_wrapped_json_answer(proxy, upstream, wrapped):
    upstream.script(Json(chat_completion(wrapped)))

    parsed = sdk(proxy).chat.completions.parse(model="m", messages=after_tools(), response_format=Weather)

    assert parsed.choices[0].message.parsed == Weather(paris_c=18, berlin_c=11)


@pytest.mark.parametrize(("wrapped", "bare"), list(JSON_REPLIES.values()), ids=list(JSON_REPLIES))
def test_a_streamed_wrapped_json_answer_arrives_bare(proxy, upstream, wrapped, bare):
    upstream.script(Sse(stream_chunks(wrapped, pieces=4)))

    with sdk(proxy).chat.completions.stream(model="m", messages=after_tools(), response_format=Weather) as events:
        final = events.get_final_completion()

    assert final.choices[0].message.content == bare
    assert final.choices[0].message.parsed == Weather(paris_c=18, berlin_c=11)

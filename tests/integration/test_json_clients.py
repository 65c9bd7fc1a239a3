"""Bare JSON for every structured client (issue 31, item 2), each over real HTTP in both
stream modes: a valid answer the model wrapped in a ```` ```json ```` fence reaches the
client's own strict parser as the bare JSON the output contract checked — the openai SDK's
``responses.parse`` / ``responses.stream`` with ``text_format``, the anthropic SDK's
``messages.parse`` / ``messages.stream`` with ``output_format``, google-genai's
``response.parsed`` (``response_json_schema`` and ``response_schema``), chat's JSON mode
without a schema, the OpenAI Agents SDK's ``output_type`` (Responses, its default, and chat)
and LangGraph's ``create_react_agent(..., response_format=)``.

(The openai SDK's ``chat.completions.parse`` and ``stream`` are covered in test_answer_shapes.py;
the same rewrite in every wire format in formats/test_json_answers.py.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from google import genai
from google.genai import types
from pydantic import BaseModel

from tests.support.fake_responses import FakeResponses
from tests.support.fake_upstream import emptied
from tests.support.responses_fixtures import responses_server  # noqa: F401 (fixture)
from tests.support.structured_clients import agents_run, anthropic_parsed, responses_parsed
from tests.support.turns import turn

STREAMED = pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
TASK = "What is the temperature in Paris and in Berlin, in °C?"
FENCED = '```json\n{"paris_c": 18, "berlin_c": 11}\n```'
IN_A_SENTENCE = 'Here it is: {"paris_c": 18, "berlin_c": 11}. Both in °C.'
BARE = '{"paris_c": 18, "berlin_c": 11}'


class Weather(BaseModel):
    paris_c: float
    berlin_c: float


WEATHER = Weather(paris_c=18, berlin_c=11)


@pytest.fixture
def responses_fake(responses_server: FakeResponses) -> Iterator[FakeResponses]:  # noqa: F811 (fixture)
    yield from emptied(responses_server)


# -- the openai SDK over the Responses API ---------------------------------------------------


@STREAMED
def test_responses_parse_reads_a_fenced_answer_as_its_model(make_proxy, responses_fake, stream):
    responses_fake.script(turn(FENCED))
    proxy = make_proxy(upstream=responses_fake.url)

    final = responses_parsed(proxy.base_url, Weather, TASK, stream=stream)

    assert (final.output_text, final.output_parsed) == (BARE, WEATHER)


# -- the anthropic SDK over Messages ------------------------------------------------------------


@STREAMED
def test_anthropic_messages_parse_reads_a_fenced_answer_as_its_model(messages_proxy, anthropic_upstream, stream):
    anthropic_upstream.script(turn(IN_A_SENTENCE))

    final = anthropic_parsed(messages_proxy, Weather, TASK, stream=stream)

    assert final.parsed_output == WEATHER
    assert anthropic_upstream.requests[0].json()["output_config"]["format"]["type"] == "json_schema"


# -- google-genai over the Gemini API -----------------------------------------------------------

GEMINI_SCHEMAS = {
    "response_json_schema": {"response_json_schema": Weather.model_json_schema()},
    "response_schema": {"response_schema": Weather},
}


def gemini_client(proxy) -> genai.Client:
    return genai.Client(api_key="gk-provider", http_options=types.HttpOptions(base_url=proxy.url))


@STREAMED
@pytest.mark.parametrize("schema", list(GEMINI_SCHEMAS.values()), ids=list(GEMINI_SCHEMAS))
def test_google_genai_parses_a_fenced_answer(make_proxy, gemini_upstream, stream, schema):
    gemini_upstream.script(turn(FENCED))
    proxy = make_proxy(upstream=gemini_upstream.url)
    config = types.GenerateContentConfig(response_mime_type="application/json", **schema)

    client = gemini_client(proxy)  # held: the client closes its connections when collected
    models = client.models
    if stream:
        pieces = list(models.generate_content_stream(model="gemini-fake", contents=TASK, config=config))
        text = "".join(piece.text or "" for piece in pieces)
        assert json.loads(text) == WEATHER.model_dump()
    else:
        reply = models.generate_content(model="gemini-fake", contents=TASK, config=config)
        parsed = reply.parsed
        assert (reply.text, parsed if isinstance(parsed, dict) else parsed.model_dump()) == (
            BARE,
            WEATHER.model_dump(),
        )


# -- chat's JSON mode without a schema ----------------------------------------------------------


@STREAMED
def test_a_fenced_answer_in_json_mode_reaches_the_client_as_bare_json(proxy, upstream, stream):
    upstream.script(turn(FENCED))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)
    request: dict[str, Any] = {
        "model": "m",
        "messages": [{"role": "user", "content": TASK}],
        "response_format": {"type": "json_object"},
    }

    if stream:
        chunks = client.chat.completions.create(stream=True, **request)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        text = client.chat.completions.create(**request).choices[0].message.content

    assert json.loads(text) == WEATHER.model_dump()


def test_a_prose_answer_in_json_mode_is_sent_back_as_not_json(proxy, upstream):
    upstream.script(turn("Paris has 18 °C and Berlin 11 °C."), turn(BARE))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)

    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": TASK}], response_format={"type": "json_object"}
    )

    assert raw.parse().choices[0].message.content == BARE
    assert raw.headers["x-loopwarden-interventions"] == "schema_retry"
    assert "not valid JSON" in upstream.requests[1].json()["messages"][-1]["content"]


# -- the OpenAI Agents SDK ----------------------------------------------------------------------


@STREAMED
def test_the_agents_sdk_output_type_reads_a_fenced_answer_over_responses(make_proxy, responses_fake, stream):
    responses_fake.script(turn(FENCED))
    proxy = make_proxy(upstream=responses_fake.url)

    assert agents_run(proxy.base_url, Weather, TASK, chat=False, stream=stream) == WEATHER
    assert responses_fake.agent_payloads[0]["text"]["format"]["type"] == "json_schema"


@STREAMED
def test_the_agents_sdk_output_type_reads_a_fenced_answer_over_chat(proxy, upstream, stream):
    upstream.script(turn(FENCED))

    assert agents_run(proxy.base_url, Weather, TASK, chat=True, stream=stream) == WEATHER


# -- LangGraph ----------------------------------------------------------------------------------


@STREAMED
def test_langgraphs_response_format_reads_a_fenced_answer(proxy, upstream, stream):
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    upstream.script(turn("Paris: 18 °C, Berlin: 11 °C."), turn(FENCED))
    model = ChatOpenAI(model="m", base_url=proxy.base_url, api_key="sk-p", max_retries=0, streaming=stream)
    agent = create_react_agent(model, tools=[], response_format=Weather)

    state = agent.invoke({"messages": [{"role": "user", "content": TASK}]})

    assert state["structured_response"] == WEATHER
    assert "response_format" in upstream.requests[1].json()

"""Refusals, both ways. A structured request the guard has to end reaches each client library
as that library's own refusal, carrying the summary, instead of a text it would fail to parse
(or misparse); and a model's own refusal passes to the client as the answer it is.

(The openai SDK's ``parse`` and ``stream`` of the proxy's ending are covered in test_judge.py.)
"""

from __future__ import annotations

import asyncio

import openai
import pytest
from pydantic import BaseModel

from tests.support.assertions import summary_of
from tests.support.fake_upstream import Json, chat_completion, streamed, tool_call

pytestmark = pytest.mark.shared_proxy

TASK = "How many people live in Lyon? Answer with the city and its population."
SUMMARY = "Found: Lyon. Missing: a population figure that fits the schema. Next step: ask again."


class City(BaseModel):
    city: str
    population: float


def never_valid(upstream) -> None:
    """A model that answers in prose three times (the first try and two corrections), then the summary."""
    upstream.script(*[Json(chat_completion("About half a million people.")) for _ in range(3)])
    upstream.script(Json(chat_completion(SUMMARY)))


def test_the_openai_agents_sdk_raises_its_model_refusal_error_with_the_summary(proxy, upstream):
    from agents import Agent, ModelRefusalError, OpenAIChatCompletionsModel, Runner, set_tracing_disabled

    set_tracing_disabled(True)
    never_valid(upstream)
    client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)
    agent: Agent[None] = Agent(
        name="lookup", model=OpenAIChatCompletionsModel(model="m", openai_client=client), output_type=City
    )

    with pytest.raises(ModelRefusalError) as refused:
        asyncio.run(Runner.run(agent, TASK))

    assert summary_of(refused.value.refusal) == SUMMARY
    assert "response_format" in upstream.requests[0].json()


def test_langchain_structured_output_raises_its_refusal_error_with_the_summary(proxy, upstream):
    from langchain_core.exceptions import ModelRefusalError
    from langchain_openai import ChatOpenAI

    never_valid(upstream)
    model = ChatOpenAI(model="m", base_url=proxy.base_url, api_key="sk-p", max_retries=0)

    with pytest.raises(ModelRefusalError, match="Missing: a population figure"):
        model.with_structured_output(City, method="json_schema").invoke(TASK)

    assert "response_format" in upstream.requests[0].json()


REFUSAL = "I can't help with that."
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "city", "schema": City.model_json_schema()}}


def test_a_models_own_refusal_passes_to_the_client_untouched(proxy, upstream):
    upstream.script(Json(chat_completion(None, refusal=REFUSAL)))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)

    raw = client.chat.completions.with_raw_response.parse(
        model="m", messages=[{"role": "user", "content": TASK}], response_format=City
    )

    message = raw.parse().choices[0].message
    assert (message.refusal, message.parsed) == (REFUSAL, None)
    assert raw.headers["x-loopwarden-interventions"] == "none"
    assert len(upstream.requests) == 1


def test_a_models_own_streamed_refusal_passes_to_the_client_untouched(proxy, upstream):
    upstream.script(streamed(chat_completion(None, refusal=REFUSAL)))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)

    with client.chat.completions.stream(
        model="m", messages=[{"role": "user", "content": TASK}], response_format=City
    ) as stream:
        final = stream.get_final_completion()

    assert final.choices[0].message.refusal == REFUSAL
    assert len(upstream.requests) == 1


def test_a_json_object_request_ends_as_a_refusal_too(proxy, upstream):
    upstream.script(Json(chat_completion(None)), Json(chat_completion(None)), Json(chat_completion(None)))
    upstream.script(Json(chat_completion(SUMMARY)))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)

    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": TASK}], response_format={"type": "json_object"}
    )

    message = raw.parse().choices[0].message
    assert raw.headers["x-loopwarden-terminated"] == "empty_response"
    assert (message.content, summary_of(message.refusal)) == (None, SUMMARY)


def test_a_policy_schema_without_response_format_ends_as_text(make_proxy, upstream, write_policies):
    schema = "output_contract:\n  schema: {type: object, required: [population]}\n"
    proxy = make_proxy(policies_dir=str(write_policies(default=schema)))
    upstream.script(*[Json(chat_completion("About half a million.")) for _ in range(3)])
    upstream.script(Json(chat_completion(SUMMARY)))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)

    raw = client.chat.completions.with_raw_response.create(model="m", messages=[{"role": "user", "content": TASK}])

    message = raw.parse().choices[0].message
    assert raw.headers["x-loopwarden-terminated"] == "invalid_output"
    assert (summary_of(message.content), message.refusal) == (SUMMARY, None)


def test_a_json_mode_stream_holds_its_text_so_the_ending_is_still_a_refusal(proxy, upstream):
    """JSON mode's text is checked whole (it must be JSON), so the prose before a broken call
    never reached the client, and the ending can still take the refusal form."""
    search = {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}
    invalid = tool_call("search", '{"q": ', "c1")
    upstream.script(*[streamed(chat_completion("Let me look that up. ", tool_calls=[invalid])) for _ in range(3)])
    upstream.script(Json(chat_completion(SUMMARY)))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)

    stream = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": TASK}],
        tools=[search],
        response_format={"type": "json_object"},
        stream=True,
    )
    deltas = [chunk.choices[0].delta for chunk in stream if chunk.choices]

    assert "".join(d.content or "" for d in deltas) == ""
    assert summary_of("".join(d.refusal or "" for d in deltas)) == SUMMARY

"""A structured request the guard has to end reaches each client library as that library's
own refusal, carrying the summary, instead of a text it would fail to parse (or misparse).

(The openai SDK's ``parse`` and ``stream`` are covered in test_judge.py.)
"""

from __future__ import annotations

import asyncio

import openai
import pytest
from pydantic import BaseModel

from tests.support.fake_upstream import Json, chat_completion

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

    assert refused.value.refusal == SUMMARY
    assert "response_format" in upstream.requests[0].json()


def test_langchain_structured_output_raises_its_refusal_error_with_the_summary(proxy, upstream):
    from langchain_core.exceptions import ModelRefusalError
    from langchain_openai import ChatOpenAI

    never_valid(upstream)
    model = ChatOpenAI(model="m", base_url=proxy.base_url, api_key="sk-p", max_retries=0)

    with pytest.raises(ModelRefusalError, match="Missing: a population figure"):
        model.with_structured_output(City, method="json_schema").invoke(TASK)

    assert "response_format" in upstream.requests[0].json()

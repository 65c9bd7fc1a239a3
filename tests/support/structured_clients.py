"""Structured clients, for the JSON-answer and refusal tests: the OpenAI Agents SDK's
``output_type`` over the Responses API (its default) or chat, the anthropic SDK's
``messages.parse`` and the openai SDK's ``responses.parse``, each plain or streamed."""

from __future__ import annotations

import asyncio
from typing import Any

import openai

from tests.support.agents_sdk import final_output
from tests.support.fake_messages import check_stream, checking_client
from tests.support.responses_clients import checked_sdk

__all__ = ["agents_run", "anthropic_parsed", "responses_parsed"]


def agents_run(base_url: str, output_type: type, task: str, *, chat: bool, stream: bool) -> Any:
    """One ``Runner.run`` (or ``run_streamed``) of an agent answering in ``output_type``; its final output."""
    from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, set_tracing_disabled

    set_tracing_disabled(True)

    async def go() -> Any:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-p", max_retries=0)
        kind = OpenAIChatCompletionsModel if chat else OpenAIResponsesModel
        agent: Agent[None] = Agent(name="agent", model=kind(model="m", openai_client=client), output_type=output_type)
        return await final_output(agent, task, stream=stream, client=client)

    return asyncio.run(go())


def anthropic_parsed(proxy: Any, output_format: type, task: str, *, stream: bool) -> Any:
    """The anthropic SDK's ``messages.parse`` (or ``messages.stream``'s final message) asking
    for ``output_format``; every stream it read passes the Messages stream checker."""
    streams: list[bytes] = []
    client = checking_client(proxy, streams)
    request: dict[str, Any] = {
        "model": "claude-fake",
        "max_tokens": 500,
        "messages": [{"role": "user", "content": task}],
        "output_format": output_format,
    }
    if stream:
        with client.messages.stream(**request) as events:
            final = events.get_final_message()
    else:
        final = client.messages.parse(**request)
    for each in streams:
        check_stream(each)
    return final


def responses_parsed(base_url: str, text_format: type, task: str, *, stream: bool) -> Any:
    """The openai SDK's ``responses.parse`` (or ``responses.stream``'s final response) asking
    for ``text_format``; every stream it read passes the strict Responses validator."""
    with checked_sdk(base_url) as (client, _):
        if stream:
            with client.responses.stream(model="m", input=task, text_format=text_format) as events:
                return events.get_final_response()
        return client.responses.parse(model="m", input=task, text_format=text_format)

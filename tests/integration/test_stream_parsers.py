"""Guarded streams through other frameworks' own stream parsers: LangChain's ChatOpenAI (what
LangGraph agents stream with), pydantic-ai and AgentScope. Each gets a stream the proxy had to
intervene on and must assemble it into the right answer or tool call.

(The openai SDK's parser is covered in test_streaming.py.)
"""

from __future__ import annotations

import asyncio

import pytest

from tests.support.fake_upstream import chat_completion, streamed, tool_call

pytestmark = pytest.mark.shared_proxy

TASK = "How many people live in Lyon?"
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    },
}


def searching(call_id: str = "call_1"):
    return streamed(chat_completion(None, tool_calls=[tool_call("search", '{"q": "Lyon population"}', call_id)]))


def test_langchain_chat_openai_assembles_a_tool_call_after_a_reasoning_only_retry(proxy, upstream):
    from langchain_openai import ChatOpenAI

    upstream.script(streamed(chat_completion(None, reasoning="I should search.")), searching())
    model = ChatOpenAI(model="m", base_url=proxy.base_url, api_key="sk-p", max_retries=0).bind_tools([SEARCH])

    chunks = list(model.stream(TASK))
    message = chunks[0]
    for chunk in chunks[1:]:
        message += chunk

    assert message.tool_calls == [
        {"name": "search", "args": {"q": "Lyon population"}, "id": "call_1", "type": "tool_call"}
    ]
    assert len(upstream.requests) == 2


def test_langchain_chat_openai_streams_text_after_an_empty_retry(proxy, upstream):
    from langchain_openai import ChatOpenAI

    upstream.script(streamed(chat_completion(None)), streamed(chat_completion("Lyon has 522,250 inhabitants.")))
    model = ChatOpenAI(model="m", base_url=proxy.base_url, api_key="sk-p", max_retries=0)

    text = "".join(str(chunk.content) for chunk in model.stream(TASK))

    assert text == "Lyon has 522,250 inhabitants."


def test_pydantic_ai_agent_runs_its_tool_loop_over_guarded_streams(proxy, upstream):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    upstream.script(
        streamed(chat_completion(None)),  # empty: nudged, never seen by the agent
        searching(),
        streamed(chat_completion("Lyon has 522,250 inhabitants.")),
    )
    agent = Agent(OpenAIChatModel("m", provider=OpenAIProvider(base_url=proxy.base_url, api_key="sk-p")))
    searched: list[str] = []

    @agent.tool_plain
    def search(q: str) -> str:
        searched.append(q)
        return "Lyon: 522,250 inhabitants (INSEE 2021)."

    async def run() -> str:
        async with agent.run_stream(TASK) as result:
            return await result.get_output()

    assert asyncio.run(run()) == "Lyon has 522,250 inhabitants."
    assert searched == ["Lyon population"]
    assert len(upstream.requests) == 3


def test_agentscope_model_assembles_a_tool_call_after_a_reasoning_only_retry(proxy, upstream):
    from agentscope.credential import OpenAICredential
    from agentscope.message import Msg, TextBlock
    from agentscope.model import OpenAIChatModel

    upstream.script(streamed(chat_completion(None, reasoning="I should search.")), searching("call_7"))
    model = OpenAIChatModel(OpenAICredential(api_key="sk-p", base_url=proxy.base_url), "m", stream=True)

    async def run():
        responses = await model([Msg(name="user", content=[TextBlock(text=TASK)], role="user")], tools=[SEARCH])
        last = None
        async for response in responses:
            last = response
        return last

    last = asyncio.run(run())

    assert last is not None
    assert last.is_last
    (block,) = last.content
    assert (block.id, block.name, block.input) == ("call_7", "search", '{"q": "Lyon population"}')
    assert len(upstream.requests) == 2

"""The retry budget the proxy shares with the client (issue 31, item 3), with the anthropic SDK
(its own 2 retries, which it skips on ``x-should-retry: false``) and the OpenAI Agents SDK
(whose model calls retry as its openai client does), streamed and not.

Alone, each client's 3 attempts use up three 500s and it fails; through the proxy its first
retry gets the attempts left of the 6 it shares with the proxy's own. An outage costs 6
upstream attempts (not 9), and the client stops at the answer that says so.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import openai
import pytest

from tests.support.agents_sdk import final_output
from tests.support.fake_messages import said, text
from tests.support.fake_upstream import Json
from tests.support.turns import Turn

streams = pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
MESSAGES_FAULT = {"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}
CHAT_FAULT = {"error": {"message": "boom", "type": "server_error", "param": None, "code": None}}
QUESTION = "How many people live in Lyon?"


def anthropic_client(proxy, sent: list[Any]):
    """The anthropic SDK with its default retries, every request it sends noted in ``sent``."""
    import anthropic
    import httpx2

    return anthropic.Anthropic(
        base_url=proxy.url, api_key="sk-ant", http_client=httpx2.Client(event_hooks={"request": [sent.append]})
    )


def ask_anthropic(client, stream: bool) -> str:
    request = {"model": "claude-x", "max_tokens": 100, "messages": [{"role": "user", "content": QUESTION}]}
    if not stream:
        return "".join(b.text for b in client.messages.create(**request).content if b.type == "text")
    with client.messages.stream(**request) as events:
        return "".join(events.text_stream)


@streams
def test_three_500s_then_a_good_reply_reach_the_anthropic_sdk_as_a_success(messages_proxy, anthropic_upstream, stream):
    anthropic_upstream.script(*[Json(MESSAGES_FAULT, status=500) for _ in range(3)], said(text("About 522,000.")))
    sent: list[Any] = []

    answer = ask_anthropic(anthropic_client(messages_proxy, sent), stream)

    assert answer == "About 522,000."
    assert len(anthropic_upstream.requests) == 4
    assert len(sent) == 2  # the SDK's first retry got the budget's attempts left


@streams
def test_a_spent_shared_budget_stops_the_anthropic_sdk_before_its_last_retry(
    messages_proxy, anthropic_upstream, stream
):
    import anthropic

    anthropic_upstream.script(*[Json(MESSAGES_FAULT, status=500) for _ in range(9)])
    sent: list[Any] = []

    with pytest.raises(anthropic.InternalServerError) as raised:
        ask_anthropic(anthropic_client(messages_proxy, sent), stream)

    assert len(anthropic_upstream.requests) == 6  # not 3 x 3
    assert len(sent) == 2
    assert raised.value.response.headers["x-should-retry"] == "false"
    assert raised.value.body == MESSAGES_FAULT  # in the Messages API's own error shape


def run_agents_sdk(proxy, sent: list[httpx.Request], stream: bool) -> Any:
    from agents import Agent, OpenAIChatCompletionsModel, set_tracing_disabled

    set_tracing_disabled(True)

    async def note(request: httpx.Request) -> None:
        sent.append(request)

    async def run() -> Any:
        http = httpx.AsyncClient(event_hooks={"request": [note]})
        client = openai.AsyncOpenAI(base_url=proxy.base_url, api_key="sk-p", http_client=http)  # its 2 retries
        agent: Agent[None] = Agent(name="research", model=OpenAIChatCompletionsModel(model="m", openai_client=client))
        return await final_output(agent, QUESTION, stream=stream, client=client)

    return asyncio.run(run())


@streams
def test_three_500s_then_a_good_reply_reach_the_agents_sdk_as_a_success(proxy, upstream, stream):
    upstream.script(*[Json(CHAT_FAULT, status=500) for _ in range(3)], Turn("About 522,000."))
    sent: list[httpx.Request] = []

    assert run_agents_sdk(proxy, sent, stream) == "About 522,000."
    assert len(upstream.requests) == 4
    assert len(sent) == 2


@streams
def test_a_spent_shared_budget_stops_the_agents_sdk_before_its_last_retry(proxy, upstream, stream):
    upstream.script(*[Json(CHAT_FAULT, status=500) for _ in range(9)])
    sent: list[httpx.Request] = []

    with pytest.raises(openai.InternalServerError) as raised:
        run_agents_sdk(proxy, sent, stream)

    assert len(upstream.requests) == 6
    assert len(sent) == 2
    assert raised.value.response.headers["x-should-retry"] == "false"

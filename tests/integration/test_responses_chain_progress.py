"""No-progress on stored Responses chains (issue 31, item 8), with the openai SDK and the Agents SDK.

A chained request (``previous_response_id``, ``store`` on) carries only its new items; the
upstream holds the history. A model that searches with new words each time for the same
empty answer is nudged and ended on the same requests as a run that resends its history: the
ending reaches the client on its 5th request, not the 7th, streamed or not, on either store.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

import openai
import pytest

from tests.support.assertions import summary_of
from tests.support.capped_agents import SUMMARY, is_ending_call
from tests.support.responses_clients import checked_sdk, run_agent
from tests.support.responses_fixtures import fake, responses_server  # noqa: F401 (fixtures)
from tests.support.turns import Turn, calling

TOOLS = [{"type": "function", "name": "search", "parameters": {"type": "object"}}]
TASK = [{"role": "user", "content": "How many people lived in Lyon in 1800?"}]
streams = pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])


@pytest.fixture(params=["memory", "redis"])
def proxy(request, make_proxy, fake, redis_url):
    return make_proxy(upstream=fake.url, **({"redis_url": redis_url} if request.param == "redis" else {}))


def ever_new_searches() -> Callable[[Any], Turn]:
    """A model asking a new query every call (so no call repeats), the summary when the proxy ends the run."""
    queries = itertools.count()

    def model(payload: Any) -> Turn:
        if is_ending_call(payload):
            return Turn(SUMMARY)
        n = next(queries)
        return calling("search", {"q": f"lyon 1800, try {n}"}, f"c{n}")

    return model


def chained(fake) -> list[bool]:
    """Whether each agent request after the first continued a stored response."""
    return [bool(p.get("previous_response_id")) for p in fake.agent_payloads[1:] if not is_ending_call(p)]


@streams
def test_identical_results_on_a_stored_chain_end_with_no_progress_at_the_fifth_request(proxy, fake, stream):
    fake.model = ever_new_searches()

    with checked_sdk(proxy.base_url) as (client, _):
        turns, headers, response, _ = run_agent(
            client,
            lambda call: "No results.",
            TASK,
            stream=stream,
            chained=True,
            model="m",
            tools=TOOLS,
            extra_headers={"X-Session-Id": f"chain-{stream}"},
        )

    assert headers["x-loopwarden-terminated"] == "no_progress"
    assert turns == 5
    assert summary_of(response.output_text) == SUMMARY
    assert chained(fake)
    assert all(chained(fake))


@streams
def test_the_agents_sdk_chaining_by_previous_response_id_gets_the_no_progress_ending_within_five_turns(
    proxy,
    fake,
    stream,
):
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)

    @function_tool
    def search(q: str) -> str:
        """Search the web."""
        return "No results."

    fake.model = ever_new_searches()

    async def run() -> Any:
        client = openai.AsyncOpenAI(
            base_url=proxy.base_url, api_key="sk-p", max_retries=0, default_headers={"X-Session-Id": f"agents-{stream}"}
        )
        agent: Agent[None] = Agent(
            name="research", model=OpenAIResponsesModel(model="m", openai_client=client), tools=[search]
        )
        try:
            if not stream:
                return (
                    await Runner.run(agent, TASK[0]["content"], max_turns=5, auto_previous_response_id=True)
                ).final_output
            result = Runner.run_streamed(agent, TASK[0]["content"], max_turns=5, auto_previous_response_id=True)
            async for _ in result.stream_events():
                pass
            return result.final_output
        finally:
            await client.close()

    answer = asyncio.run(run())

    assert str(answer).startswith("LoopWarden stopped this run (no_progress)"), answer
    assert summary_of(str(answer)) == SUMMARY
    assert chained(fake)
    assert all(chained(fake))

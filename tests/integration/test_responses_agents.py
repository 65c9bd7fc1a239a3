"""The OpenAI Agents SDK with its default model (Responses), through the proxy, against
misbehaving models: the run sees only good replies, and endings arrive as its final output."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import openai
import pytest

from tests.support.agents_sdk import final_output
from tests.support.assertions import summary_of
from tests.support.fake_responses import (
    function_call,
    message,
    reasoning,
    response,
    text_response,
    verdict,
)
from tests.support.responses_events import validate_stream
from tests.support.responses_fixtures import fake, proxy, responses_server  # noqa: F401 (fixtures)


class Run:
    """One agent run: what the SDK sent, every stream it read, the tool's calls."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.streams: list[bytes] = []
        self.tool_calls: list[str] = []


def run_agent(base_url: str, *, stream: bool, session: str, task: str = "Weather in Paris?") -> tuple[Any, Run]:
    from agents import Agent, OpenAIResponsesModel, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    run = Run()

    @function_tool
    def get_weather(city: str) -> str:
        """Current weather for a city.

        Args:
            city: The city's English name.
        """
        run.tool_calls.append(city)
        return f"{city}: 21 °C, sunny (reading {len(run.tool_calls)})"

    async def sent(request: httpx.Request) -> None:
        run.sent.append(request.content)

    async def kept(response: httpx.Response) -> None:
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            run.streams.append(await response.aread())

    async def go() -> Any:
        http = httpx.AsyncClient(event_hooks={"request": [sent], "response": [kept]})
        client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key="sk-p",
            max_retries=0,
            http_client=http,
            default_headers={"X-Session-Id": session},
        )
        agent: Agent[Any] = Agent(
            name="weather",
            instructions="Answer with the tool's reading.",
            tools=[get_weather],
            model=OpenAIResponsesModel(model="m", openai_client=client),
        )
        return await final_output(agent, task, stream=stream, client=client)

    output = asyncio.run(go())
    for raw in run.streams:
        validate_stream(raw)
    return output, run


def weather_call(call_id: str, arguments: str = '{"city": "Paris"}'):
    return response(reasoning("Use the tool."), function_call("get_weather", arguments, call_id))


STREAMED = pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])


@STREAMED
def test_a_well_behaved_run_is_untouched_byte_for_byte(proxy, fake, stream):
    fake.script(weather_call("c1"), text_response("Paris: 21 °C and sunny, by the tool's reading."))

    output, run = run_agent(proxy.base_url, stream=stream, session=f"fine-{stream}")

    assert output == "Paris: 21 °C and sunny, by the tool's reading."
    assert [r.body for r in fake.requests] == run.sent
    assert fake.rejections == []


@STREAMED
def test_an_empty_reply_is_nudged_once_and_the_run_sees_only_the_good_one(proxy, fake, stream):
    fake.script(response(message("")), text_response("Paris is sunny."))

    output, run = run_agent(proxy.base_url, stream=stream, session=f"empty-{stream}")

    assert output == "Paris is sunny."
    assert len(run.sent) == 1
    assert len(fake.requests) == 2


@STREAMED
def test_a_reasoning_only_model_is_ended_gracefully(proxy, fake, stream):
    fake.script(*[response(reasoning("Hmm...")) for _ in range(3)], text_response("Found: nothing yet. Next: retry."))

    output, _ = run_agent(proxy.base_url, stream=stream, session=f"thinking-{stream}")

    assert summary_of(output) == "Found: nothing yet. Next: retry."


@STREAMED
def test_a_call_repeated_forever_is_ended_within_block_at(proxy, fake, stream):
    fake.script(
        *[weather_call(f"c{n}") for n in range(7)], text_response("Paris: 21 °C. I stopped repeating the tool.")
    )

    output, run = run_agent(proxy.base_url, stream=stream, session=f"loop-{stream}")

    assert summary_of(output) == "Paris: 21 °C. I stopped repeating the tool."
    assert len(run.tool_calls) <= 4
    assert fake.rejections == []


@STREAMED
def test_bad_arguments_go_back_to_the_model_with_their_path(proxy, fake, stream):
    fake.script(weather_call("c1", '{"town": "Paris"}'), weather_call("c2"), text_response("Paris: 21 °C."))

    output, run = run_agent(proxy.base_url, stream=stream, session=f"args-{stream}")

    assert output == "Paris: 21 °C."
    assert run.tool_calls == ["Paris"]
    feedback = fake.agent_payloads[1]["input"][-1]
    assert feedback["type"] == "function_call_output"
    assert "'city' is a required property" in feedback["output"]


@STREAMED
def test_a_premature_done_is_judged_and_continued(proxy, fake, stream):
    fake.judge = lambda request: verdict(request, False, "the conditions were not given")
    fake.script(
        weather_call("c1"), text_response("21."), text_response("Paris: 21 °C and sunny, per the tool's reading. " * 6)
    )

    output, _ = run_agent(proxy.base_url, stream=stream, session=f"judge-{stream}")

    assert output.startswith("Paris: 21 °C and sunny")
    assert len(fake.judge_requests) == 1
    nudge = fake.agent_payloads[2]["input"][-1]
    assert nudge["content"][0]["text"].startswith("You are not done yet: the conditions were not given")


@STREAMED
def test_a_budget_ends_the_run_with_a_summary(make_proxy, fake, write_policies, stream):
    proxy = make_proxy(upstream=fake.url, policies_dir=str(write_policies(default="budgets: {max_tokens: 6000}\n")))
    fake.script(
        response(function_call("get_weather", '{"city": "Paris"}', "c1"), usage=(5500, 100)),
        text_response("Found: Paris 21 °C. Missing: Lyon. Next: ask again."),
    )

    output, _ = run_agent(proxy.base_url, stream=stream, session=f"budget-{stream}")

    assert summary_of(output) == "Found: Paris 21 °C. Missing: Lyon. Next: ask again."
    assert fake.agent_payloads[-1]["tool_choice"] == "none"

"""What each structured client's application sees when the proxy ends a JSON-mode request
(issue 31, item 6): the ending of a request that asked for JSON is a refusal, the form
OpenAI's structured outputs promise besides a valid object; each client surfaces it in its
own way, shown here over real HTTP, streamed and not (docs/judgment/answers.md, "The refusal
channel per client", is this module's table).

Every test scripts a model that answers in prose three times (the first try and two
corrections), then the summary the proxy's last call asks for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from google import genai
from google.genai import types
from pydantic import BaseModel

from tests.support.assertions import summary_of
from tests.support.fake_responses import FakeResponses
from tests.support.fake_upstream import FakeUpstream, emptied
from tests.support.responses_fixtures import responses_server  # noqa: F401 (fixture)
from tests.support.structured_clients import agents_run, anthropic_parsed, responses_parsed
from tests.support.turns import calling, turn

STREAMED = pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
TASK = "How many people live in Lyon? Answer with the city and its population."
SUMMARY = "Found: Lyon. Missing: a population figure that fits the schema. Next step: ask again."


class City(BaseModel):
    city: str
    population: int


def never_valid(fake: FakeUpstream) -> None:
    fake.script(*[turn("About half a million people.") for _ in range(3)], turn(SUMMARY))


@pytest.fixture
def responses_fake(responses_server: FakeResponses) -> Iterator[FakeResponses]:  # noqa: F811 (fixture)
    yield from emptied(responses_server)


@STREAMED
def test_openai_responses_parse_sees_a_refusal_part_and_no_parsed_output(make_proxy, responses_fake, stream):
    never_valid(responses_fake)
    proxy = make_proxy(upstream=responses_fake.url)

    final = responses_parsed(proxy.base_url, City, TASK, stream=stream)

    part = final.output[0].content[0]
    assert (final.output_parsed, part.type, summary_of(part.refusal)) == (None, "refusal", SUMMARY)


@STREAMED
def test_the_agents_sdk_raises_model_refusal_error_over_responses(make_proxy, responses_fake, stream):
    from agents import ModelRefusalError

    never_valid(responses_fake)
    proxy = make_proxy(upstream=responses_fake.url)

    with pytest.raises(ModelRefusalError) as refused:
        agents_run(proxy.base_url, City, TASK, chat=False, stream=stream)

    assert summary_of(refused.value.refusal) == SUMMARY


@STREAMED
def test_the_agents_sdk_raises_model_refusal_error_over_chat(proxy, upstream, stream):
    from agents import ModelRefusalError

    never_valid(upstream)

    with pytest.raises(ModelRefusalError) as refused:
        agents_run(proxy.base_url, City, TASK, chat=True, stream=stream)

    assert summary_of(refused.value.refusal) == SUMMARY


@STREAMED
def test_langgraph_response_format_raises_model_refusal_error(proxy, upstream, stream):
    from langchain_core.exceptions import ModelRefusalError
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    upstream.script(turn("Lyon has about half a million people."))
    never_valid(upstream)
    model = ChatOpenAI(model="m", base_url=proxy.base_url, api_key="sk-p", max_retries=0, streaming=stream)
    agent = create_react_agent(model, tools=[], response_format=City)

    with pytest.raises(ModelRefusalError) as refused:
        agent.invoke({"messages": [{"role": "user", "content": TASK}]})

    assert SUMMARY in str(refused.value)


@STREAMED
def test_anthropic_messages_parse_sees_a_refusal_stop_with_the_summary_as_its_explanation(
    messages_proxy, anthropic_upstream, stream
):
    never_valid(anthropic_upstream)

    final = anthropic_parsed(messages_proxy, City, TASK, stream=stream)

    assert (final.stop_reason, final.parsed_output, final.content) == ("refusal", None, [])
    assert final.stop_details is not None
    assert summary_of(final.stop_details.explanation) == SUMMARY


@STREAMED
def test_google_genai_sees_no_parsed_answer_a_stop_for_other_reasons_and_the_summary_as_text(
    make_proxy, gemini_upstream, stream
):
    never_valid(gemini_upstream)
    proxy = make_proxy(upstream=gemini_upstream.url)
    client = genai.Client(api_key="gk-provider", http_options=types.HttpOptions(base_url=proxy.url))
    config = types.GenerateContentConfig(response_mime_type="application/json", response_schema=City)

    if stream:
        pieces = list(client.models.generate_content_stream(model="gemini-fake", contents=TASK, config=config))
    else:
        pieces = [client.models.generate_content(model="gemini-fake", contents=TASK, config=config)]

    last = pieces[-1].candidates[0]
    assert [piece.parsed for piece in pieces] == [None] * len(pieces)
    assert summary_of("".join(piece.text or "" for piece in pieces)) == SUMMARY
    assert (last.finish_reason, last.finish_message) == (types.FinishReason.OTHER, None)  # the SDK drops the message


def pydantic_ai_run(proxy, output_type: Any, *, stream: bool) -> Any:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=proxy.base_url, api_key="sk-p")
    agent = Agent(OpenAIChatModel("m", provider=provider), output_type=output_type, retries=1)

    async def go() -> Any:
        if stream:
            async with agent.run_stream(TASK) as result:
                return await result.get_output()
        return (await agent.run(TASK)).output

    return asyncio.run(go())


@STREAMED
def test_pydantic_ai_native_output_raises_content_filter_error_carrying_the_summary(proxy, upstream, stream):
    from pydantic_ai import NativeOutput
    from pydantic_ai.exceptions import ContentFilterError

    never_valid(upstream)

    with pytest.raises(ContentFilterError) as refused:
        pydantic_ai_run(proxy, NativeOutput(City), stream=stream)

    assert str(refused.value).startswith("Content filter triggered. Refusal: 'LoopWarden stopped this run")
    assert "Missing: a population figure" in str(refused.value)


@STREAMED
def test_pydantic_ai_tool_output_without_a_valid_forced_call_raises_content_filter_error(proxy, upstream, stream):
    from pydantic_ai.exceptions import ContentFilterError

    upstream.script(*[turn() for _ in range(3)], calling("final_result", {"city": "Lyon"}, "end"))  # no population

    with pytest.raises(ContentFilterError, match="Refusal: 'LoopWarden stopped this run"):
        pydantic_ai_run(proxy, City, stream=stream)

    assert upstream.requests[-1].json()["tool_choice"] == {"type": "function", "function": {"name": "final_result"}}


class GaveUp(BaseModel):
    """The application's own type for a run that could not answer."""

    reason: str


def empty_replies(fake: FakeUpstream) -> None:
    fake.script(*[turn() for _ in range(3)], turn(SUMMARY))


@STREAMED
def test_pydantic_ai_with_a_give_up_output_type_gets_the_ending_as_that_type(proxy, upstream, stream):
    empty_replies(upstream)

    output = pydantic_ai_run(proxy, [City, GaveUp], stream=stream)

    assert isinstance(output, GaveUp)
    assert summary_of(output.reason) == SUMMARY
    offered = [t["function"]["name"] for t in upstream.requests[0].json()["tools"]]
    assert offered == ["final_result_City", "final_result_GaveUp"]


@STREAMED
def test_smolagents_code_agent_with_structured_outputs_ends_its_run_with_the_summary(proxy, upstream, stream):
    from smolagents import CodeAgent, OpenAIServerModel

    never_valid(upstream)
    model = OpenAIServerModel(model_id="m", api_base=proxy.base_url, api_key="sk-p", client_kwargs={"max_retries": 0})
    agent = CodeAgent(
        tools=[],
        model=model,
        max_steps=5,
        verbosity_level=0,
        use_structured_outputs_internally=True,
        stream_outputs=stream,
    )

    output = agent.run(TASK)

    assert summary_of(output) == SUMMARY
    assert len(upstream.requests) == 4  # three tries and the summary call: the ending is its last step
    assert upstream.requests[0].json()["response_format"]["json_schema"]["name"] == "ThoughtAndCodeAnswer"

"""Endings in the channel the agent reads answers from (issue 22, item 1), with the real clients.

smolagents ends only through its ``final_answer`` tool and pydantic-ai's structured output
answers through ``final_result``: a text ending is a parse error for one and exhausts the
other's output retries. So a request offering such a tool gets the ending as a call to it:
the summary in its answer field for a free-text tool, a forced call checked against the
schema for a structured one (the refusal form when none comes back valid); a JSON-mode
request keeps its refusal.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from tests.support.assertions import summary_of
from tests.support.fake_upstream import Json, chat_completion, streamed, tool_call

TASK = "How many people live in Lyon? Give the city and its population."
SUMMARY = "Found: Lyon is in France. Missing: its population. Next step: ask INSEE."


class City(BaseModel):
    city: str
    population: int


def calling(name: str, arguments: dict[str, Any], call_id: str) -> Json:
    return Json(chat_completion(None, tool_calls=[tool_call(name, json.dumps(arguments), call_id)]))


def empty() -> Json:
    return Json(chat_completion(None))


def smolagents_agent(proxy, tools, *, session: str | None = None, stream: bool = False):
    from smolagents import OpenAIServerModel, ToolCallingAgent

    headers = {"X-Session-Id": session} if session else {}
    model = OpenAIServerModel(
        model_id="m",
        api_base=proxy.base_url,
        api_key="sk-p",
        client_kwargs={"max_retries": 0, "default_headers": headers},
    )
    return ToolCallingAgent(tools=tools, model=model, max_steps=12, verbosity_level=0, stream_outputs=stream)


def search_tool(results):
    from smolagents import tool

    @tool
    def search(q: str) -> str:
        """Search the web.

        Args:
            q: what to look for
        """
        return results(q)

    return search


def pydantic_agent(proxy, output_type):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=proxy.base_url, api_key="sk-p")
    return Agent(OpenAIChatModel("m", provider=provider), output_type=output_type, retries=1)


# -- smolagents: final_answer ------------------------------------------------------------


def test_smolagents_accepts_a_repeated_call_loop_ending_through_final_answer(proxy, upstream):
    upstream.script(*[calling("search", {"q": "lyon"}, f"c{n}") for n in range(7)], Json(chat_completion(SUMMARY)))
    fetched = itertools.count()
    agent = smolagents_agent(proxy, [search_tool(lambda q: f"Lyon is a city in France (fetch {next(fetched)}).")])

    answer = agent.run(TASK)

    assert summary_of(answer) == SUMMARY
    summary_call = upstream.requests[-1].json()
    assert summary_call["tool_choice"] == "none"  # the summary itself is asked for as text
    assert "final_answer" in [t["function"]["name"] for t in summary_call["tools"]]


def test_smolagents_accepts_an_empty_replies_ending_through_final_answer(proxy, upstream):
    upstream.script(empty(), empty(), empty(), Json(chat_completion(SUMMARY)))
    agent = smolagents_agent(proxy, [search_tool(lambda q: "unused")])

    assert summary_of(agent.run(TASK)) == SUMMARY


def test_smolagents_streaming_accepts_the_ending_through_final_answer(proxy, upstream):
    upstream.script(streamed(chat_completion(None)), streamed(chat_completion(None)), streamed(chat_completion(None)))
    upstream.script(Json(chat_completion(SUMMARY)))
    agent = smolagents_agent(proxy, [search_tool(lambda q: "unused")], stream=True)

    assert summary_of(agent.run(TASK)) == SUMMARY


def test_a_later_call_of_an_ended_session_replays_the_ending_as_its_answer_call(proxy, upstream):
    upstream.script(empty(), empty(), empty(), Json(chat_completion(SUMMARY)))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)
    ask = {"model": "m", "messages": [{"role": "user", "content": TASK}], "extra_headers": {"X-Session-Id": "replay"}}
    client.chat.completions.create(**ask)  # ended as text: this request offers no answer tool
    final_answer = {
        "type": "function",
        "function": {
            "name": "final_answer",
            "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
        },
    }

    raw = client.chat.completions.with_raw_response.create(**ask, tools=[final_answer])

    message = raw.parse().choices[0].message
    assert raw.headers["x-loopwarden-terminated"] == "empty_response"
    assert message.content is None
    assert [(c.function.name, summary_of(json.loads(c.function.arguments)["answer"])) for c in message.tool_calls] == [
        ("final_answer", SUMMARY)
    ]
    assert len(upstream.requests) == 4  # the replay made no upstream call


# -- pydantic-ai: final_result -----------------------------------------------------------


def test_pydantic_ai_structured_output_accepts_a_forced_final_result_ending(proxy, upstream):
    valid = {"city": "Lyon", "population": 0}
    upstream.script(empty(), empty(), empty(), calling("final_result", valid, "end"))
    agent = pydantic_agent(proxy, City)

    result = asyncio.run(agent.run(TASK))

    assert result.output == City(city="Lyon", population=0)
    forced = upstream.requests[-1].json()
    assert forced["tool_choice"] == {"type": "function", "function": {"name": "final_result"}}
    assert "Answer by calling final_result" in forced["messages"][-1]["content"]


def test_pydantic_ai_gets_its_refusal_when_the_forced_call_is_not_valid(proxy, upstream):
    from pydantic_ai.exceptions import ContentFilterError

    upstream.script(empty(), empty(), empty(), calling("final_result", {"city": "Lyon"}, "end"))  # population missing
    agent = pydantic_agent(proxy, City)

    with pytest.raises(ContentFilterError) as refused:
        asyncio.run(agent.run(TASK))

    assert "I have to stop here" in str(refused.value.body)


def test_pydantic_ai_text_output_accepts_a_text_ending(proxy, upstream):
    upstream.script(empty(), empty(), empty(), Json(chat_completion(SUMMARY)))
    agent = pydantic_agent(proxy, str)

    result = asyncio.run(agent.run(TASK))

    assert summary_of(result.output) == SUMMARY
    assert upstream.requests[-1].json().get("tool_choice") in (None, "none")


def test_pydantic_ai_free_text_output_model_gets_the_summary_in_its_field(proxy, upstream):
    class Answer(BaseModel):
        answer: str

    upstream.script(empty(), empty(), empty(), Json(chat_completion(SUMMARY)))
    agent = pydantic_agent(proxy, Answer)

    result = asyncio.run(agent.run(TASK))

    assert summary_of(result.output.answer) == SUMMARY


# -- what keeps its old form -------------------------------------------------------------


def test_a_json_mode_request_offering_an_answer_tool_still_gets_the_refusal(proxy, upstream):
    upstream.script(empty(), empty(), empty(), Json(chat_completion(SUMMARY)))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)
    final_answer = {"type": "function", "function": {"name": "final_answer", "parameters": {}}}

    raw = client.chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": TASK}],
        tools=[final_answer],
        response_format={"type": "json_object"},
    )

    message = raw.parse().choices[0].message
    assert (message.content, summary_of(message.refusal), message.tool_calls) == (None, SUMMARY, None)


def test_a_forced_tool_gets_the_ending_as_its_call_in_a_stream(proxy, upstream):
    report = {
        "type": "function",
        "function": {"name": "report", "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}},
    }
    upstream.script(*[streamed(chat_completion(None)) for _ in range(3)], Json(chat_completion(SUMMARY)))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)

    with client.chat.completions.stream(
        model="m",
        messages=[{"role": "user", "content": TASK}],
        tools=[report],
        tool_choice={"type": "function", "function": {"name": "report"}},
    ) as stream:
        final = stream.get_final_completion()

    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert [
        (c.function.name, summary_of(json.loads(c.function.arguments)["text"])) for c in choice.message.tool_calls
    ] == [("report", SUMMARY)]


def test_a_derived_session_ended_by_an_answer_call_is_continued_by_a_request_sending_it_back(proxy, upstream):
    """Without X-Session-Id, the run is named by the reply the client got: the answer call,
    not the text it was made from, so the request that sends that call back finds the ending."""
    upstream.script(empty(), empty(), empty(), Json(chat_completion(SUMMARY)))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    final_answer = {"type": "function", "function": {"name": "final_answer", "parameters": {}}}

    first = client.chat.completions.create(model="m", messages=messages, tools=[final_answer]).choices[0].message
    (call,) = first.tool_calls
    messages += [first.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": call.id, "content": "ok"}]
    raw = client.chat.completions.with_raw_response.create(model="m", messages=messages, tools=[final_answer])

    assert raw.headers["x-loopwarden-terminated"] == "empty_response"
    assert raw.parse().choices[0].message.tool_calls[0].id == call.id  # the same ending, replayed
    assert len(upstream.requests) == 4


def test_pydantic_ai_streamed_structured_output_accepts_a_forced_final_result_ending(proxy, upstream):
    upstream.script(*[streamed(chat_completion(None)) for _ in range(3)])
    upstream.script(calling("final_result", {"city": "Lyon", "population": 0}, "end"))
    agent = pydantic_agent(proxy, City)

    async def run() -> City:
        async with agent.run_stream(TASK) as result:
            return await result.get_output()

    assert asyncio.run(run()) == City(city="Lyon", population=0)

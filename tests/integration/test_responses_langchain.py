"""LangChain's ``ChatOpenAI(use_responses_api=True)`` through the proxy (invoke and stream),
against misbehaving models; every stream it reads passes the strict validator."""

from __future__ import annotations

import json

import httpx
import pydantic
import pytest

from tests.support.assertions import summary_of
from tests.support.fake_responses import (
    function_call,
    message,
    reasoning,
    response,
    text_response,
    verdict,
)
from tests.support.responses_clients import TeeTransport
from tests.support.responses_events import validate_stream
from tests.support.responses_fixtures import fake, proxy, responses_server  # noqa: F401 (fixtures)


@pytest.fixture
def tee():
    transport = TeeTransport()
    yield transport
    for raw in transport.streams:
        validate_stream(raw)


def chat(base_url: str, tee: TeeTransport, session: str):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model="m",
        base_url=base_url,
        api_key="sk-p",
        max_retries=0,
        use_responses_api=True,
        http_client=httpx.Client(transport=tee),
        default_headers={"X-Session-Id": session},
    )


def ask(model, messages, stream: bool):
    if not stream:
        return model.invoke(messages)
    merged = None
    for chunk in model.stream(messages):
        merged = chunk if merged is None else merged + chunk
    return merged


def text_of(reply) -> str:
    return reply.text if isinstance(reply.text, str) else reply.text()


STREAMED = pytest.mark.parametrize("stream", [False, True], ids=["invoke", "stream"])
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {
            "type": "object",
            "properties": {"q": {"type": "string"}},
            "required": ["q"],
            "additionalProperties": False,
        },
    },
}


@STREAMED
def test_an_empty_reply_is_nudged_once_and_langchain_sees_only_the_good_one(proxy, fake, tee, stream):
    fake.script(response(message("")), text_response("Lyon has 522,250 inhabitants."))

    reply = ask(chat(proxy.base_url, tee, f"lc-empty-{stream}"), "How many people live in Lyon?", stream)

    assert text_of(reply) == "Lyon has 522,250 inhabitants."
    assert len(fake.requests) == 2


@STREAMED
def test_a_reasoning_only_model_is_ended_gracefully(proxy, fake, tee, stream):
    fake.script(*[response(reasoning("Hmm.")) for _ in range(3)], text_response("Found: nothing. Next: ask."))

    reply = ask(chat(proxy.base_url, tee, f"lc-thinking-{stream}"), "How many people live in Lyon?", stream)

    assert summary_of(text_of(reply)) == "Found: nothing. Next: ask."


@STREAMED
def test_a_call_repeated_forever_is_ended_within_block_at(proxy, fake, tee, stream):
    from langchain_core.messages import HumanMessage, ToolMessage

    fake.script(
        *[response(function_call("search", '{"q": "lyon"}', f"c{n}")) for n in range(7)],
        text_response("Lyon: ~520k. I stopped searching."),
    )
    model = chat(proxy.base_url, tee, f"lc-loop-{stream}").bind_tools([SEARCH])
    messages: list = [HumanMessage("How many people live in Lyon?")]
    runs = 0
    for _ in range(10):
        reply = ask(model, messages, stream)
        messages.append(reply)
        if not reply.tool_calls:
            break
        for call in reply.tool_calls:
            runs += 1
            messages.append(ToolMessage(f"result #{runs}", tool_call_id=call["id"]))

    assert summary_of(text_of(messages[-1])) == "Lyon: ~520k. I stopped searching."
    assert runs <= 4
    assert fake.rejections == []


@STREAMED
def test_bad_arguments_go_back_to_the_model_with_their_path(proxy, fake, tee, stream):
    fake.script(
        response(function_call("search", '{"query": "lyon"}', "c1")),
        response(function_call("search", '{"q": "lyon"}', "c2")),
    )

    reply = ask(chat(proxy.base_url, tee, f"lc-args-{stream}").bind_tools([SEARCH]), "Lyon?", stream)

    assert [call["args"] for call in reply.tool_calls] == [{"q": "lyon"}]
    feedback = fake.agent_payloads[1]["input"][-1]
    assert "$.q: 'q' is a required property" in feedback["output"]


def run_tools(model, question: str, stream: bool, results: dict[str, str]) -> list:
    """LangChain's own tool loop: each call answered from ``results`` by tool name, until a text reply."""
    from langchain_core.messages import HumanMessage, ToolMessage

    messages: list = [HumanMessage(question)]
    for _ in range(8):
        reply = ask(model, messages, stream)
        messages.append(reply)
        if not reply.tool_calls:
            break
        messages += [ToolMessage(results[call["name"]], tool_call_id=call["id"]) for call in reply.tool_calls]
    return messages


FETCH = {**SEARCH, "function": {**SEARCH["function"], "name": "fetch"}}
CENSUS = "Lyon has 522,250 inhabitants (INSEE 2021), so the answer is confirmed by the official census. " * 3


@STREAMED
def test_a_premature_done_is_judged_and_continued(proxy, fake, tee, stream):
    fake.judge = lambda request: verdict(request, False, "the source was not given")
    fake.script(
        response(function_call("search", '{"q": "lyon"}', "c1")),
        text_response("About 500k."),
        response(function_call("fetch", '{"q": "insee lyon"}', "c2")),
        text_response(CENSUS),
    )
    model = chat(proxy.base_url, tee, f"lc-judge-{stream}").bind_tools([SEARCH, FETCH])

    messages = run_tools(model, "How many people live in Lyon?", stream, {"search": "about 500k", "fetch": "522,250"})

    assert "INSEE" in text_of(messages[-1])
    assert len(fake.judge_requests) == 1
    assert fake.agent_payloads[2]["input"][-1]["content"][0]["text"].startswith("You are not done yet")


@STREAMED
def test_a_token_budget_ends_the_session_with_a_summary(make_proxy, fake, write_policies, tee, stream):
    proxy = make_proxy(upstream=fake.url, policies_dir=str(write_policies(default="budgets: {max_tokens: 1200}\n")))
    fake.script(response(message("Part one."), usage=(900, 100)), text_response("Found most of it; missing Q4."))
    model = chat(proxy.base_url, tee, f"lc-budget-{stream}").bind(max_output_tokens=100)

    first = ask(model, "Summarize the quarterly report.", stream)
    ending = ask(model, "Summarize the quarterly report.", stream)

    assert text_of(first) == "Part one."
    assert (
        summary_of(text_of(ending)) == "Found most of it; missing Q4."
    )  # 1,000 of 1,200 used: the next call is the ending
    summary_call = json.loads(fake.requests[1].body)
    assert summary_call["input"][-1]["content"][0]["text"].startswith("Stop working on the task now")


@STREAMED
def test_a_well_behaved_run_reaches_upstream_as_langchain_sent_it(proxy, fake, tee, stream):
    fake.script(response(function_call("search", '{"q": "lyon"}', "c1")), text_response("Lyon: 522,250."))
    model = chat(proxy.base_url, tee, f"lc-clean-{stream}").bind_tools([SEARCH])

    messages = run_tools(model, "How many people live in Lyon?", stream, {"search": "522,250"})

    assert text_of(messages[-1]) == "Lyon: 522,250."
    assert [request.body for request in fake.requests] == tee.sent  # byte for byte, both calls
    assert fake.rejections == []


class City(pydantic.BaseModel):
    city: str
    population: int


def test_a_structured_request_that_never_validates_ends_in_langchains_refusal_error(proxy, fake, tee):
    from langchain_core.exceptions import ModelRefusalError

    fake.script(
        *[text_response("About half a million.") for _ in range(3)], text_response("Missing: a population figure.")
    )

    with pytest.raises(ModelRefusalError, match="Missing: a population figure"):
        chat(proxy.base_url, tee, "lc-schema").with_structured_output(City, method="json_schema").invoke("Lyon?")

    assert fake.agent_payloads[0]["text"]["format"]["type"] == "json_schema"

"""Runs within a session over real HTTP: after an ending, a new human instruction starts a new
run (its evidence afresh, the session's budgets carried on); a resend gets the stored ending; a
fresh conversation under a known session id is a new run. Memory, Redis and Redis Cluster state."""

from __future__ import annotations

import uuid

import anthropic
import httpx
import openai
import pytest

from tests.support.fake_messages import said, text, tool_use
from tests.support.fake_upstream import Json, chat_completion, tool_call

SYSTEM = {"role": "system", "content": "You are a weather agent."}
ASK = {"role": "user", "content": "What is the weather in Paris?"}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]


@pytest.fixture(params=["memory", "redis", "cluster"])
def store_settings(request, redis_url) -> dict[str, str | bool]:
    if request.param == "cluster":
        return {"redis_url": request.getfixturevalue("redis_cluster").url, "redis_cluster": True}
    return {"redis_url": redis_url} if request.param == "redis" else {}


def empty():
    return Json(chat_completion(None))


def sdk(proxy, session: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=proxy.base_url, api_key="sk-p", max_retries=0, default_headers={"X-Session-Id": session}
    )


def ended_by_empty_replies(client: openai.OpenAI, upstream) -> list[dict]:
    """A run ended by three empty replies; the conversation as the client holds it after it."""
    upstream.script(empty(), empty(), empty(), Json(chat_completion("Found nothing yet.")))
    ended = client.chat.completions.with_raw_response.create(model="m", messages=[SYSTEM, ASK], tools=TOOLS)
    assert ended.headers["x-loopwarden-terminated"] == "empty_response"
    return [SYSTEM, ASK, {"role": "assistant", "content": ended.parse().choices[0].message.content}]


def test_a_new_instruction_after_an_ending_starts_a_new_run(make_proxy, upstream, store_settings):
    client = sdk(make_proxy(**store_settings), f"runs-{uuid.uuid4().hex}")
    history = ended_by_empty_replies(client, upstream)
    upstream.script(Json(chat_completion("Paris: 21 °C.")))

    again = client.chat.completions.with_raw_response.create(
        model="m", messages=[*history, {"role": "user", "content": "Try once more, please."}], tools=TOOLS
    )

    assert "x-loopwarden-terminated" not in again.headers
    assert again.parse().choices[0].message.content == "Paris: 21 °C."
    assert len(upstream.requests) == 5


def test_without_a_session_id_a_new_instruction_after_an_ending_starts_a_new_run(make_proxy, upstream, store_settings):
    client = openai.OpenAI(base_url=make_proxy(**store_settings).base_url, api_key="sk-p", max_retries=0)
    history = ended_by_empty_replies(client, upstream)  # a derived session: the opening and the first reply
    upstream.script(Json(chat_completion("Paris: 21 °C.")))

    again = client.chat.completions.with_raw_response.create(
        model="m", messages=[*history, {"role": "user", "content": "Try once more, please."}], tools=TOOLS
    )

    assert "x-loopwarden-terminated" not in again.headers
    assert again.parse().choices[0].message.content == "Paris: 21 °C."


def test_a_resend_of_the_ended_conversation_gets_the_stored_ending(make_proxy, upstream, store_settings):
    client = sdk(make_proxy(**store_settings), f"runs-{uuid.uuid4().hex}")
    ended_by_empty_replies(client, upstream)

    replay = client.chat.completions.with_raw_response.create(model="m", messages=[SYSTEM, ASK], tools=TOOLS)

    assert replay.headers["x-loopwarden-terminated"] == "empty_response"
    assert len(upstream.requests) == 4  # no upstream call


def test_a_new_run_starts_its_strikes_afresh_and_carries_the_sessions_steps_on(make_proxy, upstream, store_settings):
    proxy, session = make_proxy(**store_settings), f"runs-{uuid.uuid4().hex}"
    client = sdk(proxy, session)
    history = ended_by_empty_replies(client, upstream)
    upstream.script(empty(), Json(chat_completion("Paris: 21 °C.")))  # one miss: a nudge, not the old run's third

    again = client.chat.completions.with_raw_response.create(
        model="m", messages=[*history, {"role": "user", "content": "Try once more."}], tools=TOOLS
    )

    assert "x-loopwarden-terminated" not in again.headers
    assert again.headers["x-loopwarden-interventions"] == "empty_nudge"
    described = httpx.get(f"{proxy.base_url}/loopwarden/sessions/{session}", headers={"Authorization": "Bearer sk-p"})
    assert (described.json()["steps"], described.json()["termination"]) == (6, None)  # 4 before, 2 in the new run


def test_the_sessions_api_shows_which_run_a_session_is_in(make_proxy, upstream, store_settings):
    proxy, session = make_proxy(**store_settings), f"runs-{uuid.uuid4().hex}"
    client = sdk(proxy, session)
    history = ended_by_empty_replies(client, upstream)
    upstream.script(Json(chat_completion("Paris: 21 °C.")))
    url, auth = f"{proxy.base_url}/loopwarden/sessions/{session}", {"Authorization": "Bearer sk-p"}
    ended = httpx.get(url, headers=auth).json()["run"]

    client.chat.completions.create(
        model="m", messages=[*history, {"role": "user", "content": "Try once more."}], tools=TOOLS
    )

    assert (ended, httpx.get(url, headers=auth).json()["run"]) == (1, 2)


def test_a_spent_budget_ends_the_new_run_at_once_naming_the_budget(make_proxy, upstream, write_policies):
    proxy = make_proxy(policies_dir=str(write_policies(default="max_steps: 5\n")))
    client = sdk(proxy, f"runs-{uuid.uuid4().hex}")
    history = ended_by_empty_replies(client, upstream)  # 4 of 5 steps

    again = client.chat.completions.with_raw_response.create(
        model="m", messages=[*history, {"role": "user", "content": "Go on."}], tools=TOOLS
    )

    assert again.headers["x-loopwarden-terminated"] == "budget_steps"
    assert (
        again.parse()
        .choices[0]
        .message.content.startswith("LoopWarden stopped this run (budget_steps): the session's steps budget is spent")
    )


def two_tool_run() -> list[Json]:
    return [
        Json(chat_completion(None, tool_calls=[tool_call("get_weather", '{"city": "Paris"}', "c1")])),
        Json(chat_completion(None, tool_calls=[tool_call("get_time", '{"city": "Paris"}', "c2")])),
        Json(chat_completion("Paris: 21 °C at noon.")),
    ]


def run_task(client: openai.OpenAI) -> list:
    """The two-tool task as the openai SDK runs it: call, run the tool, send the result back."""
    messages: list = [SYSTEM, ASK]
    raws = []
    while True:
        raw = client.chat.completions.with_raw_response.create(model="m", messages=messages, tools=TOOLS)
        raws.append(raw)
        message = raw.parse().choices[0].message
        if not message.tool_calls:
            return raws
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": f"{call.function.name}: ok"})


def test_the_same_task_twice_under_one_session_id_is_two_runs_never_a_cycle(make_proxy, upstream, store_settings):
    proxy, session = make_proxy(**store_settings), f"runs-{uuid.uuid4().hex}"
    client = sdk(proxy, session)
    upstream.script(*two_tool_run(), *two_tool_run())

    run_task(client)
    second = run_task(client)

    assert [raw.headers["x-loopwarden-interventions"] for raw in second] == ["none"] * 3
    assert len(upstream.requests) == 6
    described = httpx.get(f"{proxy.base_url}/loopwarden/sessions/{session}", headers={"Authorization": "Bearer sk-p"})
    # The second run's commits landed: its own calls counted once each, the session's steps carried on.
    assert (sorted(described.json()["tool_call_fingerprints"].values()), described.json()["steps"]) == ([1, 1], 6)


def test_claude_style_messages_start_a_new_run_after_an_ending(make_proxy, anthropic_upstream, store_settings):
    proxy = make_proxy(upstream=anthropic_upstream.url, **store_settings)
    client = anthropic.Anthropic(
        base_url=proxy.url, api_key="sk-ant", max_retries=0, default_headers={"X-Session-Id": uuid.uuid4().hex}
    )
    anthropic_upstream.script(said(), said(), said(), said(text("Found nothing yet.")))
    asked = [{"role": "user", "content": "Weather in Paris?"}]
    ended = client.messages.with_raw_response.create(model="claude", max_tokens=100, messages=asked)
    assert ended.headers["x-loopwarden-terminated"] == "empty_response"
    anthropic_upstream.script(said(tool_use("get_weather", {"city": "Paris"})))
    history = [*asked, {"role": "assistant", "content": ended.parse().content[0].text}]

    again = client.messages.with_raw_response.create(
        model="claude",
        max_tokens=100,
        messages=[*history, {"role": "user", "content": "<system-reminder>Be brief.</system-reminder>Try again."}],
        tools=[{"name": "get_weather", "input_schema": {"type": "object"}}],
    )

    assert "x-loopwarden-terminated" not in again.headers
    assert again.parse().content[0].name == "get_weather"

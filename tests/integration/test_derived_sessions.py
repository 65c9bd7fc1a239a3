"""Runs without X-Session-Id never share a session: the same task, run back to back or side by
side by the openai SDK's tool loop against one proxy, keeps its steps, strikes and endings apart."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.support.fake_upstream import Json, chat_completion, streamed, tool_call

TASK = [
    {"role": "system", "content": "You are a research agent."},
    {"role": "user", "content": "Find the population of Lyon."},
]
TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]


class Run:
    """One agent run: the openai SDK's loop, each tool call answered, the history growing."""

    def __init__(self, proxy) -> None:
        self.client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-test", max_retries=0)
        self.messages: list[dict] = [dict(m) for m in TASK]

    def step(self) -> openai._legacy_response.LegacyAPIResponse:
        raw = self.client.chat.completions.with_raw_response.create(model="m", messages=self.messages, tools=TOOLS)
        message = raw.parse().choices[0].message
        self.messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or []:
            self.messages.append({"role": "tool", "tool_call_id": call.id, "content": f"result of {call.id}"})
        return raw


def calls(run: str, step: int) -> Json:
    """A reply calling ``search`` with a call id of its own run and step (ids are unique, as OpenAI's are)."""
    return Json(
        chat_completion(None, tool_calls=[tool_call("search", json.dumps({"q": f"{run}{step}"}), f"call_{run}{step}")])
    )


@pytest.fixture
def capped(make_proxy, write_policies):
    return make_proxy(policies_dir=str(write_policies(default="max_steps: 4\n")))  # 3 calls, the 4th is the ending


def test_a_runs_first_reply_names_the_session_its_second_request_continues(proxy, upstream):
    upstream.script(calls("a", 1), calls("a", 2))
    run = Run(proxy)

    first, second = run.step(), run.step()

    assert first.headers["x-loopwarden-session"] == second.headers["x-loopwarden-session"]
    assert (first.headers["x-loopwarden-step"], second.headers["x-loopwarden-step"]) == ("1", "2")


def test_later_requests_of_a_run_keep_its_session(proxy, upstream):
    upstream.script(calls("a", 1), calls("a", 2), calls("a", 3))
    run = Run(proxy)
    run.step()

    second, third = run.step(), run.step()

    assert third.headers["x-loopwarden-session"] == second.headers["x-loopwarden-session"]
    assert third.headers["x-loopwarden-step"] == "3"


def test_two_runs_of_one_task_side_by_side_count_their_steps_apart(proxy, upstream):
    upstream.script(calls("a", 1), calls("b", 1), calls("a", 2), calls("b", 2), calls("a", 3), calls("b", 3))
    a, b = Run(proxy), Run(proxy)

    steps = [(a.step().headers["x-loopwarden-step"], b.step().headers["x-loopwarden-step"]) for _ in range(3)]

    assert steps == [("1", "1"), ("2", "2"), ("3", "3")]


def test_the_same_task_run_again_is_not_served_the_previous_runs_ending(capped, upstream):
    upstream.script(calls("a", 1), calls("a", 2), calls("a", 3), Json(chat_completion("Run a's summary.")))
    a = Run(capped)
    for _ in range(3):
        a.step()
    ended = a.step()
    assert ended.headers["x-loopwarden-terminated"] == "budget_steps"
    upstream.script(calls("b", 1), calls("b", 2))
    b = Run(capped)

    first, second = b.step(), b.step()

    assert second.headers.get("x-loopwarden-terminated") is None
    assert second.parse().choices[0].message.tool_calls[0].id == "call_b2"  # the model's reply, not a's ending
    assert (first.headers["x-loopwarden-step"], second.headers["x-loopwarden-step"]) == ("1", "2")
    assert upstream.pending == 0


def test_a_run_ended_side_by_side_with_another_leaves_the_other_running(capped, upstream):
    upstream.script(calls("a", 1), calls("b", 1), calls("a", 2), calls("a", 3))
    a, b = Run(capped), Run(capped)
    a.step(), b.step(), a.step(), a.step()
    upstream.script(Json(chat_completion("Run a's summary.")), calls("b", 2))

    assert a.step().headers["x-loopwarden-terminated"] == "budget_steps"
    continued = b.step()

    assert continued.headers.get("x-loopwarden-terminated") is None
    assert continued.headers["x-loopwarden-step"] == "2"


def test_a_history_the_session_never_delivered_starts_a_run_of_its_own(proxy, upstream):
    upstream.script(calls("a", 1), Json(chat_completion("fine")))
    Run(proxy).step()
    made_up = Run(proxy)
    made_up.messages += [
        {"role": "assistant", "content": "I already searched."},
        {"role": "user", "content": "Go on."},
    ]

    raw = made_up.client.chat.completions.with_raw_response.create(model="m", messages=made_up.messages)

    assert raw.headers["x-loopwarden-step"] == "1"


def test_a_streamed_first_reply_names_the_run_too(proxy, upstream):
    first_call = tool_call("search", '{"q": "a1"}', "call_a1")
    upstream.script(streamed(chat_completion(None, tool_calls=[first_call])), calls("a", 2))
    url = f"{proxy.base_url}/chat/completions"
    opened = httpx.post(url, json={"model": "m", "messages": TASK, "tools": TOOLS, "stream": True})
    assert "call_a1" in opened.text
    history = [
        *TASK,
        {"role": "assistant", "content": None, "tool_calls": [first_call]},
        {"role": "tool", "tool_call_id": "call_a1", "content": "Lyon: 522,000"},
    ]

    second = httpx.post(url, json={"model": "m", "messages": history, "tools": TOOLS})

    assert second.headers["x-loopwarden-step"] == "2"


def test_runs_ending_on_their_first_request_each_get_their_own_ending(proxy, upstream):
    empty = Json(chat_completion(None))
    upstream.script(empty, empty, empty, Json(chat_completion("Run a's summary.")))
    upstream.script(empty, empty, empty, Json(chat_completion("Run b's summary.")))

    endings = [Run(proxy).step() for _ in range(2)]

    assert [raw.headers["x-loopwarden-terminated"] for raw in endings] == ["empty_response"] * 2
    assert [raw.parse().choices[0].message.content for raw in endings] == ["Run a's summary.", "Run b's summary."]

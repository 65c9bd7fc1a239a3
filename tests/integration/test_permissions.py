"""Tool permissions end to end: a dangerous call never reaches the agent (streaming too)."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.support.fake_upstream import Json, chat_completion, streamed, tool_call

TOOLS = [
    {"type": "function", "function": {"name": "run_shell", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "list_files", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "admin_reset", "parameters": {"type": "object"}}},
]
TASK = [{"role": "user", "content": "Clean up the build directory."}]
POLICY = r"""
permissions:
  max_denials: 2
  rules:
    - id: no-root-rm
      tool: run_shell
      when: [{path: $.command, regex: 'rm\s+-rf\s+/(\s|$)'}]
      action: deny
      message: Deleting the filesystem root is never allowed.
    - id: no-fork-bomb
      tool: run_shell
      when: [{path: $.command, regex: ':\(\)\s*\{'}]
      action: deny_session
    - id: no-admin
      tool: admin_*
      action: deny
      hide: true
"""


@pytest.fixture
def guarded(make_proxy, write_policies):
    return make_proxy(policies_dir=str(write_policies(default=POLICY)))


def calling(name: str, arguments: dict, call_id: str) -> Json:
    return Json(chat_completion(None, tool_calls=[tool_call(name, json.dumps(arguments), call_id)]))


def sdk(proxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)


def test_a_refused_call_is_replaced_by_the_models_next_choice(guarded, upstream):
    upstream.script(calling("run_shell", {"command": "rm -rf /"}, "c1"), calling("list_files", {"dir": "build"}, "c2"))

    raw = sdk(guarded).chat.completions.with_raw_response.create(model="m", messages=TASK, tools=TOOLS)

    calls = raw.parse().choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["list_files"]
    assert raw.headers["x-loopwarden-interventions"] == "tools_hidden,permission_denied"
    refusal = upstream.requests[1].json()["messages"][-1]
    assert refusal["role"] == "tool"
    assert refusal["tool_call_id"] == "c1"
    assert "rule no-root-rm" in refusal["content"]
    assert "never allowed" in refusal["content"]


def test_a_model_that_insists_ends_the_session(guarded, upstream):
    upstream.script(
        *[calling("run_shell", {"command": "rm -rf /"}, f"c{n}") for n in range(3)],
        Json(chat_completion("I could not clean up: the only way I saw was refused.")),
    )

    raw = sdk(guarded).chat.completions.with_raw_response.create(model="m", messages=TASK, tools=TOOLS)

    assert raw.headers["x-loopwarden-terminated"] == "permission"
    assert raw.parse().choices[0].message.tool_calls is None


def test_deny_session_ends_at_once(guarded, upstream):
    upstream.script(calling("run_shell", {"command": ":(){ :|:& };:"}, "c1"), Json(chat_completion("Stopped.")))

    raw = sdk(guarded).chat.completions.with_raw_response.create(model="m", messages=TASK, tools=TOOLS)

    assert raw.headers["x-loopwarden-terminated"] == "permission"
    assert len(upstream.requests) == 2  # the call, then the summary


def test_hidden_tools_never_reach_the_upstream(guarded, upstream):
    sdk(guarded).chat.completions.create(model="m", messages=TASK, tools=TOOLS)

    offered = [t["function"]["name"] for t in upstream.requests[0].json()["tools"]]
    assert offered == ["run_shell", "list_files"]


def test_streaming_clients_never_see_the_refused_call(guarded, upstream):
    refused, allowed = (
        calling("run_shell", {"command": "rm -rf /"}, "c1"),
        calling("list_files", {"dir": "build"}, "c2"),
    )
    upstream.script(streamed(refused.body), streamed(allowed.body))

    stream = sdk(guarded).chat.completions.create(model="m", messages=TASK, tools=TOOLS, stream=True)
    names = [
        call.function.name
        for chunk in stream
        if chunk.choices and chunk.choices[0].delta.tool_calls
        for call in chunk.choices[0].delta.tool_calls
        if call.function and call.function.name
    ]

    assert names == ["list_files"]
    assert all(r.json().get("stream") is True for r in upstream.requests)


def test_decisions_are_counted_by_rule(guarded, upstream):
    upstream.script(calling("run_shell", {"command": "rm -rf /"}, "c1"), calling("list_files", {}, "c2"))

    sdk(guarded).chat.completions.create(model="m", messages=TASK, tools=TOOLS)

    metrics = httpx.get(f"{guarded.metrics_url}/metrics").text
    assert 'loopwarden_permission_decisions_total{action="deny",policy="default",rule="no-root-rm"} 1.0' in metrics


def test_shadow_mode_counts_the_refusal_but_delivers_the_call(make_proxy, upstream, write_policies):
    proxy = make_proxy(policies_dir=str(write_policies(default=POLICY + "mode: shadow\n")))
    upstream.script(calling("run_shell", {"command": "rm -rf /"}, "c1"))

    raw = sdk(proxy).chat.completions.with_raw_response.create(model="m", messages=TASK, tools=TOOLS)

    assert raw.parse().choices[0].message.tool_calls[0].function.name == "run_shell"
    assert raw.headers["x-loopwarden-shadow"] == "tools_hidden,permission_denied"
    assert [t["function"]["name"] for t in upstream.requests[0].json()["tools"]] == [
        t["function"]["name"] for t in TOOLS
    ]

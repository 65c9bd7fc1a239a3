"""Schemas a client sends, over HTTP: a catastrophic pattern costs the model a retry and
nobody else anything; a schema past the limits is a 400 naming it; duplicate keys in a
model's tool arguments go back to it as invalid."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.support.fake_upstream import Json, chat_completion, tool_call
from tests.support.timed import Stopwatch, while_probing_health

TASK = [{"role": "user", "content": "Look up the code."}]
NESTED_BACKTRACKING = r"^(a+)+$"
"""Took 10 s on Python's re against 26 model-written letters, doubling per letter."""
ALTERNATING = r"^(a|a)*$"
"""Backtracks 2^n times on both engines: the bounded one gives up."""


def lookup_tool(pattern: str) -> list[dict]:
    parameters = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": pattern}},
        "required": ["code"],
    }
    return [{"type": "function", "function": {"name": "lookup", "parameters": parameters}}]


def calling(arguments: str, call_id: str = "c1") -> Json:
    return Json(chat_completion(None, tool_calls=[tool_call("lookup", arguments, call_id)]))


def post(proxy, body: dict, session: str = "schemas") -> httpx.Response:
    return httpx.post(
        f"{proxy.base_url}/chat/completions",
        json={"model": "m", "messages": TASK, **body},
        headers={"Authorization": "Bearer sk-p", "X-Session-Id": session},
        timeout=60,
    )


def test_a_catastrophic_pattern_costs_the_model_a_retry_and_never_holds_the_event_loop(proxy, upstream):
    upstream.script(calling(json.dumps({"code": "a" * 27 + "!"})), calling('{"code": "aaa"}', "c2"))
    answered, watch, health_latencies = while_probing_health(
        f"{proxy.url}/healthz", lambda: post(proxy, {"tools": lookup_tool(NESTED_BACKTRACKING)})
    )

    assert watch.elapsed < watch.scaled(1.0)  # Python's re took > 7 s here, the whole event loop with it
    assert max(health_latencies) < watch.scaled(0.5)
    reply = answered.json()["choices"][0]["message"]
    assert json.loads(reply["tool_calls"][0]["function"]["arguments"]) == {"code": "aaa"}
    retry = upstream.requests[1].json()["messages"]
    assert "does not match" in retry[-1]["content"]


def test_a_value_the_pattern_cannot_check_in_time_goes_back_to_the_model_as_invalid(proxy, upstream):
    upstream.script(calling(json.dumps({"code": "a" * 27 + "!"})), calling('{"code": "aa"}', "c2"))

    with Stopwatch() as watch:
        response = post(proxy, {"tools": lookup_tool(ALTERNATING)})

    assert watch.elapsed < watch.scaled(1.0)
    assert response.headers["x-loopwarden-interventions"] == "tool_args_retry"
    retry = upstream.requests[1].json()["messages"]
    assert "could not be checked against the pattern" in retry[-1]["content"]


def test_an_answer_the_response_format_pattern_cannot_check_in_time_is_retried(proxy, upstream):
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": ALTERNATING}}}
    response_format = {"type": "json_schema", "json_schema": {"name": "code", "schema": schema}}
    upstream.script(
        Json(chat_completion(json.dumps({"code": "a" * 27 + "!"}))), Json(chat_completion('{"code": "aa"}'))
    )

    with Stopwatch() as watch:
        response = post(proxy, {"response_format": response_format})

    assert watch.elapsed < watch.scaled(1.0)
    assert response.json()["choices"][0]["message"]["content"] == '{"code": "aa"}'
    assert "could not be checked against the pattern" in upstream.requests[1].json()["messages"][-1]["content"]


def test_a_pattern_the_bounded_engine_cannot_compile_in_reason_is_a_400(proxy, upstream):
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "(((a{100}){100}){100}){100}"}}}
    response_format = {"type": "json_schema", "json_schema": {"name": "code", "schema": schema}}

    with Stopwatch() as watch:
        response = post(proxy, {"response_format": response_format})

    assert watch.elapsed < watch.scaled(1.0)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "response_format.json_schema.schema"
    assert upstream.requests == []


# -- limits --------------------------------------------------------------------------------


def big_tools(properties: int, description: str = "") -> list[dict]:
    small = {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}
    props = {f"field_{i}": {"type": "string", "description": description} for i in range(properties)}
    big = {"type": "function", "function": {"name": "bulk", "parameters": {"type": "object", "properties": props}}}
    return [small, big]


@pytest.mark.parametrize(
    ("tools", "reason"),
    [
        (big_tools(100, "d" * 3000), "larger than 262144 bytes of JSON"),
        (big_tools(5001), "declares more than 5000 properties"),
    ],
    ids=["bytes", "properties"],
)
def test_a_tool_schema_past_the_limits_is_a_400_naming_it(proxy, upstream, tools, reason):
    response = post(proxy, {"tools": tools})

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "tools[1].function.parameters"
    assert error["type"] == "invalid_request_error"
    assert reason in error["message"]
    assert error["message"].startswith("tools[1].function.parameters: ")
    assert upstream.requests == []


def test_a_response_format_schema_past_the_limits_is_a_400_naming_it(proxy, upstream):
    schema = big_tools(100, "d" * 3000)[1]["function"]["parameters"]
    response_format = {"type": "json_schema", "json_schema": {"name": "big", "schema": schema}}

    response = post(proxy, {"response_format": response_format})

    assert response.status_code == 400
    assert response.json()["error"]["param"] == "response_format.json_schema.schema"


def test_the_schema_limits_are_settings(make_proxy, upstream):
    proxy = make_proxy(max_schema_properties=10)
    upstream.script(Json(chat_completion("ok")))

    assert post(proxy, {"tools": big_tools(10)}).status_code == 200
    assert post(proxy, {"tools": big_tools(11)}, session="other").status_code == 400


def test_a_large_schema_within_the_limits_compiles_without_holding_the_event_loop(make_proxy, upstream):
    proxy = make_proxy(max_schema_bytes=4 * 1024 * 1024, max_schema_properties=20_000)
    upstream.script(Json(chat_completion(None, tool_calls=[tool_call("bulk", '{"field_1": "x"}')])))
    answered, watch, health_latencies = while_probing_health(
        f"{proxy.url}/healthz", lambda: post(proxy, {"tools": big_tools(5000, "d" * 100)})
    )

    assert answered.status_code == 200
    assert len(health_latencies) > 1
    assert max(health_latencies) < watch.scaled(0.5)


# -- duplicate keys ------------------------------------------------------------------------


def test_tool_arguments_giving_a_key_twice_go_back_to_the_model(proxy, upstream):
    tools = [{"type": "function", "function": {"name": "run_shell", "parameters": {"type": "object"}}}]
    twice = Json(chat_completion(None, tool_calls=[tool_call("run_shell", '{"command": "rm -rf /", "command": "ls"}')]))
    once = Json(chat_completion(None, tool_calls=[tool_call("run_shell", '{"command": "ls"}', "c2")]))
    upstream.script(twice, once)
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)

    raw = client.chat.completions.with_raw_response.create(model="m", messages=TASK, tools=tools)

    assert raw.parse().choices[0].message.tool_calls[0].function.arguments == '{"command": "ls"}'
    assert raw.headers["x-loopwarden-interventions"] == "tool_args_retry"
    assert "give the key 'command' more than once" in upstream.requests[1].json()["messages"][-1]["content"]


def test_a_deny_rule_refuses_tool_arguments_giving_a_key_twice(make_proxy, upstream, write_policies):
    policy = (
        "tool_args: {enabled: false}\n"
        "permissions:\n"
        "  rules: [{id: no-rm, tool: run_shell, when: [{path: $.command, regex: rm}], action: deny}]\n"
    )
    proxy = make_proxy(policies_dir=str(write_policies(default=policy)))
    tools = [{"type": "function", "function": {"name": "run_shell", "parameters": {"type": "object"}}}]
    twice = Json(chat_completion(None, tool_calls=[tool_call("run_shell", '{"command": "rm -rf /", "command": "ls"}')]))
    upstream.script(twice, Json(chat_completion("I will not do that.")))

    response = post(proxy, {"tools": tools})

    assert response.json()["choices"][0]["message"]["content"] == "I will not do that."
    assert response.headers["x-loopwarden-interventions"] == "permission_denied"


def test_a_number_too_long_to_read_in_tool_arguments_goes_back_to_the_model(proxy, upstream):
    upstream.script(calling('{"code": 1' + "0" * 5000 + "}"), calling('{"code": "aa"}', "c2"))

    response = post(proxy, {"tools": lookup_tool("^a+$")})

    assert response.status_code == 200
    assert response.headers["x-loopwarden-interventions"] == "tool_args_retry"
    assert "not valid JSON" in upstream.requests[1].json()["messages"][-1]["content"]


def test_an_answer_with_a_number_too_long_to_read_is_retried(proxy, upstream):
    response_format = {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}}
    upstream.script(Json(chat_completion('{"n": 1' + "0" * 5000 + "}")), Json(chat_completion('{"n": 1}')))

    response = post(proxy, {"response_format": response_format})

    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == '{"n": 1}'

"""A client's schema never makes the proxy fetch anything, nor hold the event loop with references.

jsonschema, left to its defaults, resolves a ``$ref`` to an unknown URI by downloading it
(urllib, no timeout, on the thread that validates): a tool schema could make the proxy
request any address it reaches (cloud metadata, internal services) and wait on it forever.
A reference that resolves nowhere is a schema that does not compile, not a 500; and
references that fan out (``a`` refers twice to ``b``, ``b`` twice to ``c``…) cost a
validation at most its time budget.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.fake_upstream import FakeUpstream, Json, chat_completion, tool_call
from tests.support.timed import while_probing_health

TASK = [{"role": "user", "content": "Run it."}]


@pytest.fixture
def bait():
    """A server the proxy has no reason to call: every request it records is a forged one."""
    server = FakeUpstream().start()
    server.script(Json({"type": "string"}))
    yield server
    server.stop()


def post(proxy, body: dict, session: str = "refs") -> httpx.Response:
    return httpx.post(
        f"{proxy.base_url}/chat/completions",
        json={"model": "m", "messages": TASK, **body},
        headers={"Authorization": "Bearer sk-p", "X-Session-Id": session},
        timeout=30,
    )


def run_tool(parameters: dict) -> list[dict]:
    return [{"type": "function", "function": {"name": "run", "parameters": parameters}}]


def answer_format(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}


def remote_refs(bait: FakeUpstream) -> list[dict]:
    url = f"http://127.0.0.1:{bait.port}/latest/meta-data/schema.json"
    return [
        {"type": "object", "properties": {"command": {"$ref": url}}},
        {"type": "object", "$defs": {"c": {"$ref": url}}, "properties": {"command": {"$ref": "#/$defs/c"}}},
        {"$id": f"http://127.0.0.1:{bait.port}/base/", "properties": {"command": {"$ref": "other.json"}}},
        {"$schema": "http://json-schema.org/draft-07/schema#", "properties": {"command": {"$ref": url}}},
    ]


@pytest.mark.parametrize("case", range(4), ids=["absolute", "through-defs", "relative-to-id", "draft-07"])
def test_a_remote_ref_in_a_tool_schema_is_never_fetched(proxy, upstream, bait, case):
    schema = remote_refs(bait)[case]
    upstream.script(Json(chat_completion(None, tool_calls=[tool_call("run", json.dumps({"command": "ls"}))])))

    response = post(proxy, {"tools": run_tool(schema)})

    assert response.status_code == 200
    assert bait.requests == []


@pytest.mark.parametrize("case", range(4), ids=["absolute", "through-defs", "relative-to-id", "draft-07"])
def test_a_remote_ref_in_a_response_format_is_a_400_and_never_fetched(proxy, upstream, bait, case):
    schema = remote_refs(bait)[case]

    response = post(proxy, {"response_format": answer_format(schema)})

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "response_format.json_schema.schema"
    assert "cannot be resolved" in error["message"]
    assert bait.requests == []
    assert upstream.requests == []


def test_a_tool_schema_with_a_ref_to_nowhere_leaves_its_calls_unchecked(proxy, upstream):
    schema = {"type": "object", "properties": {"command": {"$ref": "#/$defs/missing"}}}
    upstream.script(Json(chat_completion(None, tool_calls=[tool_call("run", json.dumps({"command": "ls"}))])))

    response = post(proxy, {"tools": run_tool(schema)})

    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "run"
    assert len(upstream.requests) == 1


def test_a_response_format_with_a_ref_to_nowhere_is_a_400_naming_it(proxy, upstream):
    schema = {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}

    response = post(proxy, {"response_format": answer_format(schema)})

    assert response.status_code == 400
    assert "'#/nowhere' cannot be resolved" in response.json()["error"]["message"]
    assert upstream.requests == []


def fanning_out(levels: int) -> dict:
    """1.5 KB of schema whose references unfold into 2**levels checks of one value."""
    defs = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2} for i in range(levels)}
    defs[f"d{levels}"] = {"type": "string"}
    return {"type": "object", "properties": {"command": {"$ref": "#/$defs/d0"}}, "$defs": defs}


def test_references_that_fan_out_cost_the_model_a_retry_and_never_hold_the_event_loop(proxy, upstream):
    upstream.script(
        Json(chat_completion(None, tool_calls=[tool_call("run", json.dumps({"command": "ls"}))])),
        Json(chat_completion("I give up.")),
    )
    answered, watch, health_latencies = while_probing_health(
        f"{proxy.url}/healthz", lambda: post(proxy, {"tools": run_tool(fanning_out(40))})
    )

    assert watch.elapsed < 1.0 + watch.scaled(2.0)  # 2**40 checks: days, before (the check stops at 1 s)
    assert max(health_latencies) < watch.scaled(0.5)
    assert answered.headers["x-loopwarden-interventions"] == "tool_args_retry"
    assert "could not be checked" in upstream.requests[1].json()["messages"][-1]["content"]

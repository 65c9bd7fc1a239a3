"""Bad input and faults on the Responses and Messages routes: each has its defined status, in
the error shape of the API the route answers (OpenAI's on /v1/responses, Anthropic's on
/v1/messages), and hostile bodies never get a 5xx from the proxy."""

from __future__ import annotations

import json

import httpx
import pytest

from proxy.edge.tenants import hash_key
from tests.support.fake_upstream import Json
from tests.support.processes import free_port

PROXY_KEY = "lw-tenant-" + "3" * 24
ROUTES = {
    "responses": ("/responses", {"model": "m", "input": "hi"}),
    "messages": ("/messages", {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]}),
}
REPLIES = {
    "responses": {"id": "resp_1", "object": "response", "status": "completed", "output": []},
    "messages": {"id": "msg_1", "type": "message", "role": "assistant", "content": [{"type": "text", "text": "ok"}]},
}


def assert_shape(route: str, response: httpx.Response, status: int) -> None:
    assert response.status_code == status, response.text[:300]
    body = response.json()
    if route == "messages":
        assert body["type"] == "error"
        assert set(body["error"]) == {"type", "message"}
    else:
        assert set(body["error"]) == {"message", "type", "param", "code"}


def post(proxy, route: str, content: bytes, **headers: str) -> httpx.Response:
    path, _ = ROUTES[route]
    sent = {"Authorization": "Bearer sk-p", "Content-Type": "application/json", **headers}
    return httpx.post(f"{proxy.base_url}{path}", content=content, headers=sent, timeout=30)


def body_of(route: str, **fields: object) -> bytes:
    return json.dumps({**ROUTES[route][1], **fields}).encode()


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(
    ("content", "status"),
    [(b"{", 400), (b"", 400), (b"[1]", 400), (b"[" * 100_000 + b"]" * 100_000, 400)],
    ids=["truncated", "empty", "not-an-object", "deep"],
)
def test_a_malformed_body_is_a_400_in_the_routes_shape(proxy, upstream, route, content, status):
    assert_shape(route, post(proxy, route, content), status)
    assert upstream.requests == []


@pytest.mark.parametrize("route", ROUTES)
def test_an_oversized_body_is_a_413_in_the_routes_shape(make_proxy, upstream, route):
    proxy = make_proxy(max_body_bytes=1000)

    assert_shape(route, post(proxy, route, body_of(route, pad="x" * 2000)), 413)


@pytest.mark.parametrize("route", ROUTES)
def test_an_unknown_key_is_a_401_in_the_routes_shape(make_proxy, upstream, route, tmp_path, monkeypatch):
    monkeypatch.setenv("PROVIDER_KEY", "sk-provider-" + "1" * 20)
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(
        f"tenants:\n  - name: acme\n    key_sha256: ['{hash_key(PROXY_KEY)}']\n"
        "    upstream: {api_key_env: PROVIDER_KEY}\n"
    )
    proxy = make_proxy(tenants_file=str(tenants))

    for headers in ({"Authorization": "Bearer lw-unknown"}, {"Authorization": "", "x-api-key": "lw-unknown"}):
        assert_shape(route, post(proxy, route, body_of(route), **headers), 401)
    assert upstream.requests == []


@pytest.mark.parametrize("route", ROUTES)
def test_an_unreachable_upstream_is_a_502_in_the_routes_shape(make_proxy, route):
    proxy = make_proxy(upstream=f"http://127.0.0.1:{free_port()}/v1", retry_attempts=1)

    assert_shape(route, post(proxy, route, body_of(route)), 502)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(("mode", "status"), [("closed", 503), ("open", 200)])
def test_a_redis_outage_follows_the_policys_fail_mode(
    make_proxy, upstream, private_redis, write_policies, route, mode, status
):
    upstream.script(Json(REPLIES[route]))
    policies = write_policies(default=f"state_fail_mode: {mode}\n")
    proxy = make_proxy(redis_url=private_redis.url, redis_timeout=0.3, policies_dir=str(policies))
    private_redis.stop()

    response = post(proxy, route, body_of(route), **{"X-Session-Id": "s"})

    if status == 200:
        assert response.status_code == 200, response.text[:300]
    else:
        assert_shape(route, response, status)


HOSTILE = {
    "responses": [
        {"input": 5},
        {"input": {"a": 1}},
        {"input": [None, 5, "x", [], {"type": "zzz"}, {"type": "item_reference"}, {"type": "item_reference", "id": 5}]},
        {"input": [{"type": "message", "role": 5, "content": [5, {"text": 5}]}, {"type": "function_call"}]},
        {"input": [{"type": "function_call_output", "call_id": {"x": 1}, "output": [None]}]},
        {"input": "x", "previous_response_id": "resp_lw}{:" * 500, "tools": [{"type": "namespace", "name": 5}]},
        {"input": "x", "tools": "x", "text": {"format": {"type": "json_schema", "schema": 5}}, "stream": "yes"},
        {"input": [{"type": "reasoning", "summary": 5, "content": {"x": 1}}], "prompt_cache_key": ["x"]},
    ],
    "messages": [
        {"messages": 5},
        {"messages": [None, 5, "x", {"role": 5}, {"role": "user", "content": {"x": 1}}]},
        {
            "messages": [
                {"role": "user", "content": [5, {"type": "tool_result"}, {"type": "tool_result", "content": 5}]}
            ]
        },
        {"messages": [{"role": "assistant", "content": [{"type": "tool_use", "input": "x", "id": 5}]}]},
        {"system": [5, {"text": 5}], "metadata": {"user_id": "{" * 50_000}, "tools": [None, {"name": 5}]},
        {"metadata": {"user_id": "[" * 100_000 + "]" * 100_000}, "stream": "yes", "thinking": 5},
    ],
}


@pytest.mark.parametrize(("route", "fields"), [(route, fields) for route, cases in HOSTILE.items() for fields in cases])
def test_hostile_bodies_never_get_a_5xx(proxy, upstream, route, fields):
    upstream.script(*[Json(REPLIES[route]) for _ in range(5)])

    response = post(proxy, route, body_of(route, **fields))

    assert response.status_code < 500, response.text[:300]
    if response.status_code >= 400:
        assert_shape(route, response, response.status_code)

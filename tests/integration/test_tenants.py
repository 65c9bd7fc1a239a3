"""Tenants authenticate with proxy keys; the upstream only ever sees provider keys."""

from __future__ import annotations

import httpx
import openai
import pytest

from proxy.edge.tenants import hash_key
from proxy.observe.logs import JsonFormatter
from tests.support.assertions import assert_openai_error
from tests.support.fake_upstream import Json, Sse, chat_completion, stream_chunks

ACME_KEY = "lw-acme-7f3a9c"
BYOK_KEY = "lw-byok-51d2e0"
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture
def tenant_proxy(make_proxy, upstream, tmp_path, monkeypatch):
    monkeypatch.setenv("ACME_PROVIDER_KEY", "sk-acme-provider")
    path = tmp_path / "tenants.yaml"
    path.write_text(
        f"""
tenants:
  - name: acme
    key_sha256: ["{hash_key(ACME_KEY)}"]
    upstream: {{base_url: "{upstream.url}", api_key_env: ACME_PROVIDER_KEY}}
    policies: [default, strict]
  - name: byok
    key_sha256: ["{hash_key(BYOK_KEY)}"]
    upstream: {{forward_client_key: true}}
"""
    )
    return make_proxy(tenants_file=str(path))


def _everything_upstream_saw(upstream) -> str:
    return "\n".join(f"{r.headers!r} {r.body!r} {r.query}" for r in upstream.requests)


@pytest.mark.parametrize("stream", [False, True])
def test_tenant_key_is_replaced_by_the_provider_key(tenant_proxy, upstream, stream):
    upstream.script(Sse(stream_chunks("ok")) if stream else Json(chat_completion()))
    client = openai.OpenAI(base_url=tenant_proxy.base_url, api_key=ACME_KEY)

    result = client.chat.completions.create(model="m", messages=MESSAGES, stream=stream)
    if stream:
        list(result)

    assert upstream.requests[0].header_values("authorization") == ["Bearer sk-acme-provider"]
    assert ACME_KEY not in _everything_upstream_saw(upstream)


def test_bring_your_own_key_forwards_the_client_key(tenant_proxy, upstream):
    client = openai.OpenAI(
        base_url=tenant_proxy.base_url, api_key="sk-client-own", default_headers={"X-LoopWarden-Key": BYOK_KEY}
    )

    client.chat.completions.create(model="m", messages=MESSAGES)

    assert upstream.requests[0].header_values("authorization") == ["Bearer sk-client-own"]
    assert BYOK_KEY not in _everything_upstream_saw(upstream)


def test_bring_your_own_key_without_proxy_key_header_is_401(tenant_proxy, upstream):
    response = httpx.post(
        f"{tenant_proxy.base_url}/chat/completions",
        json={"model": "m", "messages": MESSAGES},
        headers={"Authorization": f"Bearer {BYOK_KEY}"},
    )

    error = assert_openai_error(response, 401, "invalid_api_key")
    assert "X-LoopWarden-Key".lower() in error["message"].lower()
    assert upstream.requests == []


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer lw-wrong-key"},
        {"Authorization": "Basic " + ACME_KEY},
        {"Authorization": "Bearer"},
        {"X-LoopWarden-Key": "lw-nope"},
    ],
    ids=["missing", "unknown", "wrong-scheme", "empty", "unknown-in-key-header"],
)
def test_missing_or_unknown_key_gets_one_uniform_401(tenant_proxy, upstream, headers):
    response = httpx.post(
        f"{tenant_proxy.base_url}/chat/completions", json={"model": "m", "messages": MESSAGES}, headers=headers
    )

    error = assert_openai_error(response, 401, "invalid_api_key")
    assert error["message"] == "Invalid or missing API key for this proxy."
    assert upstream.requests == []


def test_passthrough_routes_require_a_tenant_key_too(tenant_proxy, upstream):
    denied = httpx.get(f"{tenant_proxy.base_url}/models")
    allowed = httpx.get(f"{tenant_proxy.base_url}/models", headers={"Authorization": f"Bearer {ACME_KEY}"})

    assert_openai_error(denied, 401)
    assert allowed.status_code == 200
    assert upstream.requests[0].header_values("authorization") == ["Bearer sk-acme-provider"]


def test_proxy_key_never_appears_in_the_log(tenant_proxy, upstream, log_records):
    client = openai.OpenAI(base_url=tenant_proxy.base_url, api_key=ACME_KEY)
    client.chat.completions.create(model="m", messages=MESSAGES)
    httpx.post(f"{tenant_proxy.base_url}/chat/completions", json={}, headers={"Authorization": "Bearer lw-bad"})

    logged = "\n".join(JsonFormatter().format(record) for record in log_records)

    assert '"tenant":"acme"' in logged
    assert ACME_KEY not in logged
    assert "lw-bad" not in logged
    assert "sk-acme-provider" not in logged


def test_deleting_another_tenants_session_is_404(tenant_proxy, upstream):
    upstream.script(Json(chat_completion()))
    acme = openai.OpenAI(base_url=tenant_proxy.base_url, api_key=ACME_KEY, default_headers={"X-Session-Id": "s1"})
    acme.chat.completions.create(model="m", messages=MESSAGES)

    response = httpx.delete(
        f"{tenant_proxy.base_url}/loopwarden/sessions/s1",
        headers={"Authorization": "Bearer sk-byok-provider", "X-LoopWarden-Key": BYOK_KEY},
    )

    assert_openai_error(response, 404, "not_found")


def test_deleting_a_session_that_does_not_exist_is_404(tenant_proxy):
    response = httpx.delete(
        f"{tenant_proxy.base_url}/loopwarden/sessions/never-seen", headers={"Authorization": f"Bearer {ACME_KEY}"}
    )

    assert_openai_error(response, 404, "not_found")


def test_without_tenants_file_every_policy_of_the_directory_can_be_chosen(make_proxy, upstream, write_policies):
    proxy = make_proxy(policies_dir=str(write_policies(default="mode: enforce\n", candidate="mode: shadow\n")))
    upstream.script(Json(chat_completion()))

    reply = httpx.post(
        f"{proxy.base_url}/chat/completions",
        json={"model": "m", "messages": MESSAGES},
        headers={"Authorization": "Bearer sk-p", "X-LoopWarden-Policy": "candidate"},
    )

    assert reply.status_code == 200, reply.text
    assert reply.headers["x-loopwarden-policy"] == "candidate"


def test_without_tenants_file_a_policy_that_does_not_exist_is_403(proxy, upstream):
    reply = httpx.post(
        f"{proxy.base_url}/chat/completions",
        json={"model": "m", "messages": MESSAGES},
        headers={"Authorization": "Bearer sk-p", "X-LoopWarden-Policy": "nonexistent"},
    )

    assert_openai_error(reply, 403, "permission_denied")
    assert upstream.requests == []


def test_a_non_ascii_policy_name_comes_back_intact_in_the_403(tenant_proxy, upstream):
    reply = httpx.post(
        f"{tenant_proxy.base_url}/chat/completions",
        json={"model": "m", "messages": MESSAGES},
        headers={"Authorization": f"Bearer {ACME_KEY}", "X-LoopWarden-Policy": "stríct".encode()},
    )

    error = assert_openai_error(reply, 403, "permission_denied")
    assert "stríct" in error["message"]

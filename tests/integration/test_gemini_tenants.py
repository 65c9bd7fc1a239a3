"""Gemini callers of a tenants file: a bring-your-own-key tenant's caller sends the proxy key
in ``X-LoopWarden-Key`` and the provider key in ``x-goog-api-key`` (or ``?key=``); only the
provider key goes upstream, in the header. A tenant with its own stored key sends that key."""

from __future__ import annotations

import httpx
import pytest
from google import genai
from google.genai import errors, types

from proxy.edge.tenants import hash_key
from tests.support.turns import Turn

MODEL = "gemini-fake"
BYOK_KEY = "lw-gemini-byok-6c1e"
KEYED_KEY = "lw-gemini-keyed-93ab"
PROVIDER = "gk-caller-own-provider-7755"
STORED = "gk-tenant-stored-provider-1234"
BODY = {"contents": [{"role": "user", "parts": [{"text": "Weather?"}]}]}


@pytest.fixture
def gemini_tenants(make_proxy, gemini_upstream, tmp_path, monkeypatch):
    monkeypatch.setenv("GEMINI_STORED_KEY", STORED)
    path = tmp_path / "tenants.yaml"
    path.write_text(
        f"""
tenants:
  - name: byok
    key_sha256: ["{hash_key(BYOK_KEY)}"]
    upstream: {{base_url: "{gemini_upstream.url}", forward_client_key: true}}
  - name: keyed
    key_sha256: ["{hash_key(KEYED_KEY)}"]
    upstream: {{base_url: "{gemini_upstream.url}", api_key_env: GEMINI_STORED_KEY}}
"""
    )
    return make_proxy(upstream=gemini_upstream.url, tenants_file=str(path))


def _seen(upstream) -> str:
    return "\n".join(f"{r.headers!r} {r.body!r} {r.query}" for r in upstream.requests)


def _byok_client(proxy) -> genai.Client:
    options = types.HttpOptions(base_url=proxy.url, headers={"X-LoopWarden-Key": BYOK_KEY})
    return genai.Client(api_key=PROVIDER, http_options=options)


def test_a_byok_callers_provider_key_goes_upstream_in_the_header(gemini_tenants, gemini_upstream):
    gemini_upstream.script(Turn("Sunny."))

    client = _byok_client(gemini_tenants)

    reply = client.models.generate_content(model=MODEL, contents="Weather?")

    assert reply.text == "Sunny."
    assert gemini_upstream.requests[0].header("x-goog-api-key") == PROVIDER
    assert BYOK_KEY not in _seen(gemini_upstream)


def test_a_byok_callers_stream_sends_the_provider_key_and_never_the_proxy_key(gemini_tenants, gemini_upstream):
    gemini_upstream.script(Turn("Sunny all day."))

    client = _byok_client(gemini_tenants)

    chunks = client.models.generate_content_stream(model=MODEL, contents="Weather?")

    assert "".join(chunk.text or "" for chunk in chunks) == "Sunny all day."
    assert gemini_upstream.requests[0].header("x-goog-api-key") == PROVIDER
    assert BYOK_KEY not in _seen(gemini_upstream)


def test_a_byok_key_in_the_query_string_goes_upstream_in_the_header(gemini_tenants, gemini_upstream):
    gemini_upstream.script(Turn("Sunny."))
    url = f"{gemini_tenants.url}/v1beta/models/{MODEL}:generateContent?key={PROVIDER}"

    reply = httpx.post(url, json=BODY, headers={"X-LoopWarden-Key": BYOK_KEY})

    assert reply.status_code == 200
    sent = gemini_upstream.requests[0]
    assert sent.header("x-goog-api-key") == PROVIDER
    assert PROVIDER not in sent.query
    assert BYOK_KEY not in _seen(gemini_upstream)


def test_the_byok_provider_key_reaches_no_log_metric_or_timeline(gemini_tenants, gemini_upstream, log_records):
    gemini_upstream.script(Turn("Sunny."))
    headers = {"X-LoopWarden-Key": BYOK_KEY, "X-Session-Id": "byok-keyed"}
    url = f"{gemini_tenants.url}/v1beta/models/{MODEL}:streamGenerateContent?alt=sse&key={PROVIDER}"

    reply = httpx.post(url, json=BODY, headers=headers)
    timeline = httpx.get(
        f"{gemini_tenants.base_url}/loopwarden/sessions/byok-keyed/events",
        headers={"X-LoopWarden-Key": BYOK_KEY, "x-goog-api-key": PROVIDER},
    )
    metrics = httpx.get(f"{gemini_tenants.metrics_url}/metrics")

    assert reply.status_code == 200
    assert timeline.status_code == 200
    logged = [f"{r.getMessage()} {getattr(r, 'fields', {})}" for r in log_records]
    for text in (*logged, timeline.text, metrics.text, reply.text):
        assert PROVIDER not in text
        assert BYOK_KEY not in text


def test_a_tenant_with_a_stored_key_sends_that_key_not_the_callers(gemini_tenants, gemini_upstream):
    gemini_upstream.script(Turn("Sunny."))
    client = genai.Client(api_key=KEYED_KEY, http_options=types.HttpOptions(base_url=gemini_tenants.url))

    reply = client.models.generate_content(model=MODEL, contents="Hi")

    assert reply.text == "Sunny."
    assert gemini_upstream.requests[0].header_values("x-goog-api-key") == [STORED]
    assert KEYED_KEY not in _seen(gemini_upstream)


def test_a_callers_query_key_is_not_forwarded_for_a_tenant_with_a_stored_key(gemini_tenants, gemini_upstream):
    gemini_upstream.script(Turn("Sunny."))
    url = f"{gemini_tenants.url}/v1beta/models/{MODEL}:generateContent?key={PROVIDER}"

    reply = httpx.post(url, json=BODY, headers={"X-LoopWarden-Key": KEYED_KEY})

    assert reply.status_code == 200
    assert gemini_upstream.requests[0].header_values("x-goog-api-key") == [STORED]
    assert PROVIDER not in _seen(gemini_upstream)


def test_an_unknown_proxy_key_is_a_401_in_googles_shape(gemini_tenants, gemini_upstream):
    client = genai.Client(api_key="lw-nobody", http_options=types.HttpOptions(base_url=gemini_tenants.url))

    with pytest.raises(errors.ClientError) as raised:
        client.models.generate_content(model=MODEL, contents="Hi")

    assert raised.value.code == 401
    assert raised.value.status == "UNAUTHENTICATED"
    assert gemini_upstream.requests == []

"""A proxy key sent in a provider-key header (``x-api-key``, ``api-key``, ``x-goog-api-key``)
authenticates the caller and never travels on: only the tenant's provider key goes upstream,
on every route, whichever of those headers the caller used."""

from __future__ import annotations

import httpx
import pytest

from proxy.edge.tenants import hash_key

PROVIDER_KEY = "sk-provider-" + "4" * 32
PROXY_KEY = "lw-tenant-" + "8" * 24
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def tenant_proxy(make_proxy, tmp_path, monkeypatch):
    monkeypatch.setenv("PROVIDER_KEY", PROVIDER_KEY)
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(
        f"tenants:\n  - name: acme\n    key_sha256: ['{hash_key(PROXY_KEY)}']\n"
        "    upstream: {api_key_env: PROVIDER_KEY}\n"
    )
    return make_proxy(tenants_file=str(tenants))


@pytest.mark.parametrize("name", ["x-api-key", "api-key", "x-goog-api-key"])
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [("POST", "/chat/completions", CHAT), ("GET", "/models", None), ("POST", "/messages", {**CHAT, "max_tokens": 5})],
    ids=["chat", "passthrough", "messages"],
)
def test_a_proxy_key_in_a_provider_key_header_never_reaches_the_upstream(
    tenant_proxy, upstream, name, method, path, body
):
    httpx.request(method, f"{tenant_proxy.base_url}{path}", json=body, headers={name: PROXY_KEY})

    sent = upstream.requests[-1]
    assert not any(PROXY_KEY in value for _, value in sent.headers)
    assert PROVIDER_KEY in " ".join(value for _, value in sent.headers)

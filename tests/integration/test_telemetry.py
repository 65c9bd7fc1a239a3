"""Claude Code's telemetry (POST /api/event_logging/batch) goes to the upstream's host only where
the tenant allows it, never with the tenant's provider key; elsewhere the proxy answers it."""

from __future__ import annotations

import httpx
import pytest

from proxy.edge.tenants import hash_key

TELEMETRY = "/api/event_logging/batch"
TELEMETRY_V2 = "/api/event_logging/v2/batch"
BODY = b'{"events":[{"event_type":"ClaudeCodeInternalEvent","event_data":{}}]}'
PROVIDER_KEY = "sk-ant-tenant-provider-key"


def tenants(tmp_path, upstream_root: str, *entries: tuple[str, str, str]) -> str:
    """A tenants file; each entry is (name, base path below the fake's root, extra YAML keys)."""
    lines = ["tenants:"]
    for name, base, extra in entries:
        lines += [
            f"  - name: {name}",
            f'    key_sha256: ["{hash_key("lw-" + name)}"]',
            f'    upstream: {{base_url: "{upstream_root}{base}", api_key_env: TENANT_PROVIDER_KEY}}',
            *(f"    {line}" for line in extra.splitlines() if line),
        ]
    path = tmp_path / "tenants.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture
def gateway(make_proxy, anthropic_upstream, tmp_path, monkeypatch):
    """Tenants of one Anthropic-style host: ``alpha`` at its own /v1, ``delta`` below a shared
    gateway's path, ``opted`` there too but forwarding, ``silent`` at /v1 but keeping it back."""
    monkeypatch.setenv("TENANT_PROVIDER_KEY", PROVIDER_KEY)
    root = anthropic_upstream.url.removesuffix("/v1")
    path = tenants(
        tmp_path,
        root,
        ("alpha", "/v1", ""),
        ("delta", "/tenants/delta/v1", ""),
        ("opted", "/tenants/opted/v1", "forward_telemetry: true"),
        ("silent", "/v1", "forward_telemetry: false"),
    )
    return make_proxy(tenants_file=path)


def post_telemetry(proxy, tenant: str, path: str = TELEMETRY) -> httpx.Response:
    headers = {"x-api-key": f"lw-{tenant}", "content-type": "application/json", "x-service-name": "claude-code"}
    return httpx.post(f"{proxy.url}{path}", content=BODY, headers=headers)


def kept_count(proxy, tenant: str) -> float:
    metrics = httpx.get(f"{proxy.metrics_url}/metrics").text
    line = f'loopwarden_telemetry_answered_locally_total{{tenant="{tenant}"}} '
    return next((float(row.split()[-1]) for row in metrics.splitlines() if row.startswith(line)), 0.0)


@pytest.mark.parametrize("tenant", ["delta", "silent"])
def test_telemetry_the_tenant_does_not_allow_is_answered_here_with_a_success_and_counted(
    gateway, anthropic_upstream, tenant
):
    reply = post_telemetry(gateway, tenant)

    assert (reply.status_code, reply.json()) == (200, {})
    assert anthropic_upstream.requests == []
    assert kept_count(gateway, tenant) == 1


@pytest.mark.parametrize("tenant", ["alpha", "opted"])
def test_telemetry_the_tenant_allows_goes_to_the_hosts_one_path_without_any_key(gateway, anthropic_upstream, tenant):
    reply = post_telemetry(gateway, tenant)

    assert reply.status_code == 200
    [sent] = anthropic_upstream.requests
    assert (sent.path, sent.body, sent.header("x-service-name")) == (TELEMETRY, BODY, "claude-code")
    seen = " ".join(f"{name}: {value}" for name, value in sent.headers)
    assert PROVIDER_KEY not in seen  # the endpoint needs no provider key: the tenant's is never sent
    assert f"lw-{tenant}" not in seen  # nor the proxy key the client authenticated with
    assert sent.header("x-api-key") is None
    assert sent.header("authorization") is None


def test_without_a_tenants_file_the_setting_off_keeps_telemetry_at_the_apis_own_v1(make_proxy, anthropic_upstream):
    proxy = make_proxy(upstream=anthropic_upstream.url, forward_telemetry="off")

    reply = httpx.post(f"{proxy.url}{TELEMETRY}", content=BODY, headers={"x-api-key": "sk-ant-client"})

    assert reply.status_code == 200
    assert anthropic_upstream.requests == []
    assert kept_count(proxy, "default") == 1


def test_the_v2_telemetry_path_goes_where_the_tenant_allows_to_the_same_path(gateway, anthropic_upstream):
    reply = post_telemetry(gateway, "alpha", TELEMETRY_V2)

    assert reply.status_code == 200
    [sent] = anthropic_upstream.requests
    assert (sent.path, sent.body, sent.header("x-api-key")) == (TELEMETRY_V2, BODY, None)


def test_the_v2_telemetry_path_is_answered_here_where_the_tenant_does_not_allow_it(gateway, anthropic_upstream):
    reply = post_telemetry(gateway, "delta", TELEMETRY_V2)

    assert (reply.status_code, reply.json()) == (200, {})
    assert anthropic_upstream.requests == []
    assert kept_count(gateway, "delta") == 1

"""The pass-through at unit level: which format a call belongs to, where the provider key goes,
what the caller's headers keep back, and where Claude Code's telemetry may go. Forwarding over
real HTTP is in tests/integration/test_passthrough*.py."""

from __future__ import annotations

import dataclasses

import httpx
import pytest

from proxy.books.pricing import PriceTable
from proxy.books.tenant_day import TenantDay
from proxy.edge.passthrough import Passthrough, passthrough_wire, telemetry_headers, upstream_headers
from proxy.edge.tenants import Credentials, Tenant
from proxy.observe.metrics import Metrics
from proxy.policy.models import Policy
from proxy.session.memory import MemoryStore
from proxy.settings import Settings
from proxy.upstream.client import UpstreamClient
from proxy.wire.messages.format import MESSAGES
from proxy.wire.responses.format import RESPONSES

CALLER = [(b"authorization", b"Bearer lw-proxy-key"), (b"x-api-key", b"lw-proxy-key"), (b"x-trace", b"t1")]


def scope(path: str, headers: list[tuple[bytes, bytes]] | None = None) -> dict:
    return {"type": "http", "raw_path": path.encode(), "headers": CALLER if headers is None else headers}


def credentials(provider_key: str | None, **tenant: object) -> Credentials:
    """A caller of tenant ``team``; ``provider_key``: the tenant's own (None: the caller's is forwarded)."""
    authorization = provider_key or "Bearer lw-proxy-key"
    owner = Tenant("team", "https://api.example.com/v1", provider_key, provider_key is None, ("default",), "default")
    return Credentials(dataclasses.replace(owner, **tenant), authorization, "team")


def passthrough(forward_telemetry: str = "auto") -> Passthrough:
    settings = Settings(upstream="https://api.example.com/v1", forward_telemetry=forward_telemetry)
    upstream = UpstreamClient(settings, httpx.MockTransport(lambda request: httpx.Response(200)))
    return Passthrough(
        settings,
        upstream,
        TenantDay(MemoryStore(), Metrics(), PriceTable({})),
        Metrics(),
        lambda tenant: Policy(),
        answer=None,  # type: ignore[arg-type]  # never asked: no reply is copied here
        own_headers=lambda reply: [],
        clock=lambda: 0.0,
    )


@pytest.mark.parametrize(
    ("path", "headers", "wire"),
    [
        ("/v1/messages/count_tokens", [], MESSAGES),
        ("/v1/responses/resp_1/input_items", [], RESPONSES),
        ("/v1/models", [(b"anthropic-version", b"2023-06-01")], MESSAGES),
        ("/v1/models", [], None),
        ("/v1/embeddings", [], None),
    ],
)
def test_a_call_belongs_to_the_format_whose_route_it_extends_or_that_its_client_speaks(path, headers, wire):
    assert passthrough_wire(scope(path, headers)) is wire


def test_the_tenants_key_goes_in_the_formats_own_header_and_no_proxy_key_goes_along():
    sent = upstream_headers(scope("/v1/messages/count_tokens"), credentials("Bearer sk-ant"), MESSAGES)

    assert ("x-api-key", "sk-ant") in sent
    assert not any(value == "lw-proxy-key" or value.endswith(" lw-proxy-key") for _, value in sent)
    assert ("x-trace", "t1") in sent


def test_a_key_the_client_brought_goes_as_the_client_sent_it():
    sent = upstream_headers(scope("/v1/messages/count_tokens"), credentials(None), MESSAGES)

    assert ("authorization", "Bearer lw-proxy-key") in sent
    assert ("x-api-key", "lw-proxy-key") in sent


def test_an_openai_call_carries_the_tenants_key_in_authorization():
    sent = upstream_headers(scope("/v1/embeddings"), credentials("Bearer sk-oa"), None)

    assert [value for name, value in sent if name == "authorization"] == ["Bearer sk-oa"]
    assert all(name != "x-api-key" for name, _ in sent)


def test_telemetry_never_carries_the_tenants_key_nor_the_callers_proxy_key():
    sent = telemetry_headers(scope("/api/event_logging/batch"), credentials("Bearer sk-ant"))

    assert sent == [("x-trace", "t1")]


def test_telemetry_of_a_caller_with_its_own_key_goes_with_its_headers():
    sent = telemetry_headers(scope("/api/event_logging/batch"), credentials(None))

    assert ("x-api-key", "lw-proxy-key") in sent


@pytest.mark.parametrize(
    ("setting", "upstream_url", "tenant_flag", "forwards"),
    [
        ("auto", "https://api.example.com/v1", None, True),
        ("auto", "https://gateway.example.com/tenants/delta/v1", None, False),
        ("on", "https://gateway.example.com/tenants/delta/v1", None, True),
        ("off", "https://api.example.com/v1", None, False),
        ("off", "https://api.example.com/v1", True, True),
        ("on", "https://api.example.com/v1", False, False),
    ],
)
def test_telemetry_goes_upstream_where_the_tenant_or_else_the_setting_allows(
    setting, upstream_url, tenant_flag, forwards
):
    tenant = credentials("Bearer sk", upstream_url=upstream_url, forward_telemetry=tenant_flag).tenant

    assert passthrough(setting).forwards_telemetry(tenant) is forwards

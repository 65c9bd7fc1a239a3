"""Keys on Messages routes: where the provider key goes upstream, and x-api-key as a proxy key."""

from __future__ import annotations

from proxy.edge.http import upstream_request_headers
from proxy.edge.tenants import Tenant, TenantDirectory, hash_key
from proxy.wire.chat.format import CHAT_COMPLETIONS
from proxy.wire.messages.format import MESSAGES
from proxy.wire.registry import passthrough_format

CLIENT = [("x-api-key", "lw-proxy-key"), ("anthropic-version", "2023-06-01"), ("anthropic-beta", "a,b")]


def test_the_tenants_key_replaces_the_callers_x_api_key():
    headers = upstream_request_headers(CLIENT, "Bearer sk-ant-tenant", key_header="x-api-key")

    assert [v for k, v in headers if k == "x-api-key"] == ["sk-ant-tenant"]
    assert not any(k == "authorization" for k, _ in headers)
    assert ("anthropic-beta", "a,b") in headers


def test_without_a_key_header_the_key_goes_in_authorization_as_before():
    headers = upstream_request_headers([("authorization", "Bearer lw")], "Bearer sk-x")

    assert headers == [("authorization", "Bearer sk-x")]


def test_x_api_key_is_accepted_as_a_tenants_proxy_key():
    tenant = Tenant("team", "http://up", "Bearer sk", False, ("default",), "default")
    directory = TenantDirectory({hash_key("lw-team"): tenant})

    credentials = directory.authenticate(None, None, api_key="lw-team")

    assert credentials.tenant.name == "team"


def test_pass_through_calls_of_messages_clients_are_told_apart():
    def no_header(name: bytes) -> str | None:
        return None

    def anthropic_client(name: bytes) -> str | None:
        return "2023-06-01" if name == b"anthropic-version" else None

    assert passthrough_format("/v1/messages/count_tokens", no_header) is MESSAGES
    assert passthrough_format("/v1/models", anthropic_client) is MESSAGES
    assert passthrough_format("/v1/models", no_header) is None
    assert passthrough_format("/v1/chat/completions/abc", no_header) is CHAT_COMPLETIONS

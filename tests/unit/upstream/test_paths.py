"""passthrough_url: the tenant's base plus the path below /v1, never anything outside the base."""

from __future__ import annotations

import pytest

from proxy.errors import InvalidRequest
from proxy.upstream.paths import passthrough_route, passthrough_url, telemetry_url

AZURE = "https://example.openai.azure.com/openai/deployments/x"


@pytest.mark.parametrize(
    ("base", "raw_path", "query", "expected"),
    [
        (AZURE, b"/v1/models", b"", f"{AZURE}/models"),
        (AZURE, b"/v1", b"", AZURE),
        (AZURE, b"/v1/files/f-1/content", b"limit=2", f"{AZURE}/files/f-1/content?limit=2"),
        (AZURE, b"/v1/files/a%20b", b"", f"{AZURE}/files/a%20b"),
        ("http://up:8000", b"/v1/models", b"", "http://up:8000/models"),
        (AZURE, b"/v1/files/a%2520b", b"", f"{AZURE}/files/a%2520b"),
        (AZURE, b"/v1/files/a;b", b"", f"{AZURE}/files/a;b"),
        ("http://up:8000/v1", b"/v1/models", b"x=/../y", "http://up:8000/v1/models?x=/../y"),
    ],
)
def test_a_plain_path_joins_the_base(base, raw_path, query, expected):
    assert str(passthrough_url(base, raw_path, query)) == expected


@pytest.mark.parametrize(
    "raw_path",
    [
        b"/v1/..",
        b"/v1/../x",
        b"/v1/a/./b",
        b"/v1//a",
        b"/v1/a/",
        b"/v1/",
        b"/v1/%2e%2e/x",
        b"/v1/%2E./x",
        b"/v1/a%2f%2fb",
        b"/v1/a%2f..%2fb",
        b"/v1/a\\..\\b",
        b"/v1/a%5C..%5Cb",
        b"/v1%2f..",
        b"/v1x/models",
        b"/v1/..;/x",
        b"/v1/a/.;jsessionid=1/b",
        b"/v1/%252e%252e/x",
        b"/v1/a%252f%252e%252e%252fb",
    ],
)
def test_a_path_that_could_leave_the_base_is_refused(raw_path):
    with pytest.raises(InvalidRequest):
        passthrough_url(AZURE, raw_path, b"")


@pytest.mark.parametrize("raw_path", [b"/v1/a#frag", b"/v1/@evil.example/x", b"/v1/a?b=c"])
def test_the_joined_url_keeps_the_base_host_and_path(raw_path):
    url = passthrough_url(AZURE, raw_path, b"")

    assert url.host == "example.openai.azure.com"
    assert url.raw_path.startswith(b"/openai/deployments/x/")


@pytest.mark.parametrize(
    ("base", "query", "expected"),
    [
        ("https://api.anthropic.com/v1", b"", "https://api.anthropic.com/api/event_logging/batch"),
        ("https://gw.example:8443/anthropic/v1", b"", "https://gw.example:8443/api/event_logging/batch"),
        ("https://api.anthropic.com/v1", b"beta=true", "https://api.anthropic.com/api/event_logging/batch?beta=true"),
    ],
    ids=["anthropic", "below-a-base-path", "query-kept"],
)
def test_claude_codes_telemetry_goes_to_the_upstreams_host_at_its_one_path(base, query, expected):
    assert str(telemetry_url(base, query)) == expected


@pytest.mark.parametrize(
    ("raw_path", "label"),
    [
        (b"/v1/responses/resp_123", "passthrough:responses"),
        (b"/v1/responses/resp_123/input_items?limit=2", "passthrough:responses"),
        (b"/v1/messages/count_tokens", "passthrough:messages"),
        (b"/v1/models", "passthrough:models"),
        (b"/v1/a-path-a-client-made-up/1", "passthrough"),
        (b"/v2/models", "passthrough"),
        (b"/api/event_logging/batch", "passthrough:telemetry"),
    ],
    ids=["stored-response", "input-items", "count-tokens", "models", "unknown-family", "not-v1", "claude-telemetry"],
)
def test_pass_through_requests_are_counted_by_api_family_from_a_fixed_set(raw_path, label):
    assert passthrough_route(raw_path) == label

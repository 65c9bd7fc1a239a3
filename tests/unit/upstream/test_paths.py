"""passthrough_url: the tenant's base plus the path below /v1, never anything outside the base."""

from __future__ import annotations

import pytest

from proxy.errors import InvalidRequest
from proxy.upstream import paths
from proxy.upstream.paths import (
    is_api_root,
    is_telemetry,
    passthrough_family,
    passthrough_route,
    passthrough_url,
    spends,
    telemetry_url,
)

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


V1, V2 = b"/api/event_logging/batch", b"/api/event_logging/v2/batch"


@pytest.mark.parametrize(
    ("base", "path", "query", "expected"),
    [
        ("https://api.anthropic.com/v1", V1, b"", "https://api.anthropic.com/api/event_logging/batch"),
        ("https://gw.example:8443/anthropic/v1", V1, b"", "https://gw.example:8443/api/event_logging/batch"),
        (
            "https://api.anthropic.com/v1",
            V1,
            b"beta=true",
            "https://api.anthropic.com/api/event_logging/batch?beta=true",
        ),
        ("https://api.anthropic.com/v1", V2, b"", "https://api.anthropic.com/api/event_logging/v2/batch"),
    ],
    ids=["anthropic", "below-a-base-path", "query-kept", "the-v2-path"],
)
def test_claude_codes_telemetry_goes_to_the_upstreams_host_at_the_path_it_was_sent_to(base, path, query, expected):
    assert str(telemetry_url(base, path, query)) == expected


@pytest.mark.parametrize("path", [b"/api/event_logging/batch/more", b"/api/event_logging/v3/batch", b"/api/keys"])
def test_no_other_path_is_telemetry(path):
    assert not is_telemetry(path)
    with pytest.raises(ValueError, match="not a telemetry path"):
        telemetry_url("https://api.anthropic.com/v1", path, b"")


@pytest.mark.parametrize(
    ("raw_path", "route"),
    [
        (b"/v1/chat/completions;x", "/v1/chat/completions"),
        (b"/v1/responses;x", "/v1/responses"),
        (b"/v1/messages;beta=true", "/v1/messages"),
        (b"/v1/chat/completions%00", "/v1/chat/completions"),
        (b"/v1/chat/completions\x00", "/v1/chat/completions"),
        (b"/v1/Messages", "/v1/messages"),
        (b"/v1/CHAT/Completions", "/v1/chat/completions"),
        (b"/v1/chat/completions.json", "/v1/chat/completions"),
        (b"/v1/responses.json", "/v1/responses"),
        (b"/v1/chat/completions%3bx", "/v1/chat/completions"),
        (b"/v1/chat%2fcompletions", "/v1/chat/completions"),
        (b"/v1/%6Dessages", "/v1/messages"),
        (b"/v1/%ef%bd%8d%ef%bd%85ssages", "/v1/messages"),
        (b"/v1/Responses/resp_1", "/v1/responses"),
        (b"/v1/messages;x/batches", "/v1/messages"),
        (b"/v1/openai/deployments/gpt/chat/completions", "/v1/chat/completions"),
        (b"/v1/engines/x/responses", "/v1/responses"),
        (b"/v1/proxy/messages", "/v1/messages"),
    ],
    ids=lambda value: value.decode("latin-1") if isinstance(value, bytes) else None,
)
def test_another_spelling_of_a_guarded_route_is_refused_naming_the_path(raw_path, route):
    with pytest.raises(InvalidRequest) as refused:
        passthrough_url(AZURE, raw_path, b"")

    assert route in refused.value.message
    assert raw_path.split(b"\x00")[0].decode("latin-1") in refused.value.message


@pytest.mark.parametrize(
    "raw_path",
    [
        b"/v1/responses/resp_1",
        b"/v1/responses/resp_1/input_items",
        b"/v1/responses/compact",
        b"/v1/messages/batches",
        b"/v1/messages/count_tokens",
        b"/v1/chat/completions/chatcmpl-1",
        b"/v1/chat/completions/chatcmpl-1/messages",
        b"/v1/threads/thread_1/messages",
        b"/v1/files/messages.json",
    ],
)
def test_the_guarded_families_own_sub_resources_pass(raw_path):
    assert passthrough_url(AZURE, raw_path, b"").raw_path == AZURE.split(".com", 1)[1].encode() + raw_path[3:]


@pytest.mark.parametrize(
    ("method", "raw_path", "spending"),
    [
        ("POST", b"/v1/completions", True),
        ("POST", b"/v1/embeddings", True),
        ("POST", b"/v1/images/generations", True),
        ("POST", b"/v1/audio/transcriptions", True),
        ("POST", b"/v1/batches", True),
        ("POST", b"/v1/messages/batches", True),
        ("POST", b"/v1/responses/compact", True),
        ("POST", b"/v1/threads/thread_1/runs", True),
        ("POST", b"/v1/videos", True),
        ("POST", b"/v1/messages/count_tokens", False),
        ("POST", b"/v1/responses/input_tokens", False),
        ("POST", b"/v1/batches/batch_1/cancel", False),
        ("POST", b"/v1/files", False),
        ("POST", b"/v1/moderations", False),
        ("GET", b"/v1/batches/batch_1", False),
        ("DELETE", b"/v1/responses/resp_1", False),
    ],
)
def test_a_call_spends_when_it_is_a_post_outside_the_free_families_and_actions(method, raw_path, spending):
    assert spends(method, raw_path) is spending


@pytest.mark.parametrize(
    ("raw_path", "family"),
    [(b"/v1/embeddings", "embeddings"), (b"/v1/messages/batches?x=1", "messages"), (b"/v1/videos/v1", "other")],
)
def test_a_pass_through_path_belongs_to_the_family_of_its_first_segment(raw_path, family):
    assert passthrough_family(raw_path) == family


@pytest.mark.parametrize(
    ("base", "root"),
    [
        ("https://api.anthropic.com/v1", True),
        ("https://api.openai.com/v1/", True),
        ("https://gw.example/tenants/delta/v1", False),
        (AZURE, False),
        ("http://up:8000", False),
    ],
)
def test_telemetry_goes_by_default_only_where_the_base_is_the_apis_own_v1(base, root):
    assert is_api_root(base) is root


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


@pytest.mark.parametrize(
    "raw_path",
    [
        b"/v1/v1/chat/completions",
        b"/v1/v1/messages",
        b"/v1/v1/responses",
        b"/v1/v1/models",
        b"/v1/v1",
        b"/v1/V1/embeddings",
        b"/v1/v1;x/files",
        b"/v1/%76%31/files",
        b"/v1/%2576%2531/models",
    ],
)
def test_a_path_that_repeats_v1_is_refused_naming_the_base_url_to_set_and_logged(raw_path, log_records):
    from proxy.errors import RepeatedBasePath

    with pytest.raises(RepeatedBasePath) as refused:
        passthrough_url("https://api.openai.com/v1", raw_path, b"")

    assert refused.value.code == "base_url_repeats_v1"
    assert "repeats /v1: the client's base URL already ends in /v1" in refused.value.message
    assert "base_url='http://HOST:PORT/v1'" in refused.value.message
    assert "ANTHROPIC_BASE_URL=http://HOST:PORT)" in refused.value.message
    assert [r.getMessage() for r in log_records] == ["base_url_repeats_v1"]


@pytest.mark.parametrize("raw_path", [b"/v1/models/v1", b"/v1/files/v1/content", b"/v1/v10/models"])
def test_a_v1_later_in_the_path_is_no_repeated_base(raw_path):
    assert passthrough_url("https://api.openai.com/v1", raw_path, b"").path.endswith(raw_path[3:].decode())


def test_a_short_model_url_is_kept_checked():
    paths._kept_url_text.cache_clear()
    first = paths.checked_url_text("http://up.test/v1", b"/v1/chat/completions", b"api-version=1")
    again = paths.checked_url_text("http://up.test/v1", b"/v1/chat/completions", b"api-version=1")

    assert first == again == "http://up.test/v1/chat/completions?api-version=1"
    assert paths._kept_url_text.cache_info().hits == 1


def test_a_long_client_query_is_checked_but_never_kept():
    paths._kept_url_text.cache_clear()
    query = b"q=" + b"x" * paths.KEPT_URL_BYTES

    url = paths.checked_url_text("http://up.test/v1", b"/v1/chat/completions", query)

    assert url.endswith("x" * 100)
    assert paths._kept_url_text.cache_info().currsize == 0


def test_a_kept_url_is_still_refused_when_it_leaves_the_base():
    with pytest.raises(InvalidRequest):
        paths.checked_url_text("http://up.test/v1", b"/v1/../admin", b"")

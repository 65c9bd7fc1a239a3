"""No relayed upstream error carries a provider key: the tenant's, the client's own, the judge's.

Some providers and gateways quote the key they were sent in a 401. The tenant's key must
never reach its clients, and the judge's key never any client; the client's own key, in
single-tenant mode, is masked too (it costs nothing).
"""

from __future__ import annotations

import base64
import gzip
import json
import zlib

import httpx
import pytest

try:
    import zstandard
except ImportError:  # optional: httpx reads zstd bodies only when it is installed
    zstandard = None

from proxy.edge.tenants import hash_key
from tests.support.fake_responses import stream_events as responses_events
from tests.support.fake_responses import text_response
from tests.support.fake_upstream import Json, Sse, stream_chunks

PROVIDER_KEY = "sk-provider-" + "7" * 32
JUDGE_KEY = "sk-judge-" + "5" * 32
PROXY_KEY = "lw-tenant-" + "1" * 24
CLIENT_KEY = "sk-client-" + "3" * 32
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def quoting(key: str) -> dict:
    return {
        "error": {
            "message": f"Incorrect API key provided: {key}. You can find your API key in your account.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }


@pytest.fixture
def tenant_proxy(make_proxy, tmp_path, monkeypatch, write_policies):
    monkeypatch.setenv("PROVIDER_KEY", PROVIDER_KEY)
    monkeypatch.setenv("JUDGE_KEY", JUDGE_KEY)
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(
        f"tenants:\n  - name: acme\n    key_sha256: ['{hash_key(PROXY_KEY)}']\n"
        "    upstream: {api_key_env: PROVIDER_KEY}\n"
    )
    policies = write_policies(default="judge: {api_key_env: JUDGE_KEY}\n")
    return make_proxy(tenants_file=str(tenants), policies_dir=str(policies))


def send(proxy, path: str, *, key: str = PROXY_KEY, stream: bool = False, **headers: str) -> httpx.Response:
    body = {**BODY, "stream": True} if stream else BODY
    return httpx.post(f"{proxy.base_url}{path}", json=body, headers={"Authorization": f"Bearer {key}", **headers})


@pytest.mark.parametrize(
    ("path", "stream"),
    [("/chat/completions", False), ("/chat/completions", True), ("/responses", False), ("/responses", True)],
    ids=["chat", "chat-stream", "passthrough", "passthrough-stream"],
)
def test_the_tenants_provider_key_quoted_in_an_upstream_401_is_masked(tenant_proxy, upstream, path, stream):
    upstream.script(Json(quoting(PROVIDER_KEY), status=401))

    response = send(tenant_proxy, path, stream=stream)

    assert response.status_code == 401
    assert PROVIDER_KEY not in response.text
    assert response.json()["error"]["message"].startswith("Incorrect API key provided: [REDACTED]. You can")
    assert response.json()["error"]["code"] == "invalid_api_key"


def test_the_judges_key_is_masked_too(tenant_proxy, upstream):
    upstream.script(Json(quoting(JUDGE_KEY), status=403))

    response = send(tenant_proxy, "/chat/completions")

    assert response.status_code == 403
    assert JUDGE_KEY not in response.text
    assert "[REDACTED]" in response.text


def test_a_key_in_a_non_json_error_is_masked_before_it_is_wrapped(tenant_proxy, upstream):
    page = f"<html><body>401: key {PROVIDER_KEY} rejected</body></html>".encode()
    upstream.script(Json(page, status=401, headers={"Content-Type": "text/html"}))

    response = send(tenant_proxy, "/embeddings")

    assert response.status_code == 401
    assert PROVIDER_KEY[:12] not in response.text
    assert response.json()["error"]["code"] == "upstream_401"
    assert "key [REDACTED] rejected" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("coding", "compress"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("gzip, gzip", lambda data: gzip.compress(gzip.compress(data))),
    ]
    + ([("zstd", lambda data: zstandard.ZstdCompressor().compress(data))] if zstandard else []),
)
def test_a_compressed_error_is_decoded_masked_and_sent_uncompressed(tenant_proxy, upstream, coding, compress):
    raw = json.dumps(quoting(PROVIDER_KEY)).encode()
    upstream.script(Json(compress(raw), status=401, headers={"Content-Encoding": coding}))

    response = httpx.get(
        f"{tenant_proxy.base_url}/models",
        headers={"Authorization": f"Bearer {PROXY_KEY}", "Accept-Encoding": "gzip, deflate, zstd"},
    )

    assert response.status_code == 401
    assert "content-encoding" not in response.headers
    assert PROVIDER_KEY not in response.text
    assert response.json()["error"]["message"].startswith("Incorrect API key provided: [REDACTED].")


def test_an_error_in_an_encoding_the_proxy_cannot_read_is_not_relayed(tenant_proxy, upstream):
    upstream.script(Json(b"\x00opaque" + PROVIDER_KEY.encode(), status=401, headers={"Content-Encoding": "snappy"}))

    response = httpx.get(f"{tenant_proxy.base_url}/models", headers={"Authorization": f"Bearer {PROXY_KEY}"})

    assert response.status_code == 401
    assert "content-encoding" not in response.headers
    assert response.json()["error"]["code"] == "upstream_401"
    assert "opaque" not in response.text


@pytest.mark.parametrize("path", ["/chat/completions", "/models"])
def test_the_clients_own_key_is_masked_when_it_is_forwarded(proxy, upstream, path):
    upstream.script(Json(quoting(CLIENT_KEY), status=401))

    response = send(proxy, path, key=CLIENT_KEY)

    assert response.status_code == 401
    assert CLIENT_KEY not in response.text


def test_an_azure_style_api_key_header_is_masked(proxy, upstream):
    upstream.script(Json(quoting(CLIENT_KEY), status=401))

    response = httpx.post(f"{proxy.base_url}/chat/completions", json=BODY, headers={"api-key": CLIENT_KEY})

    assert response.status_code == 401
    assert CLIENT_KEY not in response.text


@pytest.mark.parametrize("after_chunks", [0, 8], ids=["before-any-byte", "mid-stream"])
def test_a_key_in_an_upstream_stream_error_event_is_masked(tenant_proxy, upstream, after_chunks):
    event = {"error": {"message": "x" * 480 + f" key {PROVIDER_KEY} revoked", "type": "invalid_request_error"}}
    upstream.script(Sse([*stream_chunks("word " * 200, pieces=10)[:after_chunks], event], delay=0.02))

    response = send(tenant_proxy, "/chat/completions", stream=True)

    assert response.status_code == (502 if after_chunks == 0 else 200)
    assert "ended the stream with an error" in response.text
    assert "sk-provider" not in response.text  # not even the part before a cut


@pytest.mark.parametrize(
    ("path", "stream"),
    [("/messages", False), ("/messages", True), ("/messages/count_tokens", False)],
    ids=["messages", "messages-stream", "passthrough"],
)
def test_the_tenants_key_quoted_on_a_messages_route_is_masked_in_anthropics_shape(tenant_proxy, upstream, path, stream):
    said = {"type": "error", "error": {"type": "authentication_error", "message": f"invalid x-api-key {PROVIDER_KEY}"}}
    upstream.script(Json(said, status=401))
    body = {**BODY, "max_tokens": 5, "stream": stream}

    response = httpx.post(f"{tenant_proxy.base_url}{path}", json=body, headers={"x-api-key": PROXY_KEY})

    assert response.status_code == 401
    assert PROVIDER_KEY not in response.text
    assert response.json() == {"type": "error", "error": {**said["error"], "message": "invalid x-api-key [REDACTED]"}}
    assert upstream.requests[-1].header("x-api-key") == PROVIDER_KEY
    assert upstream.requests[-1].header("authorization") is None


@pytest.mark.parametrize("after_events", [0, 6], ids=["at-once", "mid-stream"])
def test_a_key_in_a_responses_stream_failed_event_is_masked(tenant_proxy, upstream, after_events):
    events = responses_events(text_response("word " * 100), pieces=10)[:after_events]
    error = {"code": "server_error", "message": f"key {PROVIDER_KEY} revoked"}
    failed = {"type": "response.failed", "response": {"id": "resp_f", "status": "failed", "output": [], "error": error}}
    upstream.script(Sse([*events, failed], done=False))

    response = send(tenant_proxy, "/responses", stream=True)

    assert "sk-provider" not in response.text
    assert "key [REDACTED] revoked" in response.text


def unicode_escaped(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in text)


@pytest.mark.parametrize(
    "quoted",
    [unicode_escaped(PROVIDER_KEY), PROVIDER_KEY.upper(), base64.b64encode(PROVIDER_KEY.encode()).decode()],
    ids=["unicode-escaped", "upper-cased", "base64"],
)
@pytest.mark.parametrize("path", ["/chat/completions", "/embeddings"], ids=["guarded", "passthrough"])
def test_the_tenants_key_in_another_spelling_is_masked(tenant_proxy, upstream, path, quoted):
    upstream.script(Json(b'{"error": {"message": "bad key ' + quoted.encode() + b'", "type": "x"}}', status=401))

    response = send(tenant_proxy, path)

    assert response.status_code == 401
    assert response.json()["error"]["message"] == "bad key [REDACTED]"


def test_a_key_spelled_with_escapes_in_a_responses_failed_event_is_masked(tenant_proxy, upstream):
    message = f"key {unicode_escaped(PROVIDER_KEY)} revoked"
    failed = '{"type": "response.failed", "response": {"id": "resp_f", "status": "failed", "output": [], '
    failed += '"error": {"code": "server_error", "message": "' + message + '"}}}'
    upstream.script(Sse([failed], done=False))

    response = send(tenant_proxy, "/responses", stream=True)

    assert "key [REDACTED] revoked" in response.text
    events = [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]
    assert PROVIDER_KEY not in json.dumps(events)  # not even once a client has decoded them

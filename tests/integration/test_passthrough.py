"""Every other /v1 route passes through untouched: method, path, query, body, status, headers."""

from __future__ import annotations

import gzip

import httpx
import openai
import pytest

from tests.support.fake_upstream import Json

pytestmark = pytest.mark.shared_proxy

AUTH = {"Authorization": "Bearer sk-provider"}


def test_models_list_works_through_the_sdk(proxy, upstream):
    upstream.script(
        Json({"object": "list", "data": [{"id": "fake-model", "object": "model", "created": 0, "owned_by": "x"}]})
    )
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-provider")

    models = client.models.list()

    assert [m.id for m in models.data] == ["fake-model"]
    assert upstream.requests[0].method == "GET"
    assert upstream.requests[0].path == "/v1/models"


def test_embeddings_body_is_forwarded_verbatim(proxy, upstream):
    raw = b'{"input": ["a", "b"],   "model": "emb", "encoding_format": "float"}'
    upstream.script(
        Json({"object": "list", "data": [], "model": "emb", "usage": {"prompt_tokens": 2, "total_tokens": 2}})
    )

    response = httpx.post(
        f"{proxy.base_url}/embeddings", content=raw, headers={**AUTH, "Content-Type": "application/json"}
    )

    assert response.status_code == 200
    assert upstream.requests[0].path == "/v1/embeddings"
    assert upstream.requests[0].body == raw


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE"])
def test_method_path_and_query_are_kept(proxy, upstream, method):
    response = httpx.request(method, f"{proxy.base_url}/files/file-1/content?limit=2&after=x%20y", headers=AUTH)

    assert response.status_code == 200
    seen = upstream.requests[0]
    assert (seen.method, seen.path, seen.query) == (method, "/v1/files/file-1/content", "limit=2&after=x%20y")


def test_upstream_status_and_body_are_returned(proxy, upstream):
    body = {"error": {"message": "No such file", "type": "invalid_request_error", "param": None, "code": None}}
    upstream.script(Json(body, status=404))

    response = httpx.get(f"{proxy.base_url}/files/missing", headers=AUTH)

    assert response.status_code == 404
    assert response.json() == body


def test_hop_by_hop_headers_are_not_forwarded(proxy, upstream):
    headers = {
        **AUTH,
        "Connection": "keep-alive, X-Private-Hop",
        "X-Private-Hop": "secret",
        "TE": "trailers",
        "Proxy-Authorization": "Basic abc",
        "Upgrade": "websocket",
        "X-End-To-End": "kept",
    }

    httpx.get(f"{proxy.base_url}/models", headers=headers)

    seen = {name.lower() for name, _ in upstream.requests[0].headers}
    assert {"x-private-hop", "te", "proxy-authorization", "upgrade"}.isdisjoint(seen)
    assert upstream.requests[0].header("x-end-to-end") == "kept"


def test_duplicate_request_headers_stay_separate(proxy, upstream):
    httpx.get(
        f"{proxy.base_url}/models", headers=[("Authorization", "Bearer sk-p"), ("X-Multi", "a"), ("X-Multi", "b")]
    )

    assert upstream.requests[0].header_values("x-multi") == ["a", "b"]


def test_no_default_client_headers_are_added(proxy, upstream):
    httpx.get(f"{proxy.base_url}/models", headers={**AUTH, "User-Agent": "my-agent/1.0"})

    assert upstream.requests[0].header_values("user-agent") == ["my-agent/1.0"]


def test_upstream_cookies_are_never_stored_or_replayed(proxy, upstream):
    upstream.script(Json({"object": "list", "data": []}, headers={"Set-Cookie": "session=tenant-a-secret; Path=/"}))

    httpx.get(f"{proxy.base_url}/models", headers={"Authorization": "Bearer tenant-a"})
    httpx.get(f"{proxy.base_url}/models", headers={"Authorization": "Bearer tenant-b"})
    httpx.post(
        f"{proxy.base_url}/chat/completions",
        json={"model": "m", "messages": []},
        headers={"Authorization": "Bearer tenant-b"},
    )

    assert all(r.header("cookie") is None for r in upstream.requests[1:])


def test_compressed_bodies_pass_through_raw(proxy, upstream):
    payload = b'{"object": "list", "data": []}'
    upstream.script(Json(gzip.compress(payload), headers={"Content-Encoding": "gzip"}))

    response = httpx.get(f"{proxy.base_url}/models", headers={**AUTH, "Accept-Encoding": "gzip"})

    assert response.headers["content-encoding"] == "gzip"
    assert response.content == payload  # httpx decoded what the proxy passed through compressed


def test_large_download_is_relayed(proxy, upstream):
    blob = bytes(range(256)) * 40_000  # ~10 MB
    upstream.script(Json(blob, headers={"Content-Type": "application/octet-stream"}))

    response = httpx.get(f"{proxy.base_url}/files/file-1/content", headers=AUTH)

    assert response.content == blob


def test_percent_encoding_in_path_and_query_is_preserved(proxy, upstream):
    httpx.get(f"{proxy.base_url}/files/a%2Fb%20c?q=%2B1&r=a+b", headers=AUTH)

    seen = upstream.requests[0]
    assert (seen.path, seen.query) == ("/v1/files/a%2Fb%20c", "q=%2B1&r=a+b")


def test_a_guarded_model_call_keeps_the_clients_query_string(proxy, upstream):
    body = {"model": "m", "messages": [{"role": "user", "content": "Query kept?"}]}

    reply = httpx.post(f"{proxy.base_url}/chat/completions?api-version=2024-10-21", json=body)

    assert reply.status_code == 200
    assert (upstream.requests[0].path, upstream.requests[0].query) == ("/v1/chat/completions", "api-version=2024-10-21")

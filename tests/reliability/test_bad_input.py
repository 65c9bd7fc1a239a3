"""Hostile and broken input: never a 5xx from the proxy, never a crash, always OpenAI's shape."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from tests.support.assertions import summary_of
from tests.support.fake_upstream import Json, chat_completion

pytestmark = pytest.mark.shared_proxy

AUTH = {"Authorization": "Bearer sk-p", "Content-Type": "application/json"}


def post(proxy, body: bytes, headers=AUTH) -> httpx.Response:
    return httpx.post(f"{proxy.base_url}/chat/completions", content=body, headers=headers, timeout=30)


def assert_not_a_proxy_failure(response: httpx.Response) -> None:
    assert response.status_code < 500, response.text[:300]
    if response.status_code >= 400:
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
        b'{"model": "m", "messages": "not a list"}',
        b'{"model": 5, "messages": [{"role": 5, "content": 5}]}',
        b'{"model": "m", "messages": [{"role": "user", "content": {"nested": ["x"]}}], "tools": "x"}',
        b'{"model": "m", "messages": [null, 1, "x", []], "tools": [null, 1], "stream": "yes"}',
        b'{"model": "m", "messages": [{"role": "tool", "tool_call_id": 5, "content": null}]}',
        b'{"model": "m", "messages": [], "response_format": {"type": "json_schema", "json_schema": "x"}}',
        b'{"model": "m", "messages": [], "response_format": {"type": "json_schema", "json_schema": {"schema": 5}}}',
        b'{"model": "m", "messages": [], "max_tokens": "lots", "stream_options": 7}',
        b'{"model": "m", "model": "n", "messages": [], "messages": []}',
        b'{"model": "\xff\xfe", "messages": []}',
        b"\xef\xbb\xbf{}",
        b"{}" * 10,
    ],
    ids=[
        "deep-arrays",
        "deep-objects",
        "messages-not-list",
        "numbers-everywhere",
        "tools-a-string",
        "junk-entries",
        "tool-id-number",
        "schema-spec-string",
        "schema-number",
        "wrong-types",
        "duplicate-keys",
        "invalid-utf8",
        "bom",
        "concatenated",
    ],
)
def test_malformed_bodies_never_get_a_5xx(proxy, upstream, body):
    upstream.script(*[Json(chat_completion("ok")) for _ in range(5)])

    assert_not_a_proxy_failure(post(proxy, body))


def test_ten_thousand_messages_pass(proxy, upstream):
    messages = [{"role": "user" if n % 2 == 0 else "assistant", "content": f"m{n}"} for n in range(10_000)]

    response = post(proxy, json.dumps({"model": "m", "messages": messages}).encode())

    assert response.status_code == 200
    assert len(upstream.requests[0].json()["messages"]) == 10_000


def test_a_huge_string_within_the_body_limit_passes(proxy, upstream):
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 5_000_000}]}).encode()

    assert post(proxy, body).status_code == 200


def _raw_request(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_transfer_encoding_with_content_length_is_refused(proxy, upstream):
    body = b'{"model": "m", "messages": []}'
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-p\r\n"
        b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
        + hex(len(body))[2:].encode()
        + b"\r\n"
        + body
        + b"\r\n0\r\n\r\n"
    )

    answer = _raw_request(proxy.port, request)

    assert answer.startswith(b"HTTP/1.1 400") or answer.startswith(b"HTTP/1.1 200")
    assert not answer.startswith(b"HTTP/1.1 5")
    assert len(upstream.requests) <= 1


def test_header_injection_cannot_reach_the_upstream(proxy, upstream):
    request = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-p\r\nX-Evil: a\rInjected: yes\r\n\r\n"

    answer = _raw_request(proxy.port, request)

    assert not answer.startswith(b"HTTP/1.1 5")
    assert all(r.header("injected") is None for r in upstream.requests)


def test_a_model_reply_with_pathologically_deep_arguments_is_handled(proxy, upstream):
    from tests.support.fake_upstream import tool_call

    deep = '{"a":' * 5000 + "1" + "}" * 5000
    upstream.script(
        Json(chat_completion(None, tool_calls=[tool_call("search", deep, "c1")])),
        Json(chat_completion(None, tool_calls=[tool_call("search", '{"q": "x"}', "c2")])),
    )
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "go"}],
        "tools": [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}],
    }

    response = post(proxy, json.dumps(body).encode())

    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["tool_calls"][0]["id"] == "c2"


def test_a_deep_final_answer_under_an_output_contract_is_handled(proxy, upstream):
    deep = "[" * 5000 + "]" * 5000
    upstream.script(*[Json(chat_completion(deep)) for _ in range(3)], Json(chat_completion("Summary.")))
    schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}

    response = post(proxy, json.dumps({"model": "m", "messages": [], "response_format": schema}).encode())

    assert response.status_code == 200
    assert response.headers["x-loopwarden-terminated"] == "invalid_output"
    assert summary_of(response.json()["choices"][0]["message"]["refusal"]) == "Summary."

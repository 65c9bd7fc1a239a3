"""Every error the proxy itself returns: the right status, OpenAI's shape, no stack trace."""

from __future__ import annotations

import httpx
import pytest

from tests.support.assertions import assert_openai_error
from tests.support.fake_upstream import CloseAfterRequest, Hang, Json
from tests.support.processes import free_port
from tests.support.timed import Stopwatch

AUTH = {"Authorization": "Bearer sk-provider"}
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_malformed_json_is_400(proxy, upstream):
    response = httpx.post(f"{proxy.base_url}/chat/completions", content=b'{"model": "m",', headers=AUTH)

    error = assert_openai_error(response, 400, "invalid_json")
    assert error["type"] == "invalid_request_error"
    assert upstream.requests == []


def test_empty_body_is_400(proxy, upstream):
    response = httpx.post(f"{proxy.base_url}/chat/completions", content=b"", headers=AUTH)

    assert_openai_error(response, 400, "invalid_json")


@pytest.mark.parametrize("body", [b"[]", b'"text"', b"42", b"null"])
def test_json_that_is_not_an_object_is_400(proxy, upstream, body):
    response = httpx.post(f"{proxy.base_url}/chat/completions", content=body, headers=AUTH)

    assert_openai_error(response, 400)
    assert upstream.requests == []


def test_body_over_the_limit_is_413(make_proxy, upstream):
    proxy = make_proxy(max_body_bytes=1024)

    response = httpx.post(f"{proxy.base_url}/chat/completions", content=b"x" * 2048, headers=AUTH)

    assert_openai_error(response, 413, "payload_too_large")
    assert upstream.requests == []


def test_chunked_body_over_the_limit_is_413_while_reading(make_proxy, upstream):
    proxy = make_proxy(max_body_bytes=1024)

    def chunks():
        for _ in range(64):
            yield b"y" * 256

    response = httpx.post(f"{proxy.base_url}/chat/completions", content=chunks(), headers=AUTH)

    assert_openai_error(response, 413, "payload_too_large")
    assert upstream.requests == []


def test_body_at_the_limit_is_accepted(make_proxy, upstream):
    proxy = make_proxy(max_body_bytes=1024)
    head, tail = b'{"model": "m", "messages": [], "pad": "', b'"}'
    body = head + b"p" * (1024 - len(head) - len(tail)) + tail
    assert len(body) == 1024

    response = httpx.post(f"{proxy.base_url}/chat/completions", content=body, headers=AUTH)

    assert response.status_code == 200


def test_wrong_method_on_chat_completions_is_405(proxy, upstream):
    response = httpx.get(f"{proxy.base_url}/chat/completions", headers=AUTH)

    assert_openai_error(response, 405, "method_not_allowed")
    assert response.headers["allow"] == "POST"


def test_wrong_method_on_health_route_is_405(proxy):
    response = httpx.post(f"{proxy.url}/healthz")

    assert_openai_error(response, 405, "method_not_allowed")


def test_unknown_route_is_404(proxy, upstream):
    response = httpx.get(f"{proxy.url}/not-a-route", headers=AUTH)

    assert_openai_error(response, 404, "not_found")
    assert upstream.requests == []


def test_unreachable_upstream_is_502(make_proxy):
    proxy = make_proxy(upstream=f"http://127.0.0.1:{free_port()}/v1", retry_attempts=2)

    response = httpx.post(f"{proxy.base_url}/chat/completions", json=BODY, headers=AUTH)

    error = assert_openai_error(response, 502, "upstream_unreachable")
    assert "connection refused" in error["message"]
    assert "127.0.0.1" not in error["message"]


def test_upstream_timeout_is_504(make_proxy, upstream):
    proxy = make_proxy(read_timeout=0.3)
    upstream.script(Hang(5))

    response = httpx.post(f"{proxy.base_url}/chat/completions", json=BODY, headers=AUTH, timeout=10)

    assert_openai_error(response, 504, "upstream_timeout")


def test_total_deadline_bounds_the_wait_including_retries(make_proxy, upstream):
    proxy = make_proxy(total_timeout=0.5, read_timeout=30)
    upstream.script(Hang(5))

    with Stopwatch() as watch:
        response = httpx.post(f"{proxy.base_url}/chat/completions", json=BODY, headers=AUTH, timeout=60)

    assert_openai_error(response, 504, "upstream_timeout")
    assert watch.elapsed < 0.5 + watch.scaled(1.5)


def test_upstream_closing_after_the_request_is_502(proxy, upstream):
    upstream.script(CloseAfterRequest())

    response = httpx.post(f"{proxy.base_url}/chat/completions", json=BODY, headers=AUTH)

    assert_openai_error(response, 502, "upstream_disconnected")


def test_non_json_upstream_error_is_wrapped_in_openai_shape(make_proxy, upstream):
    proxy = make_proxy(retry_attempts=1)
    upstream.script(Json(b"<html>bad gateway</html>", status=502, headers={"Content-Type": "text/html"}))

    response = httpx.post(f"{proxy.base_url}/chat/completions", json=BODY, headers=AUTH)

    error = assert_openai_error(response, 502, "upstream_502")
    assert "bad gateway" in error["message"]


def test_openai_shaped_upstream_error_passes_through_as_sent(proxy, upstream):
    body = {"error": {"message": "model not found", "type": "invalid_request_error", "param": "model", "code": None}}
    upstream.script(Json(body, status=404))

    response = httpx.post(f"{proxy.base_url}/chat/completions", json=BODY, headers=AUTH)

    assert response.status_code == 404
    assert response.json() == body

"""Every error a Gemini caller can meet comes in Google's shape (``{"error": {"code",
"message", "status"}}``) with the HTTP status the Gemini API would use for it."""

from __future__ import annotations

import httpx

from tests.support.fake_upstream import Hang, Json
from tests.support.processes import free_port

MODEL = "gemini-fake"
BODY = {"contents": [{"role": "user", "parts": [{"text": "Weather?"}]}]}
KEY = {"x-goog-api-key": "gk-provider"}


def _url(proxy, stream: bool = False) -> str:
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    return f"{proxy.url}/v1beta/models/{MODEL}:{method}"


def _google_error(reply: httpx.Response, code: int, status: str) -> dict:
    assert reply.status_code == code
    error = reply.json()["error"]
    assert (error["code"], error["status"]) == (code, status)
    assert error["message"]
    return error


def test_an_oversized_body_is_a_413_in_googles_shape(make_proxy, gemini_upstream):
    proxy = make_proxy(upstream=gemini_upstream.url, max_body_bytes=200)
    long = {"contents": [{"role": "user", "parts": [{"text": "x" * 500}]}]}

    reply = httpx.post(_url(proxy), json=long, headers=KEY)

    _google_error(reply, 413, "INVALID_ARGUMENT")
    assert gemini_upstream.requests == []


def test_an_upstream_html_5xx_is_wrapped_in_googles_shape(make_proxy, gemini_upstream):
    proxy = make_proxy(upstream=gemini_upstream.url, retry_attempts=1)
    gemini_upstream.script(Json(b"<html>bad gateway</html>", status=502, headers={"Content-Type": "text/html"}))

    reply = httpx.post(_url(proxy), json=BODY, headers=KEY)

    _google_error(reply, 502, "UNAVAILABLE")


def test_an_upstream_timeout_is_a_504_in_googles_shape(make_proxy, gemini_upstream):
    proxy = make_proxy(upstream=gemini_upstream.url, read_timeout=0.3)
    gemini_upstream.script(Hang(5))

    reply = httpx.post(_url(proxy), json=BODY, headers=KEY, timeout=10)

    _google_error(reply, 504, "DEADLINE_EXCEEDED")


def test_an_unreachable_store_under_a_fail_closed_policy_is_a_503_in_googles_shape(make_proxy, gemini_upstream):
    proxy = make_proxy(upstream=gemini_upstream.url, redis_url=f"redis://127.0.0.1:{free_port()}/0", redis_timeout=0.3)

    reply = httpx.post(_url(proxy), json=BODY, headers={**KEY, "X-LoopWarden-Policy": "strict"})

    _google_error(reply, 503, "UNAVAILABLE")
    assert gemini_upstream.requests == []

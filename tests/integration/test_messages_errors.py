"""What the proxy answers on Anthropic's routes keeps Anthropic's shape: its errors, the upstream's rewrapped,
and an ending another route stored."""

from __future__ import annotations

import httpx
import pytest

from tests.support.fake_messages import check_stream
from tests.support.fake_upstream import Json

BODY = {"model": "claude", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
KEY = {"x-api-key": "sk-ant-client-" + "6" * 20, "anthropic-version": "2023-06-01"}


def assert_anthropic_error(response: httpx.Response, status: int, kind: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"type", "error"}
    assert body["type"] == "error"
    assert set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == kind
    return str(body["error"]["message"])


@pytest.mark.parametrize("path", ["/messages", "/messages/batches"], ids=["guarded", "passthrough"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_non_json_upstream_error_on_a_messages_route_is_rewrapped_in_anthropics_shape(
    messages_proxy, anthropic_upstream, path, stream
):
    anthropic_upstream.script(Json(b"<html>bad request</html>", status=400, headers={"Content-Type": "text/html"}))

    response = httpx.post(f"{messages_proxy.base_url}{path}", json={**BODY, "stream": stream}, headers=KEY)

    message = assert_anthropic_error(response, 400, "invalid_request_error")
    assert "<html>bad request</html>" in message


def test_an_anthropic_shaped_upstream_error_passes_through_as_sent(messages_proxy, anthropic_upstream):
    sent = {"type": "error", "error": {"type": "not_found_error", "message": "model: claude"}}
    anthropic_upstream.script(Json(sent, status=404))

    response = httpx.post(f"{messages_proxy.base_url}/messages", json=BODY, headers=KEY)

    assert response.status_code == 404
    assert response.json() == sent


def test_a_websocket_upgrade_on_messages_is_refused_in_anthropics_shape(messages_proxy, anthropic_upstream):
    upgrade = {**KEY, "Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13"}
    upgrade["Sec-WebSocket-Key"] = "dGhlIHNhbXBsZSBub25jZQ=="

    response = httpx.get(f"{messages_proxy.base_url}/messages", headers=upgrade)

    assert_anthropic_error(response, 426, "invalid_request_error")
    assert anthropic_upstream.requests == []


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_an_ending_stored_by_another_route_is_replayed_in_anthropics_shape(
    make_proxy, anthropic_upstream, write_policies, stream
):
    policy = "empty_response_max_strikes: 1\nfinalize: {use_upstream: false}\n"
    proxy = make_proxy(upstream=anthropic_upstream.url, policies_dir=str(write_policies(default=policy)))
    anthropic_upstream.script(Json({"choices": [{"index": 0, "message": {"role": "assistant", "content": ""}}]}))
    session = {**KEY, "X-Session-Id": "one-session-two-routes"}
    chat = {"model": "m", "messages": [{"role": "user", "content": "task"}]}
    ended = httpx.post(f"{proxy.base_url}/chat/completions", json=chat, headers=session)
    assert ended.headers["x-loopwarden-terminated"] == "empty_response"

    same_task = {**BODY, "messages": chat["messages"], "stream": stream}  # a new instruction would be a new run
    replayed = httpx.post(f"{proxy.base_url}/messages", json=same_task, headers=session)

    assert replayed.headers["x-loopwarden-terminated"] == "empty_response"
    if stream:
        events = check_stream(replayed.content)
        assert events[0]["message"]["type"] == "message"
    else:
        assert replayed.json()["type"] == "message"
        assert "I have to stop here" in replayed.json()["content"][0]["text"]

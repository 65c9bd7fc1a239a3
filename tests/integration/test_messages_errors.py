"""Errors on Anthropic's routes keep Anthropic's shape, the upstream's own rewrapped too."""

from __future__ import annotations

import httpx
import pytest

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

"""A WebSocket upgrade on a proxied route is refused with 426 (Codex then uses HTTP at once),
whether the server hands it over as a WebSocket or, without a WebSocket library, as HTTP."""

from __future__ import annotations

import json

import pytest

from proxy.edge.websockets import asks_websocket, refuse_websocket


def _scope(kind: str, headers: dict[str, str], extensions: dict | None = None) -> dict:
    raw = [(name.lower().encode(), value.encode()) for name, value in headers.items()]
    return {"type": kind, "headers": raw, "extensions": extensions or {}}


UPGRADE = {"Connection": "keep-alive, Upgrade", "Upgrade": "websocket"}


@pytest.mark.parametrize(
    ("headers", "asks"),
    [
        (UPGRADE, True),
        ({"Connection": "Upgrade", "Upgrade": "WebSocket"}, True),
        ({"Upgrade": "websocket"}, False),  # no Connection: Upgrade, no upgrade (a stray hop-by-hop header)
        ({"Connection": "Upgrade", "Upgrade": "h2c"}, False),
        ({}, False),
    ],
)
def test_an_upgrade_to_a_websocket_is_told_by_both_headers(headers, asks):
    assert asks_websocket(_scope("http", headers)) is asks  # type: ignore[arg-type]


async def _sent(scope: dict) -> list[dict]:
    messages: list[dict] = []

    async def send(message: dict) -> None:
        messages.append(message)

    await refuse_websocket(scope, send)  # type: ignore[arg-type]
    return messages


async def test_over_http_the_refusal_is_a_426_in_openais_error_shape():
    start, body = await _sent(_scope("http", UPGRADE))

    assert start["status"] == 426
    assert json.loads(body["body"])["error"]["code"] == "websocket_not_supported"


async def test_over_a_websocket_the_refusal_is_a_426_response_where_the_server_can_send_one():
    start, body = await _sent(_scope("websocket", UPGRADE, {"websocket.http.response": {}}))

    assert (start["type"], start["status"]) == ("websocket.http.response.start", 426)
    assert json.loads(body["body"])["error"]["type"] == "invalid_request_error"


async def test_a_server_that_cannot_send_a_response_gets_a_close():
    assert await _sent(_scope("websocket", UPGRADE)) == [{"type": "websocket.close", "code": 1008}]

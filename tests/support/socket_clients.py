"""A Responses client over the proxy's WebSocket: the openai SDK's ``responses.connect()``, one
``response.create`` per turn, every turn's events checked by the strict stream validator."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx
import openai

from tests.support.responses_events import validate_stream

__all__ = ["ASK_HEADERS", "SocketTurn", "socket_turn"]

ASK_HEADERS = {"X-LoopWarden-Events": "headers"}
"""The handshake header that asks the proxy for its ``loopwarden.headers`` event before each response."""
REQUEST = httpx.Request("GET", "ws://proxy/v1/responses")
TERMINAL = ("response.completed", "response.incomplete", "response.failed")


class SocketTurn:
    """What one turn over the socket gave: the proxy's headers, the final response, every event."""

    def __init__(self, headers: dict[str, str], response: Any, events: list[dict[str, Any]]) -> None:
        self.headers = headers
        self.response = response
        self.events = events


def socket_turn(base_url: str, request: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> SocketTurn:
    """Open a socket, send ``request`` as one ``response.create`` (its ``extra_body`` merged in), and
    read its events to the terminal one."""
    client = openai.OpenAI(base_url=base_url, api_key="sk-p", max_retries=0)
    fields = {key: value for key, value in request.items() if key != "extra_body"}
    fields.update(request.get("extra_body") or {})
    got: dict[str, str] = {}
    events: list[dict[str, Any]] = []
    final = None
    with client.responses.connect(extra_headers={**ASK_HEADERS, **(headers or {})}) as connection:
        connection.send_raw(json.dumps({"type": "response.create", **fields}))
        while final is None:
            raw = connection.recv_bytes()
            event = json.loads(raw)
            if event["type"] == "loopwarden.headers":
                got = event["headers"]
                continue
            if event["type"] == "error":  # what the SDK raises for the same answer over HTTP
                reply = httpx.Response(event["status"], json={"error": event["error"]}, request=REQUEST)
                raise openai.APIStatusError(event["message"], response=reply, body=event["error"])
            events.append(event)
            if event["type"] in TERMINAL:
                final = connection.parse_event(raw).response  # type: ignore[union-attr]
    validate_stream(b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events))
    return SocketTurn(got, final, events)

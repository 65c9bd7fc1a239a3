"""A scriptable fake Responses upstream that also speaks the API's WebSocket mode on ``/v1/responses``.

Over HTTP it is :class:`~tests.support.fake_responses.FakeResponses`, the same script, records
and strictness. A WebSocket handshake is accepted (or refused with ``refuse``, the status an
HTTP-only API answers), and each ``response.create`` on it is one agent call, answered with the
stream's events as messages. Chains are kept as the API keeps them: a stored response (``store``
on) anywhere, a ``store=false`` one only on its socket and only while it is that socket's most
recent response; any other ``previous_response_id`` is the API's ``previous_response_not_found``
error event (counted in ``rejections``), and an error empties the socket's memory, as the API's.
``SocketCut`` closes the socket mid-response.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from aiohttp import WSMsgType, web

from tests.support.fake_responses import Events, FakeResponses, Served, _id, _Stored, rendered, stream_events
from tests.support.fake_upstream import Hang, Json, Recorded, _raw_headers, is_judge_request
from tests.support.turns import Turn

__all__ = ["FakeResponsesSocket", "SocketCut"]


@dataclass
class SocketCut:
    """Serve ``body``'s first ``after`` events, then close the socket (``code``; None: drop the
    connection without a close frame)."""

    body: dict[str, Any]
    after: int = 3
    code: int | None = 1011


@dataclass
class _Socket:
    """One client socket's connection-local memory: its most recent ``store=false`` response."""

    last: tuple[str, list[dict[str, Any]]] | None = None


class FakeResponsesSocket(FakeResponses):
    """The scripted Responses server, over HTTP and over its WebSocket mode."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse: int | None = None
        """Refuse every WebSocket handshake with this status (None: accept)."""
        self.sockets = 0
        """WebSockets accepted."""
        self.close_after_turn = False
        """Close each socket after its first event's answer (an upstream letting an idle socket go)."""

    def reset(self) -> None:
        super().reset()
        self.refuse = None
        self.sockets = 0
        self.close_after_turn = False

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Upgrade", "").lower() != "websocket":
            return await super()._handle(request)
        raw = request.rel_url
        self.upgrades.append(Recorded(request.method, raw.raw_path, raw.raw_query_string, _raw_headers(request), b""))
        if self.refuse is not None:
            error = {"message": "WebSocket is not supported here.", "type": "invalid_request_error", "code": None}
            return web.json_response({"error": {**error, "param": None}}, status=self.refuse)
        ws = web.WebSocketResponse(max_msg_size=64 * 1024 * 1024)
        await ws.prepare(request)
        self.sockets += 1
        memory = _Socket()
        async for message in ws:
            if message.type is not WSMsgType.TEXT:
                break
            await self._event(request, ws, memory, message.data)
            if self.close_after_turn and not ws.closed:
                await ws.close(code=1000)
            if ws.closed:
                break
        return ws

    async def _event(self, request: web.Request, ws: web.WebSocketResponse, memory: _Socket, text: str) -> None:
        event = json.loads(text)
        if event.get("type") != "response.create":
            await _send(ws, _error(400, "invalid_request_error", f"Unknown event type {event.get('type')!r}.", None))
            return
        payload = {key: value for key, value in event.items() if key != "type"}
        recorded = Recorded("WEBSOCKET", request.rel_url.raw_path, "", _raw_headers(request), text.encode())
        with self._lock:
            judging = is_judge_request(payload)
            (self.judge_requests if judging else self.requests).append(recorded)
            reply = self.judge(payload) if judging else self._next(payload)
        if isinstance(reply, Turn):
            reply = rendered(reply)
        if isinstance(reply, Hang):
            await asyncio.sleep(reply.seconds)
            return
        if isinstance(reply, Json):  # an error status: the API's error event
            body = reply.body if isinstance(reply.body, dict) else {}
            error = body.get("error") or {"message": "failed", "type": "server_error", "code": None}
            await _send(ws, {"type": "error", "status": reply.status, "error": error})
            return
        if isinstance(reply, Events):
            for number, raw in enumerate(reply.events):
                if reply.cut_after is not None and number >= reply.cut_after:
                    await ws.close(code=1011)
                    return
                await _send(ws, raw)
            return
        cut = reply if isinstance(reply, SocketCut) else None
        body = cut.body if cut is not None else reply
        if judging:
            await self._socket_body(ws, memory, payload, {**body, "id": _id("resp")}, [], None)
            return
        known = dict(self.stored)
        if memory.last is not None:
            known[memory.last[0]] = _Stored(memory.last[1])
        history, problem = self._history(payload, known)
        served = Served(payload, history)
        self.served.append(served)
        if problem is not None:
            self.rejections.append(problem[1])
            memory.last = None  # an error empties the socket's memory
            code = "previous_response_not_found" if problem[0] == "previous_response_id" else None
            await _send(ws, _error(400, "invalid_request_error", problem[1], code, problem[0]))
            return
        served.response = body = {**body, "id": _id("resp")}
        await self._socket_body(ws, memory, payload, body, history, cut)

    async def _socket_body(
        self,
        ws: web.WebSocketResponse,
        memory: _Socket,
        payload: dict[str, Any],
        body: dict[str, Any],
        history: list[dict[str, Any]],
        cut: SocketCut | None,
    ) -> None:
        items = [*history, *body["output"]]
        if payload.get("store") is not False:
            self.stored[body["id"]] = _Stored(items)
            for item in body["output"]:
                if isinstance(item.get("id"), str):
                    self.items[item["id"]] = item
        for number, event in enumerate(stream_events(body)):
            if cut is not None and number >= cut.after:
                memory.last = None
                if cut.code is None:
                    assert ws._req is not None
                    assert ws._req.transport is not None
                    ws._req.transport.abort()
                else:
                    await ws.close(code=cut.code)
                return
            await _send(ws, event)
        memory.last = (body["id"], items) if body["status"] != "failed" else None

    def served_history(self, index: int) -> list[dict[str, Any]]:
        """The ``index``-th agent call's whole input as the model saw it (its chain resolved)."""
        recorded = self.requests[index]
        served = [s for s in self.served if s.payload == {k: v for k, v in recorded.json().items() if k != "type"}]
        return served[0].history if served else recorded.json().get("input") or []

    def socket_payloads(self) -> list[dict[str, Any]]:
        """The agent calls that came over a socket, as sent (``type`` removed)."""
        return [{k: v for k, v in r.json().items() if k != "type"} for r in self.requests if r.method == "WEBSOCKET"]


def _error(status: int, kind: str, message: str, code: str | None, param: str | None = None) -> dict[str, Any]:
    return {
        "type": "error",
        "status": status,
        "error": {"type": kind, "code": code, "message": message, "param": param},
    }


async def _send(ws: web.WebSocketResponse, event: dict[str, Any]) -> None:
    if not ws.closed:
        await ws.send_str(json.dumps(event))

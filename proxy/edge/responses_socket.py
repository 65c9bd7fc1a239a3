"""The Responses API over one long-lived WebSocket on ``/v1/responses``, guarded as over HTTP.

The handshake is authenticated as a request is (a refusal is an HTTP answer in OpenAI's
error shape, before any socket exists). Then each ``response.create`` event is one request:
its fields (``stream`` implicit) run through the very route a ``POST /v1/responses`` does,
with the handshake's headers (the session id, the policy, the goal), so the same guards,
ledger, timeline, metrics and log line see it, and the stream's events go out as the
socket's messages, in order, with the streaming hold-back rules. The pipeline sees every turn
whole: the proxy carries the ``store=false`` chains of the socket itself
(:mod:`proxy.wire.responses.socket_chains`), so a continuation the client sends with only its
new items is the whole conversation to the guards. Upstream, the client socket has a WebSocket
of its own (:mod:`proxy.upstream.socket`, unless ``upstream_websocket`` is off), on which a
turn that goes on from the socket's most recent response is sent as a continuation of it again,
hidden attempts (a nudge, a summary) included; an upstream that refuses the upgrade is served
over HTTP, whole. An upstream socket that breaks mid-response fails the turn like a cut stream
(its error event), then the client's socket is closed with the upstream's close code (1011
where it gave none).

The proxy's own response headers (``X-LoopWarden-Session``, ``-Step``, ``-Terminated``…) have
no place on a socket; a client that sends ``X-LoopWarden-Events: headers`` at its handshake
gets them as a ``loopwarden.headers`` event before each response's events.

What a socket can do wrong, and what it gets (the API's ``error`` events, the socket open):

- an event that is not JSON, not an object, or of a type the socket mode does not define
  (``invalid_json``, ``unknown_event_type``);
- a ``response.steer`` (input queued into a response in flight, whose successor the upstream
  would start by itself, unguarded): ``response.steer.failed`` with ``steering_not_supported``
  and the input handed back, as the API answers where steering is not supported;
- a ``response.create`` while one is in flight: the API runs one response at a time per
  socket (``response_in_progress``; the one in flight goes on);
- a warm-up (``generate: false``): answered by the proxy, an empty response, no upstream call;
- a ``store=false`` continuation of a response this socket never delivered
  (``previous_response_not_found``, as the API answers);
- a message over ``max_body_bytes``: the server closes with 1009 (message too big);
- no event for ``socket_idle_timeout`` seconds with nothing in flight: closed with 1000;
  the server's pings find a dead peer sooner;
- the client leaving mid-response: the turn is cancelled and booked like a cut stream;
- the proxy stopping: the response in flight finishes (within the shutdown grace), then the
  socket is closed with 1001; an idle socket is closed at once (1012).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from litestar.types import HTTPScope, Scope

from proxy.edge.connections import BUSY, DRAIN, SEND_MANY
from proxy.edge.event_relay import HEADERS_EVENT, EventRelay, Message, Send, error_event, headers_event
from proxy.observe.logs import log_event
from proxy.upstream.socket import UpstreamSocket, through
from proxy.wire.responses.socket_chains import SocketChains, warm_up_events

__all__ = [
    "HEADERS_EVENT",
    "SOCKET_FORMATS",
    "EventRelay",
    "ResponsesSocket",
    "Turn",
    "error_event",
    "headers_event",
    "steer_refused",
]

SOCKET_FORMATS = frozenset({"responses"})
"""The wire formats whose route takes a WebSocket."""

Receive = Callable[[], Awaitable[Message]]
"""ASGI's, untyped: this module speaks both sides of it (a socket's messages, a request's)."""
Turn = Callable[[HTTPScope, bytes, dict[str, Any], Send, Receive], Awaitable[None]]
"""Runs one request through the guarded route: its scope, body, that body decoded (read once,
not again by the route), where its answer goes, and a ``receive`` that says ``http.disconnect``
when the client leaves."""

_decode = msgspec.json.decode
_encode = msgspec.json.Encoder().encode
_HANDSHAKE_ONLY = frozenset(
    {
        b"upgrade",
        b"connection",
        b"sec-websocket-key",
        b"sec-websocket-version",
        b"sec-websocket-extensions",
        b"sec-websocket-protocol",
    }
)
ASK_HEADERS = b"x-loopwarden-events"
"""The handshake header (``headers``) that asks for a ``loopwarden.headers`` event before each response."""
GOING_AWAY = 1001
NORMAL = 1000
INTERNAL = 1011
_UNSENDABLE = frozenset({1004, 1005, 1006, 1015})
"""Close codes a peer may only report, never send (RFC 6455, 7.4.1)."""
Opener = Callable[[list[tuple[str, str]]], UpstreamSocket | None]
"""Opens a client socket's upstream socket with the client's handshake headers it carries on."""


def steer_refused(event: dict[str, Any]) -> bytes:
    """The API's answer to steering it does not support: ``response.steer.failed``, the input
    handed back (the client sends it in its next ``response.create``)."""
    steer = {"previous_response_id": event.get("previous_response_id"), "input": event.get("input")}
    message = "Steering is not supported through LoopWarden: send the input in the next response.create."
    error = {"code": "steering_not_supported", "message": message, "type": "invalid_request_error"}
    refused: dict[str, Any] = {"type": "response.steer.failed", "sequence_number": 0, "steer": steer, "error": error}
    if isinstance(event.get("stream_id"), str):
        refused["stream_id"] = event["stream_id"]
    return _encode(refused)


def upstream_headers(scope: Scope) -> list[tuple[str, str]]:
    """The client's handshake headers its upstream socket's handshake carries too (an
    ``OpenAI-Beta`` naming WebSockets), besides what every call sends."""
    return [
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in scope["headers"]
        if name == b"openai-beta" and b"websocket" in value.lower()
    ]


def turn_scope(scope: Scope) -> HTTPScope:
    """The handshake as the scope of one ``POST``: its headers, but those of the upgrade, and
    an ``OpenAI-Beta`` naming WebSockets (the upstream is served over HTTP)."""
    headers = [
        (name, value)
        for name, value in scope["headers"]
        if name not in _HANDSHAKE_ONLY and not (name == b"openai-beta" and b"websocket" in value.lower())
    ]
    return {**scope, "type": "http", "method": "POST", "headers": headers}  # type: ignore[typeddict-item]


class ResponsesSocket:
    """One client socket: its events read in order, one ``response.create`` run at a time."""

    def __init__(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        turn: Turn,
        idle_timeout: float,
        draining: Callable[[], bool],
        upstream: UpstreamSocket | None = None,
    ) -> None:
        self._scope = turn_scope(scope)
        self._upstream = upstream
        self._headers = any(k == ASK_HEADERS and b"headers" in v.lower() for k, v in scope["headers"])
        self._receive = receive
        self._send = send
        self._turn = turn
        self._idle = idle_timeout if idle_timeout > 0 else None
        self._extensions: Any = scope.get("extensions")
        self._draining = draining
        self._chains = SocketChains()
        self._gone = asyncio.Event()
        self._out = EventRelay(send, lambda _: None)
        """Where the socket's own error events go (a turn's go through the turn's relay)."""
        self._relay = self._out
        self._running: asyncio.Task[None] | None = None
        self.turns = 0
        if isinstance(self._extensions, dict):  # the server's shutdown waits while a response is in flight
            self._extensions[BUSY] = lambda: self._running is not None

    async def serve(self) -> int:
        """Read events until the client leaves, the socket idles out or the proxy stops; the close code."""
        reading: asyncio.Task[Message] | None = None
        try:
            while True:
                if self._running is None and self._stopping():
                    return await self._close(GOING_AWAY, "The proxy is shutting down.")
                if reading is None:
                    reading = asyncio.ensure_future(self._receive())
                running = self._running
                if not await _either(reading, running, None if running else self._idle):
                    return await self._close(NORMAL, "Idle for too long.")
                if running is not None and running.done():
                    self._running = None
                    if self._upstream is not None and self._upstream.lost is not None:
                        code = self._upstream.lost
                        code = INTERNAL if code in _UNSENDABLE or not 1000 <= code <= 4999 else code
                        return await self._close(code, "The upstream closed its socket mid-response.")
                if reading.done():
                    message, reading = reading.result(), None
                    if message["type"] == "websocket.disconnect":
                        return int(message.get("code") or 1005)
                    await self._event(message)
        finally:
            self._gone.set()
            self._out.closed = self._relay.closed = True
            if reading is not None:
                reading.cancel()
            if self._running is not None:
                await asyncio.wait({self._running})

    def _stopping(self) -> bool:
        """The proxy is draining, or its server stopped while a response was in flight."""
        return self._draining() or bool(isinstance(self._extensions, dict) and self._extensions.get(DRAIN))

    async def _close(self, code: int, reason: str) -> int:
        await self._send({"type": "websocket.close", "code": code, "reason": reason})
        return code

    async def _event(self, message: Message) -> None:
        raw = message.get("text")
        data: bytes = raw.encode() if isinstance(raw, str) else message.get("bytes") or b""
        try:
            event = _decode(data)
        except (msgspec.DecodeError, RecursionError):
            event = None
        if not isinstance(event, dict):
            await self._out.text(error_event(400, "The event is not a JSON object.", "invalid_json"))
            return
        kind = event.get("type")
        if kind == "response.steer":
            await self._out.text(steer_refused(event))
            return
        if kind != "response.create":
            text = f"Unknown event type {kind!r}: this socket takes response.create."
            await self._out.text(error_event(400, text, "unknown_event_type", "type"))
            return
        if self._running is not None:
            text = "A response is in progress on this socket; send the next response.create after its last event."
            await self._out.text(error_event(400, text, "response_in_progress"))
            return
        self._start({key: value for key, value in event.items() if key != "type"})

    def _start(self, payload: dict[str, Any]) -> None:
        payload["stream"] = True
        self.turns += 1
        self._running = asyncio.get_running_loop().create_task(self._run(payload))

    async def _run(self, payload: dict[str, Any]) -> None:
        sent = self._chains.carried(payload)
        if sent is None:
            previous = payload.get("previous_response_id")
            text = f"Previous response with id {previous!r} not found on this socket."
            await self._out.text(error_event(400, text, "previous_response_not_found", "previous_response_id"))
            return
        if payload.get("generate") is False:  # a warm-up: nothing to generate, nothing to guard
            body, events = warm_up_events(sent)
            self._chains.record(sent, body)
            for event in events:
                await self._out.text(_encode(event))
            return
        many = self._extensions.get(SEND_MANY) if isinstance(self._extensions, dict) else None
        delivered = lambda response: self._delivered(sent, response)  # noqa: E731
        relay = EventRelay(self._send, delivered, headers=self._headers, many=many)
        self._relay = relay

        async def receive() -> Message:
            await self._gone.wait()
            return {"type": "http.disconnect"}

        encoded = _encode(sent)
        if self._upstream is not None:
            self._upstream.expect(encoded, sent)
        try:
            with through(self._upstream):
                await self._turn(self._scope, encoded, sent, relay, receive)
        except Exception as exc:  # the route answers its own failures: anything else is a bug
            log_event("socket_turn_failed", {"error_type": type(exc).__name__}, logging.ERROR)

    def _delivered(self, sent: dict[str, Any], response: dict[str, Any]) -> None:
        """The client got ``response``: its chain is remembered, and the upstream socket learns
        the client's view of it (a later turn that extends it goes on from it upstream)."""
        conversation = self._chains.record(sent, response)
        if self._upstream is not None and conversation is not None:
            self._upstream.chain.seen(response.get("id"), conversation)

    @property
    def upstream_transport(self) -> str:
        """How the socket's turns went upstream: websocket, or http."""
        return (self._upstream.over or "websocket") if self._upstream is not None else "http"


async def _either(reading: asyncio.Future[Any], running: asyncio.Future[Any] | None, idle: float | None) -> bool:
    """Until ``reading`` or ``running`` is done (True), or ``idle`` seconds pass first (False):
    ``asyncio.wait``'s answer without its sets, its per-call waiter bookkeeping and its copies."""
    if reading.done() or (running is not None and running.done()):
        return True
    wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def woken(_: object) -> None:
        if not wake.done():
            wake.set_result(None)

    reading.add_done_callback(woken)
    if running is not None:
        running.add_done_callback(woken)
    timer = None if idle is None else asyncio.get_running_loop().call_later(idle, woken, None)
    try:
        await wake
    finally:
        if timer is not None:
            timer.cancel()
        reading.remove_done_callback(woken)
        if running is not None:
            running.remove_done_callback(woken)
    return reading.done() or (running is not None and running.done())


async def serve_socket(
    scope: Scope,
    receive: Receive,
    send: Send,
    refusal: Callable[[], Awaitable[tuple[int, bytes] | None]],
    turn: Turn,
    idle_timeout: float,
    draining: Callable[[], bool],
    opener: Opener = lambda _: None,
) -> None:
    """Accept the socket unless ``refusal`` (the handshake's authentication) gives an HTTP
    answer, then serve it until it closes; ``opener`` gives it its upstream socket."""
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    refused = await refusal()
    if refused is not None:
        status, body = refused
        if "websocket.http.response" not in (scope.get("extensions") or {}):
            await send({"type": "websocket.close", "code": 1008})
            return
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
        return
    await send({"type": "websocket.accept"})
    log_event("socket_opened", {"route": scope["path"]})
    upstream = opener(upstream_headers(scope))
    socket = ResponsesSocket(scope, receive, send, turn, idle_timeout, draining, upstream)
    try:
        code = await socket.serve()
    finally:
        if upstream is not None:
            await upstream.aclose()
    facts = {"route": scope["path"], "code": code, "turns": socket.turns}
    log_event("socket_closed", {**facts, "upstream_transport": socket.upstream_transport})

"""A guarded turn's answer as the messages of the client's Responses WebSocket.

The route answers a turn as it answers ``POST /v1/responses``: an SSE stream (or an error
body). :class:`EventRelay` is the ``send`` that turns it into the socket's messages: each
event's data is one message, in order, the events of one chunk in one write where the server
sends batches, and the terminal event's response is handed on (the socket's chains remember
it). An error body becomes the API's ``error`` event.

The events that pass through from the upstream (one data line, the type first: the API's
own compact JSON) are read in one pass over the chunk, only the terminal one decoded; any
other framing (the proxy's named events, pretty-printed lines, comments) event by event.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from proxy.upstream.socket import is_terminal
from proxy.upstream.socket_events import TERMINAL_OPENINGS, TYPE_FIRST, ended_response
from proxy.wire.responses.stream import TERMINAL

__all__ = ["HEADERS_EVENT", "EventRelay", "Message", "Send", "SendMany", "error_event", "headers_event"]

Message = dict[str, Any]
Send = Callable[[Message], Awaitable[None]]
SendMany = Callable[[list[bytes]], Awaitable[None]]
"""The server's :data:`~proxy.edge.connections.SEND_MANY`: text messages in one write."""
HEADERS_EVENT = "loopwarden.headers"
_OWN = b"x-loopwarden-"
_DATA_TYPE_FIRST = b"data: " + TYPE_FIRST
_decode = msgspec.json.decode
_encode = msgspec.json.Encoder().encode


def error_event(status: int, message: str, code: object, param: object = None, kind: object = None) -> bytes:
    """The API's ``error`` event: its fields at the top (as the SDK reads them) and as ``error``."""
    error = {"type": kind or "invalid_request_error", "code": code, "message": message, "param": param}
    return _encode(
        {"type": "error", "status": status, "code": code, "message": message, "param": param, "error": error}
    )


def headers_event(status: int, headers: list[tuple[bytes, bytes]]) -> bytes:
    """The proxy's own response headers (``X-LoopWarden-*``: the session, the step, an ending) as
    a ``loopwarden.headers`` event, for a socket that asked for them at its handshake."""
    own = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in headers if k.lower().startswith(_OWN)}
    return _encode({"type": HEADERS_EVENT, "status": status, "headers": own})


def _one_name(head: bytes) -> bool:
    return head.startswith(b"event: ") and b"\n" not in head


class EventRelay:
    """``send`` for one turn: the route's answer (a stream's events, or an error body) as the
    socket's messages; a stream's terminal response is handed to ``delivered``. With ``many``
    (the server's batch send) the events of one chunk go out in one write."""

    __slots__ = ("_body", "_buffer", "_delivered", "_headers", "_many", "_send", "_sse", "_status", "closed")

    def __init__(
        self,
        send: Send,
        delivered: Callable[[dict[str, Any]], None],
        *,
        headers: bool = False,
        many: SendMany | None = None,
    ) -> None:
        self._send = send
        self._many = many
        self._headers = headers
        self._delivered = delivered
        self._buffer = b""
        self._body: list[bytes] = []
        self._sse = False
        self._status = 200
        self.closed = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self._status = int(message["status"])
            self._sse = any(
                k.lower() == b"content-type" and v.lower().startswith(b"text/event-stream")
                for k, v in message["headers"]
            )
            if self._headers:
                await self.text(headers_event(self._status, message["headers"]))
            return
        body: bytes = message.get("body", b"")
        if self._sse:
            chunk = self._buffer + body
            *frames, self._buffer = chunk.split(b"\n\n")
            texts = self._typed(frames, chunk.count(b"\n", 0, len(chunk) - len(self._buffer)))
            if texts is None:
                texts = [text for text in map(self._frame, frames) if text is not None]
            if self._many is not None and len(texts) > 1:
                await self.texts(texts)
            else:
                for text in texts:
                    await self.text(text)
            return
        self._body.append(body)
        if not message.get("more_body"):
            await self._whole(b"".join(self._body))

    def _typed(self, frames: list[bytes], newlines: int) -> list[bytes] | None:
        """The events' data in one pass where each is one data line that opens with its type
        (what passes through from the upstream, ``newlines``: those of the events and their
        ends), the terminal ones read: what :meth:`_frame` gives each; None for any other."""
        texts = [frame[6:] for frame in frames if frame[:15] == _DATA_TYPE_FIRST]
        if len(texts) != len(frames) or newlines != 2 * len(frames):
            return None
        dropped = [text for text in texts if text.startswith(TERMINAL_OPENINGS) and not self._deliver(text)]
        return [text for text in texts if text not in dropped] if dropped else texts

    def _deliver(self, data: bytes) -> bool:
        """A terminal event's response to ``delivered``; False for one that does not decode."""
        try:
            response = ended_response(data)
        except msgspec.DecodeError:
            return False
        if response is not None:
            self._delivered(response)
        return True

    def _frame(self, frame: bytes) -> bytes | None:
        """An SSE event's data, the message it is (None: a keep-alive, a terminator)."""
        if frame[:6] == b"data: " and b"\n" not in frame:  # one data line, unnamed: named by its type
            data = frame[6:]
            if data == b"[DONE]":
                return None
            named: str | None = None if is_terminal(data) else ""
        elif (parts := frame.partition(b"\ndata: "))[1] and _one_name(parts[0]) and b"\n" not in parts[2]:
            named, data = parts[0][7:].decode(), parts[2]  # the proxy's own framing: one name, one data line
        else:
            lines = frame.split(b"\n")
            data = b"\n".join(line[5:].lstrip() for line in lines if line.startswith(b"data:"))
            if not data or data == b"[DONE]":  # a keep-alive comment, a terminator
                return None
            named = next((line[6:].strip().decode() for line in lines if line.startswith(b"event:")), None)
        if (named is None or named in TERMINAL) and not self._deliver(data):  # only the terminal one is read
            return None
        return data

    async def _whole(self, body: bytes) -> None:
        """A reply that is not a stream: an error (before any event), as the API's error event."""
        try:
            decoded = _decode(body) if body else {}
        except msgspec.DecodeError:
            decoded = {}
        error = decoded.get("error") if isinstance(decoded, dict) else None
        if self._status < 400 and isinstance(decoded, dict) and decoded.get("object") == "response":
            self._delivered(decoded)
            await self.text(_encode({"type": "response.completed", "sequence_number": 0, "response": decoded}))
            return
        if not isinstance(error, dict):
            error = {"message": f"The upstream model API answered {self._status}."}
        message = str(error.get("message") or "The request failed.")
        event = error_event(self._status, message, error.get("code"), error.get("param"), error.get("type"))
        await self.text(event)

    async def text(self, data: bytes) -> None:
        """One message to the client; nothing once the socket is gone (its turn is being cancelled)."""
        if self.closed:
            return
        try:
            await self._send({"type": "websocket.send", "text": data.decode()})
        except (OSError, RuntimeError):  # uvicorn: the socket closed meanwhile
            self.closed = True

    async def texts(self, texts: list[bytes]) -> None:
        """Messages to the client in one write (the server's batch send), as :meth:`text` would."""
        if self.closed or self._many is None:
            return
        try:
            await self._many(texts)
        except (OSError, RuntimeError):
            self.closed = True

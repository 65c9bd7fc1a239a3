"""The events of an upstream Responses WebSocket read as an HTTP call's: each message's
``type`` (read off its opening where the API writes it first), which of them end a call, the
messages as SSE events, an ``error`` event as the HTTP error the same refusal gets."""

from __future__ import annotations

from typing import Any

import httpx
import msgspec

__all__ = [
    "ENDINGS",
    "TERMINAL",
    "TERMINAL_OPENINGS",
    "TYPE_FIRST",
    "ErrorEvent",
    "ended_response",
    "error_fields",
    "error_response",
    "event_type",
    "is_terminal",
    "sse_event",
    "sse_events",
]

TERMINAL = frozenset({b"response.completed", b"response.incomplete", b"response.failed"})
_JSON = [(b"content-type", b"application/json")]
_encode = msgspec.json.Encoder().encode


class _Kind(msgspec.Struct):
    type: str = ""


class ErrorEvent(msgspec.Struct):
    """An ``error`` event's fields, as the API may place them (top level, or under ``error``)."""

    status: Any = None
    error: Any = None
    code: Any = None
    message: Any = None


class _Kept(msgspec.Struct):
    """What a socket's chains keep of a response: the rest (the request's instructions and
    tools, echoed; the usage) is skipped, not built."""

    id: Any = msgspec.UNSET
    status: Any = msgspec.UNSET
    output: Any = msgspec.UNSET


class _Ended(msgspec.Struct):
    type: Any = None
    response: _Kept | None = None


_kind = msgspec.json.Decoder(_Kind).decode
_ended = msgspec.json.Decoder(_Ended).decode
_decode = msgspec.json.decode
TYPE_FIRST = b'{"type":"'
TERMINAL_OPENINGS = tuple(TYPE_FIRST + kind + b'"' for kind in sorted(TERMINAL))
"""How a terminal event opens where its type is its first field (as the API writes it)."""
ENDINGS = (*TERMINAL_OPENINGS, TYPE_FIRST + b'error"')
"""The openings of the events that end a call: its terminal one, an error."""


def is_terminal(data: bytes) -> bool:
    """Whether ``data`` is a terminal event (``event_type(data) in TERMINAL``, the common case
    read off the opening without slicing it out)."""
    if data.startswith(TERMINAL_OPENINGS):
        return True
    return not data.startswith(TYPE_FIRST) and event_type(data) in TERMINAL


def event_type(data: bytes) -> bytes:
    """An event's ``type``: read off its opening where it is the first field (as the API writes
    its events), else decoded."""
    if data.startswith(TYPE_FIRST):
        end = data.find(b'"', len(TYPE_FIRST))
        if end > 0:
            return data[len(TYPE_FIRST) : end]
    try:
        return _kind(data).type.encode()
    except (msgspec.DecodeError, UnicodeEncodeError):
        return b""


def ended_response(data: bytes) -> dict[str, Any] | None:
    """A terminal event's response as a socket's chains read it (its ``id``, ``status`` and
    ``output``); None for an event that is not a terminal one with a response.
    ``msgspec.DecodeError`` for data that is not JSON."""
    try:
        ended = _ended(data)
    except msgspec.ValidationError:  # JSON of another shape (read whole: bytes that are not JSON still raise)
        event = _decode(data)
        response = event.get("response") if isinstance(event, dict) else None
        if not isinstance(response, dict) or event.get("type") not in _TERMINAL_TYPES:
            return None
        return response
    kept = ended.response
    if kept is None or ended.type not in _TERMINAL_TYPES:
        return None
    return {name: value for name in _KEPT if (value := getattr(kept, name)) is not msgspec.UNSET}


_TERMINAL_TYPES = frozenset(kind.decode() for kind in TERMINAL)
_KEPT = _Kept.__struct_fields__


def sse_event(data: bytes) -> bytes:
    """One message as one SSE event (lines of pretty-printed JSON as lines of one event)."""
    if b"\n" in data or b"\r" in data:
        data = b"\ndata: ".join(data.splitlines())
    return b"data: " + data + b"\n\n"


def sse_events(messages: list[bytes]) -> bytes:
    """Messages as SSE events, joined in one pass where none has a line break (the API's
    compact JSON), else one by one as :func:`sse_event` frames each."""
    joined = b"\n\ndata: ".join(messages)
    if joined.count(b"\n") == 2 * len(messages) - 2 and b"\r" not in joined:
        return b"data: " + joined + b"\n\n"
    return b"".join(map(sse_event, messages))


def error_fields(error: ErrorEvent) -> dict[str, Any]:
    """The error object of an ``error`` event (``error``, else its top-level fields)."""
    if isinstance(error.error, dict):
        return error.error
    return {"code": error.code, "message": error.message, "type": "invalid_request_error", "param": None}


def error_response(error: ErrorEvent, request: httpx.Request) -> httpx.Response:
    """An ``error`` event as the HTTP answer the same refusal gets: its status, ``{"error": …}``."""
    status = error.status if isinstance(error.status, int) and 400 <= error.status <= 599 else 500
    return httpx.Response(status, headers=_JSON, content=_encode({"error": error_fields(error)}), request=request)

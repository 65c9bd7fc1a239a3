"""One Messages stream as the client receives it, across every upstream attempt.

A Messages stream is one message addressed by position: one ``message_start``, then content
blocks by ``index``. A client stream that spans several attempts (a nudge after part of the
reply went out) or ends with the proxy's own reply must still read as one message, so the
relay drops every later ``message_start`` and renumbers block indexes so they stay
contiguous; its events go out strictly in the upstream's order (``in_order``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.errors import ProxyError
from proxy.wire.messages.render import error_event
from proxy.wire.messages.stream import event_frame, message_events

__all__ = ["MessagesRelay"]


class MessagesRelay:
    """One client stream's event sequence, across attempts: one ``message_start``, block
    indexes contiguous (an attempt's blocks continue after those already sent)."""

    __slots__ = ("_next", "_offset", "started")
    in_order = True
    passing: frozenset[bytes] = frozenset()

    def __init__(self) -> None:
        self.started = False
        """A ``message_start`` went out."""
        self._offset = 0
        self._next = 0

    def event(self, raw: bytes | None, event: Mapping[str, Any]) -> bytes:
        """What goes out for this event (``raw``, the upstream's framing, when it needs no change)."""
        kind = event.get("type")
        if kind == "content_block_delta" or kind == "content_block_stop":  # nearly every event
            if self._offset:
                index = event.get("index")
                if isinstance(index, int):
                    return event_frame({**event, "index": index + self._offset})
        elif kind == "content_block_start":
            index = event.get("index")
            if isinstance(index, int):
                index += self._offset
                if index >= self._next:
                    self._next = index + 1
                if self._offset:
                    return event_frame({**event, "index": index})
        elif kind == "message_start":
            if self.started:
                return b""
            self.started = True
        return raw if raw is not None else event_frame(event)

    def passes(self, raw: bytes, event: Mapping[str, Any], released: int) -> tuple[bytes, int] | None:
        """Every event goes the long way (in order, renumbered)."""
        return None

    def new_attempt(self) -> None:
        """A new attempt's blocks follow the ones already sent."""
        self._offset = self._next

    def error(self, error: ProxyError) -> bytes:
        return error_event(error)

    def ending(self, body: Mapping[str, Any]) -> bytes:
        """A complete message as the rest of this stream."""
        self.new_attempt()
        return b"".join(self.event(None, event) for event in message_events(body))

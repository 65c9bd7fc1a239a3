"""One Responses stream as the client receives it, across every upstream attempt.

The proxy holds events back, drops an attempt it rejected and streams the next, or ends
with a body of its own; the client must still read one consistent response: one
``response.created``, sequence numbers that rise by one, every item opened before its
deltas and closed before the end, output indexes in the order items reached it, and a
terminal event whose ``response`` carries exactly the output that streamed, under the id
the stream opened with. The relay renumbers what goes out (an event passes as the upstream
framed it when nothing about it changes) and keeps a ``reasoning`` item back until the item
that follows it goes too, so a reasoning item never reaches the client without its follower.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.errors import ProxyError
from proxy.exchange import Channel
from proxy.wire.responses.stream import (
    LIFECYCLE,
    TERMINAL,
    ResponsesAssembler,
    event_frame,
    kind_channel,
    response_events,
)

__all__ = ["ResponsesRelay"]

_ADDED = "response.output_item.added"
_PASSING = frozenset(
    name.encode()
    for name in (
        "response.content_part.added",
        "response.content_part.done",
        "response.output_text.done",
        "response.refusal.done",
        "response.output_text.annotation.added",
        "response.function_call_arguments.done",
        "response.custom_tool_call_input.done",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done",
        "response.reasoning_summary_text.done",
        "response.reasoning_text.done",
    )
)
"""Events of an item that bring nothing the assembler takes (no item, no delta): the text or
arguments they repeat arrived as deltas and arrive again with the item's ``output_item.done``."""


class ResponsesRelay:
    """What the client has of one response stream; every outgoing event passes through it."""

    in_order = False
    """Items are addressed by id and output index, which it renumbers: a released event may
    overtake a held one."""

    def __init__(self) -> None:
        self._seq = 0
        self.head: dict[str, Any] | None = None
        """The response the client's ``response.created`` announced (its id is the client's)."""
        self.upstream_id: str | None = None
        """The id of the last upstream response streamed (the one the server holds)."""
        self._lifecycle: set[str] = set()
        self._sent: list[Mapping[str, Any]] = []
        """The events the client has, indexes as it sees them (read only when the stream must
        be completed or rebuilt, through :meth:`_view`)."""
        self._view_of: ResponsesAssembler | None = None
        """Made when first read (a stream that is neither completed nor rebuilt never is)."""
        self._viewed = 0
        self._indexes: dict[int, int] = {}
        """This attempt's output index → the client's."""
        self._kinds: dict[int, Any] = {}
        """This attempt's output index → its item's type."""
        self._channels: dict[int, int] = {}
        """This attempt's output index → its item's channel as the assembler has it (the first item
        opened there; none for an index whose events came before its item)."""
        self._straight: set[int] = set()
        """This attempt's output indexes whose events pass as they are (the client's index is
        the same, the item is not a reasoning item): most events of a stream, taken first."""
        self._next = 0
        self._waiting: list[tuple[bytes | None, Mapping[str, Any]]] = []
        """A reasoning item's events, until the item after it goes out."""
        self.altered = False
        """Something upstream sent never reached the client as sent: the terminal event is rebuilt."""

    passing = _PASSING

    def passes(self, raw: bytes, event: Mapping[str, Any], released: int) -> tuple[bytes, int] | None:
        """A passing event of an item that goes straight (see :meth:`event`), numbered as the
        client's next, whose channel is released: its bytes as the upstream framed them, and
        its channel. Anything else goes the long way."""
        index = event.get("output_index")
        seq = self._seq
        if index not in self._straight or self._waiting or event.get("sequence_number") != seq:
            return None
        channel = self._channels[index]
        if not channel & released:
            return None
        self._seq = seq + 1  # as :meth:`event` takes an event that goes straight
        self._sent.append(event)
        return raw, channel

    def new_attempt(self) -> None:
        """The attempt so far is dropped (what it let through stays with the client)."""
        if self._waiting or self.head is not None:
            self.altered = True
        self._waiting.clear()
        self._indexes.clear()
        self._kinds.clear()
        self._channels.clear()
        self._straight.clear()

    # -- events ------------------------------------------------------------------------

    def event(self, raw: bytes | None, event: Mapping[str, Any]) -> bytes:
        """The bytes that carry ``event`` to the client (none for one it must not see again,
        or one that waits: the opening events and a reasoning item wait for the first item
        that may follow them, so a stream the proxy ends instead is answered from its start)."""
        index = event.get("output_index")
        if index in self._straight and raw is not None and not self._waiting:  # the common case
            seq = self._seq
            if event.get("sequence_number") == seq and event.get("type") != _ADDED:
                self._seq = seq + 1
                self._sent.append(event)
                return raw
        kind = event.get("type")
        if isinstance(index, int):
            if kind == _ADDED and isinstance(event.get("item"), dict):
                self._kinds[index] = event["item"].get("type")
                if self._kinds[index] == "reasoning":
                    self._straight.discard(index)
            if self._kinds.get(index) == "reasoning":
                self._waiting.append((raw, event))
                return b""
            if self._waiting:
                return self._released() + self._item(raw, event, index)
            if self._indexes.get(index) == index:  # the common case, as _item takes it
                return self._out(raw, event)
            return self._item(raw, event, index)
        if kind in LIFECYCLE:
            response = event.get("response")
            if isinstance(response, dict) and isinstance(response.get("id"), str):
                self.upstream_id = response["id"]
            if self.head is None:
                self._waiting.append((raw, event))
                return b""
            if kind in self._lifecycle:
                self.altered = True
                return b""
            return self._opening(raw, event)
        if kind in TERMINAL:
            out = self._released()
            response = event.get("response")
            if isinstance(response, dict):
                if isinstance(response.get("id"), str):
                    self.upstream_id = response["id"]
                if self.head is None:
                    self.head = response
                if self.altered or response.get("id") != self.head.get("id"):
                    event = {**event, "response": self._as_streamed(response)}
                    raw = None
            return out + self._out(raw, event)
        return self._out(raw, event)

    def _opening(self, raw: bytes | None, event: Mapping[str, Any]) -> bytes:
        kind = str(event.get("type"))
        if kind in self._lifecycle:
            return b""
        self._lifecycle.add(kind)
        response = event.get("response")
        if self.head is None and isinstance(response, dict):
            self.head = response
        return self._out(raw, event)

    def _item(self, raw: bytes | None, event: Mapping[str, Any], index: int) -> bytes:
        position = self._indexes.get(index)
        if position is None:
            position = self._indexes[index] = self._next
            self._next += 1
            opened = self._kinds.get(index)  # None: events before their item (never let through unread)
            self._channels[index] = kind_channel(opened) if opened is not None else Channel.NONE
        if position != index:
            event = {**event, "output_index": position}
            raw = None
            self.altered = True
        elif self._kinds.get(index) != "reasoning":
            self._straight.add(index)
        return self._out(raw, event)

    def _released(self) -> bytes:
        """The waiting reasoning item, now that its follower goes (or the reply ends)."""
        if not self._waiting:
            return b""
        waiting, self._waiting = self._waiting, []
        return b"".join(
            self._item(raw, event, event["output_index"]) if "output_index" in event else self._opening(raw, event)
            for raw, event in waiting
        )

    def _out(self, raw: bytes | None, event: Mapping[str, Any]) -> bytes:
        self._sent.append(event)
        seq = self._seq
        self._seq += 1
        if raw is not None and event.get("sequence_number") == seq:
            return raw
        return event_frame({**event, "sequence_number": seq})

    def _as_streamed(self, response: Mapping[str, Any]) -> dict[str, Any]:
        """``response`` under the client's id, carrying exactly the output it received."""
        head = self.head or {}
        output = self._view().output()
        return {**response, "id": head.get("id"), "created_at": head.get("created_at"), "output": output}

    def _view(self) -> ResponsesAssembler:
        """What the client has, assembled (caught up with what went out since last asked)."""
        view = self._view_of
        if view is None:
            view = self._view_of = ResponsesAssembler()
        for event in self._sent[self._viewed :]:
            view.add(event)
        self._viewed = len(self._sent)
        return view

    # -- endings -----------------------------------------------------------------------

    def ending(self, body: Mapping[str, Any]) -> bytes:
        """``body`` streamed in place of the held attempt: from the start when nothing went
        out yet, else after what did (open items closed first), under the stream's id."""
        self._waiting.clear()
        if self.head is None:
            return b"".join(self._out(None, event) for event in response_events(body))
        out = [self._closed_items()]
        for event in response_events(body, first_index=self._next, lifecycle=False):
            if event["type"] in TERMINAL:
                self._next += len(body.get("output") or ())
                event = {**event, "response": self._as_streamed(body)}  # every item, the ending's too
            out.append(self._out(None, event))
        return b"".join(out)

    def _closed_items(self) -> bytes:
        """Close every item the client has open (text the client already has stays)."""
        out: list[bytes] = []
        for index, entry in sorted(self._view().items.items()):
            if entry.done:
                continue
            item = {**entry.whole(), "status": "completed"}
            where = {"item_id": item.get("id"), "output_index": index}
            kind = item.get("type")
            if kind == "message":
                for position, part in enumerate(item.get("content") or ()):
                    at = {**where, "content_index": position}
                    out.append(self._out(None, {"type": "response.output_text.done", **at, "text": part["text"]}))
                    out.append(self._out(None, {"type": "response.content_part.done", **at, "part": part}))
            elif kind == "function_call":
                args = item.get("arguments", "")
                out.append(
                    self._out(None, {"type": "response.function_call_arguments.done", **where, "arguments": args})
                )
            out.append(self._out(None, {"type": "response.output_item.done", "output_index": index, "item": item}))
        return b"".join(out)

    def error(self, error: ProxyError) -> bytes:
        """The event that ends the stream in error (OpenAI's ``error`` event)."""
        self._waiting.clear()
        event = {"type": "error", "code": error.code or error.type, "message": error.message, "param": error.param}
        return self._out(None, event)

"""Streamed Responses events, assembled into the reply the guards read, and a response
written back as the events of a stream.

Every event that carries an ``output_index`` belongs to one output item and to that item's
channel (a message's text, a reasoning item, a call); lifecycle events carry none, the
terminal event (``response.completed``, ``incomplete``, ``failed``) ends the reply. The
terminal event's response is the reply; the items as streamed stand in when it lists none.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import msgspec

from proxy.exchange import Channel, Reply, Usage
from proxy.wire.common import AssemblyProgress
from proxy.wire.responses.parse import CALL_ITEMS, OTHER_CALL_ITEMS, parse_usage, reply_from_response

__all__ = [
    "LIFECYCLE",
    "TERMINAL",
    "ResponsesAssembler",
    "event_frame",
    "kind_channel",
    "response_events",
    "split_event",
]

_encode = msgspec.json.Encoder().encode

LIFECYCLE = frozenset({"response.created", "response.in_progress", "response.queued"})
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


def item_channel(item: Any) -> int:
    """The channel of an output item's events."""
    return kind_channel(item.get("type") if isinstance(item, dict) else None)


def kind_channel(kind: Any) -> int:
    """The channel of the events of an output item of this type."""
    if kind == "reasoning":
        return Channel.REASONING
    if kind in CALL_ITEMS or kind in OTHER_CALL_ITEMS:
        return Channel.TOOL_CALLS
    return Channel.TEXT


def split_event(event: Mapping[str, Any], released: int) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Each event carries one item's channel, so no event is ever part released: it waits
    whole until its channel is."""
    return None, dict(event)


def event_frame(event: Mapping[str, Any]) -> bytes:
    """One event framed as the Responses API frames it: its type named, then its data."""
    return b"event: " + str(event.get("type", "")).encode() + b"\ndata: " + _encode(event) + b"\n\n"


class _Item:
    __slots__ = ("channel", "done", "item", "parts", "pieces", "standing_in")

    def __init__(self, item: dict[str, Any], *, standing_in: bool = False) -> None:
        self.item = item
        self.channel = item_channel(item)
        self.standing_in = standing_in
        """Made for deltas that came before their item: the item, when it comes, takes its place."""
        self.done = False
        self.parts: dict[int, list[str]] = {}
        """Text deltas by content (or summary) index."""
        self.pieces: list[str] = []
        """A call's arguments (or input) deltas."""

    def whole(self) -> dict[str, Any]:
        """The item as it stands: as the upstream closed it, or rebuilt from its deltas."""
        if self.done:
            return self.item
        item = dict(self.item)
        kind = item.get("type")
        if kind == "message":
            item["content"] = [
                {"type": "output_text", "text": "".join(text), "annotations": []}
                for _, text in sorted(self.parts.items())
            ]
        elif kind == "function_call":
            item["arguments"] = "".join(self.pieces)
        elif kind == "custom_tool_call":
            item["input"] = "".join(self.pieces)
        elif kind == "reasoning" and self.parts:
            item["summary"] = [{"type": "summary_text", "text": "".join(t)} for _, t in sorted(self.parts.items())]
        return item


class ResponsesAssembler(AssemblyProgress):
    """Feed it the events of one streamed response; read the reply so far at any time."""

    end_name = "response.completed"

    def __init__(self) -> None:
        super().__init__()
        self.complete = False
        """A terminal event arrived: the stream is whole."""
        self.head: dict[str, Any] | None = None
        """The response as ``response.created`` announced it."""
        self.final: dict[str, Any] | None = None
        """The response as the terminal event carried it."""
        self.model: str | None = None
        self.usage: Usage | None = None
        self.items: dict[int, _Item] = {}
        self._completion: dict[str, Any] | None = None

    @staticmethod
    def ends(data: bytes) -> bool:
        """No sentinel: a Responses stream ends with its terminal event."""
        return False

    def add(self, event: Mapping[str, Any]) -> int:
        """Take one event; return the channel it carries (``FINISH`` for the terminal one)."""
        kind = event.get("type")
        index = event.get("output_index")
        if isinstance(index, int):
            return self._item_event(kind, index, event)
        if kind in TERMINAL:
            self._completion = None
            self.complete = True
            response = event.get("response")
            if isinstance(response, dict):
                self.final = response
                self._take_response(response)
                if isinstance(response.get("usage"), dict):
                    self.usage = parse_usage(response["usage"])
            return Channel.FINISH
        if kind in LIFECYCLE:
            response = event.get("response")
            if isinstance(response, dict):
                if self.head is None:
                    self.head = response
                self._take_response(response)
        return Channel.NONE

    def _take_response(self, response: Mapping[str, Any]) -> None:
        if self.model is None and isinstance(response.get("model"), str):
            self.model = response["model"]

    def _item_event(self, kind: Any, index: int, event: Mapping[str, Any]) -> int:
        self._completion = None
        entry = self.items.get(index)
        if kind == "response.output_item.added" or kind == "response.output_item.done":
            item = event.get("item")
            if not isinstance(item, dict):
                return entry.channel if entry is not None else Channel.TEXT
            if entry is None or entry.standing_in:  # a call's events are a call's, however late it says so
                kept = entry
                entry = self.items[index] = _Item(item)
                if kept is not None:
                    entry.parts, entry.pieces = kept.parts, kept.pieces
                self._opened(entry)
            if kind == "response.output_item.done":
                entry.item, entry.done = item, True
                self._closed(entry)
            return entry.channel
        if entry is None:  # a delta before its item: kept, read as text until its item says otherwise
            entry = self.items[index] = _Item({"type": "message", "role": "assistant"}, standing_in=True)
        delta = event.get("delta")
        if isinstance(delta, str) and delta:
            self.produced_chars += len(delta)
            if kind == "response.output_text.delta" or kind == "response.refusal.delta":  # nearly every event
                self._answer_text(delta)
                position = _int(event.get("content_index"))
                texts = entry.parts.get(position)
                if texts is None:
                    entry.parts[position] = [delta]
                else:
                    texts.append(delta)
            elif kind in ("response.function_call_arguments.delta", "response.custom_tool_call_input.delta"):
                entry.pieces.append(delta)
            elif kind == "response.reasoning_summary_text.delta" or kind == "response.reasoning_text.delta":
                entry.parts.setdefault(_int(event.get("summary_index", event.get("content_index"))), []).append(delta)
                self.has_reasoning = self.has_reasoning or not delta.isspace()
        return entry.channel

    def _opened(self, entry: _Item) -> None:
        kind = entry.item.get("type")
        if kind == "reasoning":
            self.has_reasoning = True
        elif kind in CALL_ITEMS or kind in OTHER_CALL_ITEMS:
            self.has_tool_calls = True

    def _closed(self, entry: _Item) -> None:
        """A message closed whole may carry text no delta brought (an upstream that sends none)."""
        if entry.item.get("type") == "message" and not entry.parts:
            for part in entry.item.get("content") or ():
                text = part.get("text") if isinstance(part, dict) else None
                if isinstance(text, str) and text:
                    self._answer_text(text)
                    self.produced_chars += len(text)

    # -- reading --------------------------------------------------------------------

    def output(self) -> list[dict[str, Any]]:
        """The output items so far, in index order."""
        return [entry.whole() for _, entry in sorted(self.items.items())]

    def completion(self) -> dict[str, Any]:
        """The response as a non-streamed call would have returned it."""
        if self._completion is None:
            final = self.final
            if final is not None and (final.get("output") or not self.items):
                self._completion = final
            else:
                base = final or self.head or {"id": "resp_lw", "object": "response", "status": "completed"}
                self._completion = {**base, "output": self.output()}
        return self._completion

    def reply(self) -> Reply:
        return reply_from_response(self.completion())


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0


# -- a response as a stream ------------------------------------------------------------------


def response_events(
    body: Mapping[str, Any], *, first_index: int = 0, lifecycle: bool = True
) -> Iterator[dict[str, Any]]:
    """The events (without sequence numbers) that stream ``body``: created and in progress,
    each output item opened, filled and closed, then the terminal event for its status.
    ``first_index`` numbers the items after ones already streamed; ``lifecycle`` False leaves
    out the opening events (a stream that already has them)."""
    if lifecycle:
        opening = {**body, "status": "in_progress", "output": [], "usage": None}
        yield {"type": "response.created", "response": opening}
        yield {"type": "response.in_progress", "response": opening}
    for offset, item in enumerate(body.get("output") or ()):
        if isinstance(item, dict):
            yield from item_events(item, first_index + offset)
    status = body.get("status")
    terminal = f"response.{status}" if f"response.{status}" in TERMINAL else "response.completed"
    yield {"type": terminal, "response": dict(body)}


def item_events(item: dict[str, Any], index: int) -> Iterator[dict[str, Any]]:
    """One output item's events, opened to closed."""
    kind = item.get("type")
    item_id = item.get("id")
    where = {"item_id": item_id, "output_index": index}
    if kind == "message":
        parts = [p for p in item.get("content") or () if isinstance(p, dict)]
        yield {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "status": "in_progress", "content": []},
        }
        for position, part in enumerate(parts):
            at = {**where, "content_index": position}
            if part.get("type") == "refusal":
                text = str(part.get("refusal", ""))
                yield {"type": "response.content_part.added", **at, "part": {"type": "refusal", "refusal": ""}}
                yield {"type": "response.refusal.delta", **at, "delta": text}
                yield {"type": "response.refusal.done", **at, "refusal": text}
            else:
                text = str(part.get("text", ""))
                empty = {"type": "output_text", "text": "", "annotations": []}
                yield {"type": "response.content_part.added", **at, "part": empty}
                yield {"type": "response.output_text.delta", **at, "delta": text, "logprobs": []}
                yield {"type": "response.output_text.done", **at, "text": text, "logprobs": []}
            yield {"type": "response.content_part.done", **at, "part": part}
    elif kind in ("function_call", "custom_tool_call"):
        field = "arguments" if kind == "function_call" else "input"
        name = "function_call_arguments" if kind == "function_call" else "custom_tool_call_input"
        text = str(item.get(field, ""))
        yield {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, field: "", "status": "in_progress"},
        }
        yield {"type": f"response.{name}.delta", **where, "delta": text}
        yield {"type": f"response.{name}.done", **where, field: text}
    elif kind == "reasoning":
        summary = [s for s in item.get("summary") or () if isinstance(s, dict)]
        opened = {k: v for k, v in item.items() if k != "encrypted_content"}
        yield {"type": "response.output_item.added", "output_index": index, "item": {**opened, "summary": []}}
        for position, part in enumerate(summary):
            at = {**where, "summary_index": position}
            text = str(part.get("text", ""))
            yield {"type": "response.reasoning_summary_part.added", **at, "part": {"type": "summary_text", "text": ""}}
            yield {"type": "response.reasoning_summary_text.delta", **at, "delta": text}
            yield {"type": "response.reasoning_summary_text.done", **at, "text": text}
            yield {"type": "response.reasoning_summary_part.done", **at, "part": part}
    else:
        yield {"type": "response.output_item.added", "output_index": index, "item": item}
    yield {"type": "response.output_item.done", "output_index": index, "item": item}

"""Streamed Anthropic Messages: events assembled into the reply the guards read, and the
client's event sequence kept well-formed across attempts and endings.

A Messages stream is one message: ``message_start``, then each content block opened,
filled by deltas and closed by its ``index``, then ``message_delta`` (``stop_reason``,
cumulative usage) and ``message_stop``. Every block event carries exactly one
:class:`~proxy.exchange.Channel` (its block's kind), so the hold-back never needs to cut
an event in two; it must, though, keep the events in order, and a client stream that spans
several attempts (a nudge after part of the reply went out) or ends with the proxy's own
reply must still read as one message: :class:`~proxy.wire.messages.relay.MessagesRelay` drops
the later ``message_start`` events and renumbers block indexes so they stay contiguous.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import msgspec

from proxy.exchange import Channel, Reply, ToolCall, Usage
from proxy.wire.common import AssemblyProgress
from proxy.wire.messages.parse import parse_usage, reply_from_message

__all__ = [
    "PING",
    "MessagesAssembler",
    "event_frame",
    "message_events",
    "split_event",
]

_decode = msgspec.json.decode
_encode = msgspec.json.Encoder().encode

PING = b'event: ping\ndata: {"type": "ping"}\n\n'
"""Anthropic's own keep-alive event (an SSE comment would do for parsers, but this is what the
API sends, and what clients that log events expect)."""

_BLOCK_CHANNELS: dict[str, int] = {
    "text": Channel.TEXT,
    "thinking": Channel.REASONING,
    "redacted_thinking": Channel.REASONING,
    "tool_use": Channel.TOOL_CALLS,
}
"""Other block types (server tools, ones added later) are output the client reads: TEXT."""
_DELTA_CHANNELS: dict[str, int] = {
    "text_delta": Channel.TEXT,
    "citations_delta": Channel.TEXT,
    "thinking_delta": Channel.REASONING,
    "signature_delta": Channel.REASONING,
    "input_json_delta": Channel.TOOL_CALLS,
}


def event_frame(event: Mapping[str, Any]) -> bytes:
    """One event as the API frames it: its ``type`` as the SSE event name, then its data."""
    kind = event.get("type")
    name = kind.encode() if isinstance(kind, str) else b"message"
    return b"event: " + name + b"\ndata: " + _encode(event) + b"\n\n"


def split_event(event: Mapping[str, Any], released: int) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """An event is one block's, so it goes whole or stays whole (a ``content_block_stop``, which
    names no kind, stays: it is never the only part of a partly released event)."""
    kind = event.get("type")
    channel = Channel.NONE
    if kind == "content_block_start":
        block = event.get("content_block")
        channel = _BLOCK_CHANNELS.get(block.get("type", ""), Channel.TEXT) if isinstance(block, dict) else Channel.TEXT
    elif kind == "content_block_delta":
        delta = event.get("delta")
        channel = _DELTA_CHANNELS.get(delta.get("type", ""), Channel.TEXT) if isinstance(delta, dict) else Channel.TEXT
    if channel and channel & released:
        return dict(event), None
    return None, dict(event)


class _Block:
    __slots__ = ("channel", "citations", "kind", "parts", "signature", "start", "text")

    def __init__(self, start: dict[str, Any], channel: int, kind: Any) -> None:
        self.start = start
        self.channel = channel
        self.kind = kind
        """The block's ``type``."""
        self.text = kind == "text"
        """A ``text`` block: its text is the answer's."""
        self.parts: list[str] = []
        """Text, thinking or partial JSON, as the deltas brought it."""
        self.signature: list[str] = []
        self.citations: list[Any] = []

    def whole(self) -> dict[str, Any]:
        """The block as a complete message would carry it."""
        block = dict(self.start)
        kind = self.kind
        joined = "".join(self.parts)
        if kind == "text":
            block["text"] = _text(block.get("text")) + joined
            if self.citations:
                earlier = block.get("citations")
                block["citations"] = [*(earlier if isinstance(earlier, list) else ()), *self.citations]
        elif kind == "thinking":
            block["thinking"] = _text(block.get("thinking")) + joined
            block["signature"] = _text(block.get("signature")) + "".join(self.signature)
        elif self.parts:  # tool_use, server_tool_use: the input arrived as partial JSON
            try:
                block["input"] = _decode(joined)
            except (msgspec.DecodeError, RecursionError):
                block["input"] = {}
        return block

    def arguments(self) -> str:
        """A tool call's arguments as the model wrote them (repeated keys and all)."""
        if self.parts:
            return "".join(self.parts)
        value = self.start.get("input")
        return _encode(value).decode() if value else ""


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


class MessagesAssembler(AssemblyProgress):
    """Feed it the events of one streamed message; read the reply so far at any time."""

    end_name = "message_stop"

    def __init__(self) -> None:
        super().__init__()
        self.complete = False
        """``message_stop`` arrived: the stream is complete."""
        self.model: str | None = None
        self._parsed_usage: Usage | None = None
        self._usage_read = True
        """``_parsed_usage`` reads ``_usage`` as it is (parsed only when asked: once per stream)."""
        self._message: dict[str, Any] = {}
        self._usage: dict[str, Any] = {}
        self._delta: dict[str, Any] = {}
        self._blocks: dict[int, _Block] = {}
        self._opened_in_order = True
        """Every block opened after those with lower indexes: ``_blocks`` is in index order."""

    @staticmethod
    def ends(data: bytes) -> bool:
        """No sentinel: ``message_stop`` (an event with data) completes the stream."""
        return False

    def add(self, event: Mapping[str, Any]) -> int:
        """Take one event; return the channel it carries, ``FINISH`` for the message's last two.

        This runs for every event of every stream: a text block's delta, nearly every event,
        is taken here whole (what :meth:`_take` and :meth:`_add_text` do for it, inlined)."""
        kind = event.get("type")
        if kind == "content_block_delta":
            block = self._blocks.get(event.get("index"))  # type: ignore[arg-type]
            delta = event.get("delta")
            if block is None or not isinstance(delta, dict):
                return Channel.NONE
            if block.text and delta.get("type") == "text_delta":
                part = delta.get("text")
                if not isinstance(part, str):
                    part = ""
                block.parts.append(part)
                self._text.append(part)
                self._joined = None
                size = len(part)
                self.text_length += size
                self.produced_chars += size
                if not self.has_text and part and not part.isspace():
                    self.has_text = True
                return Channel.TEXT
            self._take(block, delta)
            return block.channel
        if kind == "content_block_start":
            return self._open(event)
        if kind == "content_block_stop":
            block = self._blocks.get(event.get("index"))  # type: ignore[arg-type]
            return block.channel if block is not None else Channel.NONE
        if kind == "message_start":
            message = event.get("message")
            if isinstance(message, dict):
                head = self._message = dict(message)
                head.pop("content", None)
                model = head.get("model")
                self.model = model if isinstance(model, str) else None
                self._merge_usage(head.get("usage"))
            return Channel.NONE
        if kind == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, dict):
                self._delta.update(delta)
            self._merge_usage(event.get("usage"))
            return Channel.FINISH
        if kind == "message_stop":
            self.complete = True
            return Channel.FINISH
        return Channel.NONE  # ping, and event types added after this was written

    def _open(self, event: Mapping[str, Any]) -> int:
        index = event.get("index")
        start = event.get("content_block")
        if not isinstance(index, int) or not isinstance(start, dict):
            return Channel.NONE
        kind = start.get("type")
        channel = _BLOCK_CHANNELS.get(kind, Channel.TEXT) if isinstance(kind, str) else Channel.TEXT
        if self._opened_in_order and self._blocks and index < next(reversed(self._blocks)):
            self._opened_in_order = False
        block = self._blocks[index] = _Block(dict(start), channel, kind)
        if kind == "text":
            initial = start.get("text")
            if isinstance(initial, str) and initial:
                self._add_text(block, initial, initial=True)
        elif kind == "tool_use":
            self.has_tool_calls = True
        elif kind == "redacted_thinking" or (kind == "thinking" and _text(start.get("thinking")).strip()):
            self.has_reasoning = True
        return channel

    def _take(self, block: _Block, delta: Mapping[str, Any]) -> None:
        kind = delta.get("type")
        if kind == "text_delta":
            self._add_text(block, _text(delta.get("text")))
        elif kind == "input_json_delta":
            part = _text(delta.get("partial_json"))
            block.parts.append(part)
            self.produced_chars += len(part)
        elif kind == "thinking_delta":
            part = _text(delta.get("thinking"))
            block.parts.append(part)
            self.produced_chars += len(part)
            self.has_reasoning = self.has_reasoning or (bool(part) and not part.isspace())
        elif kind == "signature_delta":
            block.signature.append(_text(delta.get("signature")))
        elif kind == "citations_delta":
            block.citations.append(delta.get("citation"))

    def _add_text(self, block: _Block, part: str, *, initial: bool = False) -> None:
        if not initial:
            block.parts.append(part)
        if block.text:
            self._answer_text(part)
        self.produced_chars += len(part)

    def _merge_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            if None in usage.values():  # a count not reported here leaves the one reported before
                usage = {k: v for k, v in usage.items() if v is not None}
            self._usage.update(usage)
            self._usage_read = False

    @property
    def usage(self) -> Usage | None:
        """The usage reported so far, merged (None: none yet)."""
        if not self._usage_read:
            self._parsed_usage = parse_usage(self._usage)
            self._usage_read = True
        return self._parsed_usage

    @usage.setter
    def usage(self, value: Usage | None) -> None:
        self._parsed_usage = value
        self._usage_read = True

    # -- reading --------------------------------------------------------------------

    def completion(self) -> dict[str, Any]:
        """The message a non-streamed call would have returned."""
        message: dict[str, Any] = {
            "id": "msg_lw",
            "type": "message",
            "role": "assistant",
            "model": self.model or "",
            **self._message,
            "content": [block.whole() for block in self._ordered()],
        }
        message.update(self._delta)
        message.setdefault("stop_reason", None)
        message.setdefault("stop_sequence", None)
        if self._usage:
            message["usage"] = dict(self._usage)
        return message

    def reply(self) -> Reply:
        """:meth:`completion` read as a complete message is, with the calls' arguments as the
        model wrote them and the usage as merged here (so only what the reading needs of the
        message is put together: not its ``id``, its defaults or its usage)."""
        blocks = self._ordered()
        calls = (
            tuple(
                ToolCall(_text(b.start.get("id")), _text(b.start.get("name")), b.arguments())
                for b in blocks
                if b.kind == "tool_use"
            )
            if self.has_tool_calls
            else ()
        )
        message = {"model": self.model or "", **self._message, "content": [b.whole() for b in blocks], **self._delta}
        return reply_from_message(message, calls=calls, usage=self.usage or Usage())

    def _ordered(self) -> list[_Block]:
        """The blocks by index (as they opened, unless one opened before one it follows)."""
        if self._opened_in_order:
            return list(self._blocks.values())
        return [block for _, block in sorted(self._blocks.items())]


# -- what the client receives -----------------------------------------------------------


_IN_THE_DELTA = ("content", "stop_reason", "stop_sequence", "stop_details")
"""What a stream tells at its end (``message_delta``), not in ``message_start``."""


def message_events(body: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """A complete message as the events of its stream (each block opened, filled, closed)."""
    head = {k: v for k, v in body.items() if k not in _IN_THE_DELTA}
    raw_usage = body.get("usage")
    usage: Mapping[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
    started_usage = {**usage, "output_tokens": min(1, _count(usage.get("output_tokens")))}
    yield {
        "type": "message_start",
        "message": {**head, "content": [], "stop_reason": None, "stop_sequence": None, "usage": started_usage},
    }
    content = body.get("content")
    for index, block in enumerate(content if isinstance(content, list) else ()):
        if isinstance(block, dict):
            yield from _block_events(index, block)
    delta = {"stop_reason": body.get("stop_reason") or "end_turn", "stop_sequence": body.get("stop_sequence")}
    if body.get("stop_details") is not None:
        delta["stop_details"] = body["stop_details"]
    yield {"type": "message_delta", "delta": delta, "usage": {"output_tokens": _count(usage.get("output_tokens"))}}
    yield {"type": "message_stop"}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _block_events(index: int, block: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    kind = block.get("type")
    if kind == "text":
        yield _start(index, {**block, "text": ""})
        if block.get("text"):
            yield _delta(index, {"type": "text_delta", "text": block["text"]})
    elif kind == "thinking":
        yield _start(index, {**block, "thinking": "", "signature": ""})
        if block.get("thinking"):
            yield _delta(index, {"type": "thinking_delta", "thinking": block["thinking"]})
        if block.get("signature"):
            yield _delta(index, {"type": "signature_delta", "signature": block["signature"]})
    elif kind in ("tool_use", "server_tool_use"):
        yield _start(index, {**block, "input": {}})
        if block.get("input"):
            yield _delta(index, {"type": "input_json_delta", "partial_json": _encode(block["input"]).decode()})
    else:
        yield _start(index, dict(block))
    yield {"type": "content_block_stop", "index": index}


def _start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def _delta(index: int, delta: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}

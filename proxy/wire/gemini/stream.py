"""Gemini's streams (``streamGenerateContent?alt=sse``): every event a whole
``GenerateContentResponse`` carrying the next parts of the first candidate, the last one its
``finishReason`` and ``usageMetadata``; no end sentinel (the connection closes).

Text parts are appended (thought text apart, as reasoning), ``functionCall`` parts arrive
whole. Parts keep their ``thoughtSignature``: the assembled reply is what a non-streamed call
would have returned, so the model's turn can be sent back exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from proxy.exchange import Channel, Reply, Usage
from proxy.wire.common import AssemblyProgress
from proxy.wire.gemini.parse import candidate_parts, field, parse_usage, part_channel, reply_of
from proxy.wire.sse import SSEParser

__all__ = ["CHANNELS", "GeminiAssembler", "joined", "split_chunk"]

CHANNELS = {"text": Channel.TEXT, "thought": Channel.REASONING, "call": Channel.TOOL_CALLS}
"""What each kind of part carries (see :func:`~proxy.wire.gemini.parse.part_channel`)."""
_decode = msgspec.json.decode
_JOINABLE = frozenset(("text", "thought", "thoughtSignature"))
"""A part of only these fields joins the text part before it."""


def _with_parts(chunk: Mapping[str, Any], parts: list[Any]) -> dict[str, Any]:
    candidates = chunk.get("candidates")
    first = candidates[0] if isinstance(candidates, list) and candidates else {}
    content = first.get("content") if isinstance(first, dict) else None
    content = content if isinstance(content, dict) else {"role": "model"}
    return {**chunk, "candidates": [{**first, "content": {**content, "parts": parts}}]}


def split_chunk(chunk: Mapping[str, Any], released: int) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The chunk cut in two: the parts of ``released`` channels, and the rest (None when empty).
    What is not a part (the finish reason, usage) goes with both halves."""
    parts = candidate_parts(chunk)
    out = [p for p in parts if CHANNELS.get(part_channel(p) or "", Channel.TEXT) & released]
    kept = [p for p in parts if p not in out]
    return (_with_parts(chunk, out) if out else None, _with_parts(chunk, kept) if kept else None)


class GeminiAssembler(AssemblyProgress):
    """Feed it the chunks of one streamed reply; read the reply so far at any time."""

    end_name = "finishReason"

    def __init__(self) -> None:
        super().__init__()
        self.complete = False
        self.model: str | None = None
        self.usage: Usage | None = None
        self._last: dict[str, Any] = {}
        self._candidate: dict[str, Any] = {}
        self._parts: list[dict[str, Any]] = []
        self._last_kind: str | None = None
        """:func:`part_channel` of the last of ``_parts``."""

    @staticmethod
    def ends(data: bytes) -> bool:
        """No sentinel: a Gemini stream ends with the chunk carrying ``finishReason``."""
        return False

    def add(self, chunk: Mapping[str, Any]) -> int:
        """Take one chunk; return what it carries (channels, plus ``FINISH`` / ``BARE`` marks)."""
        model = field(chunk, "modelVersion")
        if isinstance(model, str):
            self.model = model
        usage = field(chunk, "usageMetadata")
        if isinstance(usage, dict):
            self.usage = parse_usage(usage)
        last = self._last
        last.update(chunk)  # every field but the candidates, the latest of each
        last.pop("candidates", None)
        candidates = chunk.get("candidates")
        first = candidates[0] if isinstance(candidates, list) and candidates else None
        if not isinstance(first, dict):
            if isinstance(field(chunk, "promptFeedback"), dict):
                self.complete = True  # a blocked prompt: no candidate follows
                return Channel.FINISH
            return Channel.BARE
        self._candidate.update(first)
        self._candidate.pop("content", None)
        found = Channel.NONE
        for part in candidate_parts(chunk):
            kind = part_channel(part)
            if kind is None:
                if isinstance(part, dict) and part:
                    self._parts.append(dict(part))
                    self._last_kind = None
                    found |= Channel.TEXT
                continue
            if kind == "call":
                self.has_tool_calls = True
                self.produced_chars += len(msgspec.json.encode(field(part, "functionCall")))
            elif kind == "thought":
                self.has_reasoning = self.has_reasoning or bool(part["text"].strip())
                self.produced_chars += len(part["text"])
            else:
                self._answer_text(part["text"])
                self.produced_chars += len(part["text"])
            if kind == "call" or part.get("text") or field(part, "thoughtSignature"):
                found |= CHANNELS[kind]
            self._take(part, kind)
        if field(first, "finishReason"):
            self.complete = True
            found |= Channel.FINISH
        return found or Channel.BARE

    def _take(self, part: Mapping[str, Any], kind: str) -> None:
        """Text joins the text part before it of its kind (a signature stays with its part)."""
        last = self._parts[-1] if self._parts else None
        if (
            kind != "call"
            and last is not None
            and self._last_kind == kind
            and "thoughtSignature" not in last
            and _JOINABLE.issuperset(part)
        ):
            last["text"] += part["text"]
            if "thoughtSignature" in part:
                last["thoughtSignature"] = field(part, "thoughtSignature")
            return
        self._parts.append(dict(part))
        self._last_kind = kind

    def completion(self) -> dict[str, Any]:
        """The reply as a complete ``GenerateContentResponse``."""
        candidate = {**self._candidate, "content": {"role": "model", "parts": [dict(p) for p in self._parts]}}
        candidate.setdefault("index", 0)
        return {**self._last, "candidates": [candidate]}

    def reply(self) -> Reply:
        return reply_of(self.completion())


def joined(body: bytes) -> Reply | None:
    """A whole ``alt=sse`` stream read as one reply (None: not one)."""
    assembler = GeminiAssembler()
    for event in [*(parser := SSEParser()).feed(body), *parser.close()]:
        try:
            chunk = _decode(event.data)
        except (msgspec.DecodeError, RecursionError):
            return None
        if not isinstance(chunk, dict) or "error" in chunk:
            return None
        assembler.add(chunk)
    return assembler.reply() if assembler.complete else None

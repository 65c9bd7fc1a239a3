"""Streamed chat completion chunks, assembled into the reply the guards read.

Content and reasoning deltas are appended; tool-call deltas are joined by their ``index``
(id, type and name from the first delta that has them, arguments concatenated). The guards
then see a streamed reply exactly as they see a complete one. Each chunk is reported by the
:class:`~proxy.exchange.Channel` it carries, so the hold-back can pass on some kinds of delta
and keep others.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.exchange import Channel, Reply, ToolCall, Usage
from proxy.wire.common import openai_usage

__all__ = ["ChatAssembler", "parse_usage", "split_chunk", "wire_call"]


def parse_usage(raw: Any) -> Usage:
    """A ``usage`` object (from a completion or the last chunk of a stream)."""
    return openai_usage(raw, "prompt_tokens", "completion_tokens", "prompt_tokens_details")


def wire_call(call: ToolCall) -> dict[str, Any]:
    """The call as a ``tool_calls`` item."""
    if call.kind == "custom":
        return {"id": call.id, "type": "custom", "custom": {"name": call.name, "input": call.arguments}}
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


_KEYS: dict[str, int] = {
    "content": Channel.TEXT,
    "refusal": Channel.TEXT,
    "reasoning_content": Channel.REASONING,
    "reasoning": Channel.REASONING,
    "tool_calls": Channel.TOOL_CALLS,
    "function_call": Channel.TOOL_CALLS,
    "audio": Channel.TEXT,
}


def split_chunk(chunk: Mapping[str, Any], released: int) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The chunk cut in two: the deltas of ``released`` channels, and the rest (None when empty)."""
    out_choices: list[dict[str, Any]] = []
    kept_choices: list[dict[str, Any]] = []
    for choice in chunk.get("choices") or ():
        delta = choice.get("delta") or {}
        out = {k: v for k, v in delta.items() if k in _KEYS and _KEYS[k] & released}
        kept = {k: v for k, v in delta.items() if k not in out}
        if out:
            out_choices.append({**choice, "delta": out})
        if any(k in _KEYS and v for k, v in kept.items()):
            kept_choices.append({**choice, "delta": kept})
    base = {k: v for k, v in chunk.items() if k != "choices"}
    return (
        {**base, "choices": out_choices} if out_choices else None,
        {**base, "choices": kept_choices} if kept_choices else None,
    )


class _CallParts:
    __slots__ = ("arguments", "id", "name", "type")

    def __init__(self) -> None:
        self.id = ""
        self.type = "function"
        self.name = ""
        self.arguments: list[str] = []


class ChatAssembler:
    """Feed it the chunks of one streamed reply; read the reply so far at any time."""

    complete = False
    """A chat-completions stream ends with the ``[DONE]`` sentinel (:meth:`ends`), not a chunk."""
    end_name = "[DONE]"

    def __init__(self) -> None:
        self.id: str | None = None
        self.created: int | None = None
        self.model: str | None = None
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.raw_usage: dict[str, Any] | None = None
        self._content: list[str] = []
        self._refusal: list[str] = []
        self._other: dict[str, Any] = {}
        """Legacy ``function_call`` and ``audio`` deltas, merged (strings joined)."""
        self._reasoning: list[str] = []
        self._calls: dict[int, _CallParts] = {}
        self._joined: str | None = None
        self.text_length = 0
        self.produced_chars = 0
        """Characters of every kind of delta, for estimating the tokens of a stream cut short."""
        self.has_text = False
        """Some content (or a refusal) that is not whitespace arrived: the reply is not empty."""

    @staticmethod
    def ends(data: bytes) -> bool:
        """``data: [DONE]`` completes a chat-completions stream."""
        return data == b"[DONE]"

    def add(self, chunk: Mapping[str, Any]) -> int:
        """Take one chunk; return what it carries (channels, plus ``FINISH`` / ``BARE`` marks).

        One pass over each delta: this runs for every chunk of every stream."""
        if self.id is None:
            self.id = chunk.get("id") if isinstance(chunk.get("id"), str) else None
            self.created = chunk.get("created") if isinstance(chunk.get("created"), int) else None
        if self.model is None and isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.raw_usage, self.usage = usage, parse_usage(usage)
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices:
            return Channel.BARE
        found = Channel.NONE
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            # The guards read choice 0, as for complete replies; with ``n`` > 1 the others
            # arrive in chunks of their own, told apart by their index.
            primary = choice.get("index", 0) == 0
            if choice.get("finish_reason"):
                found |= Channel.FINISH
                if primary:
                    self.finish_reason = choice["finish_reason"]
            delta = choice.get("delta")
            if isinstance(delta, dict):
                for key, value in delta.items():
                    channel = _KEYS.get(key)
                    if channel is None or not value:
                        continue
                    found |= channel
                    if not primary:
                        continue
                    if key != "content":
                        self._take(key, value)
                    elif isinstance(value, str):  # _take's text, inlined: nearly every chunk is text
                        self._content.append(value)
                        self._joined = None
                        self.text_length += len(value)
                        self.produced_chars += len(value)
                        if not self.has_text:
                            self.has_text = not value.isspace()
        return found

    def _take(self, key: str, value: Any) -> None:
        """Any delta but text (which :meth:`add` takes itself)."""
        if key in ("reasoning_content", "reasoning"):
            if isinstance(value, str):
                self._reasoning.append(value)
                self.produced_chars += len(value)
        elif key == "refusal":
            if isinstance(value, str):
                self._refusal.append(value)
                self.produced_chars += len(value)
                self.has_text = self.has_text or not value.isspace()
        elif key == "tool_calls" and isinstance(value, list):
            for position, call in enumerate(value):
                if isinstance(call, dict):
                    self._add_call(call, position)
        elif key in ("function_call", "audio") and isinstance(value, dict):
            merged = self._other.setdefault(key, {})
            for name, part in value.items():
                joined = merged.get(name)
                merged[name] = joined + part if isinstance(joined, str) and isinstance(part, str) else part
                self.produced_chars += len(part) if isinstance(part, str) else 0
            self.has_text = True

    def _add_call(self, call: Mapping[str, Any], position: int) -> None:
        index = call.get("index")
        if not isinstance(index, int):
            index = max(self._calls, default=-1) + 1 if call.get("id") else max(self._calls, default=position)
        parts = self._calls.get(index)
        if parts is None:
            parts = self._calls[index] = _CallParts()
        if isinstance(call.get("id"), str) and call["id"] and not parts.id:
            parts.id = call["id"]
        if isinstance(call.get("type"), str) and call["type"]:
            parts.type = call["type"]
        function = call.get("function")
        if isinstance(call.get("custom"), dict):  # GPT-5 custom tools: free-text ``input``
            function = {"name": call["custom"].get("name"), "arguments": call["custom"].get("input")}
            parts.type = "custom"
        if isinstance(function, dict):
            if isinstance(function.get("name"), str) and function["name"] and not parts.name:
                parts.name = function["name"]
            if isinstance(function.get("arguments"), str):
                parts.arguments.append(function["arguments"])
                self.produced_chars += len(function["arguments"])

    # -- reading --------------------------------------------------------------------

    @property
    def content(self) -> str:
        if self._joined is None:
            self._joined = "".join(self._content)
        return self._joined

    @property
    def has_reasoning(self) -> bool:
        return any(not part.isspace() for part in self._reasoning)

    @property
    def has_tool_calls(self) -> bool:
        return bool(self._calls)

    def _tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(
            ToolCall(parts.id, parts.name, "".join(parts.arguments), "custom" if parts.type == "custom" else "function")
            for _, parts in sorted(self._calls.items())
        )

    def reply(self) -> Reply:
        calls = self._tool_calls()
        return Reply(
            content=self.content if self._content else None,
            reasoning="".join(self._reasoning) or None,
            tool_calls=calls,
            finish_reason=self.finish_reason,
            usage=self.usage or Usage(),
            model=self.model,
            refusal="".join(self._refusal) or None,
            other_output=bool(self._other),
        )

    def completion(self) -> dict[str, Any]:
        """The reply as a complete chat.completion (what a non-streamed call would have returned)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content if self._content else None}
        if self._refusal:
            message["refusal"] = "".join(self._refusal)
        if self._reasoning:
            message["reasoning_content"] = "".join(self._reasoning)
        if self._calls:
            message["tool_calls"] = [wire_call(call) for call in self._tool_calls()]
        message.update(self._other)
        body: dict[str, Any] = {
            "id": self.id or "chatcmpl-lw",
            "object": "chat.completion",
            "created": self.created or 0,
            "model": self.model or "",
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason or "stop"}],
        }
        if self.raw_usage is not None:
            body["usage"] = self.raw_usage
        return body

"""The normalized exchange: what guards may read, whatever the wire format.

An adapter in :mod:`proxy.wire` turns a wire format (chat completions today) into these
types. They are read-only views: the decoded JSON stays as it came, so unknown fields
survive and nothing is copied that no guard reads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from proxy.schemas import CompiledSchema

__all__ = ["Conversation", "Reply", "ToolCall", "Usage", "parse_arguments"]


_decode = msgspec.json.decode
_encode = msgspec.json.encode
_minified = msgspec.json.format


class _RepeatedKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        raise _RepeatedKey(next(k for k, _ in pairs if k in seen or seen.add(k)))  # type: ignore[func-returns-value]
    return value


_EXACT = json.JSONDecoder(object_pairs_hook=_unique_pairs)


def parse_arguments(text: str) -> tuple[Any, str | None]:
    """A tool call's arguments decoded, or why they cannot be: not JSON, nested too deeply, or
    a key given twice (``{"command": "rm -rf /", "command": "ls"}``: a permission check and the
    tool's executor could each read another value). Empty arguments are ``{}``.

    The fast path is msgspec; its dicts keep the last of repeated keys, so the value is
    re-encoded and compared with the minified text: equal, no key can repeat. Otherwise
    (repeated keys, or only another spelling: ``1e5``, ``\\u00e9``) the stdlib decoder
    reads the pairs one by one.
    """
    if not text.strip():
        return {}, None
    raw = text.encode()
    try:
        value = _decode(raw)
        if not isinstance(value, dict | list) or _encode(value) == _minified(raw, indent=-1):
            return value, None
    except (msgspec.DecodeError, RecursionError):
        pass
    try:
        return _EXACT.decode(text), None
    except _RepeatedKey as exc:
        return None, f"arguments give the key {exc.key!r} more than once"
    except ValueError as exc:  # JSONDecodeError, or a number past int's 4,300 digits
        return None, f"arguments are not valid JSON: {exc}"
    except RecursionError:
        return None, "arguments are nested too deeply"


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str
    kind: str = "function"
    """``function`` (JSON arguments) or ``custom`` (free-text input: GPT-5's custom tools)."""
    _parsed: tuple[Any, str | None] | None = field(default=None, init=False, repr=False, compare=False)

    def parsed_arguments(self) -> tuple[Any, str | None]:
        """(value, None), or (None, why the arguments cannot be read): :func:`parse_arguments`,
        once per call, however many guards ask. The one place arguments are decoded."""
        if self._parsed is None:
            object.__setattr__(self, "_parsed", parse_arguments(self.arguments))
        return self._parsed  # type: ignore[return-value]

    @classmethod
    def from_wire(cls, raw: Any) -> ToolCall | None:
        """A ``tool_calls`` item as the chat-completions wire carries it (None: not an object)."""
        if not isinstance(raw, Mapping):
            return None
        custom = raw.get("custom")
        if raw.get("type") == "custom" and isinstance(custom, Mapping):
            text = custom.get("input")
            return cls(
                str(raw.get("id", "")), str(custom.get("name", "")), text if isinstance(text, str) else "", "custom"
            )
        function = raw.get("function")
        if not isinstance(function, Mapping):
            function = {}
        arguments = function.get("arguments")
        name = str(function.get("name", ""))
        return cls(str(raw.get("id", "")), name, arguments if isinstance(arguments, str) else "")

    def wire(self) -> dict[str, Any]:
        """The call as a ``tool_calls`` item."""
        if self.kind == "custom":
            return {"id": self.id, "type": "custom", "custom": {"name": self.name, "input": self.arguments}}
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    """Prompt tokens served from the provider's cache (``prompt_tokens_details.cached_tokens``)."""

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class Reply:
    """The assistant's answer (first choice), normalized."""

    content: str | None
    reasoning: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str | None
    usage: Usage
    model: str | None = None
    refusal: str | None = None
    """The model declined (OpenAI's ``message.refusal``): an answer the client handles, not silence."""
    other_output: bool = False
    """Output the guards do not read (``audio``, a legacy ``function_call``): not silence either."""

    @property
    def has_text(self) -> bool:
        return bool(self.content and self.content.strip())

    @property
    def has_reasoning(self) -> bool:
        return bool(self.reasoning and self.reasoning.strip())

    @property
    def cut_short(self) -> bool:
        """The provider stopped the reply (its output limit, its content filter): the same request
        would stop the same way again, and the client needs that ``finish_reason`` to act on."""
        return self.finish_reason in ("length", "content_filter")

    @property
    def answered(self) -> bool:
        """It said something: text, a tool call, a refusal or other output, or was cut short."""
        return bool(self.has_text or self.tool_calls or self.refusal or self.other_output or self.cut_short)

    @property
    def is_empty(self) -> bool:
        """Nothing at all: not even reasoning."""
        return not self.answered and not self.has_reasoning

    @property
    def is_reasoning_only(self) -> bool:
        """It thought but neither answered nor acted."""
        return self.has_reasoning and not self.answered


@dataclass(frozen=True, slots=True)
class Conversation:
    """The request's conversation as the guards see it."""

    messages: Sequence[Mapping[str, Any]]
    model: str | None = None
    tools: Sequence[Mapping[str, Any]] = ()
    """The request's ``tools`` as sent, and its legacy ``functions`` in the same form."""
    output_schema: Mapping[str, Any] | None = None
    """The JSON Schema of ``response_format: {"type": "json_schema"}``, when the request has one."""
    tool_schemas: Mapping[str, CompiledSchema | None] | None = None
    """The offered tools' ``parameters`` compiled at the edge, by tool name (None for one that
    declares none or does not compile). None: the conversation did not come through the edge
    (a replay, a test), and its schemas are compiled when first needed."""
    answer_schema: CompiledSchema | None = None
    """``output_schema`` compiled at the edge."""
    extra: Mapping[str, Any] = field(default_factory=dict)

    def tool_parameters(self) -> dict[str, Any]:
        """Offered function name → its parameters schema (``{}`` when it declares none)."""
        offered: dict[str, Any] = {}
        for tool in self.tools:
            function = tool.get("function")
            if isinstance(function, Mapping) and isinstance(function.get("name"), str):
                parameters = function.get("parameters")
                offered[function["name"]] = parameters if isinstance(parameters, Mapping) else {}
        return offered

    def calls_by_id(self) -> dict[str, ToolCall]:
        """Every tool call the history's assistant turns made, by call id."""
        calls: dict[str, ToolCall] = {}
        for message in self.messages:
            if message.get("role") != "assistant":
                continue
            for raw in message.get("tool_calls") or ():
                call = ToolCall.from_wire(raw)
                if call is not None:
                    calls[call.id] = call
        return calls

    def tool_results(self) -> list[Mapping[str, Any]]:
        """Tool results in order: ``tool`` messages, and the ``Observation:`` user turns of
        clients that flatten tools into text (smolagents)."""
        results = []
        first_user_seen = False
        for message in self.messages:
            role = message.get("role")
            if role == "tool":
                results.append(message)
            elif role == "user":
                if first_user_seen and content_text(message.get("content")).lstrip().startswith("Observation:"):
                    results.append(message)
                first_user_seen = True
        return results

    def trailing_tool_messages(self) -> list[Mapping[str, Any]]:
        """The tool results sent after the last assistant turn (this request's new results)."""
        trailing: list[Mapping[str, Any]] = []
        for message in reversed(self.messages):
            if message.get("role") != "tool":
                break
            trailing.append(message)
        return trailing[::-1]

    def assistant_texts(self) -> list[str]:
        """Text of each assistant turn, in order (empty string for pure tool-call turns)."""
        return [content_text(m.get("content")) for m in self.messages if m.get("role") == "assistant"]

    @property
    def has_assistant_turn(self) -> bool:
        return any(m.get("role") == "assistant" for m in self.messages)

    @property
    def used_tools(self) -> bool:
        """The history shows tool use: an assistant tool call or a tool result."""
        return any(m.get("role") == "tool" or m.get("tool_calls") for m in self.messages)

    def first_text(self, *roles: str) -> str | None:
        """Text of the first message with one of ``roles`` (content parts joined)."""
        for message in self.messages:
            if message.get("role") in roles:
                return content_text(message.get("content"))
        return None


def content_text(content: Any) -> str:
    """A message's text, whether content is a string or a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part.get("text", "") for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""

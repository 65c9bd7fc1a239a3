"""The normalized exchange: what guards may read, whatever the wire format.

An adapter in :mod:`proxy.wire` turns a wire format (chat completions today) into these
types. They are read-only views: the decoded JSON stays as it came, so unknown fields
survive and nothing is copied that no guard reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Conversation", "Reply", "ToolCall", "Usage"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str


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

    @property
    def has_text(self) -> bool:
        return bool(self.content and self.content.strip())

    @property
    def has_reasoning(self) -> bool:
        return bool(self.reasoning and self.reasoning.strip())

    @property
    def is_empty(self) -> bool:
        """No content, no tool call, no refusal and no reasoning: the model said nothing at all."""
        return not self.has_text and not self.tool_calls and not self.has_reasoning and not self.refusal

    @property
    def is_reasoning_only(self) -> bool:
        """It thought but neither answered, refused nor acted."""
        return self.has_reasoning and not self.has_text and not self.tool_calls and not self.refusal


@dataclass(frozen=True, slots=True)
class Conversation:
    """The request's conversation as the guards see it."""

    messages: Sequence[Mapping[str, Any]]
    model: str | None = None
    tools: Sequence[Mapping[str, Any]] = ()
    """The request's ``tools`` (function definitions), as sent."""
    output_schema: Mapping[str, Any] | None = None
    """The JSON Schema of ``response_format: {"type": "json_schema"}``, when the request has one."""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def tools_offered(self) -> bool:
        return bool(self.tools)

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
                if isinstance(raw, Mapping) and isinstance(raw.get("function"), Mapping):
                    function = raw["function"]
                    arguments = function.get("arguments")
                    call = ToolCall(
                        str(raw.get("id", "")),
                        str(function.get("name", "")),
                        arguments if isinstance(arguments, str) else "",
                    )
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

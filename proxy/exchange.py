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


@dataclass(frozen=True, slots=True)
class Reply:
    """The assistant's answer (first choice), normalized."""

    content: str | None
    reasoning: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str | None
    usage: Usage
    model: str | None = None

    @property
    def has_text(self) -> bool:
        return bool(self.content and self.content.strip())

    @property
    def has_reasoning(self) -> bool:
        return bool(self.reasoning and self.reasoning.strip())

    @property
    def is_empty(self) -> bool:
        """No content, no tool call and no reasoning: the model said nothing at all."""
        return not self.has_text and not self.tool_calls and not self.has_reasoning

    @property
    def is_reasoning_only(self) -> bool:
        """It thought but neither answered nor acted."""
        return self.has_reasoning and not self.has_text and not self.tool_calls


@dataclass(frozen=True, slots=True)
class Conversation:
    """The request's conversation as the guards see it."""

    messages: Sequence[Mapping[str, Any]]
    model: str | None = None
    tools_offered: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)

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

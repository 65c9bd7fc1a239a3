"""The wire formats the proxy guards: one adapter each, one guarded route each.

A new format is a new adapter here; the app registers its route, and every guard, budget,
ending and metric works on it unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

from proxy.upstream.paths import CLAUDE_TELEMETRY
from proxy.wire.base import WireAdapter
from proxy.wire.chat.adapter import CHAT_COMPLETIONS
from proxy.wire.messages.adapter import MESSAGES
from proxy.wire.responses.adapter import RESPONSES

__all__ = ["ADAPTERS", "adapter_named", "passthrough_format"]

ADAPTERS: tuple[WireAdapter, ...] = (CHAT_COMPLETIONS, RESPONSES, MESSAGES)


def adapter_named(name: object) -> WireAdapter | None:
    """The adapter a step record names (``wire``); chat completions for records written before
    records named their format; None for a format this build does not speak."""
    if name is None:
        return CHAT_COMPLETIONS
    return next((adapter for adapter in ADAPTERS if adapter.name == name), None)


def passthrough_format(path: str, header: Callable[[bytes], str | None]) -> WireAdapter | None:
    """The wire format of a call the proxy passes through, for its errors' shape and where its
    key goes: the adapter whose route the path extends (``/v1/messages/count_tokens``), or
    Messages for a call an Anthropic client marks with ``anthropic-version`` (Claude Code's
    ``GET /v1/models``); None: OpenAI's."""
    path = path.partition("?")[0]
    if path == CLAUDE_TELEMETRY:
        return MESSAGES
    for adapter in ADAPTERS:
        if path.startswith(adapter.route + "/"):
            return adapter
    return MESSAGES if header(b"anthropic-version") is not None else None

"""The wire formats the proxy guards: one adapter each, one guarded route each.

A new format is a new adapter here; the app registers its route, and every guard, budget,
ending and metric works on it unchanged.
"""

from __future__ import annotations

from proxy.wire.base import WireAdapter
from proxy.wire.chat_completions import CHAT_COMPLETIONS
from proxy.wire.responses import RESPONSES

__all__ = ["ADAPTERS", "adapter_named"]

ADAPTERS: tuple[WireAdapter, ...] = (CHAT_COMPLETIONS, RESPONSES)


def adapter_named(name: object) -> WireAdapter | None:
    """The adapter a step record names (``wire``); chat completions for records written before
    records named their format; None for a format this build does not speak."""
    if name is None:
        return CHAT_COMPLETIONS
    return next((adapter for adapter in ADAPTERS if adapter.name == name), None)

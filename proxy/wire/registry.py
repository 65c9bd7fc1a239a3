"""The wire formats the proxy guards: one adapter each, one guarded route each.

A new format is a new adapter here; the app registers its route, and every guard, budget,
ending and metric works on it unchanged.
"""

from __future__ import annotations

from proxy.wire.base import WireAdapter
from proxy.wire.chat_completions import CHAT_COMPLETIONS

__all__ = ["ADAPTERS"]

ADAPTERS: tuple[WireAdapter, ...] = (CHAT_COMPLETIONS,)

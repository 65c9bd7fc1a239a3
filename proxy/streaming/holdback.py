"""The streaming contract of a response guard: what it still needs held back, mid-stream.

A guard decides on the whole reply, but a streamed reply reaches the client piece by
piece. So while a reply streams, each guard says which channels (text, reasoning, tool
calls; :class:`~proxy.exchange.Channel`) it may still object to, given what has
arrived so far (:meth:`~proxy.guards.base.ResponseGuard.holds`). A channel flows to the
client once no guard holds it, and never stops again. A guard that does not say holds
everything until the reply is complete (the protocol's default): a new guard is correct on
streams with no streaming code, and fast once it says what it needs.
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.exchange import Channel, PartialReply
from proxy.guards.base import GuardContext, ResponseGuard

__all__ = ["held_channels"]


def held_channels(guards: Sequence[ResponseGuard], partial: PartialReply, context: GuardContext) -> int:
    """Every channel some guard still holds."""
    held = Channel.NONE
    for guard in guards:
        held |= guard.holds(partial, context)
        if held == Channel.ALL:
            break
    return held

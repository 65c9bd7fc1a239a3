"""The wire formats the proxy guards: one :class:`~proxy.wire.base.WireFormat` each, one
guarded route each.

A new format is one subpackage under :mod:`proxy.wire` and one line in :data:`FORMATS`; the
app registers its route, and every guard, budget, ending and metric works on it unchanged
(and :mod:`tests.unit.wire.test_contract` runs the wire contract suite over it).
"""

from __future__ import annotations

from collections.abc import Callable

from proxy.upstream.paths import CLAUDE_TELEMETRY
from proxy.wire.base import WireFormat
from proxy.wire.chat.format import CHAT_COMPLETIONS
from proxy.wire.gemini.format import GEMINI
from proxy.wire.messages.format import MESSAGES
from proxy.wire.responses.format import RESPONSES

__all__ = ["FORMATS", "format_named", "passthrough_format"]

FORMATS: tuple[WireFormat, ...] = (
    CHAT_COMPLETIONS,
    RESPONSES,
    MESSAGES,
    GEMINI,
)


def format_named(name: object) -> WireFormat | None:
    """The format a step record names (``wire``); chat completions for records written before
    records named their format; None for a format this build does not speak."""
    if name is None:
        return CHAT_COMPLETIONS
    return next((wire for wire in FORMATS if wire.name == name), None)


def passthrough_format(path: str, header: Callable[[bytes], str | None]) -> WireFormat | None:
    """The wire format of a call the proxy passes through, for its errors' shape and where its
    key goes: the format whose route the path extends (``/v1/messages/count_tokens``), or
    Messages for a call an Anthropic client marks with ``anthropic-version`` (Claude Code's
    ``GET /v1/models``), or the format that claims it (Gemini's ``/v1/models/x:countTokens``);
    None: OpenAI's."""
    path = path.partition("?")[0]
    if path in CLAUDE_TELEMETRY:
        return MESSAGES
    claimed = next((w for w in FORMATS if w.addressing is not None and w.addressing.claims(path, header)), None)
    if claimed is not None:  # Gemini's calls below /v1 (``/v1/models/x:countTokens``)
        return claimed
    for wire in FORMATS:
        if path.startswith(wire.route + "/"):
            return wire
    return MESSAGES if header(b"anthropic-version") is not None else None

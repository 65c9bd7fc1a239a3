"""The usage a pass-through reply reports, read from its last bytes in any format.

A pass-through body is relayed chunk by chunk and never held whole (an embeddings reply can
be tens of megabytes), but every API puts ``usage`` last or near it: after ``data`` in an
embeddings list, in the last chunk of a completions stream, at the end of a response or a
batch object. :class:`UsageTap` keeps a bounded tail; :meth:`UsageTap.usage` finds the last
``"usage": {...}`` object there and reads it as whichever format wrote it (``prompt_tokens``
for Chat Completions, completions and embeddings; ``input_tokens`` for Responses, images and
batches; Anthropic's cache fields for Messages).
"""

from __future__ import annotations

import json
import re
from typing import Any

from proxy.exchange import Usage
from proxy.wire.chat.stream import parse_usage as chat_usage
from proxy.wire.messages.parse import parse_usage as messages_usage
from proxy.wire.responses.parse import parse_usage as responses_usage

__all__ = ["TAIL_BYTES", "UsageTap", "named_model"]

TAIL_BYTES = 64 * 1024
"""How much of a reply's end is kept: far more than a usage object and the model name need."""
_KEY = re.compile(r'(?<!\\)"(usage|model)"\s*:\s*')
_DECODER = json.JSONDecoder()
_ANTHROPIC = ("cache_creation_input_tokens", "cache_read_input_tokens")


class UsageTap:
    """The last :data:`TAIL_BYTES` of a body relayed through it."""

    __slots__ = ("_tail",)

    def __init__(self) -> None:
        self._tail = bytearray()

    def feed(self, chunk: bytes) -> None:
        self._tail += chunk
        if len(self._tail) > 2 * TAIL_BYTES:  # trimmed now and then, not on every chunk
            del self._tail[:-TAIL_BYTES]

    def usage(self) -> tuple[Usage, str | None]:
        """The last usage object the body reports (zero when none) and the model it names."""
        text = bytes(self._tail[-TAIL_BYTES:]).decode("utf-8", "replace")
        found = _values(text)
        raw = next((value for key, value in reversed(found) if key == "usage" and isinstance(value, dict)), None)
        return _as_usage(raw), next((v for k, v in reversed(found) if k == "model" and isinstance(v, str)), None)


def named_model(body: bytes) -> str | None:
    """The ``model`` a request body names near its start (for pricing when the reply names none)."""
    found = _values(body[:TAIL_BYTES].decode("utf-8", "replace"))
    return next((value for key, value in found if key == "model" and isinstance(value, str)), None)


def _values(text: str) -> list[tuple[str, Any]]:
    """Every ``"usage"`` and ``"model"`` member in ``text`` with its JSON value, in order;
    members cut off by the tail's start or end are skipped. Linear: each value is decoded
    once, and the search goes on after it."""
    found = []
    position = 0
    while (match := _KEY.search(text, position)) is not None:
        try:
            value, position = _DECODER.raw_decode(text, match.end())
        except (ValueError, RecursionError):
            position = match.end()
            continue
        found.append((match[1], value))  # members inside this value are not searched again
    return found


def _as_usage(raw: dict[str, Any] | None) -> Usage:
    if raw is None:
        return Usage()
    if "prompt_tokens" in raw or "completion_tokens" in raw:
        usage = chat_usage(raw)
    elif any(name in raw for name in _ANTHROPIC):
        usage = messages_usage(raw)
    else:
        usage = responses_usage(raw)
    total = raw.get("total_tokens")
    if not usage.total and isinstance(total, int) and not isinstance(total, bool) and total > 0:
        return Usage(prompt_tokens=total)  # only a total (some embeddings APIs): all of it prompt
    return usage

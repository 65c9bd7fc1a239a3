"""A tool call's arguments decoded strictly: JSON whose every key is given once.

A key given twice (``{"command": "rm -rf /", "command": "ls"}``) would let a permission check
and the tool's executor each read another value, so such arguments do not decode. The neutral
exchange (:meth:`proxy.exchange.ToolCall.parsed_arguments`) decodes each call's once.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

__all__ = ["parse_arguments"]

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

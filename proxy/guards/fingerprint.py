"""Fingerprints of tool calls and digests of tool results: what "the same again" means.

Two calls are the same when the tool name and the *meaning* of the arguments match: JSON
is parsed and re-serialized with sorted keys, integral floats become integers (``1.0`` is
``1``), and whitespace inside strings is collapsed, so re-serialized or re-spaced arguments
(pydantic-ai sends them compact, others pretty) do not look new. Arguments that are not
JSON (or give a key twice) are fingerprinted as their whitespace-collapsed text.

A *near* fingerprint also folds case and drops whitespace inside strings (``Paris``,
``paris`` and ``PARIS `` are one near call): the loop guard counts near repeats at a softer
rung than exact ones.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from typing import Any

from proxy.exchange import ToolCall, parse_arguments
from proxy.session.base import FIELDS, SessionDelta
from proxy.text import one_spaced, unspaced

__all__ = [
    "CALL_COUNT_PREFIX",
    "CALL_SEQUENCE",
    "NEAR_COUNT_PREFIX",
    "canonical_arguments",
    "digest",
    "fingerprint",
    "near_fingerprint",
    "remember_calls",
]

CALL_COUNT_PREFIX = FIELDS.CALL_COUNT_PREFIX
"""Session field per fingerprint: how many times the agent received that call."""
NEAR_COUNT_PREFIX = FIELDS.NEAR_COUNT_PREFIX
"""Session field per near fingerprint: how many times the agent received that near call."""
CALL_SEQUENCE = FIELDS.CALL_SEQUENCE
"""Session list field: the fingerprints of recent delivered calls, in order (for cycles)."""


def _text(value: str, near: bool) -> str:
    return unspaced(value).casefold() if near else one_spaced(value)


def _normalize(value: Any, near: bool) -> Any:
    if isinstance(value, dict):
        return {str(k): _normalize(v, near) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalize(v, near) for v in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, str):
        return _text(value, near)
    return value


def canonical_arguments(arguments: str, near: bool = False) -> str:
    """The arguments' canonical text: sorted-key compact JSON, or collapsed raw text (with
    ``near``, strings also case-folded and without whitespace)."""
    parsed, problem = parse_arguments(arguments)
    if problem is not None:  # not JSON, or a key given twice: the text is all there is
        return _text(arguments, near)
    try:
        return json.dumps(_normalize(parsed, near), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except RecursionError:  # a pathologically deep value: its text is canonical enough
        return _text(arguments, near)


_REMEMBERED_CHARS = 4096
"""Longest arguments whose fingerprint is remembered (a call's arguments are mostly short)."""


def fingerprint(name: str, arguments: str) -> str:
    """A short stable id of (tool name, canonical arguments). Remembered for short arguments:
    one reply's calls are fingerprinted by the loop guard, the session's count and the
    timeline alike, and canonical JSON is the costly part."""
    if len(arguments) > _REMEMBERED_CHARS:
        return _fingerprint.__wrapped__(name, arguments)
    return _fingerprint(name, arguments)


@functools.lru_cache(maxsize=512)  # at most 512 x 4096 characters held
def _fingerprint(name: str, arguments: str, near: bool = False) -> str:
    return digest(name + "\x00" + canonical_arguments(arguments, near))


def near_fingerprint(name: str, arguments: str) -> str:
    """The fingerprint of the call but for case and whitespace in its strings."""
    if len(arguments) > _REMEMBERED_CHARS:
        return _fingerprint.__wrapped__(name, arguments, True)
    return _fingerprint(name, arguments, True)


def remember_calls(delta: SessionDelta, calls: Sequence[ToolCall], keep: int) -> None:
    """Count the tool calls of a reply that reaches the agent, and append them to the sequence.

    Counting what the proxy *delivered* (not the history the client resends) works for
    clients that flatten or re-serialize tool calls.
    """
    for tool_call in calls:
        mark = fingerprint(tool_call.name, tool_call.arguments)
        delta.incr(CALL_COUNT_PREFIX + mark)
        delta.incr(NEAR_COUNT_PREFIX + near_fingerprint(tool_call.name, tool_call.arguments))
        delta.append(CALL_SEQUENCE, mark, keep)


def digest(text: str) -> str:
    """16 hex chars of SHA-256: enough to tell results apart, small enough to keep many."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]

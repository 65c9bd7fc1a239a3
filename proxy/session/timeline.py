"""A session's timeline and a namespace's session index: what both stores keep, the same way.

The timeline is the session's history (steps, interventions, judge calls, retries, runs,
grants, endings), appended by the commit that makes it, bounded per session: the oldest
events go first, counted in ``FIELDS.TIMELINE_DROPPED``. Events are numbered from the
session's start (``FIELDS.TIMELINE_TOTAL`` counts them), so a page's cursor stays valid while
older events are pushed out.

The index lists a namespace's sessions newest first (a tenant's, or one caller's of the open
tenant) with a summary of each, so listing reads one structure instead of every session; it is
bounded per namespace, the least recently seen going first.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import msgspec

from proxy.session.base import FIELDS, Listed, SessionState, TimelineEvent, TimelinePage

__all__ = [
    "DEFAULT_LISTED_SESSIONS",
    "DEFAULT_TIMELINE_EVENTS",
    "SUMMARY_FIELDS",
    "Listed",
    "TimelinePage",
    "client_name",
    "decode_event",
    "decode_summary",
    "encode_event",
    "index_key",
    "last_seen_ms",
    "listing",
    "split_session_key",
    "summary",
    "timeline_key",
]

DEFAULT_TIMELINE_EVENTS = 500
"""Events kept per session: a long agent run is a few hundred steps."""
DEFAULT_LISTED_SESSIONS = 10_000
"""Sessions kept listed per namespace."""

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(tuple[str, int, dict[str, Any]]).decode


def encode_event(event: TimelineEvent) -> str:
    """One event as stored: ``[kind, at_ms, {fields}]``, compact JSON."""
    return _encode((event.kind, event.at_ms, event.fields)).decode()


def decode_event(raw: str | bytes) -> TimelineEvent:
    kind, at_ms, fields = _decode(raw)
    return TimelineEvent(kind, at_ms, fields)


def timeline_key(key: str) -> str:
    """The timeline of session ``key``: same hash tag, so the commit script writes both."""
    return f"{key}:timeline"


def index_key(namespace: str) -> str:
    """The session index of a namespace, under the namespace's own hash tag."""
    return f"lw:{{{namespace}}}:sessions"


def split_session_key(key: str) -> tuple[str, str] | None:
    """``lw:{namespace:id}`` → (namespace, id); None for any other key (a tenant's day...)."""
    if not key.startswith("lw:{") or not key.endswith("}"):
        return None
    namespace, colon, session_id = key[4:-1].partition(":")
    return (namespace, session_id) if colon and namespace and session_id else None


SUMMARY_FIELDS = (
    FIELDS.FIRST_SEEN,
    FIELDS.STEPS,
    FIELDS.TURNS,
    FIELDS.TOKENS_IN,
    FIELDS.TOKENS_OUT,
    FIELDS.COST_MICROS,
    FIELDS.TERMINATION,
    FIELDS.POLICY,
    FIELDS.CLIENT,
    FIELDS.TIMELINE_TOTAL,
    FIELDS.RUN,
)


def last_seen_ms(state: SessionState) -> int:
    """Where a session sits in its index: when it was last seen (epoch ms)."""
    return state.counter(FIELDS.LAST_SEEN_MS) or state.counter(FIELDS.LAST_SEEN) * 1000


def summary(state: SessionState, ttl_seconds: int) -> dict[str, str | int]:
    """What the list shows and filters by without loading the session; ``expires_ms`` lets it
    skip a session whose state has expired but whose entry is still listed."""
    values = state.values
    shown: dict[str, str | int] = {name: values[name] for name in SUMMARY_FIELDS if values.get(name)}
    shown["expires_ms"] = last_seen_ms(state) + ttl_seconds * 1000
    return shown


def listing(state: SessionState, ttl_seconds: int) -> tuple[int, str]:
    """A session's index entry as stored on Redis: its last-seen time and summary (JSON)."""
    return last_seen_ms(state), _encode(summary(state, ttl_seconds)).decode()


def client_name(headers: list[tuple[str, str]]) -> str:
    """The agent client, as its User-Agent names itself first (``codex_exec/0.2 (...)`` →
    ``codex_exec``, ``claude-cli/1.0`` → ``claude-cli``, ``OpenAI/Python 1.9`` → ``openai``):
    bounded, lower case, for listing and filtering; ``unknown`` without one."""
    for name, value in headers:
        if name.lower() == "user-agent":
            return _product(value)
    return "unknown"


@functools.lru_cache(maxsize=256)
def _product(user_agent: str) -> str:
    """A User-Agent's first product, as :func:`client_name` names it (remembered: a client
    sends the same User-Agent on every call, and this walks it character by character)."""
    product = user_agent.strip().split("/", 1)[0].split(" ", 1)[0].lower()
    return "".join(c for c in product[:40] if c.isalnum() or c in "-_.") or "unknown"


def decode_summary(raw: str | bytes | None) -> Mapping[str, Any]:
    if not raw:
        return {}
    try:
        decoded = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return {}
    return decoded if isinstance(decoded, dict) else {}

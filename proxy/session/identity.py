"""Which session a request belongs to.

Clients rarely send a session id (none of six common agent frameworks does by default), so
the usual id is derived: a hash of the conversation's opening, the first system (or
developer) message and the first user message, which every turn of a loop resends. Only
the opening is hashed, so re-serialized assistant turns and messages inserted later do not
move the id. A request carrying only the opening starts the derived session afresh: two
runs that open identically must not share budgets or endings.

``X-Session-Id`` (plus ``X-Agent-Id`` for sub-agents) wins when sent; then an id the client's
own wire format carries (Anthropic's ``metadata.user_id``, a Responses ``prompt_cache_key``). Every id is
namespaced by the authenticated tenant, so no header reaches another tenant's state.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass

from proxy.exchange import Conversation

__all__ = ["SessionRef", "identify", "session_key"]

_SAFE_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class SessionRef:
    id: str
    """What the client sees in ``X-LoopWarden-Session`` and uses in the sessions API."""
    key: str
    """The store key: tenant-namespaced, with a Redis Cluster hash tag."""
    derived: bool
    fresh: bool
    """The request opens a new run: its state must start empty."""
    sub_agent: bool = False
    """Sent with ``X-Agent-Id``: a helper under a parent session (it never drives the parent's goal)."""


def session_key(tenant: str, session_id: str) -> str:
    """``lw:{tenant:session}``; tenant names cannot contain ':' so no id can cross tenants."""
    return f"lw:{{{tenant}:{session_id}}}"


def _clean(value: str) -> str:
    value = value.strip()
    if _SAFE_ID.match(value):
        return value
    return "h-" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _canonical(text: str | None) -> str:
    return _SPACE.sub(" ", unicodedata.normalize("NFC", text or "")).strip()


def identify(
    tenant: str,
    conversation: Conversation,
    session_header: str | None,
    agent_header: str | None,
    client_session: str | None = None,
) -> SessionRef:
    """``X-Session-Id``; else the session id the client's own format carries (``client_session``,
    from its adapter); else the derived hash of the opening."""
    agent = f"@{_clean(agent_header)}" if agent_header and agent_header.strip() else ""
    chosen = session_header if session_header and session_header.strip() else client_session
    if chosen and chosen.strip():
        session_id = _clean(chosen) + agent
        return SessionRef(
            session_id, session_key(tenant, session_id), derived=False, fresh=False, sub_agent=bool(agent)
        )
    opening = (
        _canonical(conversation.first_text("system", "developer"))
        + "\x1f"
        + _canonical(conversation.first_text("user"))
    )
    session_id = "d-" + hashlib.sha256(opening.encode()).hexdigest()[:32] + agent
    return SessionRef(
        session_id,
        session_key(tenant, session_id),
        derived=True,
        fresh=not conversation.has_assistant_turn,
        sub_agent=bool(agent),
    )

"""Which session a request belongs to.

Clients rarely send a session id (none of six common agent frameworks does by default), so
the usual id is derived from what every turn of a loop resends: the conversation's opening
(the first system or developer message and the first user message) and the run's first
reply (the first assistant turn: its call ids, or its text). Two runs of the same task
therefore never share a session, back to back or side by side: their first replies differ
(call ids are unique); a client that sends the reply's calls back as text (smolagents'
``Calling tools:``) is read by those calls. A request carrying only the opening is a new run; it stores nothing
under the opening, and commits under the run its reply names (:func:`named_run`), which
is where the run's next request looks; until then its ref is not ``named`` (what would
show the id waits for the name, see :meth:`proxy.request.AgentRequest.when_named`), so one
id names the session everywhere. Re-serialized arguments and messages inserted
later do not move the id; a history whose first reply the proxy never delivered is a run
of its own.

``X-Session-Id`` (plus ``X-Agent-Id`` for sub-agents) wins when sent; then an id the client's
own wire format carries (Claude Code's ``metadata.user_id``, Codex's ``session_id``). Every id is
namespaced by the authenticated tenant, so no header reaches another tenant's state.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from proxy.exchange import Conversation, ToolCall, flattened_calls
from proxy.schemas.weighted_cache import WeightedCache
from proxy.text import one_spaced

__all__ = ["SessionRef", "identify", "named_run", "session_key", "turn_digest"]

_SAFE_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


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
    namespace: str = ""
    opening: str = ""
    """A derived session's opening, hashed (with its first reply it names the run)."""
    agent: str = ""
    """The ``@agent`` suffix of a sub-agent's id."""
    named: bool = True
    """False for a derived run's first request until its delivered reply names the run
    (:func:`named_run`): ``id`` is provisional until then, and nothing may show it."""


def session_key(tenant: str, session_id: str) -> str:
    """``lw:{tenant:session}``; tenant names cannot contain ':' so no id can cross tenants."""
    return f"lw:{{{tenant}:{session_id}}}"


def _clean(value: str) -> str:
    value = value.strip()
    if _SAFE_ID.match(value):
        return value
    return "h-" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _canonical(text: str) -> str:
    return one_spaced(unicodedata.normalize("NFC", text))


_OPENINGS: WeightedCache[tuple[str, str, str], str] = WeightedCache(8_000_000)
"""Openings hashed, per tenant and texts, up to about 8 M characters of texts: every request of
a run resends its opening, whose instructions run to tens of kilobytes (a lookup hashes them
once, about a twentieth of collapsing and hashing them again). Per tenant: how fast an opening
is identified tells nothing about another tenant's."""
_WEIGHT = 200
"""What an entry holds besides its texts' characters (the key's tuple, the digest), about."""


def _opening(tenant: str, system: str, user: str) -> str:
    """The opening's hash: its system (or developer) text and its first user text, canonical."""
    key = (tenant, system, user)
    opened = _OPENINGS.get(key)
    if opened is None:
        opening = _canonical(system) + "\x1f" + _canonical(user)
        opened = hashlib.sha256(opening.encode()).hexdigest()
        _OPENINGS.put(key, opened, len(system) + len(user) + len(tenant) + _WEIGHT)
    return opened


def identify(
    tenant: str,
    conversation: Conversation,
    session_header: str | None,
    agent_header: str | None,
    client_session: str | None = None,
) -> SessionRef:
    """``X-Session-Id``; else the session id the client's own format carries (``client_session``,
    from its codec's ``session_hint``); else the derived hash of the opening."""
    agent = f"@{_clean(agent_header)}" if agent_header and agent_header.strip() else ""
    chosen = session_header if session_header and session_header.strip() else client_session
    if chosen and chosen.strip():
        session_id = _clean(chosen) + agent
        return SessionRef(
            session_id, session_key(tenant, session_id), derived=False, fresh=False, sub_agent=bool(agent)
        )
    opened = _opening(
        tenant, conversation.first_text("system", "developer") or "", conversation.first_text("user") or ""
    )
    first = next((m for m in conversation.messages if m.role == "assistant"), None)
    if first is None:  # the opening alone: a new run, named by the reply it gets (see named_run)
        session_id = "d-" + opened[:32] + agent
        key = session_key(tenant, session_id)
        return SessionRef(session_id, key, True, True, bool(agent), tenant, opened, agent, named=False)
    calls = first.tool_calls or flattened_calls(first.text)  # smolagents sends its calls back as text
    session_id = _run_id(opened, turn_digest(first.text, calls), agent)
    return SessionRef(session_id, session_key(tenant, session_id), True, False, bool(agent), tenant, opened, agent)


def named_run(opening: SessionRef, first_reply: str) -> SessionRef:
    """The session of the run a derived opening started, once its first reply (its
    :func:`turn_digest`) is known: the one every later request of that run will name."""
    session_id = _run_id(opening.opening, first_reply, opening.agent)
    return SessionRef(
        session_id,
        session_key(opening.namespace, session_id),
        derived=True,
        fresh=True,
        sub_agent=opening.sub_agent,
        namespace=opening.namespace,
        opening=opening.opening,
        agent=opening.agent,
    )


def _run_id(opening: str, first_reply: str, agent: str) -> str:
    return "d-" + hashlib.sha256(f"{opening}\x1e{first_reply}".encode()).hexdigest()[:32] + agent


def turn_digest(text: str | None, calls: Sequence[ToolCall]) -> str:
    """What identifies an assistant turn as a client sends it back: its calls' ids and names
    (clients re-serialize arguments and drop or keep the text beside calls as they like), else
    its text, canonicalized."""
    identity = (
        "\x1e".join(f"{tool_call.id}\x1f{tool_call.name}" for tool_call in calls) if calls else _canonical(text or "")
    )
    return hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()[:32]

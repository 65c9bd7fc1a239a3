"""What one agent request is, and what the pipeline hands back for it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from litestar.types import Send

from proxy.exchange import Conversation
from proxy.policy.models import Policy
from proxy.session.base import WindowLimit
from proxy.session.identity import SessionRef
from proxy.upstream.client import UpstreamReply
from proxy.wire.base import WireFormat

__all__ = ["AgentRequest", "Outcome", "RequestNotes"]

JSON = b"application/json"
SSE = b"text/event-stream"


@dataclass(slots=True)
class AgentRequest:
    """One agent request, authenticated and parsed."""

    tenant: str
    policy: Policy
    session: SessionRef
    payload: dict[str, Any]
    body: bytes
    conversation: Conversation
    url: str
    headers: list[tuple[str, str]]
    stream: bool
    wire: WireFormat
    """The request's wire format (the route's): parses what comes and renders what goes."""
    daily_tokens: int | None = None
    """The tenant's rolling-day token cap, if any."""
    daily_cost_usd: float | None = None
    goal: str | None = None
    """``X-LoopWarden-Goal``: the objective this request sets for its session."""
    goal_criteria: str | None = None
    respond: Send | None = None
    """For a stream: where the pipeline writes the client's events as they may go."""
    namespace: str = ""
    """The caller's session namespace, for keys beside the session's own (a response chain's)."""
    store_failure: str | None = None
    """Why a store call made for this request before the pipeline (its chain's lookup) failed:
    the pipeline then asks the store nothing more, as after its own first failure."""
    worst_tokens: int | None = field(default=None, init=False, repr=False, compare=False)
    """Its worst case in tokens, once :func:`proxy.books.budgets.worst_tokens` worked it out."""

    def include_usage(self) -> bool:
        """A streaming client asked for the usage event (its format says how)."""
        return self.wire.stream.include_usage(self.payload)

    def log_fields(self) -> dict[str, object]:
        """The fields every log line about this request starts with."""
        return {"tenant": self.tenant, "policy": self.policy.name, "session": self.session.id}


@dataclass(slots=True)
class Outcome:
    """What goes back to the agent: a complete body, an upstream reply to copy, or nothing
    more (a stream the pipeline delivered itself)."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes | None = None
    content_type: bytes = JSON
    upstream: UpstreamReply | None = None
    delivered: bool = False
    """The pipeline already wrote the whole response (a guarded stream)."""


@dataclass(slots=True)
class RequestNotes:
    """What happened on this request, for headers, metrics and logs, and what to settle."""

    started: float
    interventions: list[str] = field(default_factory=list)
    shadow: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    degraded: bool = False
    terminated: str | None = None
    refused: str | None = None
    """A session budget the call did not fit in (its reservation was refused)."""
    daily: list[WindowLimit] = field(default_factory=list)
    """Tenant window reservations to settle."""
    committed: bool = False
    claim: bool | None = None
    """The session's ending: None, not asked for; True, this request produces it; False, another does."""
    goal: str | None = None
    """The session's goal status after this request (goal mode only)."""
    streaming: bool = False
    """An upstream attempt is streaming to the client: its step is not counted until it ends,
    but headers sent while it streams count it (the client is reading its reply)."""

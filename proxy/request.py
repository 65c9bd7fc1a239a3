"""What one agent request is, and what the pipeline hands back for it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from litestar.types import Send

from proxy.exchange import Conversation
from proxy.observe.logs import log_event, logger
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
    _held: list[Callable[[], None]] = field(default_factory=list, init=False, repr=False, compare=False)
    """What names the session and waits for its name (see :meth:`when_named`)."""

    def include_usage(self) -> bool:
        """A streaming client asked for the usage event (its format says how)."""
        return self.wire.stream.include_usage(self.payload)

    def log_fields(self) -> dict[str, object]:
        """The fields every log line about this request starts with."""
        return {"tenant": self.tenant, "policy": self.policy.name, "session": self.session.id}

    def log(self, event: str, fields: Mapping[str, object], level: int = logging.INFO) -> None:
        """One log line about this request, after :meth:`log_fields`: written when its session
        has its name (at once but for a derived run's first request), keeping when it happened."""
        if not logger.isEnabledFor(level):
            return
        if self.session.named:
            log_event(event, {**self.log_fields(), **fields}, level)
            return
        at = time.time()
        self._held.append(lambda: log_event(event, {**self.log_fields(), **fields}, level, at=at))

    def when_named(self, action: Callable[[], None]) -> None:
        """Run ``action`` (which names the session: a log line, a recorded step) once the
        session has its name. A derived run's first request learns it only from the reply it
        delivers (:func:`proxy.session.identity.named_run`); until then what would name the
        session waits, so the log, the recording, the header, the timeline and the sessions API
        all name one session."""
        if self.session.named:
            action()
        else:
            self._held.append(action)

    def name_session(self, session: SessionRef) -> None:
        """The one place a request's session is renamed: the run its delivered reply names."""
        self.session = session
        self.release()

    def release(self) -> None:
        """Let out what waited for the session's name, under the name it has now (when the
        request ends without delivering a reply: the provisional one, which no run took)."""
        held, self._held = self._held, []
        for action in held:
            action()


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

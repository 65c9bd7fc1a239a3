"""The state of one agent request while the guard loop runs it, across its attempts."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from proxy.exchange import Reply, Turn
from proxy.goal.keeper import GoalRun
from proxy.guards.base import GuardContext
from proxy.judge.client import JudgeTarget, judge_target
from proxy.loop.continuity import Continuity
from proxy.request import AgentRequest, RequestNotes
from proxy.session.base import Limit, SessionDelta, SessionState
from proxy.streaming.client import ClientStream

__all__ = ["InFlight"]


@dataclass(slots=True, kw_only=True)
class InFlight:
    """One request in the guard loop: what it is, the session's books, and what it sends next.

    Built from its parts (the request, the session as loaded and this request's delta, its
    notes and reservations, the client's stream); the rest starts from the request."""

    request: AgentRequest
    state: SessionState
    delta: SessionDelta
    notes: RequestNotes
    limits: Sequence[Limit]
    client: ClientStream | None
    payload: Mapping[str, Any] = field(init=False)
    """What goes upstream next: the client's payload, amended by the guards, spliced."""
    allowed: int = field(init=False)
    """Attempts this request may make: ``max_attempts``, more for goal mode's own turns."""
    continuity: Continuity = field(init=False)
    judge: JudgeTarget | None = None
    extra: list[Turn] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)
    """Every usable reply of this request's attempts (their ids may be continued from)."""
    retries: defaultdict[str, int] = field(default_factory=partial(defaultdict, int))
    """Nudges of each kind sent so far (a defaultdict: no Counter's Python-level ``__init__`` per request)."""
    goal: GoalRun | None = None
    """Goal mode's state over this request (None outside goal mode)."""

    def __post_init__(self) -> None:
        self.payload = self.request.payload
        self.allowed = self.request.policy.max_attempts
        self.continuity = Continuity(self.request, self.state, self.delta)

    def begin_attempts(self) -> None:
        """Before the first attempt: the session's records spliced into what goes upstream, and
        where this request's judge calls go (resolved once)."""
        self.payload = self.continuity.splice(self.payload)
        self.judge = judge_target(self.request)

    @property
    def enforce(self) -> bool:
        """Guards are acted on (not shadow mode)."""
        return self.request.policy.mode == "enforce"

    def context(self, state: SessionState, *, retries: bool = True) -> GuardContext:
        """What a guard reads: the session as ``state`` shows it, the nudges sent so far, the
        request's start as its clock, and where a judge call goes."""
        request = self.request
        return GuardContext(
            request.policy,
            state,
            request.conversation,
            self.retries if retries else {},
            self.notes.started,
            self.judge,
            len(request.body),
        )

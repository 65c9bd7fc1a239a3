"""The state of one agent request while the guard loop runs it, across its attempts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.exchange import Reply, Turn
from proxy.goal.model import Goal
from proxy.guards.base import GuardContext
from proxy.judge.client import JudgeTarget
from proxy.request import AgentRequest, RequestNotes
from proxy.session.base import Limit, SessionDelta, SessionState
from proxy.streaming.client import ClientStream

__all__ = ["InFlight"]


@dataclass(slots=True)
class InFlight:
    """One request in the guard loop: what it is, the session's books, and what it sends next."""

    call: AgentRequest
    state: SessionState
    delta: SessionDelta
    notes: RequestNotes
    limits: Sequence[Limit]
    client: ClientStream | None
    enforce: bool
    payload: Mapping[str, Any]
    judge: JudgeTarget | None
    allowed: int
    extra: list[Turn] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)
    """Every usable reply of this request's attempts (their ids may be continued from)."""
    retries: Counter[str] = field(default_factory=Counter)
    goal: Goal | None = None
    goal_rounds: int = 0
    goal_offered: bool = False
    """The goal tool is offered to the upstream in this request (any reply may call it)."""
    stripped: tuple[Reply, Mapping[str, str]] | None = None
    """The upstream's reply whose goal tool calls the agent does not see, and their results."""
    amended: Mapping[str, Any] | None = None
    """Once the attempts begin: the payload before the session's records were spliced in (the
    client's, as the guards amended it; see ``Transcript.spliced``)."""

    def context(self, state: SessionState, *, retries: bool = True) -> GuardContext:
        """What a guard reads: the session as ``state`` shows it, the nudges sent so far, the
        request's start as its clock, and where a judge call goes."""
        call = self.call
        return GuardContext(
            call.policy,
            state,
            call.conversation,
            self.retries if retries else {},
            self.notes.started,
            self.judge,
            len(call.body),
        )

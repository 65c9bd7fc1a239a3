"""The pipeline's side of goal mode: start a goal, answer the goal tool, decide continuations.

Goal mode is a participant of the guard loop: for each reply it returns a decision the loop
applies like a verdict (:class:`GoalTurn`: continue with these turns; :class:`GoalStrip`: the
reply without the goal tool's calls; None: nothing to do). What goal mode keeps over one
request is one value, a :class:`GoalRun`, which the keeper opens and updates.

Every change of the goal is written to the session delta (committed with the request), counted
in ``loopwarden_goal_events_total`` and logged. Sub-agents (``X-Agent-Id``) never start or
drive a goal, and shadow mode leaves traffic untouched, so it has no goal mode either.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.exchange import Echo, Note, Reply, ReturnCalls, ToolCall
from proxy.goal.model import (
    GOAL_FIELD,
    GOAL_TOOL,
    Goal,
    apply_call,
    continuation_prompt,
    goal_calls,
    goal_tool,
    load_goal,
    over_limit,
)
from proxy.observe.metrics import Metrics
from proxy.request import AgentRequest, RequestNotes
from proxy.session.base import FIELDS, SessionDelta, SessionState
from proxy.session.instructions import human_instructions
from proxy.verdict import Nudge

__all__ = ["GoalDecision", "GoalKeeper", "GoalRun", "GoalStrip", "GoalTurn"]


@dataclass(frozen=True, slots=True)
class GoalTurn:
    """Continue: these turns go upstream and the model is called again, on an attempt of goal
    mode's own (not one of the request's nudge attempts)."""

    nudge: Nudge
    tool_round: bool
    """The model called only the goal tool (bounded by ``max_tool_rounds``); else a goal turn,
    counted as an intervention."""


@dataclass(frozen=True, slots=True)
class GoalStrip:
    """The reply without the goal tool's calls: what the guards judge and the agent receives."""

    reply: Reply
    answered: dict[str, str]
    """The goal tool's calls taken out, answered (id: result): the upstream saw them."""


GoalDecision = GoalTurn | GoalStrip | None


@dataclass(slots=True)
class GoalRun:
    """Goal mode over one request: the goal as it stands, and what this request did with it."""

    goal: Goal
    offered: bool = False
    """The goal tool is offered to the upstream in this request (any reply may call it)."""
    tool_rounds: int = 0
    """Replies that called only the goal tool, answered by the proxy (``max_tool_rounds``)."""
    stripped: tuple[Reply, dict[str, str]] | None = None
    """The last reply whose goal tool calls the agent does not see, whole, and their results."""


class GoalKeeper:
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def open(
        self, request: AgentRequest, state: SessionState, delta: SessionDelta, notes: RequestNotes
    ) -> GoalRun | None:
        """The session's goal, started now if this request sets one, its tool offered while it
        is active; None outside goal mode."""
        settings = request.policy.goal
        if not settings.enabled or request.session.sub_agent or request.policy.mode != "enforce":
            return None
        goal = load_goal(state.values.get(GOAL_FIELD))
        if goal is None:
            objective, criteria = request.goal, request.goal_criteria
            if objective is None:
                said = human_instructions(request.conversation)
                first = said[0] if said else ""
                if first.startswith(settings.command):
                    objective = first[len(settings.command) :].strip() or None
            if objective is None:
                return None
            active_ms = delta.applied_to(state).counter(FIELDS.ACTIVE_MS)
            goal = Goal(objective[:4_000], criteria[:4_000] if criteria else None, started_active_ms=active_ms)
            goal = goal.with_event("started", objective, notes.started)
            self._save(request, goal, delta, notes, "started")
        notes.goal = goal.status
        return GoalRun(goal, offered=goal.active)

    @staticmethod
    def offered(request: AgentRequest, run: GoalRun | None, payload: Mapping[str, Any]) -> Mapping[str, Any]:
        """What goes upstream: ``payload`` with the goal tool offered while the goal is active."""
        return request.wire.codec.with_tool(payload, goal_tool()) if run is not None and run.offered else payload

    @staticmethod
    def without_goal_calls(request: AgentRequest, body: dict[str, Any]) -> dict[str, Any]:
        """A reply body as the agent sees it: its own tool calls only, never the goal tool's."""
        return request.wire.codec.without_calls(body, GOAL_TOOL)

    def decide(
        self,
        request: AgentRequest,
        run: GoalRun,
        reply: Reply,
        delta: SessionDelta,
        state: SessionState,
        notes: RequestNotes,
    ) -> GoalDecision:
        """What the loop does about ``reply``; ``run`` holds the goal after it."""
        run.stripped = None
        rounds_left = run.tool_rounds < request.policy.goal.max_tool_rounds
        run.goal, decision = self._decision(request, run.goal, reply, delta, state, notes, rounds_left)
        if isinstance(decision, GoalStrip):
            run.stripped = (reply, decision.answered)
        elif decision is not None and decision.tool_round:
            run.tool_rounds += 1
        return decision

    def _decision(
        self,
        request: AgentRequest,
        goal: Goal,
        reply: Reply,
        delta: SessionDelta,
        state: SessionState,
        notes: RequestNotes,
        tool_rounds_left: bool,
    ) -> tuple[Goal, GoalDecision]:
        own, theirs = goal_calls(reply.tool_calls)
        if own:
            goal, results = self.absorb(request, goal, own, delta, notes)
            if not theirs and tool_rounds_left:
                # Only the proxy's own tool was called: answer it and let the model go on.
                answered = Nudge("goal_tool", f"goal {goal.status}", (ReturnCalls(reply, results),))
                return goal, GoalTurn(answered, tool_round=True)
            return goal, GoalStrip(dataclasses.replace(reply, tool_calls=tuple(theirs)), results)
        if goal.active and reply.has_text and not reply.tool_calls:
            # A continuation is the goal's turn, bounded by the goal's own turn and time
            # limits (and the session's budgets), not by the request's nudge attempts.
            goal, prompt = self.next_turn(request, goal, delta, state, notes)
            if prompt is not None:
                continued = Nudge("goal_continue", f"goal turn {goal.turns}", (Echo(reply), Note(prompt)))
                return goal, GoalTurn(continued, tool_round=False)
        return goal, None

    def absorb(
        self, request: AgentRequest, goal: Goal, calls: Sequence[ToolCall], delta: SessionDelta, notes: RequestNotes
    ) -> tuple[Goal, dict[str, str]]:
        """Answer the model's goal tool calls: the goal after them, and each call's result."""
        results: dict[str, str] = {}
        for each in calls:
            update = apply_call(goal, each, notes.started)
            goal = update.goal
            results[each.id] = update.result
            self._save(request, goal, delta, notes, update.event)
        return goal, results

    def next_turn(
        self, request: AgentRequest, goal: Goal, delta: SessionDelta, state: SessionState, notes: RequestNotes
    ) -> tuple[Goal, str | None]:
        """A text-only reply while the goal is active: the continuation prompt, or None when a
        limit is reached (the goal becomes ``limit_reached`` and the reply passes)."""
        settings = request.policy.goal
        active_ms = delta.applied_to(state).counter(FIELDS.ACTIVE_MS)
        reason = over_limit(goal, active_ms, settings.max_turns, settings.max_active_minutes)
        if reason is not None:
            goal = goal.with_event("limit_reached", reason, notes.started, status="limit_reached", reason=reason)
            self._save(request, goal, delta, notes, "limit_reached")
            return goal, None
        prompt = continuation_prompt(goal, active_ms, settings.max_turns, settings.max_active_minutes)
        goal = goal.with_event("continued", f"turn {goal.turns + 1}", notes.started, turns=goal.turns + 1)
        self._save(request, goal, delta, notes, "continued")
        return goal, prompt

    def _save(self, request: AgentRequest, goal: Goal, delta: SessionDelta, notes: RequestNotes, event: str) -> None:
        delta.assign(GOAL_FIELD, goal.dumps())
        notes.goal = goal.status
        self._metrics.goal_events.labels(request.tenant, request.policy.name, event).inc()
        request.log("goal", {"change": event, "status": goal.status, "turns": goal.turns})

"""The session as the inspect API shows it: counters with names and the goal the client set;
never message contents."""

from __future__ import annotations

from typing import Any

from proxy.budgets import active_ms, remaining
from proxy.fingerprint import CALL_COUNT_PREFIX
from proxy.goal import GOAL_FIELD, load_goal
from proxy.policy.models import Policy
from proxy.pricing import MICROS
from proxy.session.base import FIELDS, SessionState

__all__ = ["describe"]


def describe(session_id: str, state: SessionState, policy: Policy, now: float) -> dict[str, Any]:
    prompt, completion = state.counter(FIELDS.TOKENS_IN), state.counter(FIELDS.TOKENS_OUT)
    return {
        "id": session_id,
        "object": "loopwarden.session",
        "steps": state.steps,
        "turns": state.turns,
        "tokens": {"prompt": prompt, "completion": completion, "total": prompt + completion},
        "cost_usd": state.counter(FIELDS.COST_MICROS) / MICROS,
        "unpriced_calls": state.counter(FIELDS.UNPRICED),
        "active_seconds": active_ms(state, now, policy.budgets.idle_gap_secs) / 1000,
        "first_seen": state.counter(FIELDS.FIRST_SEEN) or None,
        "last_seen": state.counter(FIELDS.LAST_SEEN) or None,
        "strikes": {
            name.removeprefix(FIELDS.STRIKE_PREFIX): int(value)
            for name, value in sorted(state.values.items())
            if name.startswith(FIELDS.STRIKE_PREFIX) and value.lstrip("-").isdigit() and int(value)
        },
        "tool_call_fingerprints": {
            name.removeprefix(CALL_COUNT_PREFIX): int(value)
            for name, value in sorted(state.values.items())
            if name.startswith(CALL_COUNT_PREFIX) and value.isdigit()
        },
        "termination": state.termination,
        "goal": _goal(state, policy),
        "policy": policy.name,
        "budget_remaining": remaining(state, policy, now).header(),
    }


def _goal(state: SessionState, policy: Policy) -> dict[str, Any] | None:
    goal = load_goal(state.values.get(GOAL_FIELD))
    if goal is None:
        return None
    settings = policy.goal
    return goal.describe(state.counter(FIELDS.ACTIVE_MS), settings.max_turns, settings.max_active_minutes)

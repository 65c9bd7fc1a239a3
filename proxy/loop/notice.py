"""The notice an ending carries: a few plain words to the person behind the agent.

Clients show the ending's text (Codex and Claude Code print it, the SDKs return it as the final
output) and never ``X-LoopWarden-Terminated``. So every ending, written upstream or built here,
says in its own channel that LoopWarden stopped the run, why (the reason code as the header
names it and the deciding guard's evidence: tool names and counts, never message contents),
and how to go on: a new instruction starts a new run, while a spent budget has to be raised
for the session by its operator first. The policy puts the notice first, last, or nowhere.
"""

from __future__ import annotations

from proxy.books.budgets import remaining
from proxy.policy.models import Policy
from proxy.session.base import FIELDS, SessionState
from proxy.verdict import Finalize

__all__ = ["GRANT_ROUTE", "notice_for", "placed"]

GRANT_ROUTE = "PATCH /v1/loopwarden/sessions/{id}"
"""Where an operator raises one session's budget (the sessions API)."""
_CONTINUE = "Send a new instruction to continue."
_UNITS = {"budget_steps": "steps", "budget_tokens": "tokens", "budget_cost": "cost", "budget_time": "active time"}


def _budget_used(reason: str, state: SessionState, policy: Policy, now: float) -> str:
    """How much of the budget ``reason`` names was used, of how much."""
    budgets, left = policy.budgets, remaining(state, policy, now)
    if reason == "budget_steps":  # the steps in flight count: the one that did not fit ends it
        used = min(policy.max_steps - left.steps + state.counter(FIELDS.RESERVED_STEPS), policy.max_steps)
        return f"{used} of {policy.max_steps} steps used or in flight"
    if reason == "budget_tokens" and budgets.max_tokens is not None and left.tokens is not None:
        return f"{budgets.max_tokens - left.tokens} of {budgets.max_tokens} tokens used"
    if reason == "budget_cost" and budgets.max_cost_usd is not None and left.cost_usd is not None:
        return f"${budgets.max_cost_usd - left.cost_usd:.4f} of ${budgets.max_cost_usd:.2f} used"
    if reason == "budget_time" and budgets.max_active_secs is not None and left.seconds is not None:
        return f"{budgets.max_active_secs - left.seconds:.0f} of {budgets.max_active_secs:.0f} active seconds used"
    return "spent"


def notice_for(
    verdict: Finalize, state: SessionState, policy: Policy, session_id: str | None, now: float
) -> str | None:
    """The notice of ``verdict``'s ending (``state``: the session as this request leaves it);
    None when the policy turns notices off. ``session_id`` None: the session has no name yet
    (the ending names it), so the notice points at the sessions list instead."""
    if policy.finalize.notice == "off":
        return None
    reason = verdict.reason
    unit = _UNITS.get(reason)
    if unit is not None:
        used = _budget_used(reason, state, policy, now)
        which = f"session {session_id}" if session_id is not None else "this session (the sessions list names it)"
        route = GRANT_ROUTE.replace("{id}", session_id or "{id}")
        return (
            f"LoopWarden stopped this run ({reason}): the session's {unit} budget is spent ({used}). "
            f"A new instruction cannot continue until the operator grants {which} more {unit} "
            f"through the sessions API ({route})."
        )
    if reason.startswith("daily_"):
        return (
            f"LoopWarden stopped this run ({reason}): the API key's daily {reason.removeprefix('daily_')} cap "
            "is spent. Try again once the day's window has room, or ask the operator to raise the cap."
        )
    evidence = (verdict.evidence or f"the {reason} guard ended it").rstrip(".")
    return f"LoopWarden stopped this run ({reason}): {evidence}. {_CONTINUE}"


def placed(text: str, notice: str | None, placement: str) -> str:
    """``text`` with the notice first or last (as the policy says), a blank line between."""
    if not notice:
        return text
    if not text.strip():
        return notice
    return f"{notice}\n\n{text}" if placement == "first" else f"{text}\n\n{notice}"

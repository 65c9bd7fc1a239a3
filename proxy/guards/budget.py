"""Budgets: end the session when the next call would use the last of its steps, tokens, cost
or active time; ask the model to converge when any of them runs low.

The converge note ("3 of 50 steps left; converge now") makes models wrap up with what they
have instead of being cut off mid-task. The last step is the ending: a call that would use
it (or the last of the time budget: less left than a step of this session takes on average)
ends the session instead, with ``budget_steps`` or ``budget_time``, so the summary call is
that last step and a client capped at ``max_steps`` requests gets an ending, never a tool
call it cannot answer. Tokens end it the same way (``budget_tokens``) when this call's worst
case and an ending's after it do not fit, as the admission checks them atomically across
parallel calls (:func:`proxy.books.budgets.session_limits`); cost, which needs the price table, is
checked there, and here only once spent (``budget_cost``).
"""

from __future__ import annotations

from proxy.books.budgets import ending_tokens, estimate_tokens, remaining, step_seconds
from proxy.exchange import Note
from proxy.guards.base import GuardContext
from proxy.verdict import PASS, Finalize, Nudge, RequestVerdict

__all__ = ["BudgetGuard"]


class BudgetGuard:
    def check_request(self, context: GuardContext) -> RequestVerdict:
        policy, budgets = context.policy, context.policy.budgets
        left = remaining(context.state, policy, context.now)
        if left.steps <= 1:
            return Finalize("budget_steps", f"the session reached the last of its {policy.max_steps} steps")
        # What the admission reserves: this call's worst case, and room for an ending after it.
        needed = (
            estimate_tokens(context.conversation, context.body_size, policy) + ending_tokens(context.body_size, policy)
            if left.tokens is not None
            else 0
        )
        if left.tokens is not None and left.tokens < needed:
            return Finalize(
                "budget_tokens", f"this call would use the last of the session's {budgets.max_tokens} tokens"
            )
        if left.cost_usd is not None and left.cost_usd <= 0:
            return Finalize("budget_cost", f"the session spent its budget of ${budgets.max_cost_usd:.2f}")
        if left.seconds is not None and left.seconds <= step_seconds(context.state, context.now, budgets.idle_gap_secs):
            return Finalize(
                "budget_time", f"a further step would not fit in the session's {budgets.max_active_secs:.0f} seconds"
            )

        share = budgets.converge_share
        low = []
        working = left.steps - 1  # the last step is the ending's
        if working < share * policy.max_steps:
            low.append(f"{working} of {policy.max_steps} steps left")
        # A call must fit its reservation, and leave room for the ending's summary call, to be
        # admitted at all, so "low" counts both as spent: the note comes while a call still fits.
        if left.tokens is not None and budgets.max_tokens and left.tokens - needed < share * budgets.max_tokens:
            low.append(f"{left.tokens} of {budgets.max_tokens} tokens left")
        if left.cost_usd is not None and budgets.max_cost_usd and left.cost_usd < share * budgets.max_cost_usd:
            low.append(f"${left.cost_usd:.4f} of ${budgets.max_cost_usd:.2f} left")
        if left.seconds is not None and budgets.max_active_secs and left.seconds < share * budgets.max_active_secs:
            low.append(f"{left.seconds:.0f} of {budgets.max_active_secs:.0f} seconds left")
        if not low:
            return PASS
        text = policy.nudges.budget_note.format(remaining="; ".join(low))
        return Nudge(kind="budget_note", reason="; ".join(low), turns=(Note(text),))

"""Budgets: end the session when steps, tokens, cost or active time run out; ask the model
to converge when any of them runs low.

The converge note ("3 of 50 steps left; converge now") makes models wrap up with what they
have instead of being cut off mid-task. Exhaustion ends the session with ``budget_steps``,
``budget_tokens``, ``budget_cost`` or ``budget_time``.
"""

from __future__ import annotations

from proxy.budgets import remaining
from proxy.exchange import Note
from proxy.guards.base import GuardContext
from proxy.verdict import PASS, Finalize, Nudge, RequestVerdict

__all__ = ["BudgetGuard"]


class BudgetGuard:
    name = "budget"

    def check_request(self, context: GuardContext) -> RequestVerdict:
        policy, budgets = context.policy, context.policy.budgets
        left = remaining(context.state, policy, context.now)
        if left.steps <= 0:
            return Finalize("budget_steps", f"the session used all {policy.max_steps} steps it was allowed")
        if left.tokens is not None and left.tokens <= 0:
            return Finalize("budget_tokens", f"the session used its budget of {budgets.max_tokens} tokens")
        if left.cost_usd is not None and left.cost_usd <= 0:
            return Finalize("budget_cost", f"the session spent its budget of ${budgets.max_cost_usd:.2f}")
        if left.seconds is not None and left.seconds <= 0:
            return Finalize("budget_time", f"the session used its {budgets.max_active_secs:.0f} seconds")

        share = budgets.converge_share
        low = []
        if left.steps < share * policy.max_steps:
            low.append(f"{left.steps} of {policy.max_steps} steps left")
        # A call must fit its reservation (prompt + reserve_tokens) to be admitted at all, so
        # "low" counts that reservation as spent: the note comes while a call still fits.
        reserve = budgets.reserve_tokens
        if left.tokens is not None and budgets.max_tokens and left.tokens - reserve < share * budgets.max_tokens:
            low.append(f"{left.tokens} of {budgets.max_tokens} tokens left")
        if left.cost_usd is not None and budgets.max_cost_usd and left.cost_usd < share * budgets.max_cost_usd:
            low.append(f"${left.cost_usd:.4f} of ${budgets.max_cost_usd:.2f} left")
        if left.seconds is not None and budgets.max_active_secs and left.seconds < share * budgets.max_active_secs:
            low.append(f"{left.seconds:.0f} of {budgets.max_active_secs:.0f} seconds left")
        if not low:
            return PASS
        text = policy.nudges.budget_note.format(remaining="; ".join(low))
        return Nudge(kind="budget_note", reason="; ".join(low), turns=(Note(text),))

"""Step limit: a session that has used ``max_steps`` upstream calls ends gracefully."""

from __future__ import annotations

from proxy.guards.base import GuardContext
from proxy.verdict import PASS, Finalize, Verdict

__all__ = ["StepLimitGuard"]


class StepLimitGuard:
    name = "step_limit"

    def check_request(self, context: GuardContext) -> Verdict:
        if context.state.steps >= context.policy.max_steps:
            return Finalize(
                reason="budget_steps",
                detail=f"the session used all {context.policy.max_steps} steps it was allowed",
            )
        return PASS

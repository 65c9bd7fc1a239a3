"""Reasoning-only reply: it thought (``reasoning_content`` / ``reasoning``) but neither
answered nor called a tool. Nudge it to decide; after N strikes, end."""

from __future__ import annotations

from proxy.exchange import Reply
from proxy.guards.base import GuardContext
from proxy.verdict import PASS, Finalize, Nudge, Pass, Verdict

__all__ = ["ReasoningOnlyGuard"]

STRIKE = "reasoning_only"


class ReasoningOnlyGuard:
    name = "reasoning_only"

    def check_reply(self, reply: Reply, context: GuardContext) -> Verdict:
        strikes = context.state.strikes(STRIKE)
        if not reply.is_reasoning_only:
            return Pass(clear_strikes=(STRIKE,)) if strikes else PASS
        if strikes + 1 >= context.policy.reasoning_only_max_strikes:
            return Finalize(
                reason=STRIKE,
                detail=f"the model only reasoned without acting {strikes + 1} times in a row",
                strike=STRIKE,
            )
        return Nudge(
            kind="reasoning_nudge",
            reason=f"reasoning-only reply (strike {strikes + 1} of {context.policy.reasoning_only_max_strikes})",
            messages=({"role": "user", "content": context.policy.nudges.reasoning_only},),
            strike=STRIKE,
        )

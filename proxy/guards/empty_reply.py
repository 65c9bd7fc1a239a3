"""Empty reply: no content, no tool call, no reasoning. Nudge to continue; after N strikes, end.

A reply whose only text is reasoning is not empty (that is the reasoning-only guard's case);
counting it here is a known misfire of other guards.
"""

from __future__ import annotations

from proxy.exchange import Reply
from proxy.guards.base import GuardContext
from proxy.verdict import PASS, Finalize, Nudge, Pass, Verdict

__all__ = ["EmptyReplyGuard"]

STRIKE = "empty_response"


class EmptyReplyGuard:
    name = "empty_reply"

    def check_reply(self, reply: Reply, context: GuardContext) -> Verdict:
        strikes = context.state.strikes(STRIKE)
        if not reply.is_empty:
            return Pass(clear_strikes=(STRIKE,)) if strikes else PASS
        if strikes + 1 >= context.policy.empty_response_max_strikes:
            return Finalize(
                reason=STRIKE,
                detail=f"the model returned {strikes + 1} empty replies in a row",
                strike=STRIKE,
            )
        return Nudge(
            kind="empty_nudge",
            reason=f"empty reply (strike {strikes + 1} of {context.policy.empty_response_max_strikes})",
            messages=({"role": "user", "content": context.policy.nudges.empty_response},),
            strike=STRIKE,
        )

"""Empty reply: no content, no tool call, no reasoning. Nudge to continue; after N strikes, end.

A reply whose only text is reasoning is not empty (that is the reasoning-only guard's case);
counting it here is a known misfire of other guards.
"""

from __future__ import annotations

from proxy.exchange import Channel, PartialReply, Reply
from proxy.guards.base import GuardContext
from proxy.guards.strikes import cleared, strike_verdict
from proxy.verdict import ReplyVerdict

__all__ = ["EmptyReplyGuard"]


class EmptyReplyGuard:
    def holds(self, partial: PartialReply, context: GuardContext) -> int:
        """Whitespace waits until real text or a tool call shows the reply is not empty."""
        return Channel.NONE if partial.has_text or partial.has_tool_calls else Channel.TEXT

    def check_reply(self, reply: Reply, context: GuardContext) -> ReplyVerdict:
        if not reply.is_empty:
            return cleared(context, "empty_response")
        return strike_verdict(
            True,
            context,
            strike="empty_response",
            exhausted="empty_response",
            max_strikes=context.policy.empty_response_max_strikes,
            nudge_kind="empty_nudge",
            nudge_text=context.policy.nudges.empty_response,
            miss="empty replies",
        )

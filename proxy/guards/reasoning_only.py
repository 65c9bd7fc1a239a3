"""Reasoning-only reply: it thought (``reasoning_content`` / ``reasoning``) but neither
answered nor called a tool. Nudge it to decide; after N strikes, end."""

from __future__ import annotations

from proxy.exchange import Channel, PartialReply, Reply
from proxy.guards.base import GuardContext
from proxy.guards.strikes import cleared, strike_verdict
from proxy.verdict import ReplyVerdict

__all__ = ["ReasoningOnlyGuard"]


class ReasoningOnlyGuard:
    def holds(self, partial: PartialReply, context: GuardContext) -> int:
        """Reasoning waits (unless the policy relays it) until text or a tool call follows it."""
        if context.policy.streaming.reasoning == "relay" or partial.has_text or partial.has_tool_calls:
            return Channel.NONE
        return Channel.REASONING

    def check_reply(self, reply: Reply, context: GuardContext) -> ReplyVerdict:
        if not reply.is_reasoning_only:
            return cleared(context, "reasoning_only")
        return strike_verdict(
            True,
            context,
            strike="reasoning_only",
            exhausted="reasoning_only",
            max_strikes=context.policy.reasoning_only_max_strikes,
            nudge_kind="reasoning_nudge",
            nudge_text=context.policy.nudges.reasoning_only,
            miss="reasoning-only replies (thinking without acting)",
        )

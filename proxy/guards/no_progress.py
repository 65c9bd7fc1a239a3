"""No progress: the last K tool results are identical, or the model says the same thing again.

Detected from what the request shows (the client resends its history); the first
detections nudge, the ``max_strikes``-th ends the session with reason ``no_progress``.
Results and texts are compared by digest after whitespace is collapsed; results also with
their volatile fields masked (timestamps, ids, durations: :mod:`proxy.guards.volatile`)
unless ``mask_volatile`` is off.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from proxy.exchange import Channel, PartialReply, Reply
from proxy.guards.base import GuardContext
from proxy.guards.fingerprint import digest
from proxy.guards.strikes import strike_verdict
from proxy.guards.volatile import without_volatile
from proxy.verdict import PASS, ReplyVerdict, RequestVerdict

__all__ = ["NoProgressGuard", "trailing_run"]

_SPACE = re.compile(r"\s+")


def trailing_run(items: Sequence[str], limit: int | None = None) -> int:
    """How many items at the end equal the last one (digested lazily, newest first, up to ``limit``)."""
    if not items:
        return 0
    last = _digest(items[-1])
    run = 1
    while run < len(items) and (limit is None or run < limit) and _digest(items[-run - 1]) == last:
        run += 1
    return run


def _digest(text: str) -> str:
    return digest(_SPACE.sub(" ", text).strip())


class NoProgressGuard:
    def check_request(self, context: GuardContext) -> RequestVerdict:
        settings = context.policy.no_progress
        if not settings.enabled or not context.conversation.trailing_tool_results():
            return PASS
        results = [m.text for m in context.conversation.tool_results()]
        if settings.mask_volatile:
            results = [without_volatile(text) for text in results]
        run = trailing_run(results, settings.repeats)
        return strike_verdict(
            run >= settings.repeats,
            context,
            strike="no_progress_results",
            reason="no_progress",
            max_strikes=settings.max_strikes,
            nudge_kind="no_progress_nudge",
            nudge_text=context.policy.nudges.no_progress.format(count=run, what="the tool results were identical"),
            miss="rounds of identical tool results",
        )

    def holds(self, partial: PartialReply, context: GuardContext) -> int:
        """Text waits only while it could still turn out to repeat the last reply word for word."""
        settings = context.policy.no_progress
        if not settings.enabled or partial.has_tool_calls:
            return Channel.NONE
        texts = [t for t in context.conversation.assistant_texts() if t.strip()]
        if len(texts) + 1 < settings.repeats:
            return Channel.NONE
        so_far = _SPACE.sub(" ", partial.content).lstrip()
        return Channel.TEXT if _SPACE.sub(" ", texts[-1]).strip().startswith(so_far.rstrip()) else Channel.NONE

    def check_reply(self, reply: Reply, context: GuardContext) -> ReplyVerdict:
        settings = context.policy.no_progress
        if not settings.enabled or not reply.has_text or reply.tool_calls:
            return PASS
        texts = [t for t in context.conversation.assistant_texts() if t.strip()]
        run = trailing_run([*texts, reply.content or ""], settings.repeats) if len(texts) + 1 >= settings.repeats else 1
        return strike_verdict(
            run >= settings.repeats,
            context,
            strike="no_progress_text",
            reason="no_progress",
            max_strikes=settings.max_strikes,
            nudge_kind="no_progress_nudge",
            nudge_text=context.policy.nudges.no_progress.format(count=run, what="you repeated the same reply"),
            miss="identical replies",
        )

"""No progress: the last K tool results are identical, or the model says the same thing again.

Detected from what the request shows (the client resends its history); the first
detections nudge, the ``max_strikes``-th ends the session with reason ``no_progress``.
Results and texts are compared by digest after whitespace is collapsed; results also with
their volatile fields masked (timestamps, ids, durations: :mod:`proxy.guards.volatile`)
unless ``mask_volatile`` is off.

A request that continues a stored Responses chain carries only its new items: the earlier
results are read from the session, where every request leaves the digests of the results
it carried (:func:`remember_results`).
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.exchange import Channel, Conversation, PartialReply, Reply
from proxy.guards.base import GuardContext
from proxy.guards.fingerprint import digest
from proxy.guards.memo import per_text
from proxy.guards.strikes import cleared, strike_verdict
from proxy.guards.volatile import without_volatile
from proxy.policy.models import NoProgressSettings
from proxy.session.base import FIELDS, SessionDelta, SessionState
from proxy.text import one_spaced
from proxy.verdict import PASS, ReplyVerdict, RequestVerdict

__all__ = ["NoProgressGuard", "remember_results", "trailing_run"]

_KEPT_RESULTS = 16
"""Results remembered per session for chained requests (far more than ``repeats`` needs)."""


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
    return digest(one_spaced(text))


def _result_digest(text: str, settings: NoProgressSettings) -> str:
    return _masked_digest(text) if settings.mask_volatile else _digest(text)


@per_text
def _masked_digest(text: str) -> str:
    return _digest(without_volatile(text))


def remember_results(delta: SessionDelta, conversation: Conversation, settings: NoProgressSettings) -> None:
    """Keep the digests of the results this request carried, for continuations of a chain."""
    if not settings.enabled:
        return
    for message in conversation.trailing_tool_results():
        mark = f"{_result_digest(message.text, settings)}:{digest(str(message.call_id))[:8]}"
        delta.append(FIELDS.RESULT_SEQUENCE, mark, _KEPT_RESULTS)


def _earlier_results(state: SessionState, conversation: Conversation) -> list[str]:
    """The digests of the results a chained request does not carry, oldest first (each call
    once: a request the client sent again left its results twice)."""
    if not conversation.held_upstream:
        return []
    seen: set[str] = set()
    earlier = []
    for item in state.items(FIELDS.RESULT_SEQUENCE):
        result, _, call = item.partition(":")
        if call not in seen:
            seen.add(call)
            earlier.append(result)
    return earlier


def _tail_run(digests: Sequence[str], limit: int) -> int:
    run = 1 if digests else 0
    while run < len(digests) and run < limit and digests[-run - 1] == digests[-1]:
        run += 1
    return run


class NoProgressGuard:
    def check_request(self, context: GuardContext) -> RequestVerdict:
        settings = context.policy.no_progress
        if not settings.enabled or not context.conversation.trailing_tool_results():
            return PASS
        earlier = _earlier_results(context.state, context.conversation)
        results = context.conversation.tool_results()[-settings.repeats :]
        if len(earlier) + len(results) < settings.repeats:  # too few for a run: nothing to digest
            return cleared(context, "no_progress_results")
        run = _tail_run([*earlier, *(_result_digest(m.text, settings) for m in results)], settings.repeats)
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
        return Channel.TEXT if one_spaced(texts[-1]).startswith(one_spaced(partial.content)) else Channel.NONE

    def check_reply(self, reply: Reply, context: GuardContext) -> ReplyVerdict:
        settings = context.policy.no_progress
        if not settings.enabled or not reply.has_text or reply.tool_calls:
            return PASS
        texts = [t for t in context.conversation.assistant_texts() if t.strip()]
        if len(texts) + 1 < settings.repeats:  # too few texts for a run
            return cleared(context, "no_progress_text")
        run = trailing_run([*texts, reply.content or ""], settings.repeats)
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

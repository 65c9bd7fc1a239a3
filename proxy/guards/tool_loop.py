"""Repeated tool calls: the same call (tool + canonical arguments), or a cycle of calls.

Calls are counted per session by the pipeline from the replies it delivered
(:func:`proxy.fingerprint.remember_calls`), not from the history the client resends
(smolagents flattens calls into text; pydantic-ai re-serializes them).
At ``warn_at`` repetitions the model is asked once more, told the result will not change;
when the agent then sends that call's result, the same warning rides along on it
upstream. At ``block_at`` the session ends with reason ``loop``. A cycle (A-B-A-B, up to
``max_period``) repeated N times counts as N repetitions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from proxy.exchange import Channel, Note, PartialReply, Reply, ToolCall
from proxy.fingerprint import CALL_COUNT_PREFIX, CALL_SEQUENCE, canonical_arguments, fingerprint
from proxy.guards.base import GuardContext
from proxy.verdict import PASS, Amend, Finalize, Nudge, ReplyVerdict, RequestVerdict

__all__ = ["ToolLoopGuard", "cycle_repetitions"]

_SHOWN_ARGS = 160


def cycle_repetitions(sequence: Sequence[str], max_period: int) -> tuple[int, int]:
    """(repetitions, period) of the longest-repeating cycle ending the sequence (period ≥ 2)."""
    best = (1, 0)
    for period in range(2, max_period + 1):
        tail = list(sequence[-period:])
        if len(tail) < period or len(set(tail)) < 2:
            continue
        repeats = 1
        while (
            len(sequence) >= (repeats + 1) * period
            and list(sequence[-(repeats + 1) * period : -repeats * period]) == tail
        ):
            repeats += 1
        if repeats > best[0]:
            best = (repeats, period)
    return best


def _describe(call: ToolCall) -> str:
    arguments = canonical_arguments(call.arguments)
    if len(arguments) > _SHOWN_ARGS:
        arguments = arguments[: _SHOWN_ARGS - 1] + "…"
    return f"{call.name}({arguments})"


class ToolLoopGuard:
    name = "tool_loop"

    def holds(self, partial: PartialReply, context: GuardContext) -> int:
        """A repeated call is known only once its arguments are complete."""
        return Channel.TOOL_CALLS if context.policy.loop.enabled else Channel.NONE

    def check_reply(self, reply: Reply, context: GuardContext) -> ReplyVerdict:
        settings = context.policy.loop
        if not settings.enabled or not reply.tool_calls:
            return PASS
        sequence = context.state.items(CALL_SEQUENCE)
        in_reply: Counter[str] = Counter()
        worst = (0, reply.tool_calls[0], 0)  # repetitions, call, cycle period
        new: list[str] = []
        for call in reply.tool_calls:
            mark = fingerprint(call.name, call.arguments)
            in_reply[mark] += 1
            new.append(mark)
            repeats = context.state.counter(CALL_COUNT_PREFIX + mark) + in_reply[mark]
            cycle, period = cycle_repetitions([*sequence, *new], settings.max_period)
            count, cycle_period = (cycle, period) if cycle > repeats else (repeats, 0)
            if count > worst[0]:
                worst = (count, call, cycle_period)
        count, call, period = worst
        what = _describe(call) if not period else f"a cycle of {period} calls ending with {_describe(call)}"
        if count >= settings.block_at:
            return Finalize(reason="loop", detail=f"the model repeated {what} {count} times")
        if count >= settings.warn_at and not context.retries.get("loop_warning"):
            text = context.policy.nudges.loop_warning.format(call=what, count=count - 1)
            return Nudge(
                kind="loop_warning",
                reason=f"{what} repeated {count} times",
                turns=(Note(text),),
            )
        return PASS

    def check_request(self, context: GuardContext) -> RequestVerdict:
        """Attach the warning to results of calls that reached ``warn_at``."""
        settings = context.policy.loop
        trailing = context.conversation.trailing_tool_results()
        if not settings.enabled or not trailing:
            return PASS
        calls = context.conversation.calls_by_id()
        notes: dict[str, str] = {}
        for message in trailing:
            call = calls.get(str(message.call_id))
            if call is None:
                continue
            count = context.state.counter(CALL_COUNT_PREFIX + fingerprint(call.name, call.arguments))
            if count >= settings.warn_at:
                notes[call.id] = context.policy.nudges.loop_warning.format(call=_describe(call), count=count)
        if not notes:
            return PASS
        return Amend(kind="loop_warning_result", reason=f"{len(notes)} repeated call result(s)", tool_notes=notes)

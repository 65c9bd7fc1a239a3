"""Stalled progress: ever-new arguments, the same result.

A model that calls one tool again and again with new arguments whose results add nothing
(the same text apart from the values it passed in: "No results for 'lyon 4'") is stopped by
no repeat check, and every client's own turn cap fires before the step budget. A run of the
latest ``no_progress.stalled_results`` results, all of one tool, equal once each call's own
argument values are masked (but not as sent, and not all from the same arguments: those are
the no-progress and loop guards' cases), is stalled when the model calls that tool once more.

Then, when the judge is on, it is asked whether the recent steps make progress toward the
task: no → the calls go back to the model unexecuted with a note (a nudge), and the
``max_strikes``-th no in a row ends the session (``no_progress``); yes → the reply passes.
Without the judge, or when it fails, a nudge, never an ending. The question is asked again
every ``stalled_results`` more results, and after a "no" at the very next call that
continues the run (so the ending comes one request after the first nudge, within the
turn caps clients commonly set), at most once per request. Results that differ never
match, so a run of real lookups is never disturbed.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.exchange import (
    Channel,
    Conversation,
    Message,
    PartialReply,
    Reply,
    ReturnCalls,
    ToolCall,
    Usage,
    flattened_calls,
    parse_arguments,
)
from proxy.guards.base import GuardContext
from proxy.guards.memo import per_text
from proxy.guards.volatile import without_volatile
from proxy.judge.client import Judge, JudgeRequest
from proxy.session.instructions import task_of
from proxy.text import one_spaced
from proxy.verdict import PASS, Finalize, JudgeCall, Nudge, Pass, ReplyVerdict

__all__ = [
    "NUDGE_KIND",
    "STRIKE",
    "StalledProgressGuard",
    "Step",
    "latest_steps",
    "masked",
    "stalled_run",
]

STRIKE = "no_progress_stalled"
NUDGE_KIND = "stalled_progress_nudge"
_OBSERVATION = "Observation:"
_MAX_RESULT_CHARS = 8_000
"""Results are compared on this much of their text."""
_MAX_VALUES = 32
_CLIP = 300
_JUDGED_STEPS = 8
"""The judge reads this many of a run's newest steps (a run of hundreds stays one short question)."""


@dataclass(frozen=True, slots=True)
class Step:
    """One tool result and the call it answers (None: no call could be paired with it)."""

    tool_call: ToolCall | None
    result: str


def latest_steps(conversation: Conversation) -> Iterator[Step]:
    """The latest tool results, newest first, each paired with its call: a ``tool`` turn by
    call id, an ``Observation:`` user turn with the one call of the assistant turn before it.
    Walks back from the end, lazily (a run is read only as far as it goes); stops at a turn
    that is neither."""
    flattened = {id(m) for m in conversation.tool_results() if m.role != "tool"}  # Observation: turns
    pending: list[Message] = []
    for message in reversed(conversation.messages):
        if message.role == "tool" or id(message) in flattened:
            pending.append(message)
            continue
        if message.role != "assistant" or not pending:
            return
        calls = message.tool_calls or flattened_calls(message.text)
        by_id = {tool_call.id: tool_call for tool_call in calls}
        for result in pending:
            if result.role == "tool":
                yield Step(by_id.get(str(result.call_id)), result.text)
            else:
                text = result.text.lstrip().removeprefix(_OBSERVATION)
                yield Step(calls[0] if len(calls) == 1 else None, text)
        pending = []


def _values(arguments: Any) -> list[str]:
    """The argument values a result may echo: strings and numbers, at any depth."""
    found: list[str] = []
    stack = [arguments]
    while stack and len(found) < _MAX_VALUES:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and len(item.strip()) >= 2:
            found.append(item.strip())
        elif isinstance(item, int | float) and not isinstance(item, bool) and len(str(item)) >= 2:
            found.append(str(item))
    return found


def masked(result: str, tool_call: ToolCall) -> str:
    """The result with the call's own argument values blanked out (longest first, any case),
    and its volatile fields (timestamps, ids, durations), whitespace collapsed: what it says
    apart from what the model passed in."""
    return _masked(result[:_MAX_RESULT_CHARS], tool_call.arguments)


@per_text
def _masked(result: str, arguments_text: str) -> str:
    """:func:`masked`, remembered: an agent resends a run's every result and call each turn."""
    arguments, _ = parse_arguments(arguments_text)
    text = without_volatile(result)
    for value in sorted(set(_values(arguments)), key=len, reverse=True):
        text = re.sub(re.escape(value), "\u2026", text, flags=re.IGNORECASE)
    return one_spaced(text)


def stalled_run(steps: Iterable[Step], needed: int) -> list[Step]:
    """The stalled run the latest steps form, newest first (empty: none): at least ``needed``
    results of one tool, the same once masked, not all the same as sent, nor all from the
    same arguments."""
    run: list[Step] = []
    tool, first = "", ""
    for step in steps:
        tool_call = step.tool_call
        if tool_call is None:
            break
        shown = masked(step.result, tool_call)
        if not run:
            tool, first = tool_call.name, shown
        elif tool_call.name != tool or shown != first:
            break
        run.append(step)
    if len(run) < needed or len({one_spaced(s.result) for s in run}) == 1:
        return []
    return run if len({s.tool_call.arguments for s in run if s.tool_call is not None}) > 1 else []


def _transcript(steps: Sequence[Step]) -> str:
    """The newest steps of a run, oldest first, one line each, for the judge."""
    lines = []
    for step in reversed(steps[:_JUDGED_STEPS]):
        tool_call = step.tool_call
        name, arguments = (tool_call.name, tool_call.arguments) if tool_call is not None else ("a tool", "")
        result = one_spaced(step.result)
        lines.append(f"{name}({arguments[:_CLIP]}) -> {result[:_CLIP]}")
    return "\n".join(lines)


class StalledProgressGuard:
    def __init__(self, judge: Judge | None = None) -> None:
        self._judge = judge

    def holds(self, partial: PartialReply, context: GuardContext) -> int:
        """A call that continues a stalled run is known only once the reply is complete."""
        settings = context.policy.no_progress
        return Channel.TOOL_CALLS if settings.enabled and settings.stalled_results else Channel.NONE

    def check_reply(self, reply: Reply, context: GuardContext) -> ReplyVerdict | Awaitable[ReplyVerdict]:
        settings = context.policy.no_progress
        if not settings.enabled or not settings.stalled_results or not reply.tool_calls:
            return PASS
        if context.retries.get(NUDGE_KIND, 0):
            return PASS  # nudged once in this request already
        needed = settings.stalled_results
        conversation = context.conversation
        steps = stalled_run(latest_steps(conversation), needed) if len(conversation.tool_results()) >= needed else []
        tool = steps[0].tool_call.name if steps and steps[0].tool_call is not None else None
        if tool is None or all(tool_call.name != tool for tool_call in reply.tool_calls):
            return Pass(clear_strikes=(STRIKE,)) if context.state.strikes(STRIKE) else PASS
        run = len(steps)
        if run % needed and not context.state.strikes(STRIKE):
            return PASS  # asked at needed, 2 * needed, … results; once struck, at every call
        target = context.judge_target if context.policy.judge.use_llm_judge else None
        seen = f"{run} results the same but for the arguments"
        if target is None or self._judge is None:
            return self._nudge(reply, context, tool, run, seen, f"{tool}: {seen}")
        request = JudgeRequest(
            task_of(context.conversation, context.state),
            _transcript(steps),
            target,
            context.policy.judge.judge_timeout_secs,
            context.policy.judge.structured_output,
            question="progress",
        )
        return self._judged(self._judge, request, reply, context, tool, run)

    async def _judged(
        self, judge: Judge, request: JudgeRequest, reply: Reply, context: GuardContext, tool: str, run: int
    ) -> ReplyVerdict:
        outcome = await judge.decide(request)
        if outcome.done is True:
            seen = (JudgeCall("progress", outcome.latency),)
            strikes = context.state.strikes(STRIKE)
            return Pass(clear_strikes=(STRIKE,) if strikes else (), spent=outcome.usage, seen=seen)
        if outcome.done is None:  # no verdict: a nudge (information), never an ending
            seen = (JudgeCall("error", outcome.latency, outcome.error or "upstream_error"),)
            reason = f"{tool}: {run} results the same but for the arguments ({outcome.reason})"
            return self._nudge(reply, context, tool, run, "the same result each time", reason, outcome.usage, seen)
        seen = (JudgeCall("no_progress", outcome.latency),)
        strikes, limit = context.state.strikes(STRIKE) + 1, context.policy.no_progress.max_strikes
        why = outcome.reason.rstrip(".")
        if strikes >= limit:
            detail = f"the model called {tool} {run} times with new arguments for the same result ({why})"
            evidence = f"{tool} was called {run} times with new arguments and returned the same result each time"
            return Finalize("no_progress", detail, strike=STRIKE, spent=outcome.usage, seen=seen, evidence=evidence)
        reason = f"judge: {why} (strike {strikes} of {limit})"
        return self._nudge(reply, context, tool, run, why, reason, outcome.usage, seen, strike=STRIKE)

    @staticmethod
    def _nudge(
        reply: Reply,
        context: GuardContext,
        tool: str,
        run: int,
        why: str,
        reason: str,
        spent: Usage | None = None,
        seen: tuple[JudgeCall, ...] = (),
        strike: str | None = None,
    ) -> Nudge:
        """The calls handed back unexecuted, each answered with the note."""
        note = context.policy.nudges.stalled_progress.format(count=run, tool=tool, reason=why)
        turns = (ReturnCalls(reply, {tool_call.id: note for tool_call in reply.tool_calls}),)
        return Nudge(NUDGE_KIND, reason, turns, strike, spent, seen=seen)

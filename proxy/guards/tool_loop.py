"""Repeated tool calls: the same call again, or a cycle of calls, warned then ended.

Calls are counted per session by the pipeline from the replies it delivered
(:func:`proxy.guards.fingerprint.remember_calls`), not from the history the client resends
(smolagents flattens calls into text; pydantic-ai re-serializes them). A call is its
fingerprint: tool name plus canonical arguments.

What counts, in calls (the call being checked included):

- **A repeated call**: how many times the session received that same call, wherever they
  were (``A x A y A`` counts 3 for ``A``).
- **A cycle** of period ``p`` (2 ≤ ``p`` ≤ ``max_period``, at least two different calls in
  it): the length of the run at the end of the session's calls in which every call equals
  the one ``p`` before it, its first ``p`` calls included; it counts once a call repeats
  (``A B A`` is a run of 3 of period 2, ``A B C A B`` a run of 5 of period 3).

Then the model is warned (asked once more in this request, told the result will not change;
when the agent sends a warned call's result, the warning rides along on it upstream) at
``warn_at`` calls, and the session ends with reason ``loop`` at ``block_at`` calls: a cycle
ends after as many tool runs as an exact repeat (``block_at - 1``), whatever its period. A
cycle too long to repeat before those counts is warned at its first repeated call
(``p + 1``) and ended at the next (``p + 2``): never ended unwarned, unless the policy never
warns (``warn_at`` = ``block_at``). Distinct calls never
form a run: a run of new calls (new arguments each time) is never touched.

A **near repeat** (the same call but for case and whitespace in its string arguments:
``Paris``, ``paris``, ``PARIS ``) counts at a softer rung: warned at ``warn_at`` near calls
like an exact repeat, ended at ``near_block_at`` (0: near repeats are not counted).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from proxy.exchange import Channel, Note, PartialReply, Reply, ToolCall
from proxy.guards.base import GuardContext
from proxy.guards.fingerprint import (
    CALL_COUNT_PREFIX,
    CALL_SEQUENCE,
    NEAR_COUNT_PREFIX,
    canonical_arguments,
    fingerprint,
    near_fingerprint,
)
from proxy.policy.models import LoopSettings
from proxy.verdict import PASS, Amend, Finalize, Nudge, ReplyVerdict, RequestVerdict

__all__ = ["Repetition", "ToolLoopGuard", "cycle_runs"]

_SHOWN_ARGS = 160


def cycle_runs(sequence: Sequence[str], max_period: int) -> list[tuple[int, int]]:
    """(calls, period) of each periodic run ending the sequence, period 2 to ``max_period``,
    counted once a call in it repeats (``ABA`` → ``[(3, 2)]``; none → ``[]``). Every period is
    kept: a longer period's longer run can be judged later (its thresholds are higher)."""
    runs = []
    size = len(sequence)
    for period in range(2, max_period + 1):
        if size <= period or len(set(sequence[-period:])) < 2:
            continue
        matched = 0
        while matched + period < size and sequence[size - 1 - matched] == sequence[size - 1 - matched - period]:
            matched += 1
        if matched:
            runs.append((matched + period, period))
    return runs


@dataclass(frozen=True, slots=True)
class Repetition:
    """How far one call is into a loop, and the thresholds that apply to it."""

    calls: int
    period: int
    """0 for a repeated call, else the cycle's period."""
    warn_at: int
    block_at: int
    near: bool = False
    """A near repeat: the same call but for case and whitespace."""

    @staticmethod
    def near_of(calls: int, settings: LoopSettings) -> Repetition | None:
        """A near repeat's rung (None: near repeats are off)."""
        return Repetition(calls, 0, settings.warn_at, settings.near_block_at, True) if settings.near_block_at else None

    @staticmethod
    def of(calls: int, period: int, settings: LoopSettings) -> Repetition:
        if not period:
            return Repetition(calls, 0, settings.warn_at, settings.block_at)
        # The first repeated call is the earliest a cycle shows; one that long is warned
        # there and ended at the next call (unless the policy never warns: block_at = warn_at).
        warns = settings.warn_at < settings.block_at
        return Repetition(calls, period, max(settings.warn_at, period + 1), max(settings.block_at, period + 1 + warns))

    @property
    def level(self) -> int:
        """2: end the session, 1: warn, 0: nothing."""
        return 2 if self.calls >= self.block_at else 1 if self.calls >= self.warn_at else 0


def _describe(tool_call: ToolCall) -> str:
    arguments = canonical_arguments(tool_call.arguments)
    if len(arguments) > _SHOWN_ARGS:
        arguments = arguments[: _SHOWN_ARGS - 1] + "…"
    return f"{tool_call.name}({arguments})"


def _what(tool_call: ToolCall, period: int, near: bool = False) -> str:
    if near:
        return f"{_describe(tool_call)} (but for case and spacing)"
    return _describe(tool_call) if not period else f"a cycle of {period} calls ending with {_describe(tool_call)}"


def _evidence(tool_call: ToolCall, found: Repetition) -> str:
    """The ending's evidence: the tool's name and the count, never its arguments."""
    if found.near:
        return f"{tool_call.name} was called {found.calls} times with the same arguments but for case and spacing"
    if not found.period:
        return f"{tool_call.name} was called {found.calls} times with the same arguments"
    return f"a cycle of {found.period} tool calls ending with {tool_call.name} repeated for {found.calls} calls"


class ToolLoopGuard:
    def holds(self, partial: PartialReply, context: GuardContext) -> int:
        """A repeated call is known only once its arguments are complete."""
        return Channel.TOOL_CALLS if context.policy.loop.enabled else Channel.NONE

    def check_reply(self, reply: Reply, context: GuardContext) -> ReplyVerdict:
        settings = context.policy.loop
        if not settings.enabled or not reply.tool_calls:
            return PASS
        sequence = context.state.items(CALL_SEQUENCE)
        in_reply: dict[str, int] = {}
        worst: tuple[Repetition, ToolCall] | None = None
        new: list[str] = []
        # Fewer calls than this, and no cycle: no rung is reached (level 0), nothing to weigh.
        warned = min(settings.warn_at, settings.block_at, settings.near_block_at or settings.warn_at)
        for tool_call in reply.tool_calls:
            mark = fingerprint(tool_call.name, tool_call.arguments)
            near = NEAR_COUNT_PREFIX + near_fingerprint(tool_call.name, tool_call.arguments)
            in_reply[mark] = in_reply.get(mark, 0) + 1
            in_reply[near] = in_reply.get(near, 0) + 1
            new.append(mark)
            count = context.state.counter(CALL_COUNT_PREFIX + mark) + in_reply[mark]
            near_calls = context.state.counter(near) + in_reply[near]
            cycles = cycle_runs([*sequence, *new], settings.max_period)
            if count < warned and near_calls < warned and not cycles:
                continue
            repeated = Repetition.of(count, 0, settings)
            nearly = Repetition.near_of(near_calls, settings)
            found_here = (repeated, *(Repetition.of(calls, period, settings) for calls, period in cycles))
            for found in (*found_here, *((nearly,) if nearly is not None and nearly.calls > repeated.calls else ())):
                if worst is None or (found.level, found.calls) > (worst[0].level, worst[0].calls):
                    worst = (found, tool_call)
        if worst is None or not worst[0].level:
            return PASS
        found, tool_call = worst
        what = _what(tool_call, found.period, found.near)
        often = f"({found.calls} calls)" if found.period else f"{found.calls} times"
        if found.level == 2:
            return Finalize(
                reason="loop", detail=f"the model repeated {what} {often}", evidence=_evidence(tool_call, found)
            )
        if context.retries.get("loop_warning"):
            return PASS  # warned once in this request and it insists: the agent runs it
        text = context.policy.nudges.loop_warning.format(call=what, count=found.calls - 1)
        return Nudge(kind="loop_warning", reason=f"{what} repeated {often}", turns=(Note(text),))

    def check_request(self, context: GuardContext) -> RequestVerdict:
        """Attach the warning to results of calls that reached their warning: a call repeated
        ``warn_at`` times, or the calls of a cycle that did."""
        settings = context.policy.loop
        trailing = context.conversation.trailing_tool_results()
        if not settings.enabled or not trailing:
            return PASS
        calls = context.conversation.calls_by_id()
        sequence = context.state.items(CALL_SEQUENCE)
        runs = cycle_runs(sequence, settings.max_period)
        cycles = [Repetition.of(calls, period, settings) for calls, period in runs] if runs else ()
        cycle = max(cycles, key=lambda found: (found.level, found.calls), default=None)
        in_cycle = set(sequence[-cycle.period :]) if cycle is not None and cycle.level else set()
        notes: dict[str, str] = {}
        for message in trailing:
            tool_call = calls.get(str(message.call_id))
            if tool_call is None:
                continue
            mark = fingerprint(tool_call.name, tool_call.arguments)
            count = context.state.counter(CALL_COUNT_PREFIX + mark)
            near = context.state.counter(NEAR_COUNT_PREFIX + near_fingerprint(tool_call.name, tool_call.arguments))
            if count >= settings.warn_at:
                notes[tool_call.id] = context.policy.nudges.loop_warning.format(call=_describe(tool_call), count=count)
            elif settings.near_block_at and near >= settings.warn_at:
                what = _what(tool_call, 0, near=True)
                notes[tool_call.id] = context.policy.nudges.loop_warning.format(call=what, count=near)
            elif cycle is not None and mark in in_cycle:
                what = _what(tool_call, cycle.period)
                notes[tool_call.id] = context.policy.nudges.loop_warning.format(call=what, count=cycle.calls)
        if not notes:
            return PASS
        return Amend(kind="loop_warning_result", reason=f"{len(notes)} repeated call result(s)", tool_notes=notes)

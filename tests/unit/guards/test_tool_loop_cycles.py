"""Cycles end after as many tool runs as an exact repeat, counted in calls: a table of runs.

Each case plays an agent against the tool-loop guard the way the pipeline does: a reply's
calls are checked against the calls delivered so far, a warned reply is asked again once
(the model insists with the same calls), and what passes is delivered and remembered.
"""

from __future__ import annotations

import json

import pytest

from proxy.exchange import Reply, ToolCall, Usage
from proxy.guards import GuardContext, ToolLoopGuard
from proxy.guards.fingerprint import remember_calls
from proxy.policy.models import LoopSettings, Policy
from proxy.session.base import SessionDelta, SessionState
from proxy.verdict import Amend, Finalize, Nudge, Pass
from proxy.wire.chat.parse import parse_conversation

CALLS = {
    "A": ToolCall("a", "search", '{"q": "lyon"}'),
    "B": ToolCall("b", "fetch", '{"url": "https://insee.fr"}'),
    "C": ToolCall("c", "read", '{"page": 2}'),
    "D": ToolCall("d", "list", "{}"),
    "E": ToolCall("e", "stat", "{}"),
}


def _play(script: list[str], policy: Policy = Policy()) -> tuple[int, list[int], str | None]:
    """(tool runs before the end, the replies (1-based) that were warned, the end's reason).
    Each script item is one reply's calls, e.g. ``"A"`` or ``"AB"`` (parallel)."""
    state = SessionState()
    runs, warned = 0, []
    conversation = parse_conversation({"messages": [{"role": "user", "content": "task"}]})
    for number, calls in enumerate(script, 1):
        reply = Reply(None, None, tuple(CALLS[c] for c in calls), "tool_calls", Usage())
        verdict = ToolLoopGuard().check_reply(reply, GuardContext(policy, state, conversation, {}))
        if isinstance(verdict, Nudge):
            warned.append(number)
            verdict = ToolLoopGuard().check_reply(reply, GuardContext(policy, state, conversation, {"loop_warning": 1}))
        if isinstance(verdict, Finalize):
            return runs, warned, verdict.reason
        assert isinstance(verdict, Pass)
        delta = SessionDelta()
        remember_calls(delta, reply.tool_calls, policy.loop.history)
        state = delta.applied_to(state)
        runs += len(reply.tool_calls)
    return runs, warned, None


@pytest.mark.parametrize(
    ("script", "runs", "warned"),
    [
        ("AAAAAAAA", 4, [3, 4]),  # an exact repeat: warned at its 3rd call, ended at its 5th
        ("ABABABAB", 4, [3, 4]),  # A-B-A-B: the same tool runs and warnings
        ("ABCABCAB", 4, [4]),  # A-B-C-A-B-C: warned at its first repeated call, the same end
        ("CABABABA", 5, [4, 5]),  # a cycle after other work counts from where it starts
    ],
)
def test_a_cycle_ends_after_as_many_tool_runs_as_an_exact_repeat(script, runs, warned):
    assert _play(list(script)) == (runs, warned, "loop")


def test_a_repeated_pair_of_parallel_calls_is_counted_in_calls():
    # AB AB: a run of 4 calls (warned); AB again would be the 5th and 6th: ended.
    assert _play(["AB", "AB", "AB"]) == (4, [2], "loop")


def test_a_cycle_longer_than_the_warning_is_warned_at_its_first_repeat_and_ended_at_the_next():
    policy = Policy(loop=LoopSettings(max_period=5))

    assert _play(list("ABCDEABCDE"), policy) == (6, [6], "loop")


def test_a_cycle_beyond_max_period_is_left_to_the_exact_count():
    policy = Policy(loop=LoopSettings(max_period=2))
    # Only each call's own count: warned from its 3rd call on, A's 5th would end it.
    assert _play(list("ABCABCABCABCA"), policy) == (12, [7, 8, 9, 10, 11, 12], "loop")


def test_distinct_calls_are_never_disturbed():
    calls = [ToolCall(f"c{n}", "search" if n % 2 else "fetch", json.dumps({"q": f"page {n}"})) for n in range(30)]
    state = SessionState()
    conversation = parse_conversation({"messages": [{"role": "user", "content": "task"}]})
    for call in calls:
        reply = Reply(None, None, (call,), "tool_calls", Usage())
        verdict = ToolLoopGuard().check_reply(reply, GuardContext(Policy(), state, conversation, {}))
        assert isinstance(verdict, Pass)
        delta = SessionDelta()
        remember_calls(delta, [call], 60)
        state = delta.applied_to(state)


def test_the_result_of_a_warned_cycle_call_carries_the_warning_upstream():
    state = SessionState()
    delta = SessionDelta()
    remember_calls(delta, [CALLS["A"], CALLS["B"], CALLS["A"]], 60)
    state = delta.applied_to(state)
    conversation = parse_conversation(
        {
            "messages": [
                {"role": "user", "content": "task"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "a", "type": "function", "function": {"name": "search", "arguments": '{"q": "lyon"}'}}
                    ],
                },
                {"role": "tool", "tool_call_id": "a", "content": "Lyon: 522,250"},
            ]
        }
    )

    verdict = ToolLoopGuard().check_request(GuardContext(Policy(), state, conversation, {}))

    assert isinstance(verdict, Amend)
    assert "a cycle of 2 calls" in verdict.tool_notes["a"]

"""Stalled progress (ever-new arguments, the same result), as tables: what is a stalled run,
and what the guard decides on it with the judge, without it, and on real lookups."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.exchange import Conversation, Message, Reply, ReturnCalls, ToolCall, Usage, flattened_calls
from proxy.guards import GuardContext, StalledProgressGuard
from proxy.guards.stalled_progress import NUDGE_KIND, STRIKE, latest_steps, masked, stalled_run
from proxy.judge.client import JudgeOutcome, JudgeTarget
from proxy.policy.models import Policy
from proxy.session.base import SessionState
from proxy.verdict import PASS, Finalize, JudgeCall, Nudge, Pass
from proxy.wire.chat.format import CHAT_COMPLETIONS
from tests.support.fake_judge import FakeJudge

TASK = "How many people live in Lyon?"
TARGET = JudgeTarget("http://judge/v1/chat/completions", [], "m", CHAT_COMPLETIONS.judge, scope="t")
SPENT = Usage(10, 2)
JUDGE_POLICY = Policy.model_validate({"judge": {"use_llm_judge": True}})
NO_JUDGE_POLICY = Policy.model_validate({"judge": {"use_llm_judge": False}})


def native(calls: list[tuple[str, dict[str, Any], str]]) -> Conversation:
    """A chat history: the task, then one call and its result per step (``tool`` turns)."""
    messages = [Message("user", TASK)]
    for n, (name, arguments, result) in enumerate(calls):
        messages.append(Message("assistant", "", tool_calls=(ToolCall(f"c{n}", name, json.dumps(arguments)),)))
        messages.append(Message("tool", result, call_id=f"c{n}"))
    return Conversation(messages=messages)


def flattened(calls: list[tuple[str, dict[str, Any], str]]) -> Conversation:
    """The same history as smolagents sends it: calls as text, results as ``Observation:`` user turns."""
    messages = [Message("user", TASK)]
    for n, (name, arguments, result) in enumerate(calls):
        listed = [{"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": arguments}}]
        messages.append(Message("assistant", f"Calling tools:\n{listed!r}"))
        messages.append(Message("user", f"Observation:\n{result}"))
    return Conversation(messages=messages)


def echoing(count: int, tool: str = "search") -> list[tuple[str, dict[str, Any], str]]:
    return [(tool, {"q": f"lyon census {n}"}, f"No results for 'lyon census {n}'.") for n in range(count)]


CITIES = ["Lyon", "Paris", "Nice", "Lille", "Nantes", "Rennes", "Brest", "Dijon", "Metz"]
LOOKUPS = [("population", {"city": c}, f"{c}: {100_000 + 7919 * n} inhabitants") for n, c in enumerate(CITIES)]

STALLED_CASES = [
    # the history, the run it forms (0: not stalled)
    (echoing(3), 3),
    (echoing(5), 5),
    (echoing(2), 0),  # too short
    (LOOKUPS, 0),  # distinct lookups: different results
    ([("search", {"q": f"q{n}"}, "No results.") for n in range(4)], 0),  # identical as sent: no_progress's case
    ([("search", {"q": "lyon"}, f"No results for 'lyon' ({n})") for n in range(4)], 0),  # same arguments
    ([*echoing(2, "fetch"), *echoing(2)], 0),  # two tools
    ([*LOOKUPS[:2], *echoing(3)], 3),  # a stall after real lookups
    ([*echoing(3), LOOKUPS[0]], 0),  # a real result ends it
    ([("search", {"page": 10 + n}, f"Page {10 + n} of 0: nothing.") for n in range(3)], 3),  # numbers masked
    ([("search", {"q": f"LYON {n}"}, f"no results for lyon {n}") for n in range(3)], 3),  # any case
]


@pytest.mark.parametrize(("calls", "run"), STALLED_CASES)
def test_a_stalled_run_is_the_same_result_but_for_the_calls_own_arguments(calls, run):
    assert len(stalled_run(latest_steps(native(calls)), 3)) == run


@pytest.mark.parametrize(("calls", "run"), STALLED_CASES)
def test_smolagents_flattened_calls_and_observations_read_the_same(calls, run):
    assert len(stalled_run(latest_steps(flattened(calls)), 3)) == run


def test_flattened_calls_read_smolagents_python_repr():
    text = "Calling tools:\n[{'id': 'c1', 'type': 'function', 'function': {'name': 'search', 'arguments': {'q': 'x'}}}]"
    assert flattened_calls(text) == (ToolCall("c1", "search", '{"q":"x"}'),)


@pytest.mark.parametrize("text", ["Calling tools:\n[oops", "Hello", "Calling tools:\n__import__('os')", ""])
def test_text_that_is_no_flattened_call_list_yields_no_calls(text):
    assert flattened_calls(text) == ()


def test_masking_blanks_the_longest_value_first():
    call = ToolCall("c", "search", json.dumps({"q": "lyon census", "w": "lyon"}))
    assert masked("No results for 'lyon census' near lyon.", call) == "No results for '…' near …."


def next_call(tool: str = "search") -> Reply:
    return Reply(None, None, (ToolCall("next", tool, '{"q": "lyon census again"}'),), "tool_calls", Usage())


def context(policy: Policy, conversation: Conversation, strikes: int = 0, nudged: int = 0) -> GuardContext:
    state = SessionState({f"strike:{STRIKE}": strikes} if strikes else {})
    return GuardContext(
        policy, state, conversation, retries={NUDGE_KIND: nudged} if nudged else {}, judge_target=TARGET
    )


async def decide(guard: StalledProgressGuard, reply: Reply, ctx: GuardContext) -> Any:
    verdict = guard.check_reply(reply, ctx)
    return verdict if isinstance(verdict, Pass | Nudge | Finalize) else await verdict


NO_PROGRESS = JudgeOutcome(False, "every search came back empty", SPENT, 0.2)
PROGRESS = JudgeOutcome(True, "each query narrows the search", SPENT, 0.2)


async def test_the_judge_is_asked_whether_the_steps_make_progress():
    judge = FakeJudge(NO_PROGRESS)

    verdict = await decide(StalledProgressGuard(judge), next_call(), context(JUDGE_POLICY, native(echoing(3))))  # type: ignore[arg-type]

    (asked,) = judge.asked
    assert asked.question == "progress"
    assert asked.task == TASK
    assert "No results for 'lyon census 2'" in asked.reply
    assert isinstance(verdict, Nudge)
    assert (verdict.kind, verdict.strike, verdict.spent) == (NUDGE_KIND, STRIKE, SPENT)
    assert verdict.seen == (JudgeCall("no_progress", 0.2),)
    (turn,) = verdict.turns
    assert isinstance(turn, ReturnCalls)
    assert "same result" in turn.results["next"]


async def test_the_last_strike_ends_the_session_with_no_progress():
    judge = FakeJudge(NO_PROGRESS)
    ctx = context(JUDGE_POLICY, native(echoing(6)), strikes=JUDGE_POLICY.no_progress.max_strikes - 1)

    verdict = await decide(StalledProgressGuard(judge), next_call(), ctx)  # type: ignore[arg-type]

    assert isinstance(verdict, Finalize)
    assert verdict.reason == "no_progress"
    assert "every search came back empty" in verdict.detail


async def test_after_a_no_the_judge_is_asked_again_at_the_next_call_so_the_ending_comes_one_request_later():
    judge = FakeJudge(NO_PROGRESS)
    ctx = context(JUDGE_POLICY, native(echoing(4)), strikes=JUDGE_POLICY.no_progress.max_strikes - 1)

    verdict = await decide(StalledProgressGuard(judge), next_call(), ctx)  # type: ignore[arg-type]

    assert isinstance(verdict, Finalize)
    assert len(judge.asked) == 1


async def test_steps_the_judge_finds_progressing_pass_and_clear_the_strike():
    judge = FakeJudge(PROGRESS)

    verdict = await decide(
        StalledProgressGuard(judge), next_call(), context(JUDGE_POLICY, native(echoing(3)), strikes=1)
    )  # type: ignore[arg-type]

    assert verdict == Pass(clear_strikes=(STRIKE,), spent=SPENT, seen=(JudgeCall("progress", 0.2),))


async def test_a_judge_error_nudges_and_never_ends():
    judge = FakeJudge(JudgeOutcome(None, "judge error (timeout)", Usage(), 10.0, error="timeout"))
    ctx = context(JUDGE_POLICY, native(echoing(6)), strikes=5)

    verdict = await decide(StalledProgressGuard(judge), next_call(), ctx)  # type: ignore[arg-type]

    assert isinstance(verdict, Nudge)
    assert verdict.strike is None


@pytest.mark.parametrize("guard", [StalledProgressGuard(None), StalledProgressGuard(FakeJudge(NO_PROGRESS))])  # type: ignore[arg-type]
async def test_without_the_judge_a_stall_is_nudged_without_a_strike(guard):
    verdict = await decide(guard, next_call(), context(NO_JUDGE_POLICY, native(echoing(3)), strikes=5))

    assert isinstance(verdict, Nudge)
    assert (verdict.kind, verdict.strike) == (NUDGE_KIND, None)


PASSING_CASES = [
    # history, the reply, nudges already sent in this request: the guard passes without asking
    (LOOKUPS, next_call("population"), 0),  # real lookups
    (echoing(3), next_call("fetch"), 0),  # the model moved on to another tool
    (echoing(3), next_call(), 1),  # nudged once in this request already
    (echoing(4), next_call(), 0),  # asked at 3 and 6 results, not every step
    (echoing(13), next_call(), 0),  # nor every step of a long run
    (echoing(3), Reply("Lyon: unknown.", None, (), "stop", Usage()), 0),  # an answer, not another call
]


@pytest.mark.parametrize(("calls", "reply", "nudged"), PASSING_CASES)
async def test_the_guard_passes_without_asking_the_judge(calls, reply, nudged):
    judge = FakeJudge(NO_PROGRESS)

    verdict = await decide(StalledProgressGuard(judge), reply, context(JUDGE_POLICY, native(calls), nudged=nudged))  # type: ignore[arg-type]

    assert verdict is PASS
    assert judge.asked == []


def test_nine_distinct_lookups_are_never_disturbed_at_any_step():
    """Every prefix of a run of real lookups, met by one more lookup: nothing to ask, nothing to say."""
    guard = StalledProgressGuard(FakeJudge(NO_PROGRESS))  # type: ignore[arg-type]
    for end in range(len(LOOKUPS) + 1):
        assert guard.check_reply(next_call("population"), context(JUDGE_POLICY, native(LOOKUPS[:end]))) is PASS


def test_fewer_results_than_a_run_pass_and_clear_the_strikes():
    verdict = StalledProgressGuard(None).check_reply(
        next_call(), context(NO_JUDGE_POLICY, native(echoing(2)), strikes=1)
    )

    assert verdict == Pass(clear_strikes=(STRIKE,))


def test_the_guard_is_off_with_stalled_results_zero():
    policy = Policy.model_validate({"no_progress": {"stalled_results": 0}})
    assert StalledProgressGuard(None).check_reply(next_call(), context(policy, native(echoing(3)))) is PASS


async def test_a_long_run_is_asked_about_with_its_newest_steps_only():
    judge = FakeJudge(PROGRESS)

    await decide(StalledProgressGuard(judge), next_call(), context(JUDGE_POLICY, native(echoing(30))))  # type: ignore[arg-type]

    (asked,) = judge.asked
    assert asked.reply.count("\n") == 7  # eight steps
    assert asked.reply.endswith("No results for 'lyon census 29'.")

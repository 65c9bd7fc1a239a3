"""The first guards, as tables: reply and strikes so far → verdict."""

from __future__ import annotations

import pytest

from proxy.exchange import Conversation, Note, Reply, ToolCall, Usage
from proxy.guards import BudgetGuard, EmptyReplyGuard, GuardContext, ReasoningOnlyGuard
from proxy.policy.models import Policy
from proxy.session.base import SessionState
from proxy.verdict import PASS, Finalize, Nudge, Pass

POLICY = Policy(empty_response_max_strikes=3, reasoning_only_max_strikes=3, max_steps=5)
CALL = (ToolCall("c1", "search", "{}"),)


def reply(content=None, reasoning=None, tool_calls=()):
    return Reply(content, reasoning, tuple(tool_calls), "stop", Usage())


def context(strikes: dict[str, int] | None = None, steps: int = 0) -> GuardContext:
    values = {f"strike:{k}": str(v) for k, v in (strikes or {}).items()}
    values["steps"] = str(steps)
    return GuardContext(POLICY, SessionState(values), Conversation(messages=[]))


EMPTY_CASES = [
    # reply, strikes so far, expected verdict type, expected strike
    (reply(None), 0, Nudge, "empty_response"),
    (reply(""), 1, Nudge, "empty_response"),
    (reply("   \n"), 0, Nudge, "empty_response"),
    (reply(None), 2, Finalize, "empty_response"),  # the third strike ends it
    (reply("An answer."), 0, Pass, None),
    (reply(None, tool_calls=CALL), 0, Pass, None),
    (reply(None, reasoning="thinking..."), 0, Pass, None),  # reasoning-only is not empty
]


@pytest.mark.parametrize(("given", "strikes", "kind", "strike"), EMPTY_CASES)
def test_empty_reply_guard(given, strikes, kind, strike):
    verdict = EmptyReplyGuard().check_reply(given, context({"empty_response": strikes}))

    assert isinstance(verdict, kind)
    assert getattr(verdict, "strike", None) == strike


def test_empty_reply_nudge_carries_the_policy_text():
    verdict = EmptyReplyGuard().check_reply(reply(None), context())

    assert verdict.kind == "empty_nudge"
    assert verdict.turns == (Note(POLICY.nudges.empty_response),)


def test_good_reply_clears_empty_strikes_only_when_there_are_some():
    assert EmptyReplyGuard().check_reply(reply("ok"), context({"empty_response": 2})) == Pass(("empty_response",))
    assert EmptyReplyGuard().check_reply(reply("ok"), context()) is PASS


REASONING_CASES = [
    (reply(None, reasoning="let me think"), 0, Nudge),
    (reply("", reasoning="let me think"), 1, Nudge),
    (reply(None, reasoning="still thinking"), 2, Finalize),
    (reply("Answer", reasoning="thought"), 0, Pass),
    (reply(None, reasoning="thought", tool_calls=CALL), 0, Pass),
    (reply(None), 0, Pass),  # empty is the other guard's case
    (reply(None, reasoning="   "), 0, Pass),
]


@pytest.mark.parametrize(("given", "strikes", "kind"), REASONING_CASES)
def test_reasoning_only_guard(given, strikes, kind):
    verdict = ReasoningOnlyGuard().check_reply(given, context({"reasoning_only": strikes}))

    assert isinstance(verdict, kind)


@pytest.mark.parametrize(("steps", "ends"), [(0, False), (3, False), (5, True), (9, True)])
def test_step_limit_guard(steps, ends):
    verdict = BudgetGuard().check_request(context(steps=steps))

    assert isinstance(verdict, Finalize) is ends
    if ends:
        assert verdict.reason == "budget_steps"


EXHAUSTED_CASES = [
    # guard, a reply it nudges, the ending when the request has no attempt left for the nudge
    (EmptyReplyGuard(), reply(None), "empty_response"),
    (ReasoningOnlyGuard(), reply(None, reasoning="let me think"), "reasoning_only"),
]


@pytest.mark.parametrize(("guard", "given", "ending"), EXHAUSTED_CASES)
def test_a_strike_nudge_names_the_ending_when_attempts_run_out(guard, given, ending):
    verdict = guard.check_reply(given, context())

    assert isinstance(verdict, Nudge)
    assert verdict.exhausted == ending


def test_a_nudge_names_max_attempts_unless_its_guard_says_otherwise():
    assert Nudge("any_nudge", "why", ()).exhausted == "max_attempts"

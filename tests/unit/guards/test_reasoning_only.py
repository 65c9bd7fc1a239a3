"""The reasoning-only guard: a reply that thought but neither answered nor acted is nudged, then ends the session."""

from __future__ import annotations

import pytest

from proxy.exchange import Note, ToolCall
from proxy.guards import ReasoningOnlyGuard
from proxy.policy.models import Policy
from proxy.verdict import PASS, Finalize, Nudge, Pass
from tests.unit.guards.given import context, reply, session

POLICY = Policy(reasoning_only_max_strikes=3)
CALL = ToolCall("c1", "search", "{}")


def nudged(strike: int) -> Nudge:
    return Nudge(
        kind="reasoning_nudge",
        reason=f"reasoning-only replies (thinking without acting) (strike {strike} of 3)",
        turns=(Note(POLICY.nudges.reasoning_only),),
        strike="reasoning_only",
        exhausted="reasoning_only",
    )


CASES = [
    # the reply, strikes so far, the verdict
    pytest.param(reply(None, reasoning="let me think"), 0, nudged(1), id="thinking-without-acting-is-nudged"),
    pytest.param(reply("  ", reasoning="let me think"), 0, nudged(1), id="whitespace-text-is-no-answer"),
    pytest.param(reply(None, reasoning="hmm"), 1, nudged(2), id="a-second-miss-is-the-second-strike"),
    pytest.param(
        reply(None, reasoning="still thinking"),
        2,
        Finalize(
            "reasoning_only",
            "the model returned 3 reasoning-only replies (thinking without acting) in a row",
            strike="reasoning_only",
        ),
        id="the-third-miss-in-a-row-ends-the-session",
    ),
    pytest.param(reply("Answer", reasoning="thought"), 0, PASS, id="reasoning-with-an-answer-passes"),
    pytest.param(reply(None, CALL, reasoning="thought"), 0, PASS, id="reasoning-with-a-tool-call-passes"),
    pytest.param(reply(None, reasoning="thought", finish="length"), 0, PASS, id="a-reply-cut-short-passes"),
    pytest.param(reply(None), 0, PASS, id="an-empty-reply-is-the-empty-guards-case"),
    pytest.param(reply(None, reasoning="   "), 0, PASS, id="blank-reasoning-is-no-reasoning"),
    pytest.param(reply("ok"), 1, Pass(clear_strikes=("reasoning_only",)), id="a-good-reply-clears-the-strikes"),
]


@pytest.mark.parametrize(("given", "strikes", "expected"), CASES)
def test_reasoning_only(given, strikes, expected):
    verdict = ReasoningOnlyGuard().check_reply(given, context(POLICY, session({"reasoning_only": strikes})))

    assert verdict == expected


def test_strikes_of_the_empty_guard_are_not_its_own():
    verdict = ReasoningOnlyGuard().check_reply(
        reply(None, reasoning="hmm"), context(POLICY, session({"empty_response": 2}))
    )

    assert verdict == nudged(1)

"""The empty-reply guard: a reply with nothing in it (not even reasoning) is nudged, then ends the session."""

from __future__ import annotations

import pytest

from proxy.exchange import Note, ToolCall
from proxy.guards import EmptyReplyGuard
from proxy.policy.models import Policy
from proxy.verdict import PASS, Finalize, Nudge, Pass
from tests.unit.guards.given import context, reply, session

POLICY = Policy(empty_response_max_strikes=3)
CALL = ToolCall("c1", "search", "{}")


def nudged(strike: int) -> Nudge:
    return Nudge(
        kind="empty_nudge",
        reason=f"empty replies (strike {strike} of 3)",
        turns=(Note(POLICY.nudges.empty_response),),
        strike="empty_response",
        exhausted="empty_response",
    )


CASES = [
    # the reply, strikes so far, the verdict
    pytest.param(reply(None), 0, nudged(1), id="no-content-is-nudged"),
    pytest.param(reply(""), 0, nudged(1), id="empty-text-is-nudged"),
    pytest.param(reply("   \n"), 0, nudged(1), id="whitespace-is-nudged"),
    pytest.param(reply(None), 1, nudged(2), id="a-second-miss-is-the-second-strike"),
    pytest.param(
        reply(None),
        2,
        Finalize("empty_response", "the model returned 3 empty replies in a row", strike="empty_response"),
        id="the-third-miss-in-a-row-ends-the-session",
    ),
    pytest.param(reply("An answer."), 0, PASS, id="text-passes"),
    pytest.param(reply(None, CALL), 0, PASS, id="a-tool-call-passes"),
    pytest.param(reply(None, reasoning="thinking..."), 0, PASS, id="reasoning-alone-is-not-empty"),
    pytest.param(reply(None, refusal="I can't help with that."), 0, PASS, id="a-refusal-is-an-answer"),
    pytest.param(reply(None, finish="length"), 0, PASS, id="a-reply-cut-short-is-not-empty"),
    pytest.param(reply(None, finish="content_filter"), 0, PASS, id="a-filtered-reply-is-not-empty"),
    pytest.param(reply("ok"), 2, Pass(clear_strikes=("empty_response",)), id="a-good-reply-clears-the-strikes"),
]


@pytest.mark.parametrize(("given", "strikes", "expected"), CASES)
def test_empty_reply(given, strikes, expected):
    verdict = EmptyReplyGuard().check_reply(given, context(POLICY, session({"empty_response": strikes})))

    assert verdict == expected


def test_a_good_reply_without_strikes_passes_with_no_bookkeeping():
    assert EmptyReplyGuard().check_reply(reply("ok"), context(POLICY)) is PASS


def test_the_policy_sets_how_many_misses_end_the_session():
    policy = Policy(empty_response_max_strikes=1)

    verdict = EmptyReplyGuard().check_reply(reply(None), context(policy))

    assert verdict == Finalize("empty_response", "the model returned 1 empty replies in a row", strike="empty_response")

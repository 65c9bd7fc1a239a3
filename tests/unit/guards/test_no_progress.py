"""The no-progress guard: identical tool results, or the same reply again, are nudged, then end the session."""

from __future__ import annotations

import pytest

from proxy.exchange import Message, Note, ToolCall
from proxy.guards import NoProgressGuard
from proxy.guards.no_progress import remember_results, trailing_run
from proxy.policy.models import Policy
from proxy.session.base import SessionDelta, SessionState
from proxy.verdict import PASS, Finalize, Nudge, Pass
from tests.unit.guards.given import TASK, called, context, conversation, reply, session

POLICY = Policy()  # 3 identical in a row is no progress; the 2nd detection ends the session
OFF = Policy(no_progress={"enabled": False})


def nudged(what: str, strike: str, miss: str, count: int = 3) -> Nudge:
    text = POLICY.nudges.no_progress.format(count=count, what=what)
    return Nudge("no_progress_nudge", f"{miss} (strike 1 of 2)", (Note(text),), strike=strike)


SAME_RESULTS = nudged("the tool results were identical", "no_progress_results", "rounds of identical tool results")
SAME_TEXT = nudged("you repeated the same reply", "no_progress_text", "identical replies")

STAMPED = [f"503 Service Unavailable (request_id={n}f3a2c at 2026-12-01T10:00:0{n}Z)" for n in range(3)]
RESULT_CASES = [
    pytest.param(STAMPED, 0, POLICY, SAME_RESULTS, id="results-differing-in-timestamps-and-ids-are-identical"),
    pytest.param(STAMPED, 0, Policy(no_progress={"mask_volatile": False}), PASS, id="unless-the-policy-compares-raw"),
    # tool results in the history, strikes so far, policy, the verdict
    pytest.param(["pending", "pending"], 0, POLICY, PASS, id="two-identical-results-are-not-yet-a-run"),
    pytest.param(["pending"] * 3, 0, POLICY, SAME_RESULTS, id="three-identical-results-are-nudged"),
    pytest.param(["pending", " pending ", "pending\n"], 0, POLICY, SAME_RESULTS, id="whitespace-does-not-make-it-new"),
    pytest.param(["pending"] * 5, 0, POLICY, SAME_RESULTS, id="the-run-is-counted-up-to-the-policys-repeats"),
    pytest.param(
        ["pending"] * 4,
        1,
        POLICY,
        Finalize(
            "no_progress",
            "the model returned 2 rounds of identical tool results in a row",
            strike="no_progress_results",
        ),
        id="the-second-detection-ends-the-session",
    ),
    pytest.param(
        ["pending", "pending", "done"],
        1,
        POLICY,
        Pass(clear_strikes=("no_progress_results",)),
        id="a-new-result-clears-the-strikes",
    ),
    pytest.param(["pending"] * 3, 0, OFF, PASS, id="a-disabled-guard-passes-everything"),
    pytest.param(
        ["pending"],
        1,
        POLICY,
        Pass(clear_strikes=("no_progress_results",)),
        id="fewer-results-than-a-run-clear-the-strikes-too",
    ),
]


@pytest.mark.parametrize(("results", "strikes", "policy", "expected"), RESULT_CASES)
def test_identical_tool_results(results, strikes, policy, expected):
    state = session({"no_progress_results": strikes})

    assert NoProgressGuard().check_request(context(policy, state, conversation(*called(*results)))) == expected


def test_results_already_answered_by_the_model_are_not_new():
    messages = (*called("pending", "pending", "pending"), Message("assistant", "Still waiting."))

    assert NoProgressGuard().check_request(context(POLICY, talk=conversation(*messages))) is PASS


def said(*texts: str) -> tuple[Message, ...]:
    """The task, then each assistant text answered by the user."""
    messages = [TASK]
    for text in texts:
        messages += [Message("assistant", text), Message("user", "ok?")]
    return tuple(messages)


CALL_TURN = (Message("assistant", tool_calls=(ToolCall("c1", "poll", "{}"),)), Message("tool", "x", call_id="c1"))

TEXT_CASES = [
    # the history, the reply, strikes so far, policy, the verdict
    pytest.param(
        said("I am checking.", "I am checking."),
        reply("I am  checking."),
        0,
        POLICY,
        SAME_TEXT,
        id="the-same-reply-a-third-time-is-nudged",
    ),
    pytest.param(
        said("I am checking.", "I am checking."),
        reply("I am checking."),
        1,
        POLICY,
        Finalize("no_progress", "the model returned 2 identical replies in a row", strike="no_progress_text"),
        id="the-second-detection-ends-the-session",
    ),
    pytest.param(
        (*said("I am checking."), *CALL_TURN, Message("assistant", "I am checking.")),
        reply("I am checking."),
        0,
        POLICY,
        SAME_TEXT,
        id="tool-call-turns-without-text-do-not-break-the-run",
    ),
    pytest.param(said("I am checking."), reply("I am checking."), 0, POLICY, PASS, id="twice-is-not-yet-a-run"),
    pytest.param(
        said("I am checking.", "I am checking."), reply("Found it."), 0, POLICY, PASS, id="a-new-reply-passes"
    ),
    pytest.param(
        said("I am checking.", "I am checking."),
        reply("Found it."),
        1,
        POLICY,
        Pass(clear_strikes=("no_progress_text",)),
        id="a-new-reply-clears-the-strikes",
    ),
    pytest.param(
        said("I am checking.", "I am checking."),
        reply("I am checking.", ToolCall("c2", "poll", "{}")),
        1,
        POLICY,
        PASS,
        id="a-reply-that-acts-is-not-judged",
    ),
    pytest.param(
        said("...", "..."), reply(None, reasoning="..."), 0, POLICY, PASS, id="a-reply-without-text-is-not-judged"
    ),
    pytest.param(
        said("I am checking.", "I am checking."),
        reply("I am checking."),
        0,
        OFF,
        PASS,
        id="a-disabled-guard-passes-everything",
    ),
]


@pytest.mark.parametrize(("messages", "given", "strikes", "policy", "expected"), TEXT_CASES)
def test_the_same_reply_again(messages, given, strikes, policy, expected):
    state = session({"no_progress_text": strikes})

    assert NoProgressGuard().check_reply(given, context(policy, state, conversation(*messages))) == expected


@pytest.mark.parametrize(
    ("items", "limit", "run"),
    [
        pytest.param([], None, 0, id="nothing"),
        pytest.param(["a"], None, 1, id="one"),
        pytest.param(["a", "b", "b"], None, 2, id="only-the-end-counts"),
        pytest.param(["b", "b", "b"], None, 3, id="all-the-same"),
        pytest.param(["b ", " b"], None, 2, id="whitespace-is-collapsed"),
        pytest.param(["same"] * 500, 3, 3, id="counting-stops-at-the-limit"),
    ],
)
def test_trailing_run(items, limit, run):
    assert trailing_run(items, limit) == run


def _remembered(*results: str) -> SessionState:
    """The session after requests that carried ``results`` (one each, call ids c0, c1, ...)."""
    delta = SessionDelta()
    for n, result in enumerate(results):
        chained = conversation(Message("tool", result, call_id=f"c{n}"), held_upstream=True)
        remember_results(delta, chained, POLICY.no_progress)
    return delta.applied_to(SessionState())


def test_a_chained_request_counts_the_results_the_server_holds():
    state = _remembered("pending", "pending")
    chained = conversation(Message("tool", "pending", call_id="c2"), held_upstream=True)

    assert NoProgressGuard().check_request(context(POLICY, state, chained)) == SAME_RESULTS


def test_a_result_the_client_sent_twice_counts_once():
    state = _remembered("pending", "pending")  # c0, then c1
    resent = conversation(Message("tool", "pending", call_id="c0"), held_upstream=True)
    chained = conversation(Message("tool", "pending", call_id="c9"), held_upstream=True)
    delta = SessionDelta()
    remember_results(delta, resent, POLICY.no_progress)
    once = _remembered("pending")
    remember_results(delta, resent, POLICY.no_progress)

    assert NoProgressGuard().check_request(context(POLICY, delta.applied_to(once), chained)) is PASS
    assert NoProgressGuard().check_request(context(POLICY, state, chained)) == SAME_RESULTS


def test_a_request_that_resends_its_history_ignores_the_remembered_results():
    state = _remembered("pending", "pending")

    assert NoProgressGuard().check_request(context(POLICY, state, conversation(*called("pending")))) is PASS

"""The premature-stop guard: a short answer after tool use goes to the judge (a fake here: the judge
model is the upstream); not done, the model continues; out of continuations, the session ends."""

from __future__ import annotations

import json

import pytest

from proxy.exchange import Conversation, Echo, Message, Note, ReturnCalls, ToolCall, Usage
from proxy.guards import GuardContext, PrematureStopGuard
from proxy.judge.client import JudgeOutcome, JudgeRequest, JudgeTarget
from proxy.policy.models import Policy
from proxy.session.base import SessionState
from proxy.verdict import PASS, Finalize, JudgeCall, Nudge, Pass
from proxy.wire.chat.format import CHAT_COMPLETIONS
from proxy.wire.responses.format import RESPONSES
from proxy.wire.responses.parse import parse_reply
from tests.support.answer_shapes import LEGITIMATE
from tests.support.fake_judge import FakeJudge
from tests.support.fake_responses import message, response
from tests.unit.guards.given import context, conversation, reply, session

TASK = "Find the bug in the parser and fix it."
USED_TOOLS = conversation(
    Message("user", TASK),
    Message("assistant", tool_calls=(ToolCall("c1", "read_file", "{}"),)),
    Message("tool", "def parse(): ...", call_id="c1"),
)
NO_TOOLS = conversation(Message("user", TASK))
TARGET = JudgeTarget("http://judge/v1/chat/completions", [], "m", CHAT_COMPLETIONS.judge, scope="t")
SPENT = Usage(10, 2)
POLICY = Policy()  # the judge on; 2 continuations per session, then the session ends
FAIL_OPEN = Policy.model_validate({"judge": {"judge_fail_open": True}})
PASS_AFTER = Policy.model_validate({"judge": {"after_max_continues": "pass"}})
JUDGE_OFF = Policy.model_validate({"judge": {"use_llm_judge": False}})

DONE = JudgeOutcome(True, "done", SPENT, 0.25)
NOT_DONE = JudgeOutcome(False, "tests not run.", SPENT, 0.5)
REMEMBERED_NOT_DONE = JudgeOutcome(False, "tests not run", Usage(), 0.0, remembered=True)
TIMED_OUT = JudgeOutcome(None, "timed out", SPENT, 3.0, error="timeout")
ANSWER = reply("Done.")
FINAL = ToolCall("f1", "final_answer", '{"answer": "Fixed."}')
NOT_DONE_TEXT = POLICY.nudges.judge_not_done.format(reason="tests not run")
NOT_DONE_SEEN = (JudgeCall("not_done", 0.5),)
ERROR_SEEN = (JudgeCall("error", 3.0, "timeout"),)
SKIPPED = Pass(seen=(JudgeCall("skipped"),))


def continued(reason: str, text: str, seen, spent=SPENT, answer=ANSWER) -> Nudge:
    return Nudge("judge_continue", reason, (Echo(answer), Note(text)), "judge_continue", spent, seen=seen)


CASES = [
    # the judge's outcome, the reply, continuations so far, policy, the verdict, whether the judge was asked
    pytest.param(DONE, ANSWER, 0, POLICY, Pass(spent=SPENT, seen=(JudgeCall("done", 0.25),)), True, id="done-passes"),
    pytest.param(
        JudgeOutcome(True, "done", Usage(), 0.0, remembered=True),
        ANSWER,
        0,
        POLICY,
        Pass(spent=Usage(), seen=(JudgeCall("remembered"),)),
        True,
        id="a-remembered-done-passes-with-no-latency",
    ),
    pytest.param(
        NOT_DONE,
        ANSWER,
        0,
        POLICY,
        continued("judge: tests not run.", NOT_DONE_TEXT, NOT_DONE_SEEN),
        True,
        id="not-done-continues-with-the-judges-reason",
    ),
    pytest.param(
        REMEMBERED_NOT_DONE,
        ANSWER,
        1,
        POLICY,
        continued("judge (remembered): tests not run", NOT_DONE_TEXT, (JudgeCall("remembered"),), spent=Usage()),
        True,
        id="a-remembered-not-done-continues-and-says-so",
    ),
    pytest.param(
        NOT_DONE,
        reply(None, FINAL),
        0,
        POLICY,
        Nudge(
            "judge_continue",
            "judge: tests not run.",
            (ReturnCalls(reply(None, FINAL), {"f1": NOT_DONE_TEXT}),),
            "judge_continue",
            SPENT,
            seen=NOT_DONE_SEEN,
        ),
        True,
        id="a-completion-tool-call-not-done-gets-the-reason-as-its-result",
    ),
    pytest.param(
        TIMED_OUT,
        ANSWER,
        0,
        POLICY,
        continued("timed out", POLICY.nudges.judge_unavailable, ERROR_SEEN),
        True,
        id="a-judge-error-counts-as-not-done",
    ),
    pytest.param(
        JudgeOutcome(None, "no verdict", SPENT, 1.0),
        ANSWER,
        0,
        POLICY,
        continued("no verdict", POLICY.nudges.judge_unavailable, (JudgeCall("error", 1.0, "upstream_error"),)),
        True,
        id="an-error-without-a-cause-is-an-upstream-error",
    ),
    pytest.param(
        TIMED_OUT,
        ANSWER,
        0,
        FAIL_OPEN,
        Pass(spent=SPENT, seen=ERROR_SEEN),
        True,
        id="a-judge-error-passes-failing-open",
    ),
    pytest.param(
        NOT_DONE,
        ANSWER,
        2,
        POLICY,
        Finalize(
            "incomplete",
            "the model kept stopping before the task was done (tests not run)",
            spent=SPENT,
            seen=NOT_DONE_SEEN,
        ),
        True,
        id="not-done-after-the-last-continuation-ends-the-session",
    ),
    pytest.param(
        TIMED_OUT,
        ANSWER,
        2,
        POLICY,
        Finalize(
            "incomplete", "the answer could not be checked (timed out)", spent=SPENT, cause="timeout", seen=ERROR_SEEN
        ),
        True,
        id="an-error-after-the-last-continuation-ends-the-session-with-its-cause",
    ),
    pytest.param(NOT_DONE, ANSWER, 2, PASS_AFTER, PASS, False, id="out-of-continuations-passes-when-the-policy-says"),
    pytest.param(
        NOT_DONE, reply("x" * 256), 0, POLICY, SKIPPED, False, id="an-answer-long-enough-is-skipped-without-asking"
    ),
    pytest.param(
        NOT_DONE, reply(None, ToolCall("c2", "search", "{}")), 0, POLICY, PASS, False, id="a-tool-call-is-no-exit"
    ),
    pytest.param(
        NOT_DONE,
        reply(None, FINAL, ToolCall("c2", "search", "{}")),
        0,
        POLICY,
        PASS,
        False,
        id="a-completion-tool-among-other-calls-is-no-exit",
    ),
    pytest.param(NOT_DONE, reply(None), 0, POLICY, PASS, False, id="a-reply-without-text-is-no-answer"),
]


@pytest.mark.parametrize(("outcome", "given", "continues", "policy", "expected", "asked"), CASES)
async def test_premature_stop(outcome, given, continues, policy, expected, asked):
    judge = FakeJudge(outcome)
    state = session({"judge_continue": continues})

    verdict = await PrematureStopGuard(judge).check_reply(given, context(policy, state, USED_TOOLS, judge=TARGET))  # type: ignore[arg-type]

    assert verdict == expected
    assert len(judge.asked) == (1 if asked else 0)


async def test_the_judge_is_asked_about_the_task_and_the_answer_under_the_policys_settings():
    judge = FakeJudge(DONE)

    await PrematureStopGuard(judge).check_reply(ANSWER, context(POLICY, talk=USED_TOOLS, judge=TARGET))  # type: ignore[arg-type]

    assert judge.asked == [JudgeRequest(TASK, "Done.", TARGET, 10.0, False, 300.0)]


@pytest.mark.parametrize(
    ("arguments", "answer"),
    [
        pytest.param('{"answer": "Fixed."}', "Fixed.", id="its-answer-field"),
        pytest.param('{"result": "Fixed."}', '{"result": "Fixed."}', id="its-arguments-without-an-answer-field"),
        pytest.param("Fixed, not JSON", "Fixed, not JSON", id="its-arguments-that-are-not-json"),
    ],
)
async def test_a_completion_tool_call_is_judged_on(arguments, answer):
    judge = FakeJudge(DONE)

    await PrematureStopGuard(judge).check_reply(  # type: ignore[arg-type]
        reply(None, ToolCall("f1", "final_answer", arguments)), context(POLICY, talk=USED_TOOLS, judge=TARGET)
    )

    assert [asked.reply for asked in judge.asked] == [answer]


async def test_an_answer_before_any_tool_use_is_not_judged():
    judge = FakeJudge(NOT_DONE)

    verdict = await PrematureStopGuard(judge).check_reply(ANSWER, context(POLICY, talk=NO_TOOLS, judge=TARGET))  # type: ignore[arg-type]

    assert (verdict, judge.asked) == (PASS, [])


async def test_tool_calls_delivered_earlier_in_the_session_count_as_tool_use():
    judge = FakeJudge(NOT_DONE)
    state = session(fp_seq="abc")

    verdict = await PrematureStopGuard(judge).check_reply(ANSWER, context(POLICY, state, NO_TOOLS, judge=TARGET))  # type: ignore[arg-type]

    assert verdict == continued("judge: tests not run.", NOT_DONE_TEXT, NOT_DONE_SEEN)


async def test_a_judge_input_too_large_is_skipped_without_asking():
    judge = FakeJudge(NOT_DONE)
    talk = conversation(Message("user", "t" * 16_000), *USED_TOOLS.messages[1:])

    verdict = await PrematureStopGuard(judge).check_reply(ANSWER, context(POLICY, talk=talk, judge=TARGET))  # type: ignore[arg-type]

    assert (verdict, judge.asked) == (SKIPPED, [])


SCHEMA = {"type": "object", "required": ["fixed"]}


@pytest.mark.parametrize(
    ("policy", "expected", "asked"),
    [
        pytest.param(POLICY, SKIPPED, 0, id="the-agents-own-definition-of-done-is-not-judged"),
        pytest.param(
            Policy.model_validate({"judge": {"judge_schema_valid_answers": True}}),
            Nudge(
                "judge_continue",
                "judge: tests not run.",
                (Echo(reply('{"fixed": true}')), Note(NOT_DONE_TEXT)),
                "judge_continue",
                SPENT,
                seen=NOT_DONE_SEEN,
            ),
            1,
            id="unless-the-policy-asks-to-judge-it",
        ),
    ],
)
async def test_a_schema_valid_answer(policy, expected, asked):
    judge = FakeJudge(NOT_DONE)
    talk = conversation(*USED_TOOLS.messages, output_schema=SCHEMA)

    guard = PrematureStopGuard(judge)  # type: ignore[arg-type]
    verdict = await guard.check_reply(reply('{"fixed": true}'), context(policy, talk=talk, judge=TARGET))

    assert (verdict, len(judge.asked)) == (expected, asked)


LONG_TASK = conversation(Message("user", "x" * 300), *USED_TOOLS.messages[1:])
SHORT_NUDGE = Nudge(
    "short_response_nudge",
    "short reply to a long task",
    (Echo(ANSWER), Note(POLICY.nudges.short_response)),
    "judge_continue",
)

WITHOUT_JUDGE_CASES = [
    # policy, the conversation, continuations so far, whether a judge target exists, the verdict
    pytest.param(JUDGE_OFF, LONG_TASK, 0, True, SHORT_NUDGE, id="a-short-answer-to-a-long-task-is-nudged"),
    pytest.param(POLICY, LONG_TASK, 0, False, SHORT_NUDGE, id="so-it-is-when-no-judge-can-be-reached"),
    pytest.param(JUDGE_OFF, USED_TOOLS, 0, True, PASS, id="a-short-answer-to-a-short-task-passes"),
    pytest.param(JUDGE_OFF, LONG_TASK, 2, True, PASS, id="out-of-continuations-it-passes"),
    pytest.param(
        Policy.model_validate({"judge": {"use_llm_judge": False, "detect_short_response": False}}),
        LONG_TASK,
        0,
        True,
        PASS,
        id="without-short-answer-detection-it-passes",
    ),
]


@pytest.mark.parametrize(("policy", "talk", "continues", "reachable", "expected"), WITHOUT_JUDGE_CASES)
async def test_without_the_judge(policy, talk, continues, reachable, expected):
    judge = FakeJudge(NOT_DONE)
    state = session({"judge_continue": continues})

    verdict = await PrematureStopGuard(judge).check_reply(  # type: ignore[arg-type]
        ANSWER, context(policy, state, talk, judge=TARGET if reachable else None)
    )

    assert (verdict, judge.asked) == (expected, [])


# -- replies read from the Responses API: a preamble is never "done" ---------------------------


class DoneJudge:
    def __init__(self) -> None:
        self.asked: list[JudgeRequest] = []

    async def decide(self, request: JudgeRequest) -> JudgeOutcome:
        self.asked.append(request)
        return JudgeOutcome(True, "done", parse_reply(b'{"output": []}').usage, 0.1)  # type: ignore[union-attr]


RESPONSES_POLICY = Policy.model_validate({"judge": {"use_llm_judge": True, "judge_max_continues": 2}})


RESPONSES_USED_TOOLS = Conversation(
    messages=[
        Message("user", "Fix the parser."),
        Message("assistant", "", tool_calls=(ToolCall("c1", "read_file", "{}"),)),
        Message("tool", "def parse(): ...", call_id="c1"),
    ]
)


RESPONSES_TARGET = JudgeTarget("http://up/v1/responses", [], "m", RESPONSES.judge, scope="t")


def _context(strikes: int = 0) -> GuardContext:
    state = SessionState({"strike:judge_continue": str(strikes)} if strikes else {})
    return GuardContext(RESPONSES_POLICY, state, RESPONSES_USED_TOOLS, judge_target=RESPONSES_TARGET)


def _reply(*items):
    reply = parse_reply(json.dumps(response(*items)).encode())
    assert reply is not None
    return reply


async def test_a_commentary_preamble_is_continued_without_asking_the_judge():
    judge = DoneJudge()
    preamble = _reply(message("I'll run the tests next.", phase="commentary"))

    verdict = await PrematureStopGuard(judge).check_reply(preamble, _context())  # type: ignore[arg-type]

    assert isinstance(verdict, Nudge)
    assert judge.asked == []
    assert isinstance(verdict.turns[0], Echo)
    assert isinstance(verdict.turns[1], Note)
    assert verdict.turns[0].reply.source["output"][0]["phase"] == "commentary"


async def test_a_preamble_after_the_last_continuation_ends_the_session():
    preamble = _reply(message("Next I will look at it.", phase="commentary"))

    verdict = await PrematureStopGuard(DoneJudge()).check_reply(preamble, _context(strikes=2))  # type: ignore[arg-type]

    assert isinstance(verdict, Finalize)


async def test_a_final_answer_is_judged_as_usual():
    judge = DoneJudge()

    verdict = await PrematureStopGuard(judge).check_reply(_reply(message("Fixed.", phase="final_answer")), _context())  # type: ignore[arg-type]

    assert isinstance(verdict, Pass)
    assert len(judge.asked) == 1


HAND_BACK = reply(
    "I found the weather. Would you like me to look up the local time as well, or would you rather I check "
    "the forecast for the coming days first, or compare the two cities' averages for this time of year?"
    " Just tell me which of these you prefer and I will do it right away for you."
)
HAND_BACK_OFF = Policy.model_validate({"judge": {"hand_back_check": False}})


async def test_a_long_reply_that_hands_the_turn_back_is_judged():
    judge = FakeJudge(NOT_DONE)

    verdict = await PrematureStopGuard(judge).check_reply(HAND_BACK, context(POLICY, talk=USED_TOOLS, judge=TARGET))  # type: ignore[arg-type]

    assert isinstance(verdict, Nudge)
    assert verdict.kind == "judge_continue"
    assert len(judge.asked) == 1


async def test_a_long_hand_back_passes_unjudged_with_the_check_off():
    judge = FakeJudge(NOT_DONE)

    verdict = await PrematureStopGuard(judge).check_reply(
        HAND_BACK, context(HAND_BACK_OFF, talk=USED_TOOLS, judge=TARGET)
    )  # type: ignore[arg-type]

    assert verdict == SKIPPED
    assert judge.asked == []


async def test_a_long_hand_back_is_nudged_with_the_judge_off():
    verdict = await PrematureStopGuard(FakeJudge(DONE)).check_reply(HAND_BACK, context(JUDGE_OFF, talk=USED_TOOLS))  # type: ignore[arg-type]

    assert isinstance(verdict, Nudge)
    assert verdict.kind == "hand_back_nudge"


@pytest.mark.parametrize("text", list(LEGITIMATE.values()), ids=list(LEGITIMATE))
async def test_a_long_legitimate_answer_passes_without_a_judge_call(text):
    judge = FakeJudge(NOT_DONE)

    verdict = await PrematureStopGuard(judge).check_reply(reply(text), context(POLICY, talk=USED_TOOLS, judge=TARGET))  # type: ignore[arg-type]

    assert verdict == SKIPPED
    assert judge.asked == []

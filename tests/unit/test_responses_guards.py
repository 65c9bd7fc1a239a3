"""The guards on replies read from the Responses API: a preamble is never "done"."""

from __future__ import annotations

import json

from proxy.exchange import Conversation, Echo, Message, Note, ToolCall
from proxy.guards import GuardContext, PrematureStopGuard
from proxy.judge.client import JudgeOutcome, JudgeRequest, JudgeTarget
from proxy.policy.models import Policy
from proxy.session.base import SessionState
from proxy.verdict import Finalize, Nudge, Pass
from proxy.wire.responses.format import RESPONSES
from proxy.wire.responses.parse import parse_reply
from tests.support.fake_responses import message, response


class DoneJudge:
    def __init__(self) -> None:
        self.asked: list[JudgeRequest] = []

    async def decide(self, request: JudgeRequest) -> JudgeOutcome:
        self.asked.append(request)
        return JudgeOutcome(True, "done", parse_reply(b'{"output": []}').usage, 0.1)  # type: ignore[union-attr]


POLICY = Policy.model_validate({"judge": {"use_llm_judge": True, "judge_max_continues": 2}})
USED_TOOLS = Conversation(
    messages=[
        Message("user", "Fix the parser."),
        Message("assistant", "", tool_calls=(ToolCall("c1", "read_file", "{}"),)),
        Message("tool", "def parse(): ...", call_id="c1"),
    ]
)
TARGET = JudgeTarget("http://up/v1/responses", [], "m", RESPONSES.judge, scope="t")


def _context(strikes: int = 0) -> GuardContext:
    state = SessionState({"strike:judge_continue": str(strikes)} if strikes else {})
    return GuardContext(POLICY, state, USED_TOOLS, judge_target=TARGET)


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

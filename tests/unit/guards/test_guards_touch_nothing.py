"""Guards touch nothing: the permission and judge guards write no metrics; what they saw on the
way to a verdict rides on it, and the step log counts it (so replay and tests run them too)."""

from __future__ import annotations

import pytest

from proxy.exchange import Conversation, Message, Reply, ToolCall, Usage
from proxy.guards import GuardContext, JudgeGuard, PermissionGuard, default_request_guards, default_response_guards
from proxy.judge import JudgeOutcome, JudgeRequest, JudgeTarget
from proxy.metrics import Metrics
from proxy.policy.models import Policy
from proxy.policy.permissions import PermissionSettings
from proxy.session.base import SessionState
from proxy.verdict import PASS, Finalize, JudgeCall, Nudge, Pass, PermissionCheck

PERMISSIONS = PermissionSettings.model_validate(
    {
        "rules": [
            {"id": "no-shell", "tool": "run_shell", "action": "deny"},
            {"id": "reads-ok", "tool": "read_*", "action": "allow"},
            {"id": "no-rm", "tool": "rm_all", "action": "deny_session"},
        ]
    }
)
PERMISSION_POLICY = Policy(permissions=PERMISSIONS)


def tool_reply(*names: str) -> Reply:
    calls = tuple(ToolCall(f"c{i}", name, "{}") for i, name in enumerate(names))
    return Reply(None, None, calls, "tool_calls", Usage())


def context(
    policy: Policy, conversation: Conversation | None = None, target: JudgeTarget | None = None
) -> GuardContext:
    return GuardContext(policy, SessionState({}), conversation or Conversation(messages=[]), judge_target=target)


PERMISSION_CASES = [
    # tool calls in the reply, expected verdict type, the decisions it carries
    (("search",), Pass, ()),
    (("read_file",), Pass, (PermissionCheck("reads-ok", "allow"),)),
    (("run_shell", "search"), Nudge, (PermissionCheck("no-shell", "deny"),)),
    (("rm_all",), Finalize, (PermissionCheck("no-rm", "deny_session"),)),
]


@pytest.mark.parametrize(("names", "kind", "seen"), PERMISSION_CASES)
def test_a_permission_verdict_carries_the_rule_decisions_it_made(names, kind, seen):
    verdict = PermissionGuard().check_reply(tool_reply(*names), context(PERMISSION_POLICY))

    assert isinstance(verdict, kind)
    assert verdict.seen == seen


def test_a_reply_no_rule_decided_passes_with_nothing_seen():
    assert PermissionGuard().check_reply(tool_reply("search"), context(PERMISSION_POLICY)) is PASS


class FakeJudge:
    """A judge that answers from a script and counts its calls."""

    def __init__(self, outcome: JudgeOutcome) -> None:
        self.outcome = outcome
        self.asked: list[JudgeRequest] = []

    async def decide(self, request: JudgeRequest) -> JudgeOutcome:
        self.asked.append(request)
        return self.outcome


JUDGE_POLICY = Policy.model_validate({"judge": {"use_llm_judge": True}})
USED_TOOLS = Conversation(
    messages=[
        Message("user", "Find the bug in the parser and fix it."),
        Message("assistant", "", tool_calls=(ToolCall("c1", "read_file", "{}"),)),
        Message("tool", "def parse(): ...", call_id="c1"),
    ]
)
TARGET = JudgeTarget("http://judge/v1/chat/completions", [], "m", scope="t")
SPENT = Usage(10, 2)

JUDGE_CASES = [
    # the judge's outcome, expected verdict type, what the verdict says the judge did
    (JudgeOutcome(True, "done", SPENT, 0.25), Pass, JudgeCall("done", 0.25)),
    (JudgeOutcome(True, "done", SPENT, 0.0, remembered=True), Pass, JudgeCall("remembered")),
    (JudgeOutcome(False, "tests not run", SPENT, 0.5), Nudge, JudgeCall("not_done", 0.5)),
    (JudgeOutcome(None, "timed out", SPENT, 3.0, error="timeout"), Nudge, JudgeCall("error", 3.0, "timeout")),
]


@pytest.mark.parametrize(("outcome", "kind", "seen"), JUDGE_CASES)
async def test_a_judge_verdict_carries_what_the_judge_did(outcome, kind, seen):
    judge = FakeJudge(outcome)

    verdict = await JudgeGuard(judge).check_reply(  # type: ignore[arg-type]
        Reply("Done.", None, (), "stop", Usage()), context(JUDGE_POLICY, USED_TOOLS, TARGET)
    )

    assert isinstance(verdict, kind)
    assert verdict.seen == (seen,)
    assert verdict.spent == SPENT


async def test_an_answer_too_long_to_judge_is_skipped_without_asking():
    judge = FakeJudge(JudgeOutcome(True, "done", SPENT, 0.1))
    long_answer = "x" * JUDGE_POLICY.judge.judge_skip_threshold

    verdict = await JudgeGuard(judge).check_reply(  # type: ignore[arg-type]
        Reply(long_answer, None, (), "stop", Usage()), context(JUDGE_POLICY, USED_TOOLS, TARGET)
    )

    assert verdict.seen == (JudgeCall("skipped"),)
    assert judge.asked == []


def test_the_guards_are_built_without_metrics():
    """Nothing a guard could write to: the same set serves, replays and tests."""
    names = [type(g).__name__ for g in default_response_guards(FakeJudge(JudgeOutcome(True, "", SPENT, 0)))]  # type: ignore[arg-type]

    assert "PermissionGuard" in [type(g).__name__ for g in default_request_guards()]
    assert names[-1] == "JudgeGuard"
    assert "PermissionGuard" in names
    assert not any(isinstance(v, Metrics) for g in default_response_guards() for v in vars(g).values())

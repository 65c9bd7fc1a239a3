"""The failing-tools guard: the last N tool results all matching the policy's failure patterns end the session."""

from __future__ import annotations

import pytest

from proxy.exchange import Message
from proxy.guards import ToolFailuresGuard
from proxy.policy.models import Policy
from proxy.verdict import PASS, Finalize
from tests.unit.guards.given import TASK, called, context, conversation

POLICY = Policy()  # 3 failures in a row end the session
TRACEBACK = "Traceback (most recent call last):\n  ..."

CASES = [
    # tool results in the history, policy, the verdict
    pytest.param(
        ["Error: timeout", "error: 500", TRACEBACK],
        POLICY,
        Finalize("tool_failures", "the last 3 tool calls all failed"),
        id="three-failures-in-a-row-end-the-session",
    ),
    pytest.param(
        ['{"error": "bad"}', "ERROR x", "Exception: boom"],
        POLICY,
        Finalize("tool_failures", "the last 3 tool calls all failed"),
        id="an-error-object-and-any-case-are-failures",
    ),
    pytest.param(
        ["ok", "Failed: 1", "Failure: 2", "failed: 3", "Error: 4"],
        POLICY,
        Finalize("tool_failures", "the last 4 tool calls all failed"),
        id="the-whole-run-of-failures-is-counted",
    ),
    pytest.param(["Error: timeout", "ok", "Error: again"], POLICY, PASS, id="a-success-breaks-the-run"),
    pytest.param(["Error: timeout", "Error: timeout"], POLICY, PASS, id="two-failures-are-not-yet-enough"),
    pytest.param(
        ["no errors here", "the word error inside", "fine"], POLICY, PASS, id="error-mid-sentence-is-no-failure"
    ),
    pytest.param(
        ["Error: a", "Error: b", "x" * 2000 + "\nError: c"],
        POLICY,
        PASS,
        id="only-the-first-2000-characters-are-searched",
    ),
    pytest.param(
        ["Error: once"],
        Policy(tool_failures={"max_consecutive": 1}),
        Finalize("tool_failures", "the last 1 tool calls all failed"),
        id="the-policy-sets-how-many-failures-end-it",
    ),
    pytest.param(
        ["it broke", "it broke"],
        Policy(tool_failures={"max_consecutive": 2, "patterns": ["broke"]}),
        Finalize("tool_failures", "the last 2 tool calls all failed"),
        id="the-policy-sets-what-a-failure-looks-like",
    ),
    pytest.param(
        ["Error: a", "Error: b", "Error: c"],
        Policy(tool_failures={"enabled": False}),
        PASS,
        id="a-disabled-guard-passes-everything",
    ),
    pytest.param(
        ["503 Service Unavailable (request_id=a1)", '{"status": 502}', "connect ECONNREFUSED 10.0.0.1:80"],
        POLICY,
        Finalize("tool_failures", "the last 3 tool calls all failed"),
        id="failures-are-recognised-by-their-shape",
    ),
    pytest.param(
        ["503 Service Unavailable"] * 3,
        Policy(tool_failures={"shapes": False}),
        PASS,
        id="the-policy-can-turn-shapes-off",
    ),
]


@pytest.mark.parametrize(("results", "policy", "expected"), CASES)
def test_failing_tools(results, policy, expected):
    assert ToolFailuresGuard().check_request(context(policy, talk=conversation(*called(*results)))) == expected


def test_failures_the_model_already_answered_are_not_new():
    messages = (*called("Error: a", "Error: b", "Error: c"), Message("assistant", "Let me try another way."))

    assert ToolFailuresGuard().check_request(context(POLICY, talk=conversation(*messages))) is PASS


def observed(*results: str) -> tuple[Message, ...]:
    """smolagents' shape: each call flattened into assistant text, each result an ``Observation:`` user turn."""
    messages = [TASK]
    for result in results:
        messages.append(Message("assistant", "Calling tools:\n[{'name': 'poll'}]"))
        messages.append(Message("user", f"Observation:\n{result}"))
    return tuple(messages)


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        pytest.param(
            observed("Error: a", "Error: b", "Error: c"),
            Finalize("tool_failures", "the last 3 tool calls all failed"),
            id="three-failing-observations-end-the-session",
        ),
        pytest.param(
            (
                *observed("Error: a", "Error: b"),
                Message("assistant", "Calling tools:"),
                Message("user", "Call id: c3\nError:\nboom"),
            ),
            Finalize("tool_failures", "the last 3 tool calls all failed"),
            id="a-failed-calls-error-turn-counts-too",
        ),
        pytest.param(observed("Error: a", "fine", "Error: c"), PASS, id="a-good-observation-breaks-the-run"),
    ],
)
def test_observation_turns_are_tool_results(messages, expected):
    assert ToolFailuresGuard().check_request(context(POLICY, talk=conversation(*messages))) == expected

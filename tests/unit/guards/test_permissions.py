"""The permission guard: a refused call goes back to the model refused, insisting or a session-ending
rule ends the session, hidden tools are never offered; every rule decision rides on the verdict."""

from __future__ import annotations

import pytest

from proxy.exchange import ReturnCalls, Tool, ToolCall
from proxy.guards import PermissionGuard
from proxy.policy.models import Policy
from proxy.verdict import PASS, Amend, Finalize, Nudge, Pass, PermissionCheck
from tests.unit.guards.given import context, conversation, reply

POLICY = Policy.model_validate(
    {
        "permissions": {
            "rules": [
                {"id": "no-shell", "tool": "run_shell", "action": "deny", "message": "No shell here."},
                {"id": "reads-ok", "tool": "read_*", "action": "allow"},
                {"id": "no-rm", "tool": "rm_all", "action": "deny_session"},
                {
                    "id": "no-root-rm",
                    "tool": "bash",
                    "when": [{"path": "$.command", "regex": "rm -rf"}],
                    "action": "deny",
                },
                {"id": "no-secrets", "tool": "secret_*", "action": "deny", "hide": True},
            ]
        }
    }
)
DENY_BY_DEFAULT = Policy.model_validate({"permissions": {"default": "deny"}})
NOT_RUN = "Not executed: another call in this reply was refused. Send again the calls you still need."


def calls(*named: str | tuple[str, str]) -> tuple[ToolCall, ...]:
    """Tool calls c0, c1, ... by name, or (name, arguments)."""
    made = []
    for n, each in enumerate(named):
        name, arguments = each if isinstance(each, tuple) else (each, "{}")
        made.append(ToolCall(f"c{n}", name, arguments))
    return tuple(made)


def refused(rule: str, why: str) -> str:
    return f"Refused by policy (rule {rule}): {why} Choose another way to continue."


def returned(made: tuple[ToolCall, ...], results: dict[str, str], reason: str, *seen: PermissionCheck) -> Nudge:
    return Nudge("permission_denied", reason, (ReturnCalls(reply(None, *made), results),), seen=seen)


SHELL = PermissionCheck("no-shell", "deny")
RM = PermissionCheck("no-rm", "deny_session")
ROOT_RM = ("bash", '{"command": "rm -rf /"}')

REPLY_CASES = [
    # the reply's calls, refusals so far in this request, policy, the verdict
    pytest.param(calls("search"), 0, POLICY, PASS, id="a-call-no-rule-decides-passes-with-nothing-seen"),
    pytest.param(
        calls("read_file"),
        0,
        POLICY,
        Pass(seen=(PermissionCheck("reads-ok", "allow"),)),
        id="an-allowed-call-passes-seen",
    ),
    pytest.param(
        calls("run_shell", "search"),
        0,
        POLICY,
        returned(
            calls("run_shell", "search"),
            {"c0": refused("no-shell", "No shell here."), "c1": NOT_RUN},
            "run_shell refused by rule no-shell",
            SHELL,
        ),
        id="a-refused-call-goes-back-with-the-rules-message-and-its-siblings-unrun",
    ),
    pytest.param(
        calls(ROOT_RM),
        0,
        POLICY,
        returned(
            calls(ROOT_RM),
            {"c0": refused("no-root-rm", "this call is not allowed here")},
            "bash refused by rule no-root-rm",
            PermissionCheck("no-root-rm", "deny"),
        ),
        id="a-rule-on-the-arguments-refuses-and-a-rule-without-a-message-says-so",
    ),
    pytest.param(calls(("bash", '{"command": "ls"}')), 0, POLICY, PASS, id="arguments-the-rule-does-not-match-pass"),
    pytest.param(
        calls("run_shell"),
        1,
        POLICY,
        returned(
            calls("run_shell"),
            {"c0": refused("no-shell", "No shell here.")},
            "run_shell refused by rule no-shell",
            SHELL,
        ),
        id="refused-again-while-denials-remain",
    ),
    pytest.param(
        calls("run_shell"),
        2,
        POLICY,
        Finalize("permission", "the model asked for run_shell, which rule no-shell forbids", seen=(SHELL,)),
        id="insisting-past-max-denials-ends-the-session",
    ),
    pytest.param(
        calls("rm_all"),
        0,
        POLICY,
        Finalize("permission", "the model asked for rm_all, which rule no-rm forbids", seen=(RM,)),
        id="a-deny-session-rule-ends-the-session-at-once",
    ),
    pytest.param(
        calls("run_shell", "rm_all"),
        0,
        POLICY,
        Finalize("permission", "the model asked for run_shell, which rule no-rm forbids", seen=(SHELL, RM)),
        id="a-deny-session-rule-anywhere-in-the-reply-ends-it",
    ),
    pytest.param(
        calls("search"),
        0,
        DENY_BY_DEFAULT,
        returned(
            calls("search"),
            {"c0": refused("default", "this call is not allowed here")},
            "search refused by rule default",
            PermissionCheck("default", "deny"),
        ),
        id="a-deny-default-refuses-what-no-rule-allows",
    ),
    pytest.param(calls("run_shell"), 0, Policy(), PASS, id="no-rules-and-allow-by-default-pass-everything"),
]


@pytest.mark.parametrize(("made", "denials", "policy", "expected"), REPLY_CASES)
def test_permission_reply(made, denials, policy, expected):
    verdict = PermissionGuard().check_reply(reply(None, *made), context(policy, retries={"permission_denied": denials}))

    assert verdict == expected


def test_a_reply_without_calls_passes():
    assert PermissionGuard().check_reply(reply("Done."), context(POLICY)) is PASS


def offered(*names: str):
    return conversation(tools=tuple(Tool(name, {"type": "object"}) for name in names))


REQUEST_CASES = [
    # the tools offered, policy, the verdict
    pytest.param(
        offered("search", "secret_b", "secret_a"),
        POLICY,
        Amend("tools_hidden", "hidden: secret_a, secret_b", {}, drop_tools=("secret_b", "secret_a")),
        id="hidden-tools-are-dropped-before-the-request-goes-upstream",
    ),
    pytest.param(offered("search", "run_shell"), POLICY, PASS, id="a-refused-tool-not-hidden-stays-offered"),
    pytest.param(offered("secret_a"), DENY_BY_DEFAULT, PASS, id="without-a-hiding-rule-nothing-is-hidden"),
]


@pytest.mark.parametrize(("talk", "policy", "expected"), REQUEST_CASES)
def test_permission_request(talk, policy, expected):
    assert PermissionGuard().check_request(context(policy, talk=talk)) == expected

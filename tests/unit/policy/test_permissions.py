"""Tool permission rules, as tables: names, globs, argument paths, order, defaults, validation."""

from __future__ import annotations

import pytest

from proxy.exchange import ToolCall
from proxy.policy import PolicyError, load_policies
from proxy.policy.permissions import MISSING, PermissionSettings, decide, resolve_path

SETTINGS = PermissionSettings.model_validate(
    {
        "default": "allow",
        "rules": [
            {
                "id": "no-root-rm",
                "tool": "run_shell",
                "when": [{"path": "$.command", "regex": r"rm\s+-rf\s+/(\s|$)"}],
                "action": "deny_session",
            },
            {
                "id": "shell-readonly",
                "tool": "run_shell",
                "when": [{"path": "$.readonly", "equals": True}],
                "action": "allow",
            },
            {"id": "no-shell", "tool": "run_shell", "action": "deny", "message": "Use the file tools."},
            {"id": "no-admin", "tool": "admin_*", "action": "deny", "hide": True},
            {
                "id": "first-file",
                "tool": "write_files",
                "when": [{"path": "$.files[0].path", "regex": "^/etc/"}],
                "action": "deny",
            },
            {"id": "big-numbers", "tool": "pay", "when": [{"path": "$.amount", "equals": 1000}], "action": "deny"},
        ],
    }
)


@pytest.mark.parametrize(
    ("name", "arguments", "action", "rule"),
    [
        ("run_shell", '{"command": "rm -rf /"}', "deny_session", "no-root-rm"),
        ("run_shell", '{"command": "rm -rf /tmp/x"}', "deny", "no-shell"),  # first rule's regex does not match
        ("run_shell", '{"command": "ls", "readonly": true}', "allow", "shell-readonly"),
        ("run_shell", '{"command": "ls", "readonly": "true"}', "deny", "no-shell"),  # equals is typed
        ("run_shell", "not json", "deny", "no-root-rm"),  # unreadable: a deny rule's conditions fail closed
        ("run_shell", '{"command": "rm -rf /", "command": "ls"}', "deny", "no-root-rm"),  # readable two ways
        ("run_shell", '{"command": "ls", "readonly": true, "readonly": true}', "deny", "no-root-rm"),
        ("admin_delete_user", "{}", "deny", "no-admin"),
        ("administrate", "{}", "allow", "default"),
        ("write_files", '{"files": [{"path": "/etc/passwd"}]}', "deny", "first-file"),
        ("write_files", '{"files": [{"path": "/home/a"}, {"path": "/etc/x"}]}', "allow", "default"),
        ("write_files", '{"files": []}', "allow", "default"),  # path absent: no match
        ("pay", '{"amount": 1000}', "deny", "big-numbers"),
        ("pay", '{"amount": 1000.5}', "allow", "default"),
        ("search", "{}", "allow", "default"),
        ("RUN_SHELL", "{}", "allow", "default"),  # names are case-sensitive
    ],
)
def test_first_matching_rule_decides(name, arguments, action, rule):
    decision = decide(ToolCall("c1", name, arguments), SETTINGS)

    assert (decision.action, decision.rule) == (action, rule)


@pytest.mark.parametrize(
    "arguments",
    ['{"command": "rm -rf /", "command": "ls"}', '{"command": "ls", "command": "rm -rf /"}', '{"command": "rm'],
)
def test_arguments_that_read_two_ways_are_never_approved(arguments):
    settings = PermissionSettings.model_validate(
        {"rules": [{"id": "no-rm", "tool": "sh", "when": [{"path": "$.command", "regex": "rm"}], "action": "deny"}]}
    )

    decision = decide(ToolCall("c", "sh", arguments), settings)

    assert (decision.action, decision.rule) == ("deny", "no-rm")
    assert "valid JSON" in decision.message


def test_an_allow_rule_never_approves_arguments_that_read_two_ways():
    settings = PermissionSettings.model_validate(
        {
            "default": "deny",
            "rules": [{"id": "ls", "tool": "sh", "when": [{"path": "$.command", "equals": "ls"}], "action": "allow"}],
        }
    )

    decision = decide(ToolCall("c", "sh", '{"command": "rm -rf /", "command": "ls"}'), settings)

    assert decision.action == "deny"


def test_default_deny_refuses_unmatched_calls():
    settings = PermissionSettings(default="deny", rules=[{"id": "ok", "tool": "search", "action": "allow"}])

    assert decide(ToolCall("c", "search", "{}"), settings).action == "allow"
    assert decide(ToolCall("c", "other", "{}"), settings).action == "deny"


def test_catastrophic_pattern_is_cut_off_and_fails_closed():
    settings = PermissionSettings.model_validate(
        {"rules": [{"id": "evil", "tool": "t", "when": [{"path": "$.q", "regex": "(x+x+)+y"}], "action": "deny"}]}
    )

    decision = decide(ToolCall("c", "t", '{"q": "' + "x" * 5000 + '"}'), settings)

    assert decision.action == "deny"


def test_hidden_tools_are_found_by_name():
    assert SETTINGS.hidden("admin_drop") is not None
    assert SETTINGS.hidden("run_shell") is None


@pytest.mark.parametrize(
    ("value", "path", "expected"),
    [
        ({"a": {"b": [1, {"c": 2}]}}, "$.a.b[1].c", 2),
        ({"a": 1}, "$", {"a": 1}),
        ({"a": []}, "$.a[0]", MISSING),
        ({"a": 1}, "$.b", MISSING),
        ({"a": "text"}, "$.a.b", MISSING),
    ],
)
def test_resolve_path(value, path, expected):
    assert resolve_path(value, path) == expected


@pytest.mark.parametrize(
    ("rule", "fragment"),
    [
        ("{id: r, tool: 'run_[', action: deny}", "unbalanced"),
        ("{id: r, tool: t, when: [{path: '$.a', regex: '(unclosed'}], action: deny}", "does not compile"),
        ("{id: r, tool: t, when: [{path: 'a.b', regex: 'x'}], action: deny}", "JSON path"),
        ("{id: r, tool: t, when: [{path: '$.a', regex: 'x', equals: 1}], action: deny}", "exactly one"),
        ("{id: r, tool: t, when: [{path: '$.a'}], action: deny}", "exactly one"),
        ("{id: r, tool: t, when: [{path: '$.a', equals: 1}], action: deny, hide: true}", "hide"),
        ("{id: r, tool: t, action: maybe}", "action"),
        ("{id: 'has space', tool: t, action: deny}", "id"),
    ],
)
def test_bad_rules_fail_at_load_naming_file_and_rule(tmp_path, rule, fragment):
    (tmp_path / "default.yaml").write_text(f"permissions: {{rules: [{rule}]}}\n")

    with pytest.raises(PolicyError) as caught:
        load_policies(tmp_path)

    assert "default.yaml" in str(caught.value)
    assert "permissions.rules.0" in str(caught.value)
    assert fragment in str(caught.value)


def test_duplicate_rule_ids_are_refused(tmp_path):
    (tmp_path / "default.yaml").write_text(
        "permissions: {rules: [{id: r, tool: a, action: deny}, {id: r, tool: b, action: deny}]}\n"
    )

    with pytest.raises(PolicyError, match="used twice"):
        load_policies(tmp_path)


def _rule(action: str, regex: str, default: str = "allow") -> PermissionSettings:
    return PermissionSettings.model_validate(
        {
            "default": default,
            "rules": [{"id": "r", "tool": "t", "when": [{"path": "$.q", "regex": regex}], "action": action}],
        }
    )


def test_a_deny_rule_reads_the_whole_value():
    decision = decide(ToolCall("c", "t", '{"q": "' + " " * 10_000 + 'rm -rf /"}'), _rule("deny", r"rm\s+-rf"))

    assert (decision.action, decision.rule) == ("deny", "r")


def test_an_allow_rule_reads_the_whole_value():
    within = "/workspace/" + "a" * 10_000 + "/../../etc/passwd"

    decision = decide(ToolCall("c", "t", f'{{"q": "{within}"}}'), _rule("allow", r"^/workspace/[^.]*$", "deny"))

    assert (decision.action, decision.rule) == ("deny", "default")


def test_a_catastrophic_pattern_never_approves_a_call():
    decision = decide(ToolCall("c", "t", '{"q": "' + "x" * 5000 + '"}'), _rule("allow", "(x+x+)+y", "deny"))

    assert (decision.action, decision.rule) == ("deny", "default")

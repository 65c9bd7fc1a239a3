"""How logs, records and replays name a decision and give its reason."""

from __future__ import annotations

import pytest

from proxy.exchange import Note, Reply, Usage
from proxy.verdict import PASS, Amend, Finalize, Nudge, Pass, Rewrite, decided_by, verdict_name, verdict_reason

CASES = [
    # the decision, its name, its reason
    pytest.param(None, "pass", "", id="no-guard-objected"),
    pytest.param(PASS, "pass", "", id="a-pass"),
    pytest.param(
        Pass(clear_strikes=("empty",), flags=("tool_args_invalid",)), "pass", "", id="a-pass-with-bookkeeping"
    ),
    pytest.param(
        Nudge("empty_nudge", "an empty reply", (Note("Answer."),)), "empty_nudge", "an empty reply", id="nudge"
    ),
    pytest.param(
        Amend("loop_warning", "a repeated call", {"c1": "again"}), "loop_warning", "a repeated call", id="amend"
    ),
    pytest.param(
        Rewrite("redact", "a key in the reply", Reply("x", None, (), "stop", Usage())),
        "redact",
        "a key in the reply",
        id="rewrite",
    ),
    pytest.param(
        Finalize("budget_steps", "the session used its 10 steps"),
        "finalize_budget_steps",
        "the session used its 10 steps",
        id="finalize-is-named-after-its-reason",
    ),
]


@pytest.mark.parametrize(("verdict", "name", "reason"), CASES)
def test_a_decision_is_named_by_its_kind_and_explained_by_its_reason(verdict, name, reason):
    assert (verdict_name(verdict), verdict_reason(verdict)) == (name, reason)


def test_verdicts_are_values_compared_by_what_they_say():
    assert Nudge("k", "r", (Note("x"),)) == Nudge("k", "r", (Note("x"),))
    assert Pass() == PASS
    with pytest.raises(AttributeError):
        PASS.flags = ("changed",)  # type: ignore[misc]


DECIDED = [
    pytest.param(Nudge("empty_nudge", "r", ()), id="nudge"),
    pytest.param(Amend("loop_warning_result", "r", {}), id="amend"),
    pytest.param(Rewrite("redact", "r", Reply("x", None, (), "stop", Usage())), id="rewrite"),
    pytest.param(Finalize("loop", "d"), id="finalize"),
]


@pytest.mark.parametrize("verdict", DECIDED)
def test_a_verdict_is_told_which_guard_decided_it(verdict):
    assert decided_by(verdict, "tool_loop").guard == "tool_loop"


def test_a_verdict_that_names_its_guard_keeps_it():
    assert decided_by(Nudge("goal_continue", "r", (), guard="goal"), "tool_loop").guard == "goal"


def test_a_pass_names_no_guard():
    assert decided_by(PASS, "tool_loop") is PASS


def test_the_deciding_guard_does_not_change_what_a_verdict_says():
    assert decided_by(Finalize("loop", "d"), "tool_loop") == Finalize("loop", "d")

"""How logs, records and replays name a decision and give its reason."""

from __future__ import annotations

import pytest

from proxy.exchange import Note, Reply, Usage
from proxy.verdict import PASS, Amend, Finalize, Nudge, Pass, Rewrite, verdict_name, verdict_reason

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

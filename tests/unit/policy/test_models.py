"""A policy is a frozen model that forbids unknown keys and checks every value at load: a table of
files that load and files refused, each naming the field (loading files: test_loader.py)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from proxy.policy.models import Policy


def test_the_default_policy_needs_no_file():
    policy = Policy()

    assert (policy.name, policy.mode, policy.state_fail_mode, policy.max_attempts) == ("default", "enforce", "open", 4)


ACCEPTED = [
    pytest.param({"loop": {"warn_at": 4, "block_at": 4}}, id="a-loop-ending-where-it-warns"),
    pytest.param({"output_contract": {"schema": {"type": "object", "required": ["a"]}}}, id="an-answer-schema"),
    pytest.param({"tool_failures": {"patterns": [r"(?i)^error\b"]}}, id="failure-patterns"),
    pytest.param({"recording": {"enabled": True, "jsonl_path": "/tmp/steps.jsonl"}}, id="recording-to-a-file"),
    pytest.param({"recording": {"enabled": True, "redis_stream": "lw:steps"}}, id="recording-to-a-stream"),
    pytest.param({"recording": {"enabled": False, "jsonl_path": "a", "redis_stream": "b"}}, id="recording-off"),
    pytest.param({"budgets": {"max_cost_usd": 0.5, "max_tokens": 1000}}, id="budgets"),
]


@pytest.mark.parametrize("values", ACCEPTED)
def test_a_consistent_policy_loads(values: dict[str, Any]):
    Policy.model_validate(values)


REFUSED = [
    # the file's values, the field the error names, what it says
    pytest.param({"max_stepz": 5}, "max_stepz", "Extra inputs are not permitted", id="an-unknown-key"),
    pytest.param(
        {"judge": {"use_llm_judgee": True}}, "judge.use_llm_judgee", "Extra inputs", id="a-nested-unknown-key"
    ),
    pytest.param({"mode": "observe"}, "mode", "'enforce' or 'shadow'", id="an-unknown-mode"),
    pytest.param({"max_attempts": 0}, "max_attempts", "greater than or equal to 1", id="no-attempt"),
    pytest.param({"max_attempts": 21}, "max_attempts", "less than or equal to 20", id="too-many-attempts"),
    pytest.param(
        {"loop": {"warn_at": 5, "block_at": 3}}, "loop", "block_at must be at least warn_at", id="blocks-early"
    ),
    pytest.param(
        {"output_contract": {"schema": {"type": "nonesuch"}}}, "output_contract.schema", "", id="a-schema-that-fails"
    ),
    pytest.param(
        {"tool_failures": {"patterns": ["ok", "(unclosed"]}},
        "tool_failures.patterns",
        "patterns[1] is not a valid regex",
        id="a-bad-regex-named-by-index",
    ),
    pytest.param({"recording": {"enabled": True}}, "recording", "exactly one target", id="recording-without-a-target"),
    pytest.param(
        {"recording": {"enabled": True, "jsonl_path": "a", "redis_stream": "b"}},
        "recording",
        "exactly one target",
        id="recording-with-two-targets",
    ),
    pytest.param({"budgets": {"max_cost_usd": 0}}, "budgets.max_cost_usd", "greater than 0", id="a-free-budget"),
    pytest.param(
        {"finalize": {"instruction": ""}}, "finalize.instruction", "at least 1 character", id="no-instruction"
    ),
]


@pytest.mark.parametrize(("values", "field", "says"), REFUSED)
def test_an_inconsistent_policy_is_refused_naming_the_field(values: dict[str, Any], field: str, says: str):
    with pytest.raises(ValidationError) as refused:
        Policy.model_validate(values)

    [error] = refused.value.errors()
    assert ".".join(str(part) for part in error["loc"]) == field
    assert says in error["msg"]


def test_a_policy_is_frozen():
    with pytest.raises(ValidationError):
        Policy().max_steps = 5  # type: ignore[misc]


def test_the_schema_key_is_read_as_the_answer_schema():
    schema = {"type": "object"}

    assert Policy.model_validate({"output_contract": {"schema": schema}}).output_contract.schema_ == schema

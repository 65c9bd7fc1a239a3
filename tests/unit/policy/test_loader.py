"""Policy files: the shipped ones, the schema, and errors that name file and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.cli import policy_schema_json
from proxy.policy import Policy, PolicyError, PolicyRegistry, load_policies

POLICIES = Path(__file__).parents[3] / "policies"


def test_committed_schema_is_current():
    """Regenerate with: loopwarden policy-schema > policies/_schema.json"""
    assert (POLICIES / "_schema.json").read_text() == policy_schema_json()


def test_schema_rejects_unknown_keys():
    schema = json.loads(policy_schema_json())

    assert schema["additionalProperties"] is False
    assert "name" not in schema["properties"]


def test_shipped_policies_load():
    assert set(load_policies(POLICIES)) == {"default", "strict", "lenient"}


def test_default_policy_has_the_seed_defaults():
    default = load_policies(POLICIES)["default"]

    assert (default.empty_response_max_strikes, default.reasoning_only_max_strikes, default.max_steps) == (3, 3, 50)
    assert (default.mode, default.state_fail_mode) == ("enforce", "open")


def test_strict_fails_closed():
    assert load_policies(POLICIES)["strict"].state_fail_mode == "closed"


def test_missing_directory_gives_the_built_in_default(tmp_path):
    assert load_policies(tmp_path / "absent") == {"default": Policy()}


def test_policy_is_named_after_its_file(tmp_path):
    (tmp_path / "careful.yaml").write_text("max_steps: 10\n")

    assert load_policies(tmp_path)["careful"].name == "careful"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("max_stepz: 10\n", "max_stepz"),
        ("max_steps: many\n", "max_steps"),
        ("max_steps: 0\n", "max_steps"),
        ("mode: loud\n", "mode"),
        ("nudges: {empty_response: ''}\n", "nudges.empty_response"),
        ("finalize: {colour: red}\n", "finalize.colour"),
        ("name: other\n", "name"),
        ("output_contract: {schema: {type: nonsense}}\n", "output_contract.schema"),
        ("tool_failures: {patterns: ['(unclosed']}\n", "tool_failures.patterns"),
        ("loop: {warn_at: 5, block_at: 3}\n", "block_at must be at least warn_at"),
        ("recording: {enabled: true}\n", "exactly one target"),
        ("recording: {enabled: true, jsonl_path: a, redis_stream: b}\n", "exactly one target"),
        ("- a list\n", "mapping"),
        ("max_steps: [\n", "cannot read"),
    ],
)
def test_bad_policy_names_file_and_field(tmp_path, text, field):
    (tmp_path / "bad.yaml").write_text(text)

    with pytest.raises(PolicyError) as caught:
        load_policies(tmp_path)

    assert str(tmp_path / "bad.yaml") in str(caught.value)
    assert field in str(caught.value)


def test_pricing_and_underscore_files_are_not_policies(tmp_path):
    (tmp_path / "pricing.yaml").write_text("models: {}\n")
    (tmp_path / "_draft.yaml").write_text("nonsense: true\n")

    assert set(load_policies(tmp_path)) == {"default"}


def test_reload_takes_a_valid_change(tmp_path):
    (tmp_path / "default.yaml").write_text("max_steps: 10\n")
    registry = PolicyRegistry(tmp_path)
    (tmp_path / "default.yaml").write_text("max_steps: 20\n")

    assert registry.reload() is True
    assert registry.get("default").max_steps == 20


def test_reload_keeps_the_old_set_when_the_new_one_is_bad(tmp_path):
    (tmp_path / "default.yaml").write_text("max_steps: 10\n")
    registry = PolicyRegistry(tmp_path)
    (tmp_path / "default.yaml").write_text("max_steps: -1\n")

    assert registry.reload() is False
    assert registry.get("default").max_steps == 10


def test_changed_on_disk_notices_edits_and_new_files(tmp_path):
    (tmp_path / "default.yaml").write_text("max_steps: 10\n")
    registry = PolicyRegistry(tmp_path)
    assert not registry.changed_on_disk()

    (tmp_path / "extra.yaml").write_text("max_steps: 5\n")

    assert registry.changed_on_disk()

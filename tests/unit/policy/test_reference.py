"""The policy reference page: made from the policy JSON Schema, committed as it is made."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.cli import policy_schema_json
from proxy.policy.reference import policy_reference_markdown

PAGE = Path(__file__).parents[3] / "docs" / "reference" / "policies.md"
SCHEMA = json.loads(policy_schema_json())


def test_the_committed_reference_page_is_the_one_the_schema_makes():
    """Regenerate with: loopwarden policy-reference > docs/reference/policies.md"""
    assert PAGE.read_text() == policy_reference_markdown(SCHEMA)


def _keys(properties: dict, definitions: dict, prefix: str = "") -> list[str]:
    found = []
    for name, spec in properties.items():
        reference = spec.get("$ref") or next((s["$ref"] for s in spec.get("allOf", ()) if "$ref" in s), None)
        target = definitions.get(reference.rsplit("/", 1)[-1], {}) if reference else spec
        if target.get("type") == "object" and "properties" in target:
            found += _keys(target["properties"], definitions, f"{prefix}{name}.")
        else:
            found.append(f"{prefix}{name}")
    return found


@pytest.mark.parametrize("key", _keys(SCHEMA["properties"], SCHEMA["$defs"]))
def test_every_policy_key_has_a_row_under_its_dotted_path(key):
    assert f"| `{key}` |" in policy_reference_markdown(SCHEMA)


SMALL = {
    "properties": {
        "mode": {"enum": ["a", "b"], "default": "a", "description": "Which | way."},
        "limits": {"$ref": "#/$defs/Limits"},
    },
    "$defs": {
        "Limits": {
            "type": "object",
            "description": "How far.",
            "properties": {"steps": {"type": "integer", "minimum": 1, "default": 5}},
        }
    },
}


def test_a_key_shows_its_type_default_bounds_and_description_in_one_cell_each():
    page = policy_reference_markdown(SMALL)

    assert '| `mode` | `"a"` \\| `"b"` | `"a"` | Which \\| way. |' in page
    assert "| `limits.steps` | integer | `5` | ≥ 1 |" in page


def test_a_nested_section_gets_a_heading_and_its_description():
    page = policy_reference_markdown(SMALL)

    assert "## `limits`\n\nHow far.\n" in page

"""Every command, every flag and every policy key is documented where a user looks it up.

The documentation is the site under ``docs/`` (and the README, its front door). A flag counts
as documented for its command when a paragraph or code block that names ``loopwarden
<command>`` names the flag too (``serve``'s flags: in the configuration reference's table). A
policy key counts when a page written by hand names it by its dotted path (``judge.model``):
the generated reference lists every key anyway, so it alone does not count.
"""

from __future__ import annotations

import argparse
import json
import re
from functools import cache
from pathlib import Path

import pytest

from proxy.cli import build_parser, policy_schema_json

ROOT = Path(__file__).parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
"""The documentation a user reads: every Markdown page of it."""
REFERENCE = ROOT / "docs" / "reference" / "policies.md"
"""The policy reference page, generated from the policy JSON Schema."""


@cache
def passages() -> list[str]:
    """The documentation cut into paragraphs, list items and code blocks (a code block is one passage)."""
    found: list[str] = []
    for page in DOCS:
        text = page.read_text(encoding="utf-8")
        for index, part in enumerate(re.split(r"^```.*$", text, flags=re.MULTILINE)):
            found.extend([part] if index % 2 else re.split(r"\n\s*\n|\n(?=- )", part))
    return found


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (subcommands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {"": parser, **subcommands.choices}


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    """Its option strings but help, and ``--no-x`` where ``--x`` is documented for it."""
    flags = [f for action in parser._actions for f in action.option_strings if f not in ("-h", "--help")]
    return [f for f in flags if not (f.startswith("--no-") and "--" + f.removeprefix("--no-") in flags)]


CASES = [(command, flag) for command, parser in _commands().items() for flag in _flags(parser)]


def _names(passage: str, command: str) -> bool:
    return re.search(rf"\bloopwarden {re.escape(command)}(?![\w-])", passage) is not None


@pytest.mark.parametrize("command", [c for c in _commands() if c])
def test_every_command_is_documented(command):
    assert any(_names(passage, command) for passage in passages()), f"`loopwarden {command}` is documented nowhere"


def documented(command: str, flag: str) -> bool:
    """``flag`` of ``loopwarden <command>`` (``""``: the top-level parser's) is documented."""
    if command == "serve":
        return any(f"| `{flag}` |" in passage for passage in passages())
    token = re.compile(rf"(?<![\w-]){re.escape(flag)}(?![\w-])")
    naming = [p for p in passages() if _names(p, command)] if command else [p for p in passages() if "loopwarden" in p]
    return any(token.search(passage) for passage in naming)


@pytest.mark.parametrize(("command", "flag"), CASES, ids=[f"{c or 'loopwarden'} {f}" for c, f in CASES])
def test_every_flag_of_every_command_is_documented(command, flag):
    assert documented(command, flag), f"{flag} of `loopwarden {command}`: documented nowhere"


@pytest.mark.parametrize(
    ("command", "flag", "found"),
    [
        ("replay", "--session", True),
        ("replay", "--undocumented-flag", False),
        ("hash-key", "--session", False),  # documented, but for another command
        ("serve", "--port", True),
        ("serve", "--not-a-setting", False),
    ],
)
def test_a_flag_counts_only_where_its_command_is_documented(command, flag, found):
    assert documented(command, flag) is found


def policy_keys(schema: dict) -> list[str]:
    """Every key a policy file may set, as a dotted path (a nested section's keys under it)."""
    definitions = schema.get("$defs", {})

    def section(spec: dict) -> dict | None:
        reference = spec.get("$ref") or next((s["$ref"] for s in spec.get("allOf", ()) if "$ref" in s), None)
        target = definitions.get(reference.rsplit("/", 1)[-1], {}) if reference else spec
        return target if target.get("type") == "object" and "properties" in target else None

    def walk(properties: dict, prefix: str) -> list[str]:
        found = []
        for name, spec in sorted(properties.items()):
            inner = section(spec)
            found += walk(inner["properties"], f"{prefix}{name}.") if inner else [f"{prefix}{name}"]
        return found

    return walk(schema["properties"], "")


KEYS = policy_keys(json.loads(policy_schema_json()))


def _handwritten() -> str:
    return "\n".join(page.read_text(encoding="utf-8") for page in DOCS if page != REFERENCE)


def test_the_policy_keys_are_read_from_the_schema():
    assert {"max_steps", "judge.model", "budgets.grant_ceiling.steps", "permissions.rules"} <= set(KEYS)
    assert "budgets" not in KEYS  # a section is not a key of its own


@pytest.mark.parametrize("key", KEYS)
def test_every_policy_key_is_in_the_generated_reference(key):
    assert f"| `{key}` |" in REFERENCE.read_text(encoding="utf-8")


@pytest.mark.parametrize("key", KEYS)
def test_every_policy_key_is_named_on_a_page_written_by_hand(key):
    assert f"`{key}`" in _handwritten(), f"policy key {key}: named on no page but the generated reference"

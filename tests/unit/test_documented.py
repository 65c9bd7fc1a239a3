"""Every command and every flag of the command line is documented where a user looks it up.

The documentation is the README today; when the docs site lands, add its pages to ``DOCS`` (or
point it at ``docs/``) and the same checks run over them. A flag counts as documented for its
command when a paragraph or code block that names ``loopwarden <command>`` names the flag too
(``serve``'s flags: in the configuration reference's table).
"""

from __future__ import annotations

import argparse
import re
from functools import cache
from pathlib import Path

import pytest

from proxy.cli import build_parser

ROOT = Path(__file__).parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
"""The documentation a user reads: every Markdown page of it."""


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

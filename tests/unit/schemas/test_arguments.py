"""Tool-call arguments, decoded in one place: JSON, each key once."""

from __future__ import annotations

import pytest

from proxy.schemas.arguments import parse_arguments


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"city": "Paris", "days": 3}', ({"city": "Paris", "days": 3}, None)),
        ("", ({}, None)),
        ("   ", ({}, None)),
        ('{"q": "caf\\u00e9", "n": 1e3}', ({"q": "café", "n": 1000.0}, None)),  # spelled otherwise than msgspec
        ('{"big": 123456789012345678901234567890}', ({"big": 123456789012345678901234567890}, None)),
        ("[1, 2]", ([1, 2], None)),
        ('{"command": "rm -rf /", "command": "ls"}', (None, "arguments give the key 'command' more than once")),
        ('{"a": [{"b": 1, "c": 2, "b": 1}]}', (None, "arguments give the key 'b' more than once")),
        ('{"a": 1e3, "a": 1000.0}', (None, "arguments give the key 'a' more than once")),
        (
            '{"city": "Par',
            (None, "arguments are not valid JSON: Unterminated string starting at: line 1 column 10 (char 9)"),
        ),
        ("[" * 100_000, (None, "arguments are nested too deeply")),
    ],
)
def test_parse_arguments(text, expected):
    assert parse_arguments(text) == expected


def test_a_number_too_long_to_read_makes_the_arguments_invalid():
    value, problem = parse_arguments('{"n": 1' + "0" * 5000 + "}")  # past Python's 4,300 digits: a ValueError

    assert value is None
    assert problem.startswith("arguments are not valid JSON: ")
    assert "4300 digits" in problem

"""Log safety: anything that looks like a key is masked when contents are logged."""

from __future__ import annotations

import pytest

from proxy.observe.logs import redact


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer sk-abcdefghijklmnop", "Authorization: Bearer [REDACTED]"),
        ("my key is sk-proj-abcdefghijkl1234", "my key is [REDACTED]"),
        ("use lw-acme-7f3a9c11 here", "use [REDACTED] here"),
        ('{"api_key": "abcdef123456"}', '{"api_key": "[REDACTED]"}'),
        ("x-loopwarden-key=lw-secret-value", "x-loopwarden-key=[REDACTED]"),
        ("nothing secret here, just skills and sky-high hopes", "nothing secret here, just skills and sky-high hopes"),
    ],
)
def test_redact(text, expected):
    assert redact(text) == expected


def test_a_line_written_later_keeps_when_it_happened(log_records):
    from proxy.observe.logs import JsonFormatter, log_event

    log_event("step", {"session": "s1"}, at=1_800_000_000.25)

    line = JsonFormatter().format(log_records[-1])
    assert line.startswith('{"ts":"2027-01-15T08:00:00.250Z","level":"info","event":"step","session":"s1"')

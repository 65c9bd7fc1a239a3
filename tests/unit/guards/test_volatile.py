"""Volatile fields: what changes from call to call without meaning anything is masked before results are compared."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.guards.volatile import without_volatile


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param("at 2026-12-01T10:00:00Z", "at 2026-12-01T10:00:03.25+01:00", id="iso-timestamps"),
        pytest.param("Date: Tue, 01 Dec 2026 10:00:00 GMT", "Date: Tue, 01 Dec 2026 10:00:09 GMT", id="http-dates"),
        pytest.param("at 10:00:00", "at 10:00:07", id="clock-times"),
        pytest.param("id 0f8fad5b-d9cb-469f-a165-70867728950e", "id 7c9e6679-7425-40de-944b-e07fc1f90ae7", id="uuids"),
        pytest.param("(request_id=8f3a2c)", "(request_id=91bb07)", id="request-id-assignments"),
        pytest.param('{"trace_id": "abc-1"}', '{"trace_id": "xyz-22"}', id="trace-id-fields"),
        pytest.param("ref req_8Hq2kLm9", "ref req_Z0pQ7aa1", id="request-ids-by-prefix"),
        pytest.param("commit 3f2a9c1b7d4e5f60", "commit 9e8d7c6b5a4f3e21", id="long-hex-ids"),
        pytest.param("took 35 ms", "took 1.25s", id="durations"),
    ],
)
def test_results_differing_only_in_volatile_fields_compare_equal(first, second):
    assert without_volatile(first) == without_volatile(second)
    assert first != second


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param('{"temperature_c": 18}', '{"temperature_c": 11}', id="values"),
        pytest.param("Paris: sunny", "Berlin: light rain", id="words"),
        pytest.param("order 1234", "order 1235", id="short-numbers"),
        pytest.param("2026-12-01 report", "2026-12-02 report", id="dates-without-a-time"),
    ],
)
def test_results_that_say_different_things_stay_different(first, second):
    assert without_volatile(first) != without_volatile(second)


_PLAIN = re.compile(
    "|".join(
        (
            r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?",
            r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{1,2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2}(?: GMT| [+-]\d{4})?",
            r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b",
            r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",
            r"(?i:\b(?:x-)?(?:request|req|trace|correlation|span)[_-]?id\b[\"']?\s*[:=]\s*[\"']?)[\w.:-]+",
            r"\b(?:req|request|trace)_[A-Za-z0-9]{6,}\b",
            r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{12,}\b",
            r"\b\d+(?:\.\d+)?\s?(?:ms|µs|us|ns|s|sec|secs|seconds|milliseconds)\b",
        )
    )
)
_PIECES = (
    "2026-12-02T10:00:00Z", "Mon, 02 Dec 2026 10:00:00 GMT", "1:02:03.5", "123e4567-e89b-12d3-a456-426614174000",
    "request_id=abc", "X-Request-Id: 'z.1'", "TraceID: q", "correlation_id = 4", "spanid:1", "req_abcdef12",
    "request_ABCDEF", "trace_123456", "deadbeef1234", "abcdefabcdef", "0a0a0a0a0a0a0a", "12 ms", "1.5s", "µs",
    "id", "x-", "_", "-", ":", " ", "a", "é", "9", "Sun,", "x", "r", "t", "c", "s", "S", "T", "\n", "'",
)  # fmt: skip


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=12).map("".join))
def test_the_fast_pattern_masks_exactly_what_the_plain_one_does(text):
    assert without_volatile(text) == _PLAIN.sub("\u2400", text)

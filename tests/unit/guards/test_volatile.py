"""Volatile fields: what changes from call to call without meaning anything is masked before results are compared."""

from __future__ import annotations

import pytest

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


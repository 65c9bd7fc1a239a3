"""Fingerprints of tool calls: equivalent arguments are one call, different ones are not;
delivered calls are counted and remembered in order."""

from __future__ import annotations

import pytest

from proxy.exchange import ToolCall
from proxy.guards.fingerprint import canonical_arguments, fingerprint, remember_calls
from proxy.session.base import SessionDelta, SessionState

SAME_CALLS = [
    ('{"city": "Paris", "days": 3}', '{"days":3,"city":"Paris"}'),
    ('{"days": 3.0}', '{"days": 3}'),
    ('{"q": "  new   york "}', '{"q": "new york"}'),
    ('{"a": {"y": 1, "x": [1, 2.0]}}', '{"a":{"x":[1,2],"y":1}}'),
    ("", "{}"),
    ("  not json  at all ", "not json at all"),
]
DIFFERENT_CALLS = [
    ('{"city": "Paris"}', '{"city": "paris"}'),
    ('{"days": 3}', '{"days": 3.5}'),
    ('{"days": 3}', '{"days": "3"}'),
    ('{"a": [1, 2]}', '{"a": [2, 1]}'),
    ('{"a": 1, "a": 2}', '{"a": 2}'),  # a key given twice is not "the last one"
]


@pytest.mark.parametrize(("one", "other"), SAME_CALLS)
def test_equivalent_arguments_share_a_fingerprint(one, other):
    assert fingerprint("search", one) == fingerprint("search", other)


@pytest.mark.parametrize(("one", "other"), DIFFERENT_CALLS)
def test_different_arguments_get_different_fingerprints(one, other):
    assert fingerprint("search", one) != fingerprint("search", other)


def test_tool_name_is_part_of_the_fingerprint():
    assert fingerprint("search", "{}") != fingerprint("fetch", "{}")


def test_canonical_arguments_are_sorted_compact_json():
    assert canonical_arguments('{"b": 1, "a": [1.0, " x "]}') == '{"a":[1,"x"],"b":1}'


def test_delivered_calls_are_counted_and_remembered_in_order():
    delta = SessionDelta()
    call = ToolCall("c9", "search", '{"q": "lyon"}')
    other = ToolCall("c2", "fetch", '{"url": "x"}')
    mark = fingerprint(call.name, call.arguments)

    remember_calls(delta, [call, other, call], keep=60)
    state = delta.applied_to(SessionState())

    assert state.counter(f"fp:{mark}") == 2
    assert state.items("fp_seq") == [mark, fingerprint("fetch", '{"url": "x"}'), mark]

"""The strike pattern: a miss is nudged and counted, the ``max_strikes``-th in a row ends, a good reply clears."""

from __future__ import annotations

import pytest

from proxy.exchange import Note
from proxy.guards.strikes import strike_verdict
from proxy.verdict import PASS, Finalize, Nudge, Pass
from tests.unit.guards.given import context, session


def verdict(missed: bool, strikes: int, **overrides):
    settings = {
        "strike": "wobble",
        "max_strikes": 3,
        "nudge_kind": "wobble_nudge",
        "nudge_text": "Stop wobbling.",
        "miss": "wobbly replies",
    }
    return strike_verdict(missed, context(state=session({"wobble": strikes})), **{**settings, **overrides})


CASES = [
    # missed, strikes so far, overrides, the verdict
    pytest.param(False, 0, {}, PASS, id="no-miss-no-strikes-passes-as-is"),
    pytest.param(False, 2, {}, Pass(clear_strikes=("wobble",)), id="no-miss-clears-the-strikes-so-far"),
    pytest.param(
        True,
        0,
        {},
        Nudge("wobble_nudge", "wobbly replies (strike 1 of 3)", (Note("Stop wobbling."),), strike="wobble"),
        id="a-first-miss-is-nudged-and-counted",
    ),
    pytest.param(
        True,
        1,
        {},
        Nudge("wobble_nudge", "wobbly replies (strike 2 of 3)", (Note("Stop wobbling."),), strike="wobble"),
        id="a-second-miss-is-the-second-strike",
    ),
    pytest.param(
        True,
        2,
        {},
        Finalize("wobble", "the model returned 3 wobbly replies in a row", strike="wobble"),
        id="the-last-strike-ends-under-the-strikes-name",
    ),
    pytest.param(
        True,
        5,
        {},
        Finalize("wobble", "the model returned 6 wobbly replies in a row", strike="wobble"),
        id="strikes-past-the-limit-still-end",
    ),
    pytest.param(
        True,
        2,
        {"reason": "no_progress"},
        Finalize("no_progress", "the model returned 3 wobbly replies in a row", strike="wobble"),
        id="a-reason-names-the-ending-apart-from-the-strike",
    ),
    pytest.param(
        True,
        0,
        {"exhausted": "wobble"},
        Nudge(
            "wobble_nudge",
            "wobbly replies (strike 1 of 3)",
            (Note("Stop wobbling."),),
            strike="wobble",
            exhausted="wobble",
        ),
        id="a-nudge-names-the-ending-when-attempts-run-out",
    ),
    pytest.param(
        True,
        0,
        {"max_strikes": 1},
        Finalize("wobble", "the model returned 1 wobbly replies in a row", strike="wobble"),
        id="one-strike-allowed-ends-at-the-first-miss",
    ),
]


@pytest.mark.parametrize(("missed", "strikes", "overrides", "expected"), CASES)
def test_strike_verdict(missed, strikes, overrides, expected):
    assert verdict(missed, strikes, **overrides) == expected


def test_a_nudge_names_max_attempts_unless_its_guard_says_otherwise():
    assert Nudge("any_nudge", "why", ()).exhausted == "max_attempts"

"""A session's state read with types, and a request's changes applied as a store applies them
(the stores themselves: test_store_contract.py)."""

from __future__ import annotations

import pytest

from proxy.session.base import FIELDS, SessionDelta, SessionState, StoreUnavailable, only_released


@pytest.mark.parametrize(
    ("values", "steps"),
    [({}, 0), ({FIELDS.STEPS: "7"}, 7), ({FIELDS.STEPS: "seven"}, 0), ({FIELDS.STEPS: "-2"}, -2)],
    ids=["absent", "a-number", "not-a-number", "negative"],
)
def test_a_counter_reads_as_a_number_and_zero_when_it_is_none(values, steps):
    assert SessionState(values).steps == steps


def test_a_session_reads_its_fields_by_name():
    state = SessionState(
        {FIELDS.TURNS: "2", "strike:empty": "1", FIELDS.TERMINATION: "loop", FIELDS.ENDING: "{}", "digests": "a,b"}
    )

    assert (state.turns, state.strikes("empty"), state.strikes("judge")) == (2, 1, 0)
    assert (state.termination, state.ending, state.items("digests"), state.items("none")) == (
        "loop",
        "{}",
        ["a", "b"],
        [],
    )


def test_a_blank_ending_is_no_ending():
    state = SessionState({FIELDS.TERMINATION: "", FIELDS.ENDING: ""})

    assert (state.termination, state.ending, state.is_new) == (None, None, False)


def delta(
    *,
    incr: dict[str, int] | None = None,
    assign: dict[str, str | int | float] | None = None,
    default: dict[str, str | int | float] | None = None,
    append: tuple[tuple[str, str, int], ...] = (),
    replace: bool = False,
) -> SessionDelta:
    made = SessionDelta(replace=replace)
    for name, by in (incr or {}).items():
        made.incr(name, by)
    for name, value in (assign or {}).items():
        made.assign(name, value)
    for name, value in (default or {}).items():
        made.default(name, value)
    for name, item, keep in append:
        made.append(name, item, keep)
    return made


APPLIED = [
    # stored, the delta, the state after
    pytest.param({"steps": "2"}, delta(incr={"steps": 1}), {"steps": "3"}, id="an-increment"),
    pytest.param({}, delta(incr={"steps": 1}), {"steps": "1"}, id="an-increment-of-nothing"),
    pytest.param({"steps": "x"}, delta(incr={"steps": 2}), {"steps": "2"}, id="an-increment-of-garbage"),
    pytest.param({"a": "1"}, delta(assign={"a": 5}), {"a": "5"}, id="an-assignment"),
    pytest.param({"seen": "1"}, delta(default={"seen": 9, "new": 2}), {"seen": "1", "new": "2"}, id="defaults"),
    pytest.param(
        {"old": "1", "steps": "4"}, delta(incr={"steps": 1}, replace=True), {"steps": "1"}, id="a-fresh-session"
    ),
    pytest.param(
        {"d": "a,b"}, delta(append=(("d", "c", 3), ("d", "e", 3))), {"d": "b,c,e"}, id="a-list-keeps-its-last"
    ),
    pytest.param({}, delta(append=(("d", "a", 2),)), {"d": "a"}, id="a-new-list"),
]


@pytest.mark.parametrize(("stored", "changes", "after"), APPLIED)
def test_a_delta_applied_gives_the_state_a_commit_will_leave(stored, changes, after):
    assert changes.applied_to(SessionState(stored)).values == after


def test_an_assignment_after_an_increment_wins_over_it():
    changes = SessionDelta()
    changes.incr("steps", 3)
    changes.assign("steps", 1)

    assert changes.applied_to(SessionState({"steps": "10"})).values == {"steps": "1"}


def test_increments_of_one_field_add_up():
    changes = SessionDelta()
    changes.incr("steps")
    changes.incr("steps", 2)

    assert changes.increments == {"steps": 3}


@pytest.mark.parametrize(
    ("changes", "empty"),
    [
        (SessionDelta(), True),
        (delta(incr={"a": 1}), False),
        (delta(assign={"a": 1}), False),
        (delta(default={"a": 1}), False),
        (delta(append=(("a", "x", 1),)), False),
        (delta(replace=True), False),
    ],
    ids=["nothing", "increment", "assignment", "default", "append", "replace"],
)
def test_a_delta_without_changes_is_false(changes, empty):
    assert bool(changes) is not empty


@pytest.mark.parametrize(
    ("values", "released"),
    [
        ({}, True),
        ({FIELDS.RESERVED_STEPS: "0", FIELDS.RESERVED_TOKENS: "0"}, True),
        ({FIELDS.RESERVED_STEPS: "1"}, False),
        ({FIELDS.RESERVED_STEPS: "0", FIELDS.STEPS: "0"}, False),
    ],
    ids=["nothing", "reservations-given-back", "a-reservation-held", "another-field"],
)
def test_a_session_of_reservations_given_back_is_nothing_left(values, released):
    assert only_released(values) is released


def test_an_empty_assignment_removes_the_field():
    delta = SessionDelta()
    delta.assign("termination", "")
    delta.incr("strike:x")

    after = delta.applied_to(SessionState({"termination": "loop", "strike:x": "4"}))

    assert after.values == {"strike:x": "5"}


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (
            ConnectionError("Error 111 connecting to 10.0.0.5:6379."),
            "load failed at Redis at 10.0.0.5:6379: ConnectionError (Error 111 connecting to 10.0.0.5:6379.)",
        ),
        (TimeoutError(), "load failed at Redis at 10.0.0.5:6379: TimeoutError"),
        (ValueError("x" * 500), "load failed at Redis at 10.0.0.5:6379: ValueError (" + "x" * 200 + ")"),
    ],
    ids=["with-detail", "without", "long-detail-cut"],
)
def test_a_store_error_names_the_operation_where_the_store_is_and_what_went_wrong(error, message):
    assert str(StoreUnavailable.at("Redis at 10.0.0.5:6379", "load", error)) == message

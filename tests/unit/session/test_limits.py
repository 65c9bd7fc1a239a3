"""The admission arithmetic (the Redis store runs the same rules in Lua): tables of stored values,
limits asked for, and what is reserved or refused."""

from __future__ import annotations

import pytest

from proxy.session.base import FIELDS, Claim, Grant, Limit, WindowLimit
from proxy.session.limits import admit_in_place, admit_window_in_place, bucket_of, claim_in_place, grant_in_place

STEPS = Limit("max_steps", ("steps",), "res_steps", 1, 10)
TOKENS = Limit("max_tokens", ("tokens_in", "tokens_out"), "res_tokens", 500, 1000)
GRANTED = Limit("max_steps", ("steps",), "res_steps", 1, 10, "granted_steps")


ADMIT_CASES = [
    # stored values, limits asked, refused by, values afterwards
    pytest.param({}, [STEPS], None, {"res_steps": "1"}, id="an-empty-session-reserves"),
    pytest.param({"steps": "9"}, [STEPS], None, {"steps": "9", "res_steps": "1"}, id="the-last-step-still-fits"),
    pytest.param({"steps": "10"}, [STEPS], "max_steps", {"steps": "10"}, id="a-spent-budget-refuses"),
    pytest.param(
        {"steps": "8", "res_steps": "2"},
        [STEPS],
        "max_steps",
        {"steps": "8", "res_steps": "2"},
        id="reservations-count",
    ),
    pytest.param(
        {"tokens_in": "300", "tokens_out": "300"},
        [TOKENS],
        "max_tokens",
        {"tokens_in": "300", "tokens_out": "300"},
        id="every-used-field-counts",
    ),
    pytest.param(
        {"tokens_in": "600"},
        [STEPS, TOKENS],
        "max_tokens",
        {"tokens_in": "600"},
        id="one-refusal-reserves-nothing-for-the-others",
    ),
    pytest.param({}, [STEPS, TOKENS], None, {"res_steps": "1", "res_tokens": "500"}, id="all-fitting-reserve-together"),
    pytest.param({"steps": "garbage"}, [STEPS], None, {"steps": "garbage", "res_steps": "1"}, id="unreadable-is-zero"),
    pytest.param(
        {"steps": "10", "granted_steps": "2"},
        [GRANTED],
        None,
        {"steps": "10", "granted_steps": "2", "res_steps": "1"},
        id="a-grant-raises-the-limit",
    ),
    pytest.param(
        {"steps": "12", "granted_steps": "2"},
        [GRANTED],
        "max_steps",
        {"steps": "12", "granted_steps": "2"},
        id="a-spent-grant-refuses",
    ),
    pytest.param(
        {"steps": "10", "granted_steps": "2"},
        [STEPS],
        "max_steps",
        {"steps": "10", "granted_steps": "2"},
        id="a-limit-without-its-grant-field-ignores-grants",
    ),
]


@pytest.mark.parametrize(("values", "limits", "refused", "after"), ADMIT_CASES)
def test_admission_reserves_every_amount_or_names_the_first_limit_that_does_not_fit(values, limits, refused, after):
    values = dict(values)  # the table is shared with test_scripts.py

    assert admit_in_place(values, limits) == refused
    assert values == after


CLAIM = Claim(now_ms=1_000, lease_ms=500)

CLAIM_CASES = [
    # stored values, granted, the claim's lease afterwards
    pytest.param({}, True, "1500", id="nothing-stored-grants-until-the-lease-ends"),
    pytest.param({FIELDS.ENDING_CLAIM: "999"}, True, "1500", id="a-lapsed-claim-is-taken-over"),
    pytest.param({FIELDS.ENDING_CLAIM: "1000"}, True, "1500", id="a-claim-lapsing-now-is-taken-over"),
    pytest.param({FIELDS.ENDING_CLAIM: "1001"}, False, "1001", id="a-live-claim-refuses"),
    pytest.param({FIELDS.ENDING: "Ended.", FIELDS.ENDING_CLAIM: "0"}, False, "0", id="a-stored-ending-refuses"),
]


@pytest.mark.parametrize(("values", "granted", "lease"), CLAIM_CASES)
def test_the_endings_claim_is_granted_only_without_an_ending_or_a_live_claim(values, granted, lease):
    values = dict(values)

    assert claim_in_place(values, CLAIM) is granted
    assert values[FIELDS.ENDING_CLAIM] == lease


STEPS_GRANT = Grant("steps", "granted_steps", 5, 20)
TOKENS_GRANT = Grant("tokens", "granted_tokens", 1000, 1000)
ENDED = {FIELDS.TERMINATION: "budget_steps", FIELDS.ENDING: "{}", FIELDS.ENDING_WIRE: "chat", FIELDS.ENDING_CLAIM: "9"}

GRANT_CASES = [
    # stored values, grants asked, endings they lift, refused by, values afterwards (the grants'
    # increments are the caller's delta, committed next in the same step)
    pytest.param({"steps": "3"}, [STEPS_GRANT], ["budget_steps"], None, {"steps": "3"}, id="within-the-ceiling"),
    pytest.param(
        {"granted_steps": "15"}, [STEPS_GRANT], [], None, {"granted_steps": "15"}, id="up-to-the-ceiling-exactly"
    ),
    pytest.param(
        {"granted_steps": "16"}, [STEPS_GRANT], [], "steps", {"granted_steps": "16"}, id="over-the-ceiling-refuses"
    ),
    pytest.param(
        {**ENDED, "granted_tokens": "1"},
        [STEPS_GRANT, TOKENS_GRANT],
        ["budget_steps", "budget_tokens"],
        "tokens",
        {**ENDED, "granted_tokens": "1"},
        id="one-over-its-ceiling-grants-nothing-and-lifts-nothing",
    ),
    pytest.param(
        {**ENDED, "steps": "10"}, [STEPS_GRANT], ["budget_steps"], None, {"steps": "10"}, id="lifts-its-ending"
    ),
    pytest.param(
        {**ENDED, FIELDS.TERMINATION: "loop"},
        [STEPS_GRANT],
        ["budget_steps"],
        None,
        {**ENDED, FIELDS.TERMINATION: "loop"},
        id="another-ending-stays",
    ),
]


@pytest.mark.parametrize(("values", "grants", "lift", "refused", "after"), GRANT_CASES)
def test_a_grant_checks_every_ceiling_then_lifts_its_budgets_ending(values, grants, lift, refused, after):
    values = dict(values)  # the table is shared with test_scripts.py

    assert grant_in_place(values, grants, lift) == refused
    assert values == after


@pytest.mark.parametrize(
    ("now", "bucket"), [(0.0, 0), (3599.9, 0), (3600.0, 1), (7300.5, 2)], ids=["start", "end", "next", "later"]
)
def test_a_moment_falls_in_the_bucket_of_its_whole_hours(now, bucket):
    assert bucket_of(now, 3_600) == bucket


HOUR = 3_600
DAY = WindowLimit("tenant_day", "day:", "day_res", 10, 100)
NOW = 100 * HOUR + 60.0  # a minute into hour 100; the day's oldest bucket is hour 77


WINDOW_CASES = [
    # stored values, refused by, retry after (seconds), values afterwards
    pytest.param({}, None, None, {"day_res": "10"}, id="an-empty-day-reserves"),
    pytest.param(
        {"day:99": "50", "day:100": "40"}, None, None, {"day:99": "50", "day:100": "40", "day_res": "10"}, id="fits"
    ),
    pytest.param(
        {"day:76": "95", "day:77": "5"}, None, None, {"day:77": "5", "day_res": "10"}, id="expired-buckets-are-dropped"
    ),
    pytest.param(
        {"day:80": "30", "day:90": "65"},
        "tenant_day",
        80 * HOUR + 24 * HOUR - NOW,
        {"day:80": "30", "day:90": "65"},
        id="a-refusal-waits-for-the-oldest-bucket-that-makes-room",
    ),
    pytest.param(
        {"day:80": "2", "day:90": "95"},
        "tenant_day",
        90 * HOUR + 24 * HOUR - NOW,
        {"day:80": "2", "day:90": "95"},
        id="a-refusal-waits-until-enough-has-expired",
    ),
    pytest.param(
        {"day_res": "95"}, "tenant_day", float(24 * HOUR), {"day_res": "95"}, id="reserved-only-waits-a-whole-window"
    ),
    pytest.param(
        {"day:x": "99", "day:100": "1"},
        None,
        None,
        {"day:x": "99", "day:100": "1", "day_res": "10"},
        id="a-field-that-is-no-bucket-is-left-alone",
    ),
]


@pytest.mark.parametrize(("values", "refused", "retry_after", "after"), WINDOW_CASES)
def test_a_rolling_window_drops_expired_buckets_then_reserves_or_says_when_to_retry(
    values, refused, retry_after, after
):
    values = dict(values)

    assert admit_window_in_place(values, [DAY], NOW) == (refused, retry_after)
    assert values == after


def test_a_retry_after_is_rounded_up_to_whole_seconds():
    values = {"day:77": "95"}  # expires at hour 101, a fifth of a second from now

    _, retry_after = admit_window_in_place(values, [DAY], 101 * HOUR - 0.2)

    assert retry_after == 1.0

"""Backoff and Retry-After, as tables."""

from __future__ import annotations

import email.utils

import pytest

from proxy.upstream.retry import RetryPolicy, parse_retry_after

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after": "-3"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after-ms": "bad", "retry-after": "9"}, 9.0),
        ({"retry-after": email.utils.formatdate(NOW + 12, usegmt=True)}, 12.0),
        ({"retry-after": email.utils.formatdate(NOW - 60, usegmt=True)}, 0.0),
    ],
)
def test_parse_retry_after(headers, expected):
    assert parse_retry_after(headers, now=lambda: NOW) == expected


POLICY = RetryPolicy(attempts=4, base_delay=0.5, max_delay=3.0, retry_after_cap=10.0, paced_attempts=6)


@pytest.mark.parametrize(
    ("attempt", "retry_after", "paced", "draw", "expected"),
    [
        (1, None, 0.0, 1.0, 0.5),  # first wait: up to base
        (2, None, 0.0, 1.0, 1.0),  # doubles
        (3, None, 0.0, 1.0, 2.0),
        (3, None, 0.0, 0.5, 1.0),  # full jitter scales the whole step
        (3, None, 0.0, 0.0, 0.0),
        (4, None, 0.0, 1.0, None),  # attempts used up
        (1, 4.0, 0.0, 0.3, 4.0),  # Retry-After wins over backoff
        (1, 10.0, 0.0, 0.3, 10.0),  # at the cap: still waited out
        (1, 10.5, 0.0, 0.3, None),  # beyond the cap: hand to the client
        (4, 1.0, 3.0, 0.3, 1.0),  # a paced storm goes on past the backoff attempts
        (5, 1.0, 4.0, 0.3, 1.0),
        (6, 1.0, 5.0, 0.3, None),  # paced attempts used up
        (3, 4.0, 6.0, 0.3, 4.0),  # the waits add up to the cap: still waited out
        (3, 4.0, 6.5, 0.3, None),  # past the cap, all waits added up: hand to the client
        (4, None, 3.0, 1.0, None),  # no wait named: the backoff attempts bound it
    ],
)
def test_delay(attempt, retry_after, paced, draw, expected):
    assert POLICY.delay(attempt, retry_after, lambda: draw, paced) == expected


def test_backoff_step_is_capped_at_max_delay():
    policy = RetryPolicy(attempts=10, base_delay=1.0, max_delay=3.0)

    assert policy.delay(8, None, lambda: 1.0) == 3.0


@pytest.mark.parametrize(
    ("attempt", "fault_seconds", "expected"),
    [
        (1, None, 0.5),  # how long the fault took is unknown: the plain backoff
        (1, 2.0, 0.5),  # a slow fault: the plain backoff
        (1, 0.05, 0.5),  # at fast_fault: not fast
        (1, 0.049, 1.0),  # a fast fault: one doubling more
        (1, 0.0, 1.0),
        (2, 0.001, 2.0),
        (3, 0.001, 4.0),
        (5, 0.001, 8.0),  # still capped at max_delay
    ],
)
def test_a_fault_that_came_back_fast_backs_off_one_doubling_longer(attempt, fault_seconds, expected):
    policy = RetryPolicy(attempts=10)

    assert policy.backoff(attempt, lambda: 1.0, fault_seconds) == expected
    assert policy.delay(attempt, None, lambda: 1.0, fault_seconds=fault_seconds) == expected


def test_a_wait_the_upstream_named_is_kept_however_fast_it_failed():
    assert POLICY.delay(1, 4.0, lambda: 0.3, fault_seconds=0.0) == 4.0


def test_retry_budget_allows_a_burst_then_a_share_of_requests():
    from proxy.upstream.retry import RetryBudget

    budget = RetryBudget(ratio=0.2, burst=2)
    granted = []
    for _ in range(20):
        budget.deposit()
        granted.append(budget.withdraw())

    assert granted[:2] == [True, True]  # the burst
    assert sum(granted[2:]) == 3  # then one per five requests (0.2 x 18 = 3.6)

"""A run's first request while Redis does not answer, in every wire format: a policy that fails
closed refuses it before anything goes upstream (the call could not be booked); one that fails
open serves it, marked degraded."""

from __future__ import annotations

import pytest

from tests.support.formats import REFUSED, status_of
from tests.support.processes import free_port


@pytest.fixture
def no_redis(make_proxy, fake):
    """A proxy whose Redis URL points at a port nothing listens on."""
    return make_proxy(upstream=fake.url, redis_url=f"redis://127.0.0.1:{free_port()}/0", redis_timeout=0.3)


def test_a_fail_closed_runs_first_request_without_a_session_id_never_reaches_the_model(wire_format, no_redis, fake):
    with pytest.raises(REFUSED) as refused:
        wire_format.ask(no_redis, headers={"X-LoopWarden-Policy": "strict"})

    assert status_of(refused.value) == 503
    assert fake.requests == []


def test_a_fail_open_runs_first_request_is_served_marked_degraded(wire_format, no_redis, fake):
    if wire_format.always_streams:
        pytest.skip("a fresh run's first streamed turn touches the store only at its commit, after its headers")

    answer = wire_format.ask(no_redis)

    assert answer.headers["x-loopwarden-degraded"] == "state-store"
    assert len(fake.requests) == 1


def test_a_fail_open_runs_first_streamed_request_is_served(wire_format, no_redis, fake):
    answer = wire_format.ask(no_redis, stream=True)

    assert answer.text
    assert len(fake.requests) == 1

"""Stored Responses chains when Redis fails: restarted empty, or frozen.

A continuation (``previous_response_id``, an ``item_reference``, a ``conversation``) carries
only its new items, so after Redis lost its data it cannot show it continues anything: under
``state_fail_mode: closed`` it gets the one 503 a chat continuation gets, never a silent
restart with fresh budgets. During a freeze a continuation costs one store timeout, as a chat
call does: the chain's lookup is the request's first store call, and after it fails the
request asks the store nothing more and books nothing under a session it could not resolve.
Timeouts are counted as the commands a black-holed Redis was sent, not measured in time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.support.fake_responses import text_response
from tests.support.faultproxy import Hang
from tests.support.responses_fixtures import fake, responses_server  # noqa: F401 (fixtures)

TASK = [{"role": "user", "content": "How many people live in Lyon?"}]


def ask(proxy, headers: dict[str, str] | None = None, **body: Any) -> httpx.Response:
    return httpx.post(
        f"{proxy.base_url}/responses",
        json={"model": "m", **body},
        headers={"Authorization": "Bearer sk-p", **(headers or {})},
        timeout=10,
    )


Continuation = tuple[dict[str, Any], Callable[[dict[str, Any]], dict[str, Any]]]
CONTINUATIONS: dict[str, Continuation] = {
    "previous_response_id": (
        {"input": TASK},
        lambda reply: {"previous_response_id": reply["id"], "input": "Go on."},
    ),
    "item_reference": (
        {"input": TASK},
        lambda reply: {
            "input": [{"type": "item_reference", "id": reply["output"][0]["id"]}, {"role": "user", "content": "Go on."}]
        },
    ),
    "conversation": (
        {"conversation": "conv_lyon", "input": TASK},
        lambda reply: {"conversation": "conv_lyon", "input": "Go on."},
    ),
}


@pytest.fixture
def closed_proxy(make_proxy, fake, private_redis, write_policies):
    policies = write_policies(default="state_fail_mode: closed\n")
    return make_proxy(upstream=fake.url, redis_url=private_redis.url, policies_dir=str(policies))


@pytest.mark.parametrize("how", list(CONTINUATIONS))
def test_a_continuation_after_redis_lost_its_state_gets_one_503_then_knowingly_starts_over(
    closed_proxy, fake, private_redis, how
):
    opening, continuing = CONTINUATIONS[how]
    first = ask(closed_proxy, **opening)
    second = ask(closed_proxy, **continuing(first.json()))
    assert second.status_code == 200

    private_redis.restart()
    refused = ask(closed_proxy, **continuing(second.json()))
    acknowledged = ask(closed_proxy, **continuing(second.json()))

    assert refused.status_code == 503
    assert "state was lost" in refused.json()["error"]["message"]
    assert refused.headers["x-should-retry"] == "false"
    assert acknowledged.status_code == 200  # the client was told once; now it knowingly starts over
    assert acknowledged.headers["x-loopwarden-step"] == "1"
    assert len(fake.served) == 3  # the refused request reached no model


def test_a_new_request_after_redis_lost_its_state_is_served(closed_proxy, fake, private_redis):
    assert ask(closed_proxy, input=TASK).status_code == 200

    private_redis.restart()
    new = ask(closed_proxy, input=[{"role": "user", "content": "What is the capital of France?"}])

    assert new.status_code == 200  # it continues nothing: provably a new session


@pytest.mark.parametrize("state", ["memory", "redis"])
@pytest.mark.parametrize("how", list(CONTINUATIONS))
def test_a_continuation_with_nothing_lost_continues_its_session(
    make_proxy, fake, write_policies, redis_url, state, how
):
    policies = write_policies(default="state_fail_mode: closed\n")
    store = {"redis_url": redis_url} if state == "redis" else {}
    proxy = make_proxy(upstream=fake.url, policies_dir=str(policies), **store)
    opening, continuing = CONTINUATIONS[how]

    first = ask(proxy, **opening)
    second = ask(proxy, **continuing(first.json()))

    assert second.status_code == 200
    if how != "item_reference":  # its session is the one the reply names: a run of its own
        assert second.headers["x-loopwarden-session"] == first.headers["x-loopwarden-session"]
        assert second.headers["x-loopwarden-step"] == "2"


@pytest.fixture
def freezing(make_proxy, fake, faulty_redis, write_policies):
    """``freezing(mode)``: a proxy over a Redis that, from ``freeze()`` on, takes commands and never answers."""

    def start(mode: str = "open"):
        policies = write_policies(default=f"state_fail_mode: {mode}\n")
        return make_proxy(
            upstream=fake.url,
            redis_url=f"redis://127.0.0.1:{faulty_redis.port}/0",
            redis_timeout=0.3,
            policies_dir=str(policies),
        )

    return start


def freeze(faulty_redis) -> None:
    faulty_redis.set(Hang())
    faulty_redis.drop_connections()


@pytest.mark.parametrize(("mode", "status"), [("open", 200), ("closed", 503)])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_chain_continuation_during_a_redis_freeze_costs_one_store_timeout(
    freezing, fake, faulty_redis, mode, status, stream
):
    proxy = freezing(mode)
    first = ask(proxy, input=TASK)
    fake.script(text_response("Lyon has about 520,000 people."))
    freeze(faulty_redis)

    continued = ask(proxy, previous_response_id=first.json()["id"], input="Go on.", stream=stream)

    assert continued.status_code == status
    assert faulty_redis.swallowed.count(b"EVALSHA") == 1  # one store call, so one timeout
    if status == 200:
        assert continued.headers["x-loopwarden-degraded"] == "state-store"
        assert not continued.headers.get("x-loopwarden-session", "").startswith("chain-")  # no stray session


def test_a_responses_call_during_a_redis_freeze_records_no_chain_after_its_first_timeout(freezing, faulty_redis):
    proxy = freezing("open")
    assert ask(proxy, input=TASK).status_code == 200
    freeze(faulty_redis)

    served = ask(proxy, {"X-Session-Id": "frozen"}, input=TASK)

    assert served.status_code == 200
    assert served.headers["x-loopwarden-degraded"] == "state-store"
    assert faulty_redis.swallowed.count(b"EVALSHA") == 1  # the admission's; its reply ids are not recorded

"""A failing tool whose output does not say "error" (issue 31, item 5), with real clients.

The tool answers ``503 Service Unavailable … request_id=… at …Z``, a new request id and time
each call, while the model re-spells its argument (``Paris``, ``paris``, ``PARIS ``): no
default failure pattern matches, no two results are byte-equal and no two calls are exact
repeats. The failure's shape (an HTTP status line) trips the failing-tools breaker, and the
run ends gracefully within a cap of 5 model calls for the openai SDK, the Agents SDK,
LangGraph and smolagents, streamed and not. With a policy blind to the shape and to volatile
fields, the loop guard's near repeats end it instead, within a cap of 6.
"""

from __future__ import annotations

import itertools
import uuid

import pytest

from tests.support.assertions import summary_of
from tests.support.capped_agents import SUMMARY, LoopingModel, run_capped
from tests.support.turns import Call

pytestmark = pytest.mark.shared_proxy

SPELLINGS = ("Paris", "paris", "PARIS ", " Paris", "pARIS", "paris ")
CAP = 5
"""smolagents' ``max_steps`` at its low end; the others' caps set alike."""


def overloaded_weather(ran: list[str]):
    seconds = itertools.count(7)

    def get_weather(city: str) -> str:
        """Current weather for a city.

        Args:
            city: the city's name
        """
        ran.append(city)
        return (
            f"503 Service Unavailable: weather backend overloaded "
            f"(request_id={uuid.uuid4()}, at 2026-12-01T10:00:{next(seconds):02d}Z)"
        )

    return get_weather


@pytest.mark.parametrize("client", ["openai", "agents", "langgraph", "smolagents"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_tool_answering_503_to_respelled_arguments_ends_the_run_as_tool_failures(proxy, upstream, client, stream):
    upstream.model = LoopingModel(lambda n: Call("get_weather", {"city": SPELLINGS[n % len(SPELLINGS)]}))
    ran: list[str] = []

    answer = run_capped(client, CAP, proxy.base_url, f"503-{client}-{stream}", [overloaded_weather(ran)], stream=stream)

    assert str(answer).startswith("LoopWarden stopped this run (tool_failures)"), answer
    assert summary_of(str(answer)) == SUMMARY
    assert ran == ["Paris", "paris", "PARIS "]  # tool_failures.max_consecutive: no fourth failing call ran


BLIND = "tool_failures: {shapes: false}\nno_progress: {mask_volatile: false}\n"
"""A policy that neither knows the failure's shape nor masks its volatile fields: only the
loop guard's near repeats (case and spacing folded) can see the run go round."""


@pytest.mark.parametrize("client", ["openai", "agents", "langgraph", "smolagents"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_respelled_arguments_alone_end_the_run_as_a_near_repeat_loop(
    make_proxy, write_policies, upstream, client, stream
):
    proxy = make_proxy(policies_dir=str(write_policies(default=BLIND)))
    upstream.model = LoopingModel(lambda n: Call("get_weather", {"city": SPELLINGS[n % len(SPELLINGS)]}))
    ran: list[str] = []

    answer = run_capped(client, 6, proxy.base_url, f"near-{client}-{stream}", [overloaded_weather(ran)], stream=stream)

    assert str(answer).startswith("LoopWarden stopped this run (loop)"), answer
    assert summary_of(str(answer)) == SUMMARY
    assert len(ran) == 5  # loop.near_block_at - 1: the sixth near repeat never ran

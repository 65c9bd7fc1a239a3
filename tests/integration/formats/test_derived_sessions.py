"""Runs without X-Session-Id never share a session, in every wire format: the same task, run
back to back or side by side by an agent's tool loop against one proxy, keeps its steps, strikes
and endings apart."""

from __future__ import annotations

import pytest

from tests.support.assertions import summary_of
from tests.support.formats import Answer, Format, Tool
from tests.support.turns import Turn, calling, turn

TOOLS = [Tool("search")]


class Run:
    """One agent run: each tool call answered, the history growing as the agent resends it."""

    def __init__(self, wire_format: Format, proxy) -> None:
        self.format, self.proxy = wire_format, proxy
        self.history = wire_format.task("Find the population of Lyon.")

    def step(self, *, stream: bool = False) -> Answer:
        answer = self.format.ask(self.proxy, self.history, tools=TOOLS, stream=stream)
        self.history = self.format.handed_back(self.history, answer, [f"result of {c.id}" for c in answer.calls])
        return answer


def calls(run: str, step: int) -> Turn:
    """A reply calling ``search`` with a call id of its own run and step (ids are unique, as the APIs' are)."""
    return calling("search", {"q": f"{run}{step}"}, f"call_{run}{step}")


@pytest.fixture
def capped(make_proxy, fake, write_policies):
    return make_proxy(upstream=fake.url, policies_dir=str(write_policies(default="max_steps: 4\n")))


def test_a_runs_first_reply_names_the_session_its_second_request_continues(wire_format, proxy, fake):
    fake.script(calls("a", 1), calls("a", 2))
    run = Run(wire_format, proxy)

    first, second = run.step(), run.step()

    assert first.headers["x-loopwarden-session"] == second.headers["x-loopwarden-session"]
    assert (first.headers["x-loopwarden-step"], second.headers["x-loopwarden-step"]) == ("1", "2")


def test_later_requests_of_a_run_keep_its_session(wire_format, proxy, fake):
    fake.script(calls("a", 1), calls("a", 2), calls("a", 3))
    run = Run(wire_format, proxy)
    run.step()

    second, third = run.step(), run.step()

    assert third.headers["x-loopwarden-session"] == second.headers["x-loopwarden-session"]
    assert third.headers["x-loopwarden-step"] == "3"


def test_two_runs_of_one_task_side_by_side_count_their_steps_apart(wire_format, proxy, fake):
    fake.script(calls("a", 1), calls("b", 1), calls("a", 2), calls("b", 2), calls("a", 3), calls("b", 3))
    a, b = Run(wire_format, proxy), Run(wire_format, proxy)

    steps = [(a.step().headers["x-loopwarden-step"], b.step().headers["x-loopwarden-step"]) for _ in range(3)]

    assert steps == [("1", "1"), ("2", "2"), ("3", "3")]


def test_the_same_task_run_again_is_not_served_the_previous_runs_ending(wire_format, capped, fake):
    fake.script(calls("a", 1), calls("a", 2), calls("a", 3), turn("Run a's summary."))
    a = Run(wire_format, capped)
    for _ in range(3):
        a.step()
    ended = a.step()
    assert ended.headers["x-loopwarden-terminated"] == "budget_steps"
    fake.script(calls("b", 1), calls("b", 2))
    b = Run(wire_format, capped)

    first, second = b.step(), b.step()

    assert second.headers.get("x-loopwarden-terminated") is None
    assert second.calls[0].id == "call_b2"  # the model's reply, not a's ending
    assert (first.headers["x-loopwarden-step"], second.headers["x-loopwarden-step"]) == ("1", "2")
    assert fake.pending == 0


def test_a_run_ended_side_by_side_with_another_leaves_the_other_running(wire_format, capped, fake):
    fake.script(calls("a", 1), calls("b", 1), calls("a", 2), calls("a", 3))
    a, b = Run(wire_format, capped), Run(wire_format, capped)
    a.step(), b.step(), a.step(), a.step()
    fake.script(turn("Run a's summary."), calls("b", 2))

    assert a.step().headers["x-loopwarden-terminated"] == "budget_steps"
    continued = b.step()

    assert continued.headers.get("x-loopwarden-terminated") is None
    assert continued.headers["x-loopwarden-step"] == "2"


def test_a_history_the_session_never_delivered_starts_a_run_of_its_own(wire_format, proxy, fake):
    fake.script(calls("a", 1), turn("fine"))
    Run(wire_format, proxy).step()
    made_up = Run(wire_format, proxy)
    made_up.history += wire_format.exchanged("I already searched.", "Go on.")

    answer = wire_format.ask(proxy, made_up.history)

    assert answer.headers["x-loopwarden-step"] == "1"


def test_a_streamed_first_reply_names_the_run_too(wire_format, proxy, fake):
    fake.script(calls("a", 1), calls("a", 2))
    run = Run(wire_format, proxy)

    opened = run.step(stream=True)
    second = run.step()

    assert [call.id for call in opened.calls] == ["call_a1"]
    assert second.headers["x-loopwarden-step"] == "2"


def test_runs_ending_on_their_first_request_each_get_their_own_ending(wire_format, proxy, fake):
    fake.script(Turn(), Turn(), Turn(), turn("Run a's summary."))
    fake.script(Turn(), Turn(), Turn(), turn("Run b's summary."))

    endings = [Run(wire_format, proxy).step() for _ in range(2)]

    assert [answer.headers["x-loopwarden-terminated"] for answer in endings] == ["empty_response"] * 2
    assert [summary_of(answer.text) for answer in endings] == ["Run a's summary.", "Run b's summary."]

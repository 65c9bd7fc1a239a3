"""The guard families end to end in every wire format, with the format's SDK against a scripted
model: the empty reply nudge, reasoning-only strikes, the loop guard, the step budget and the
completion judge decide the same way whatever the agent speaks."""

from __future__ import annotations

import itertools

import pytest

from tests.support.assertions import summary_of
from tests.support.fake_upstream import judge_prompt, judged
from tests.support.formats import Tool
from tests.support.turns import Call, Turn, calling, turn

STREAMED = pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
SEARCH = Tool(
    "search",
    {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"], "additionalProperties": False},
)
FETCH = Tool("fetch", {"type": "object", "properties": {"url": {"type": "string"}}})


def fresh_results():
    counter = itertools.count()
    return lambda call: f"result #{next(counter)} for {call.raw}"


@STREAMED
def test_an_empty_reply_is_nudged_and_the_agent_sees_only_the_good_reply(wire_format, proxy, fake, stream):
    fake.script(Turn(), turn("Lyon has 522,250 inhabitants."))

    answer = wire_format.ask(proxy, stream=stream)

    assert answer.text == "Lyon has 522,250 inhabitants."
    assert answer.headers["x-loopwarden-interventions"] == "empty_nudge"
    if not stream:  # a stream's step header was seen at "1" now and then (reported; not asserted before)
        assert answer.headers["x-loopwarden-step"] == "2"
    assert len(fake.requests) == 2
    nudged = wire_format.sent(1)
    assert nudged.history[:-1] == wire_format.task()
    role, words = nudged.said(-1)
    assert role == "user"
    assert "empty" in words


@STREAMED
def test_reasoning_only_forever_ends_gracefully_after_three_strikes(wire_format, proxy, fake, stream):
    fake.script(
        *[Turn(reasoning=f"Thinking, round {n}.") for n in range(3)],
        turn("Found: nothing yet. Missing: the figure. Next: search INSEE."),
    )

    answer = wire_format.ask(proxy, stream=stream)

    assert answer.headers["x-loopwarden-terminated"] == "reasoning_only"
    assert answer.headers["x-loopwarden-interventions"] == "reasoning_nudge,reasoning_nudge"
    assert answer.stop == wire_format.text_stop
    assert summary_of(answer.text) == "Found: nothing yet. Missing: the figure. Next: search INSEE."
    assert answer.id.startswith(wire_format.own_id)
    assert len(fake.requests) == 4


def test_the_same_call_forever_ends_gracefully_within_block_at(wire_format, proxy, fake):
    fake.script(
        # turns 1-2 deliver one call each, turns 3-4 are warned and the model insists, turn 5 would be the 5th
        *[calling("search", {"q": "lyon"}, f"c{n}") for n in range(7)],
        turn("Lyon: ~520k. Missing: a source."),
    )

    turns, last, _ = wire_format.run_agent(proxy, fresh_results(), tools=[SEARCH, FETCH], session="loop-test")

    assert last.headers["x-loopwarden-terminated"] == "loop"
    assert turns <= 5
    assert summary_of(last.text) == "Lyon: ~520k. Missing: a source."


def test_a_step_budget_ends_the_session_with_a_summary(wire_format, make_proxy, fake, write_policies):
    proxy = make_proxy(upstream=fake.url, policies_dir=str(write_policies(default="max_steps: 2\n")))
    fake.script(calling("search", {"q": "lyon 0"}, "c0"), turn("Found: one page. Missing: the figure. Next: INSEE."))

    turns, last, _ = wire_format.run_agent(proxy, fresh_results(), tools=[SEARCH, FETCH], session="budget")

    assert last.headers["x-loopwarden-terminated"] == "budget_steps"
    assert turns == 2  # one agent call, then the call that would use the last step is the ending
    assert summary_of(last.text) == "Found: one page. Missing: the figure. Next: INSEE."
    assert last.id.startswith(wire_format.own_id)
    assert wire_format.sent(-1).tool_choice == wire_format.none_choice


def test_quitting_early_after_tools_is_judged_and_sent_back_to_work(wire_format, proxy, fake):
    fake.judge = lambda request: judged(request, False, "the rank was not given")
    full = "Lyon has 522,250 inhabitants (INSEE 2021), the third city of France after Paris and Marseille. " * 3
    fake.script(turn("Done."), turn(full))
    history = wire_format.called(wire_format.task(), Call("search", {"q": "lyon"}, "c1"), "522,250; rank 3")

    answer = wire_format.ask(proxy, history, tools=[SEARCH])

    assert answer.text == full
    assert answer.headers["x-loopwarden-interventions"] == "judge_continue"
    assert len(fake.judge_requests) == 1  # the long answer is not judged again
    assert judge_prompt(fake.judge_requests[0].json()).startswith("You are a strict completion judge")
    continued = wire_format.sent(1)
    assert continued.said(-2) == ("assistant", "Done.")
    assert "the rank was not given" in continued.said(-1)[1]


def test_schema_errors_go_back_to_the_model_path_by_path(wire_format, proxy, fake):
    fake.script(
        calling("search", {"query": "lyon"}, "c1"), calling("search", {"q": "lyon"}, "c2"), turn("Lyon: 522,250.")
    )
    ran: list[Call] = []

    wire_format.run_agent(proxy, lambda call: ran.append(call) or "522,250", tools=[SEARCH, FETCH], session="schema")

    assert [call.arguments for call in ran] == [{"q": "lyon"}]
    retry = wire_format.sent(1)
    assert retry.calls(-2) == [Call("search", {"query": "lyon"}, "c1")]
    [(call_id, feedback)] = retry.results
    assert call_id == "c1"
    assert "$.q: 'q' is a required property" in feedback
    assert "Additional properties are not allowed ('query' was unexpected)" in feedback


@STREAMED
def test_an_ending_after_only_relayed_reasoning_reached_the_client_starts_with_its_notice(
    wire_format, make_proxy, fake, write_policies, stream
):
    policies = write_policies(default="streaming: {reasoning: relay}\n")
    proxy = make_proxy(upstream=fake.url, policies_dir=str(policies))
    fake.script(
        *[Turn(reasoning=f"Thinking, round {n}.") for n in range(3)],
        turn("Found: nothing yet. Missing: the figure. Next: search INSEE."),
    )

    answer = wire_format.ask(proxy, stream=stream)

    assert answer.text.startswith("LoopWarden stopped this run (reasoning_only): ")  # no blank line first

"""Runs within a session: which request starts a new run, and what starts over with it."""

from __future__ import annotations

import pytest

from proxy.exchange import Conversation, Message, Tool, ToolCall
from proxy.session.base import Claim, SessionDelta, SessionState
from proxy.session.runs import instruction_mark, run_reset, starts_new_run, without_run
from tests.unit.session.test_store_contract import key, store  # noqa: F401 (fixtures: every store)

TOOLS = (Tool("get_weather"),)
ASK = Message("user", "What is the weather in Paris?")
CALL = Message("assistant", tool_calls=(ToolCall("c1", "get_weather", '{"city": "Paris"}'),))
RESULT = Message("tool", "21 °C", call_id="c1")
ENDED = (Message("system", "You help."), ASK, CALL, RESULT)


def talk(*messages: Message) -> Conversation:
    return Conversation(messages, tools=TOOLS)


def ended_on(conversation: Conversation, **values: str) -> SessionState:
    """A session whose run ended answering ``conversation``."""
    return SessionState(
        {"steps": "6", "termination": "loop", "ending": "{}", "run_said": instruction_mark(conversation), **values}
    )


@pytest.mark.parametrize(
    ("added", "new_run"),
    [
        pytest.param((), False, id="a-resend-of-the-ended-conversation-gets-the-ending"),
        pytest.param((CALL, RESULT), False, id="more-tool-results-get-the-ending"),
        pytest.param((Message("user", "Now try Lyon."),), True, id="a-new-instruction-starts-a-run"),
        pytest.param(
            (Message("user", "<environment_context>\n  <cwd>/tmp</cwd>\n</environment_context>"),),
            False,
            id="codexs-environment-context-is-no-instruction",
        ),
        pytest.param(
            (Message("user", "<system-reminder>Todo list is empty.</system-reminder>"),),
            False,
            id="a-claude-code-reminder-alone-is-no-instruction",
        ),
        pytest.param(
            (Message("user", "<system-reminder>Todo list is empty.</system-reminder>\nNow try Lyon."),),
            True,
            id="a-question-beside-a-reminder-is-an-instruction",
        ),
        pytest.param(
            (Message("user", "Now try Lyon."), CALL), False, id="an-instruction-already-answered-is-no-new-one"
        ),
    ],
)
def test_after_an_ending_only_a_new_human_instruction_starts_a_new_run(added, new_run):
    state = ended_on(talk(*ENDED))

    assert starts_new_run(state, talk(*ENDED, *added), derived=False) is new_run


def test_the_ended_instruction_sent_again_is_no_new_one():
    asked = talk(Message("system", "You help."), ASK)

    assert starts_new_run(ended_on(asked), asked, derived=False) is False


def test_a_continued_chain_bringing_a_question_starts_a_new_run():
    chained = Conversation((Message("user", "Now try Lyon."),), tools=TOOLS, held_upstream=True)

    assert starts_new_run(ended_on(talk(*ENDED)), chained, derived=False) is True


@pytest.mark.parametrize(
    ("state", "conversation", "new_run"),
    [
        pytest.param(
            {"steps": "2"}, talk(Message("system", "You help."), ASK), True, id="a-fresh-opening-is-a-new-run"
        ),
        pytest.param({}, talk(Message("system", "You help."), ASK), False, id="the-first-request-is-the-first-run"),
        pytest.param({"steps": "2"}, talk(*ENDED), False, id="an-extension-is-the-same-run"),
        pytest.param(
            {"steps": "2"}, Conversation((ASK,)), False, id="a-side-call-offering-no-tools-leaves-the-run-alone"
        ),
    ],
)
def test_a_fresh_conversation_under_a_known_session_is_a_new_run(state, conversation, new_run):
    assert starts_new_run(SessionState(state), conversation, derived=False) is new_run


def test_a_derived_session_takes_a_new_instruction_after_its_ending_as_a_new_run():
    assert starts_new_run(ended_on(talk(*ENDED)), talk(*ENDED, Message("user", "Lyon?")), derived=True) is True


def test_a_fresh_conversation_names_a_derived_session_of_its_own():
    assert (
        starts_new_run(SessionState({"steps": "2"}), talk(Message("system", "You help."), ASK), derived=True) is False
    )


STATE = SessionState(
    {
        "steps": "6",
        "tokens_in": "900",
        "cost_micros": "1200",
        "active_ms": "5000",
        "strike:empty_response": "2",
        "fp:abc": "5",
        "fp_seq": "abc,abc",
        "termination": "loop",
        "ending": "{}",
        "ending_wire": "chat",
        "run_said": "1:x",
        "run": "2",
    }
)


def test_a_new_run_clears_the_runs_evidence_and_ending_and_keeps_the_budgets():
    after = run_reset(STATE, 1_000).applied_to(STATE)

    assert without_run(after).values == {
        "steps": "6",
        "tokens_in": "900",
        "cost_micros": "1200",
        "active_ms": "5000",
        "run": "3",
        "run_started_ms": "1000",
    }
    assert (after.termination, after.ending, after.counter("fp:abc"), after.items("fp_seq")) == (None, None, 0, [])


def test_a_new_run_is_a_timeline_entry():
    (event,) = run_reset(STATE, 1_000, after="loop").events

    assert (event.kind, event.at_ms, dict(event.fields)) == ("run_started", 1_000, {"run": 3, "after": "loop"})


async def test_a_new_runs_commit_frees_the_ending_for_the_new_run_on_every_store(store, key):  # noqa: F811
    ended = SessionDelta()
    for name, value in STATE.values.items():
        ended.assign(name, value)
    await store.commit(key, ended, 60)
    loaded = await store.load(key)

    after = await store.commit(key, run_reset(loaded, 1_000), 60)
    claimed = await store.claim_ending(key, Claim(2_000, 60_000), 60)

    assert claimed.claimed
    assert (after.steps, after.counter("tokens_in"), after.termination, after.strikes("empty_response")) == (
        6,
        900,
        None,
        0,
    )


def test_the_ended_task_asked_afresh_after_a_longer_run_is_a_new_run():
    opening = talk(Message("system", "You help."), ASK)

    assert starts_new_run(ended_on(talk(*ENDED)), opening, derived=False) is True


async def test_a_counter_the_new_run_cleared_counts_again_from_zero_on_every_store(store, key):  # noqa: F811
    ended = SessionDelta()
    ended.assign("strike:empty_response", 2)
    ended.assign("termination", "empty_response")
    await store.commit(key, ended, 60)
    await store.commit(key, run_reset(await store.load(key), 1_000), 60)
    missed = SessionDelta()
    missed.incr("strike:empty_response")

    after = await store.commit(key, missed, 60)

    assert after.strikes("empty_response") == 1
    assert "termination" not in after.values

"""The person's words, told apart from what clients wrap around them: what runs and judges read."""

from __future__ import annotations

import pytest

from proxy.exchange import Conversation, Message, ToolCall
from proxy.session.base import SessionState
from proxy.session.instructions import human_instructions, instruction_text, task_of

CODEX_CONTEXT = Message(
    "user", "<environment_context>\n  <cwd>/work</cwd>\n  <shell>bash</shell>\n</environment_context>"
)
AGENTS_MD = Message("user", "# AGENTS.md instructions for /work\n\nRun the tests before you commit.")
ASK = Message("user", "How many people live in Lyon?")
CALL = Message("assistant", tool_calls=(ToolCall("c1", "search", '{"q": "Lyon"}'),))
RESULT = Message("tool", "522,250", call_id="c1")


def talk(*messages: Message) -> Conversation:
    return Conversation(messages)


@pytest.mark.parametrize(
    "wrapper",
    [CODEX_CONTEXT, AGENTS_MD, Message("user", "<system-reminder>\nToday is Wednesday.\n</system-reminder>")],
    ids=["codex-environment", "agents-md", "claude-code-reminder"],
)
def test_a_clients_context_wrapper_is_no_instruction(wrapper):
    assert instruction_text(wrapper) == ""


def test_a_claude_code_turn_keeps_the_persons_words_around_its_reminders():
    turn = Message("user", "<system-reminder>\nContext.\n</system-reminder>\nWhat does echo 42 print?")

    assert instruction_text(turn) == "What does echo 42 print?"


def test_the_instructions_skip_wrappers_and_tool_results_in_order():
    conversation = talk(CODEX_CONTEXT, AGENTS_MD, ASK, CALL, RESULT, Message("user", "And Paris?"))

    assert human_instructions(conversation) == ["How many people live in Lyon?", "And Paris?"]


def test_the_task_behind_codexs_environment_context_is_the_real_question():
    assert task_of(talk(CODEX_CONTEXT, AGENTS_MD, ASK, CALL, RESULT)) == "How many people live in Lyon?"


def test_the_task_is_the_latest_instruction():
    assert task_of(talk(ASK, CALL, RESULT, Message("user", "Now do Paris instead."))) == "Now do Paris instead."


@pytest.mark.parametrize("latest", ["continue", "Go on.", "yes", "Please keep going!", "try again"])
def test_a_latest_instruction_that_only_says_to_go_on_keeps_the_first_as_the_task(latest):
    task = task_of(talk(ASK, CALL, RESULT, Message("user", latest)))

    assert task == f"How many people live in Lyon?\n\n{latest}"


def test_a_request_carrying_no_instruction_falls_back_to_the_runs_task():
    chained = Conversation((RESULT,), held_upstream=True)

    assert task_of(chained, SessionState({"task": "How many people live in Lyon?"})) == "How many people live in Lyon?"
    assert task_of(chained) == ""

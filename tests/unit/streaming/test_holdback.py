"""What each guard holds back mid-stream, and the default for a guard that does not say."""

from __future__ import annotations

import dataclasses

from proxy.exchange import Channel, Reply
from proxy.guards import (
    EmptyReplyGuard,
    NoProgressGuard,
    OutputContractGuard,
    PrematureStopGuard,
    ReasoningOnlyGuard,
    ToolArgsGuard,
    ToolLoopGuard,
)
from proxy.guards.base import GuardContext, ResponseGuard
from proxy.judge.client import Judge, JudgeTarget
from proxy.policy.models import Policy
from proxy.session.base import SessionState
from proxy.streaming.holdback import held_channels
from proxy.verdict import PASS, Verdict
from proxy.wire.chat.format import CHAT_COMPLETIONS
from proxy.wire.chat.parse import parse_conversation
from proxy.wire.chat.stream import ChatAssembler

TASK = [{"role": "user", "content": "Find the population of Lyon."}]
AFTER_TOOLS = [
    *TASK,
    {
        "role": "assistant",
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "s", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": "c", "content": "522,250"},
]


def context(messages=TASK, policy: Policy | None = None, judge: bool = True, **conversation) -> GuardContext:
    target = JudgeTarget("http://judge/v1/chat/completions", [], "m", CHAT_COMPLETIONS.judge) if judge else None
    return GuardContext(
        policy or Policy(),
        SessionState(),
        dataclasses.replace(parse_conversation({"messages": messages}), **conversation),
        judge_target=target,
    )


def partial(content: str = "", reasoning: str = "", call: bool = False) -> ChatAssembler:
    assembler = ChatAssembler()
    delta: dict = {}
    if content:
        delta["content"] = content
    if reasoning:
        delta["reasoning_content"] = reasoning
    if call:
        delta["tool_calls"] = [{"index": 0, "id": "x", "function": {"name": "s", "arguments": "{}"}}]
    assembler.add({"choices": [{"index": 0, "delta": delta}]})
    return assembler


class SilentGuard(ResponseGuard):
    """A guard written without streaming in mind."""

    name = "silent"

    def check_reply(self, reply: Reply, context: GuardContext) -> Verdict:
        return PASS


def test_a_guard_without_holds_holds_everything_until_the_end():
    assert held_channels([SilentGuard()], partial("Lots of text already"), context()) == Channel.ALL


def test_the_guard_protocol_declares_holds_and_by_default_holds_every_channel():
    assert ResponseGuard.holds(SilentGuard(), partial("Some text"), context()) == Channel.ALL


def test_empty_reply_holds_whitespace_until_real_text():
    guard = EmptyReplyGuard()

    assert guard.holds(partial("  \n"), context()) == Channel.TEXT
    assert guard.holds(partial("Lyon"), context()) == Channel.NONE


def test_reasoning_waits_until_text_or_a_tool_call_follows():
    guard = ReasoningOnlyGuard()

    assert guard.holds(partial(reasoning="hmm"), context()) == Channel.REASONING
    assert guard.holds(partial("answer", reasoning="hmm"), context()) == Channel.NONE
    assert guard.holds(partial(reasoning="hmm", call=True), context()) == Channel.NONE


def test_relayed_reasoning_is_never_held():
    policy = Policy.model_validate({"streaming": {"reasoning": "relay"}})

    assert ReasoningOnlyGuard().holds(partial(reasoning="hmm"), context(policy=policy)) == Channel.NONE


def test_tool_calls_wait_for_argument_validation_and_loop_checks():
    assert ToolArgsGuard().holds(partial(call=True), context()) == Channel.TOOL_CALLS
    assert ToolLoopGuard().holds(partial(call=True), context()) == Channel.TOOL_CALLS


def test_disabled_tool_guards_hold_nothing():
    policy = Policy.model_validate({"tool_args": {"enabled": False}, "loop": {"enabled": False}})

    assert ToolArgsGuard().holds(partial(call=True), context(policy=policy)) == Channel.NONE
    assert ToolLoopGuard().holds(partial(call=True), context(policy=policy)) == Channel.NONE


def test_a_structured_answer_is_held_whole():
    schema = {"type": "object"}

    assert OutputContractGuard().holds(partial("{"), context(output_schema=schema)) == Channel.TEXT
    assert OutputContractGuard().holds(partial("{"), context()) == Channel.NONE


def test_a_json_mode_answer_without_a_schema_is_held_whole_too():
    assert OutputContractGuard().holds(partial("{"), context(json_answer=True)) == Channel.TEXT


def test_judge_holds_a_short_answer_after_tool_use():
    guard = PrematureStopGuard(Judge(None))  # type: ignore[arg-type]

    assert guard.holds(partial("Done."), context(AFTER_TOOLS)) & Channel.TEXT


def test_judge_releases_text_past_the_skip_threshold_whose_sentences_hold_an_answer():
    guard = PrematureStopGuard(Judge(None))  # type: ignore[arg-type]

    assert not guard.holds(partial("Lyon has 522,250 inhabitants. " * 9), context(AFTER_TOOLS)) & Channel.TEXT


def test_judge_holds_long_text_that_so_far_only_hands_the_turn_back():
    guard = PrematureStopGuard(Judge(None))  # type: ignore[arg-type]
    asking = "I found it. " + "Would you like me to look up the other districts as well, or the suburbs? " * 4

    assert guard.holds(partial(asking), context(AFTER_TOOLS)) & Channel.TEXT


def test_judge_releases_long_text_that_hands_back_with_the_check_off():
    guard = PrematureStopGuard(Judge(None))  # type: ignore[arg-type]
    asking = "I found it. " + "Would you like me to look up the other districts as well, or the suburbs? " * 4
    off = Policy.model_validate({"judge": {"hand_back_check": False}})

    assert not guard.holds(partial(asking), context(AFTER_TOOLS, policy=off)) & Channel.TEXT


def test_judge_holds_nothing_before_any_tool_use():
    guard = PrematureStopGuard(Judge(None))  # type: ignore[arg-type]

    assert guard.holds(partial("Done."), context(TASK)) == Channel.NONE


def test_no_progress_holds_text_only_while_it_could_repeat_the_last_reply():
    said = {"role": "assistant", "content": "I am   still looking."}
    history = [*TASK, said, {"role": "user", "content": "go on"}, said, {"role": "user", "content": "go on"}]
    guard = NoProgressGuard()

    assert guard.holds(partial("I am still"), context(history)) == Channel.TEXT
    assert guard.holds(partial("I found it"), context(history)) == Channel.NONE


def test_held_channels_is_the_union_of_every_guard():
    guards = [EmptyReplyGuard(), ReasoningOnlyGuard(), ToolArgsGuard()]

    assert held_channels(guards, ChatAssembler(), context()) == Channel.ALL
    assert held_channels(guards, partial("Hi"), context()) == Channel.TOOL_CALLS

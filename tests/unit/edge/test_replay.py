"""Replay of hand-written recordings: grouping, the scripted upstream's assumptions, the judge modes."""

from __future__ import annotations

import json

import pytest

from proxy.edge.replay import format_result, read_records, replay_session, sessions_of
from proxy.policy.models import Policy

TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
TASK = {"role": "user", "content": "Find the population of Lyon and report it."}
CALL = {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}


def step(turn, attempt, reply, *, request=None, verdict="pass", session="s", request_id=None):
    record = {
        "v": 1,
        "ts": 1_800_000_000.0 + turn,
        "tenant": "t",
        "policy": "recorded",
        "mode": "enforce",
        "session": session,
        "request_id": request_id or f"{session}-{turn}",
        "turn": turn,
        "attempt": attempt,
        "verdict": verdict,
        "reason": "",
        "shadow": [],
        "reply": {"content": None, "tool_calls": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5}, **reply},
    }
    if request is not None:
        record["request"] = request
    return record


def tool_turn(turn):
    return step(
        turn,
        1,
        {"tool_calls": [{"id": "c1", "name": "search", "arguments": "{}"}]},
        request={"model": "m", "messages": [TASK], "tools": TOOLS},
    )


def answer_turn(turn, text="About 520,000.", verdict="pass"):
    history = [TASK, {"role": "assistant", "content": None, "tool_calls": [CALL]}]
    history.append({"role": "tool", "tool_call_id": "c1", "content": "Lyon: 522,250 inhabitants"})
    return step(
        turn, 1, {"content": text}, request={"model": "m", "messages": history, "tools": TOOLS}, verdict=verdict
    )


def test_records_group_by_session_then_by_request():
    records = [tool_turn(1), step(1, 2, {"content": "x"}), {**tool_turn(1), "session": "other"}]

    sessions = sessions_of(records)

    assert sorted(sessions) == ["other", "s"]
    assert [len(r.steps) for r in sessions["s"]] == [2]


def test_a_request_whose_first_attempt_is_missing_is_skipped():
    assert sessions_of([step(1, 2, {"content": "x"})]) == {"s": []}


def test_a_line_that_is_not_a_record_is_named():
    with pytest.raises(ValueError, match="line 2"):
        read_records([json.dumps(tool_turn(1)), "{}"])


def test_a_record_in_a_wire_format_this_build_does_not_speak_is_named():
    with pytest.raises(ValueError, match="line 1: recorded in a wire format this build does not speak: carrier-pigeon"):
        read_records([json.dumps({**tool_turn(1), "wire": "carrier-pigeon"})])


def test_records_that_name_no_wire_format_are_chat_completions():
    records = read_records([json.dumps(tool_turn(1)), json.dumps({**tool_turn(1), "wire": "chat.completions"})])

    assert len(records) == 2


@pytest.mark.parametrize(("judge", "expected"), [("done", "pass"), ("not_done", "judge_continue")])
async def test_the_judge_mode_decides_a_short_answer(judge, expected):
    requests = sessions_of([tool_turn(1), answer_turn(2)])["s"]

    result = await replay_session("s", requests, Policy(name="p"), judge=judge)

    assert result.steps[1].replayed == expected


async def test_recorded_judge_verdicts_are_replayed():
    requests = sessions_of([tool_turn(1), answer_turn(2, verdict="judge_continue")])["s"]

    result = await replay_session("s", requests, Policy(name="p"))

    assert result.steps[1].replayed == "judge_continue"


async def test_judge_verdicts_recorded_in_shadow_mode_are_replayed():
    shadowed = {**answer_turn(2), "mode": "shadow", "shadow": ["judge_continue"]}
    requests = sessions_of([tool_turn(1), shadowed])["s"]

    result = await replay_session("s", requests, Policy(name="p"))

    assert result.steps[1].replayed == "judge_continue"


async def test_a_reply_the_recording_lacks_is_the_last_one_again_and_marked():
    requests = sessions_of([tool_turn(1), answer_turn(2)])["s"]

    result = await replay_session("s", requests, Policy(name="p"), judge="not_done")

    assert [s.assumed for s in result.steps] == [False, False, True, True]  # two judge continuations
    assert "reply assumed" in format_result(result)


async def test_an_empty_recorded_reply_ends_a_strict_policy_sooner():
    empty = step(1, 1, {"content": ""}, request={"model": "m", "messages": [TASK]})
    requests = sessions_of([empty])["s"]

    result = await replay_session("s", requests, Policy(name="strict", empty_response_max_strikes=1))

    assert (result.ending, result.ended_at) == ("empty_response", 1)

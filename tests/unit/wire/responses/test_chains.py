"""Responses chains continued from an ending: the ended request's input is carried, so the
upstream never finds a function call without its output."""

from __future__ import annotations

import json

from proxy.wire.responses.chains import ResponsesChains
from proxy.wire.responses.format import RESPONSES

CHAINS = ResponsesChains()
OUTPUT = {"type": "function_call_output", "call_id": "c5", "output": "21 °C"}
ENDED = {"model": "m", "previous_response_id": "resp_up_5", "input": [OUTPUT]}


def ending() -> dict:
    return RESPONSES.codec.ending("LoopWarden stopped this run (loop).", model="m")


def recorded_ending() -> tuple[str, str | None, dict]:
    [(own, target, body)] = CHAINS.links(ENDED, [], ending())
    assert body is not None
    return own, target, json.loads(body)


def test_an_endings_record_keeps_the_ended_requests_input():
    _, target, record = recorded_ending()

    assert (target, record["_lw_carried"]) == ("resp_up_5", [OUTPUT])


def test_a_continuation_of_an_ending_carries_the_ended_input_then_the_endings_words_then_its_own():
    own, target, record = recorded_ending()
    asked = {"type": "message", "role": "user", "content": "Now try Lyon."}

    sent = CHAINS.rechained({"model": "m", "previous_response_id": own, "input": [asked]}, target, {own: record})

    assert sent["previous_response_id"] == "resp_up_5"
    assert sent["input"][0] == OUTPUT
    assert (sent["input"][1]["role"], "id" in sent["input"][1]) == ("assistant", False)
    assert sent["input"][-1] == asked
    assert len(sent["input"]) == 3


def test_a_string_input_continuing_an_ending_is_carried_as_a_user_message():
    own, target, record = recorded_ending()

    sent = CHAINS.rechained({"model": "m", "previous_response_id": own, "input": "Go on."}, target, {own: record})

    assert sent["input"][-1] == {"type": "message", "role": "user", "content": "Go on."}


def test_an_endings_message_the_continuation_refers_to_is_not_carried_twice():
    own, target, record = recorded_ending()
    reference = {"type": "item_reference", "id": record["output"][0]["id"]}

    sent = CHAINS.rechained(
        {"model": "m", "previous_response_id": own, "input": [reference, {"role": "user", "content": "Go on."}]},
        target,
        {own: record},
    )

    assert [item.get("role") for item in sent["input"]] == [None, "assistant", "user"]
    assert sent["input"][1]["content"] == record["output"][0]["content"]

"""The Responses API's server-side chains: which ids a request records (with the response each
continues from), how a request is chained anew, references to the proxy's own items, and
chains continued from an ending (the ended request's input is carried, so the upstream never
finds a function call without its output)."""

from __future__ import annotations

import json

import pytest

from proxy.wire.responses.chains import ResponsesChains
from proxy.wire.responses.format import RESPONSES
from proxy.wire.responses.parse import parse_reply
from tests.support.fake_responses import function_call, message, response


def _reply(body: dict):
    reply = parse_reply(json.dumps(body).encode())
    assert reply is not None
    return reply


REJECTED = _reply(response(message("Let me look."), function_call("f", "{}", "c1")))
GOOD = _reply(response(message("Found it.")))
ENDING = RESPONSES.codec.ending("Stopped.", model="m")
ID = {"rejected": REJECTED.source["id"], "good": GOOD.source["id"], "ending": ENDING["id"]}

CASES = [
    # request, what the client got, expected (id, continue from)
    ({"stream": True}, GOOD, [("rejected", "good"), ("good", "good")]),
    ({}, GOOD, [("good", "good")]),
    (
        {"stream": True, "previous_response_id": "resp_prev"},
        ENDING,
        [("rejected", "resp_prev"), ("good", "resp_prev"), ("ending", "resp_prev")],
    ),
    ({}, ENDING, [("ending", None)]),
    ({"store": False}, ENDING, [("ending", None)]),
    ({"store": False, "stream": True}, GOOD, []),
    ({}, None, []),
]


@pytest.mark.parametrize(("payload", "answer", "expected"), CASES)
def test_a_request_records_the_ids_its_client_may_hold_with_the_response_to_continue_from(payload, answer, expected):
    links = RESPONSES.chains.links(payload, [REJECTED, GOOD], answer)

    named = {value: key for key, value in ID.items()}
    assert [(named[found], named.get(target, target)) for found, target, _ in links] == expected
    kept = [json.loads(body) for found, _, body in links if body is not None]
    carried = [record.pop("_lw_carried") for record in kept]  # the ended request's input, for a continuation
    assert kept == ([ENDING] if answer is ENDING else [])  # the proxy's own ending is kept whole, for its items
    assert carried == ([[]] if answer is ENDING else [])


def test_the_request_continues_another_response_when_told():
    assert RESPONSES.chains.rechained({"previous_response_id": "resp_a", "input": []}, "resp_b", {}) == {
        "previous_response_id": "resp_b",
        "input": [],
    }
    assert RESPONSES.chains.continues({"previous_response_id": "resp_a"}) == "resp_a"
    assert RESPONSES.chains.continues({"input": "x"}) is None


def test_a_reference_to_the_proxys_own_item_is_resolved_from_its_record_and_never_sent_upstream():
    message_id = ENDING["output"][0]["id"]
    payload = {
        "previous_response_id": ENDING["id"],
        "input": [
            {"type": "item_reference", "id": "msg_upstream"},
            {"type": "item_reference", "id": message_id},
            {"type": "item_reference", "id": "msg_lwunknown"},
            {"role": "user", "content": "Go on."},
        ],
    }

    assert RESPONSES.chains.references(payload) == [ENDING["id"], "resp_lwunknown"]
    resolved = RESPONSES.chains.rechained(payload, None, {ENDING["id"]: ENDING})

    assert "previous_response_id" not in resolved  # the proxy's own: nothing upstream to continue from
    assert resolved["input"] == [payload["input"][0], ENDING["output"][0], payload["input"][3]]


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

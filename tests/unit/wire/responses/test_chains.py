"""The Responses API's server-side chains: which ids a request records (with the response each
continues from), how a request is chained anew, and references to the proxy's own items."""

from __future__ import annotations

import json

import pytest

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
    assert [json.loads(body) for found, _, body in links if body is not None] == (
        [ENDING] if answer is ENDING else []
    )  # the proxy's own ending is kept whole, for its items


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

"""Stored chains: which ids a request records, and what a continuation of each finds."""

from __future__ import annotations

import json

import pytest

from proxy.loop.continuity import resolve_chain
from proxy.session.base import SessionState, StoreUnavailable
from proxy.session.chains import Chained, chained_session, remember_responses
from proxy.session.memory import MemoryStore
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


async def test_a_continuation_finds_its_session_and_where_to_chain():
    store = MemoryStore()
    links = [("resp_a", "resp_b", None), ("resp_b", "resp_b", None), ("resp_lwx", None, '{"output": []}')]
    await remember_responses(store, "t", links, "s-1", 60)

    assert await chained_session(store, "t", "resp_a") == Chained("s-1", "resp_b")
    assert await chained_session(store, "t", "resp_b") == Chained("s-1", None)
    assert await chained_session(store, "t", "resp_lwx") == Chained("s-1", None, '{"output": []}')
    assert await chained_session(store, "other-tenant", "resp_a") is None
    assert await chained_session(store, "t", "resp_unknown") is None


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


class FailingLoads(MemoryStore):
    """A store whose every load times out (counted)."""

    def __init__(self) -> None:
        super().__init__()
        self.loads = 0

    async def load(self, key: str) -> SessionState:
        self.loads += 1
        raise StoreUnavailable("load failed: TimeoutError")


async def test_a_chain_lookup_the_store_fails_stops_there_and_names_no_session():
    store = FailingLoads()
    references = [{"type": "item_reference", "id": f"msg_lw{n:032x}_0"} for n in range(3)]
    payload = {"previous_response_id": "resp_a", "input": [*references, {"role": "user", "content": "Go on."}]}

    point = await resolve_chain(store, RESPONSES.chains, "t", payload)

    assert store.loads == 1  # not one per reference: each would be another timeout
    assert point.session is None  # not chain-resp_a: a point the store cannot read is not one nobody recorded
    assert point.store_failure == "load failed: TimeoutError"

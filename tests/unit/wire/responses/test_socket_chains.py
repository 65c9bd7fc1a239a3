"""A socket's store=false chains, carried by the proxy: a continuation of a response the socket
delivered becomes the whole conversation; a stored chain stays the upstream's."""

from __future__ import annotations

from proxy.wire.responses.socket_chains import KEPT, SocketChains, warm_up_events

ASKED = {"model": "m", "input": "How many people live in Lyon?", "store": False}
CALL = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "search", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "522,250"}


def _chains() -> SocketChains:
    chains = SocketChains()
    chains.record(ASKED, {"id": "resp_1", "output": [CALL]})
    return chains


def test_a_store_false_continuation_carries_the_input_and_output_before_its_new_items():
    carried = _chains().carried({"model": "m", "store": False, "previous_response_id": "resp_1", "input": [OUTPUT]})

    assert carried == {
        "model": "m",
        "store": False,
        "input": [{"role": "user", "content": "How many people live in Lyon?"}, CALL, OUTPUT],
    }


def test_a_continuation_of_a_response_the_socket_never_delivered_is_not_found():
    assert _chains().carried({"store": False, "previous_response_id": "resp_other", "input": []}) is None


def test_a_stored_chain_is_left_to_the_upstream():
    payload = {"previous_response_id": "resp_1", "input": [OUTPUT]}

    assert _chains().carried(payload) == payload


def test_the_proxys_own_item_ids_never_go_upstream():
    chains = SocketChains()
    ending = {"type": "message", "id": "msg_lw1_0", "status": "completed", "role": "assistant", "content": []}
    chains.record(ASKED, {"id": "resp_lw1", "output": [ending]})

    carried = chains.carried({"store": False, "previous_response_id": "resp_lw1", "input": []})

    assert carried is not None
    assert carried["input"][-1] == {"type": "message", "role": "assistant", "content": []}


def test_only_the_newest_responses_are_kept():
    chains = SocketChains()
    for number in range(KEPT + 1):
        chains.record(ASKED, {"id": f"resp_{number}", "output": []})

    assert chains.carried({"store": False, "previous_response_id": "resp_0", "input": []}) is None
    assert chains.carried({"store": False, "previous_response_id": f"resp_{KEPT}", "input": []}) is not None


def test_a_warm_up_is_an_empty_completed_response_of_the_proxys_own():
    body, events = warm_up_events({"model": "m", "input": "a"})

    assert (body["status"], body["output"], body["id"][:7]) == ("completed", [], "resp_lw")
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert events[-1] == {"type": "response.completed", "response": body, "sequence_number": len(events) - 1}


def test_a_stored_continuation_of_a_warm_up_carries_its_input_too():
    chains = SocketChains()
    body, _ = warm_up_events({"model": "m"})
    chains.record(ASKED, body)

    carried = chains.carried({"previous_response_id": body["id"], "input": [OUTPUT]})

    assert carried == {"input": [{"role": "user", "content": "How many people live in Lyon?"}, OUTPUT]}

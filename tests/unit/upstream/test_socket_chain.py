"""A whole call becomes a continuation of the upstream socket's most recent response only where
its input extends that response's conversation (the upstream's own, or the one the client saw)."""

from __future__ import annotations

import json

import pytest

from proxy.upstream.socket_chain import SocketChain, whole_input

ASK = {"role": "user", "content": "Lyon?"}
CALL = {"type": "function_call", "call_id": "c1", "name": "search", "arguments": "{}"}
RESULT = {"type": "function_call_output", "call_id": "c1", "output": "522,250"}
NOTE = {"type": "message", "role": "user", "content": "Continue."}
ANSWERED = {"id": "resp_1", "status": "completed", "output": [CALL]}


def sent(chain: SocketChain, **payload) -> dict:
    frame, _, _ = chain.event({"model": "m", **payload})
    return json.loads(frame)


def after_first_call() -> SocketChain:
    chain = SocketChain()
    _, whole, _ = chain.event({"model": "m", "input": [ASK]})
    chain.answered(whole, ANSWERED)
    return chain


def test_a_first_call_goes_whole_as_a_response_create_without_stream():
    event = sent(SocketChain(), input="Lyon?", stream=True)

    assert event == {"type": "response.create", "model": "m", "input": "Lyon?"}


def test_a_call_extending_the_most_recent_conversation_sends_only_its_new_items():
    event = sent(after_first_call(), input=[ASK, CALL, RESULT])

    assert (event["previous_response_id"], event["input"]) == ("resp_1", [RESULT])


@pytest.mark.parametrize(
    "items",
    [
        [ASK, RESULT],  # not that conversation
        [ASK, CALL],  # that conversation and nothing new: sent whole
        [{"role": "user", "content": "Paris?"}, CALL, RESULT],
    ],
    ids=["other-items", "nothing-new", "other-opening"],
)
def test_any_other_call_goes_whole(items):
    event = sent(after_first_call(), input=items)

    assert "previous_response_id" not in event
    assert event["input"] == items


def test_the_clients_view_of_the_response_is_a_conversation_to_go_on_from_too():
    chain = SocketChain()
    _, whole, _ = chain.event({"model": "m", "input": [ASK, NOTE]})  # a nudge the client never saw
    chain.answered(whole, {**ANSWERED, "output": [CALL]})
    chain.seen("resp_1", [ASK, CALL])

    event = sent(chain, input=[ASK, CALL, RESULT])

    assert (event["previous_response_id"], event["input"]) == ("resp_1", [RESULT])


def test_a_view_of_another_response_is_ignored():
    chain = after_first_call()
    chain.seen("resp_lw0", [{"role": "user", "content": "other"}])

    assert "previous_response_id" not in sent(chain, input=[{"role": "user", "content": "other"}, RESULT])


def test_a_call_chained_by_its_caller_goes_as_it_is():
    event = sent(after_first_call(), input=[RESULT], previous_response_id="resp_stored")

    assert (event["previous_response_id"], event["input"]) == ("resp_stored", [RESULT])


@pytest.mark.parametrize("response", [{"id": "resp_2", "status": "failed", "output": []}, {"status": "completed"}])
def test_a_failed_response_or_one_without_id_leaves_nothing_to_go_on_from(response):
    chain = after_first_call()
    chain.answered([ASK], response)

    assert chain.last is None
    assert "previous_response_id" not in sent(chain, input=[ASK, CALL, RESULT])


def test_forget_empties_the_memory():
    chain = after_first_call()
    chain.forget()

    assert "previous_response_id" not in sent(chain, input=[ASK, CALL, RESULT])


def test_a_string_input_is_one_user_message():
    assert whole_input({"input": "Lyon?"}) == [ASK]

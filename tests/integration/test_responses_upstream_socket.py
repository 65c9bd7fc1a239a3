"""A client's Responses WebSocket goes upstream over a WebSocket of its own: the openai SDK's
``responses.connect()`` through the proxy to the scripted WebSocket upstream, which keeps
``store=false`` chains on the socket as the API does (its most recent response only)."""

from __future__ import annotations

import json
import logging

import httpx
import openai
import pytest
import websockets
from websockets.sync.client import connect

from tests.support.fake_responses import function_call, message, response, text_response
from tests.support.fake_responses_socket import FakeResponsesSocket, SocketCut
from tests.support.responses_fixtures import socket_fake, socket_server  # noqa: F401 (fixtures)

KEY = {"Authorization": "Bearer sk-p"}
TOOLS = [{"type": "function", "name": "search", "parameters": {"type": "object", "properties": {}}}]
TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")


@pytest.fixture
def fake(socket_fake: FakeResponsesSocket) -> FakeResponsesSocket:
    return socket_fake


@pytest.fixture
def proxy(make_proxy, fake):
    return make_proxy(upstream=fake.url)


@pytest.fixture
def client(proxy):
    return openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)


def turn(connection, **fields) -> list:
    """One response.create; its events up to the terminal one."""
    connection.response.create(model="m", store=False, **fields)
    events = []
    for event in connection:
        events.append(event)
        if event.type in TERMINAL:
            break
    return events


def outputs(*call_ids: str, text: str = "522,250") -> list[dict]:
    return [{"type": "function_call_output", "call_id": call_id, "output": text} for call_id in call_ids]


def _until_closed(socket) -> list[dict]:
    events = []
    try:
        while True:
            events.append(json.loads(socket.recv(timeout=30)))
    except websockets.exceptions.ConnectionClosed:
        return events


def metric(proxy, text: str) -> bool:
    return text in httpx.get(f"{proxy.metrics_url}/metrics").text


def test_a_turn_goes_upstream_as_a_response_create_on_a_socket(client, fake, proxy):
    fake.script(text_response("Lyon has 522,250 inhabitants."))

    with client.responses.connect() as connection:
        events = turn(connection, input="How many people live in Lyon?")

    assert events[-1].response.output_text == "Lyon has 522,250 inhabitants."
    assert [r.method for r in fake.requests] == ["WEBSOCKET"]
    assert fake.sockets == 1
    assert "stream" not in fake.socket_payloads()[0]  # implicit on a socket
    assert metric(proxy, 'loopwarden_upstream_websockets_total{outcome="opened"} 1.0')


def test_a_store_false_tool_loop_goes_on_from_the_upstream_sockets_own_chain(client, fake):
    fake.script(
        response(function_call("search", "{}", "c1")),
        response(function_call("search", '{"q": "INSEE"}', "c2")),
        text_response("522,250."),
    )

    with client.responses.connect() as connection:
        first = turn(connection, input="How many people live in Lyon?", tools=TOOLS)[-1].response
        second = turn(connection, input=outputs("c1"), tools=TOOLS, previous_response_id=first.id)[-1].response
        third = turn(connection, input=outputs("c2"), tools=TOOLS, previous_response_id=second.id)[-1].response

    assert third.output_text == "522,250."
    sent = fake.socket_payloads()
    assert [payload.get("previous_response_id") for payload in sent] == [None, first.id, second.id]
    assert [len(payload["input"]) for payload in sent[1:]] == [1, 1]  # only the new items
    assert fake.rejections == []
    assert fake.sockets == 1


def test_an_empty_reply_is_nudged_on_the_socket_and_the_client_goes_on_from_the_good_one(client, fake):
    fake.script(response(message("")), text_response("Lyon has 522,250 inhabitants."), text_response("2.1 M."))

    with client.responses.connect() as connection:
        good = turn(connection, input="How many people live in Lyon?")[-1].response
        again = turn(connection, input="And Paris?", previous_response_id=good.id)[-1].response

    assert good.output_text == "Lyon has 522,250 inhabitants."
    assert again.output_text == "2.1 M."
    _, nudge, next_turn = fake.socket_payloads()
    assert "Your last reply was empty" in json.dumps(nudge["input"])
    assert next_turn["previous_response_id"] == good.id  # valid upstream: its most recent response
    assert next_turn["input"] == [{"role": "user", "content": "And Paris?"}]
    assert "Your last reply was empty" in json.dumps(fake.served[2].history)  # the hidden attempt, upstream
    assert fake.rejections == []


def test_a_well_behaved_run_passes_untouched(client, fake):
    fake.script(response(function_call("search", "{}", "c1")), text_response("Lyon has 522,250 inhabitants."))

    with client.responses.connect() as connection:
        first = turn(connection, input="How many people live in Lyon?", tools=TOOLS)[-1].response
        done = turn(connection, input=outputs("c1"), tools=TOOLS, previous_response_id=first.id)[-1].response

    assert done.output_text == "Lyon has 522,250 inhabitants."
    assert "[LoopWarden]" not in json.dumps(fake.socket_payloads())
    assert fake.socket_payloads()[1]["input"] == outputs("c1")
    assert fake.rejections == []


def test_a_loop_is_ended_and_no_id_of_the_proxys_own_goes_upstream(client, fake):
    fake.script(*[response(function_call("search", "{}", f"c{n}")) for n in range(8)], text_response("Stopped."))

    with client.responses.connect() as connection:
        last = turn(connection, input="How many people live in Lyon?", tools=TOOLS)[-1].response
        for _ in range(8):
            calls = [item.call_id for item in last.output if item.type == "function_call"]
            if not calls:
                break
            found = outputs(*calls, text=f"result of {calls[0]}")  # new results: no other guard objects
            last = turn(connection, input=found, tools=TOOLS, previous_response_id=last.id)[-1].response

    assert "LoopWarden stopped this run (loop)" in last.output_text
    assert "_lw" not in json.dumps([payload.get("previous_response_id") for payload in fake.socket_payloads()])
    assert fake.rejections == []


def test_a_budget_ending_summarizes_over_the_socket(make_proxy, fake, write_policies):
    proxy = make_proxy(upstream=fake.url, policies_dir=str(write_policies(default="budgets: {max_tokens: 40000}\n")))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)
    fake.script(
        response(function_call("search", "{}", "c1"), usage=(39900, 100)),
        text_response("Found: 522,250. Missing: a source. Next: cite INSEE."),
    )

    with client.responses.connect() as connection:
        first = turn(connection, input="How many people live in Lyon?", tools=TOOLS)[-1].response
        ended = turn(connection, input=outputs("c1"), tools=TOOLS, previous_response_id=first.id)[-1].response

    assert ended.output_text.endswith("Found: 522,250. Missing: a source. Next: cite INSEE.")
    summary = fake.socket_payloads()[-1]
    assert summary["tool_choice"] == "none"
    assert [r.method for r in fake.requests] == ["WEBSOCKET", "WEBSOCKET"]
    assert fake.rejections == []


def test_an_upstream_that_refuses_the_upgrade_is_served_over_http_and_said_once(make_proxy, fake, caplog):
    proxy = make_proxy(upstream=fake.url)
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)
    fake.refuse = 426
    fake.script(text_response("One."), text_response("Two."), text_response("Three."))

    with caplog.at_level(logging.INFO, logger="loopwarden"):
        texts = []
        for _ in range(3):
            with client.responses.connect() as connection:
                texts.append(turn(connection, input="Count.")[-1].response.output_text)

    assert texts == ["One.", "Two.", "Three."]
    assert [r.method for r in fake.requests] == ["POST", "POST", "POST"]
    said = [record for record in caplog.records if record.getMessage() == "upstream_websocket_unavailable"]
    assert len(said) == 1
    assert len(fake.upgrades) == 1  # the refusal is remembered: later sockets go straight to HTTP
    assert metric(proxy, 'loopwarden_upstream_websockets_total{outcome="refused"} 3.0')


def test_an_upstream_closing_mid_response_is_a_cut_stream_and_closes_the_clients_socket(proxy, fake):
    fake.script(SocketCut(text_response("Lyon has 522,250 inhabitants."), after=4, code=1011))

    with connect(proxy.base_url.replace("http", "ws") + "/responses", additional_headers=KEY) as socket:
        socket.send(json.dumps({"type": "response.create", "model": "m", "store": False, "input": "Lyon?"}))
        events = _until_closed(socket)
        with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
            socket.recv(timeout=30)

    assert events[-1]["type"] == "error"
    assert events[-1]["code"] == "upstream_disconnected"
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1011
    assert metric(proxy, 'loopwarden_stream_unfinished_total{policy="default",reason="upstream_disconnected"')


def test_a_turn_after_the_upstream_let_its_socket_go_goes_whole_on_a_fresh_socket(client, fake):
    fake.close_after_turn = True
    fake.script(text_response("Lyon has 522,250 inhabitants."), text_response("Paris has 2.1 million."))

    with client.responses.connect() as connection:
        first = turn(connection, input="Lyon?")
        second = turn(
            connection, input=[{"role": "user", "content": "And Paris?"}], previous_response_id=first[-1].response.id
        )

    assert first[-1].type == second[-1].type == "response.completed"
    assert fake.sockets == 2
    assert "previous_response_id" not in fake.socket_payloads()[-1]

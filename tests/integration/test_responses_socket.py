"""Responses over a WebSocket on ``/v1/responses``, guarded as over HTTP: the openai SDK's
``responses.connect()`` against the proxy in front of the scripted (HTTP) Responses upstream."""

from __future__ import annotations

import json
import signal
import time

import httpx
import openai
import pytest
import websockets
from websockets.sync.client import connect

from tests.support.fake_responses import Events, function_call, message, reasoning, response, text_response
from tests.support.fake_upstream import Hang, Json
from tests.support.raw_socket import RawSocket
from tests.support.responses_fixtures import fake, proxy, responses_server  # noqa: F401 (fixtures)
from tests.support.waiting import wait_for

KEY = {"Authorization": "Bearer sk-p"}
TOOLS = [{"type": "function", "name": "search", "parameters": {"type": "object", "properties": {}}}]


def turn(connection, **fields) -> list:
    """Send one response.create, return its events up to the terminal one (or an error)."""
    connection.response.create(model="m", **fields)
    events = []
    for event in connection:
        events.append(event)
        if event.type in ("response.completed", "response.incomplete", "response.failed", "error"):
            return events
    return events


@pytest.fixture
def client(proxy):
    return openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)


def test_a_response_create_is_answered_with_the_streams_events_in_order(client, fake):
    fake.script(text_response("Lyon has 522,250 inhabitants."))

    with client.responses.connect() as connection:
        events = turn(connection, input="How many people live in Lyon?", store=False)

    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "Lyon has 522,250 inhabitants."
    assert [event.sequence_number for event in events] == sorted(event.sequence_number for event in events)
    assert json.loads(fake.requests[0].body)["stream"] is True


def test_a_store_false_continuation_reaches_the_upstream_whole(client, fake):
    fake.script(response(reasoning("Search."), function_call("search", "{}", "c1")), text_response("522,250."))

    with client.responses.connect() as connection:
        first = turn(connection, input="How many people live in Lyon?", tools=TOOLS, store=False)[-1].response
        output = [{"type": "function_call_output", "call_id": "c1", "output": "522,250"}]
        second = turn(connection, input=output, tools=TOOLS, store=False, previous_response_id=first.id)

    assert second[-1].response.output_text == "522,250."
    sent = fake.agent_payloads[1]
    assert "previous_response_id" not in sent
    assert [item.get("type", "message") for item in sent["input"]] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert fake.rejections == []


def test_an_empty_reply_is_nudged_and_the_client_sees_only_the_good_one(client, fake):
    fake.script(response(message("")), text_response("Lyon has 522,250 inhabitants."))

    with client.responses.connect() as connection:
        events = turn(connection, input="How many people live in Lyon?", store=False)
        again = turn(connection, input="And Paris?", store=False, previous_response_id=events[-1].response.id)

    assert events[-1].response.output_text == "Lyon has 522,250 inhabitants."
    assert again[-1].type == "response.completed"
    assert len(fake.requests) == 3
    assert fake.rejections == []


def test_a_handshake_with_a_wrong_key_is_refused_401_in_openais_shape(make_proxy, fake, write_tenants):
    proxy = make_proxy(upstream=fake.url, tenants_file=write_tenants({"acme": "lw-acme"}, provider_key="sk-up"))

    with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
        connect(proxy.base_url.replace("http", "ws") + "/responses", additional_headers={"Authorization": "Bearer no"})

    assert refused.value.response.status_code == 401
    assert json.loads(refused.value.response.body)["error"]["code"] == "invalid_api_key"
    assert fake.requests == []


def test_a_websocket_upgrade_on_chat_completions_is_still_refused_with_426(proxy, fake):
    with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
        connect(proxy.base_url.replace("http", "ws") + "/chat/completions", additional_headers=KEY)

    assert refused.value.response.status_code == 426
    assert json.loads(refused.value.response.body)["error"]["code"] == "websocket_not_supported"


def _socket(proxy, **options):
    return connect(proxy.base_url.replace("http", "ws") + "/responses", additional_headers=KEY, **options)


def _create(**fields) -> str:
    return json.dumps({"type": "response.create", "model": "m", "store": False, **fields})


def _until_terminal(connection) -> list[dict]:
    events = []
    while not events or events[-1]["type"] not in ("response.completed", "response.failed", "error"):
        events.append(json.loads(connection.recv(timeout=30)))
    return events


def test_an_unknown_event_type_is_an_error_event_and_the_socket_goes_on(proxy, fake):
    fake.script(text_response("Still here."))

    with _socket(proxy) as connection:
        connection.send(json.dumps({"type": "session.update", "input": "x"}))
        refused = json.loads(connection.recv(timeout=30))
        connection.send(_create(input="Hello?"))
        events = _until_terminal(connection)

    assert (refused["type"], refused["code"]) == ("error", "unknown_event_type")
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "Still here."


def test_steering_is_refused_as_the_api_refuses_it_and_its_input_handed_back(proxy, fake):
    fake.script(text_response("Still here."))

    with _socket(proxy) as connection:
        connection.send(json.dumps({"type": "response.steer", "previous_response_id": "resp_1", "input": "Faster."}))
        refused = json.loads(connection.recv(timeout=30))
        connection.send(_create(input="Hello?"))
        events = _until_terminal(connection)

    assert refused["type"] == "response.steer.failed"
    assert refused["error"]["code"] == "steering_not_supported"
    assert refused["steer"] == {"previous_response_id": "resp_1", "input": "Faster."}
    assert events[-1]["type"] == "response.completed"


def test_pings_are_answered_on_an_idle_socket_and_the_idle_timeout_still_closes_it(make_proxy, fake):
    proxy = make_proxy(upstream=fake.url, socket_idle_timeout=1.0)

    with _socket(proxy, ping_interval=None) as connection:
        answered = [connection.ping().wait(timeout=30) for _ in range(3)]
        with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
            connection.recv(timeout=60)  # pings are no events: the idle timeout counts on

    assert answered == [True, True, True]
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1000
    assert fake.requests == []


def _long_text_stream(deltas: int, piece: str, produced: list[int]):
    """A streamed text answer of ``deltas`` deltas, each produced only when the proxy reads on."""
    body = text_response("")
    item = {"type": "message", "id": "msg_long", "status": "in_progress", "role": "assistant", "content": []}
    at = {"item_id": "msg_long", "output_index": 0, "content_index": 0}
    yield {"type": "response.created", "sequence_number": 0, "response": {**body, "status": "in_progress"}}
    yield {"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": item}
    part = {"type": "output_text", "text": "", "annotations": []}
    yield {"type": "response.content_part.added", "sequence_number": 2, **at, "part": part}
    for number in range(deltas):
        produced.append(number)
        yield {"type": "response.output_text.delta", "sequence_number": 3 + number, **at, "delta": piece}
    done = {**part, "text": piece * deltas}
    yield {"type": "response.output_text.done", "sequence_number": deltas + 3, **at, "text": done["text"]}
    finished = {**item, "status": "completed", "content": [done]}
    yield {"type": "response.output_item.done", "sequence_number": deltas + 4, "output_index": 0, "item": finished}
    yield {"type": "response.completed", "sequence_number": deltas + 5, "response": {**body, "output": [finished]}}


def _settled(count) -> int:
    """``count()`` once it stopped growing (five reads in a row, 0.2 s apart, agree)."""
    seen: list[int] = []
    while len(seen) < 5 or len(set(seen[-5:])) > 1:
        seen.append(count())
        time.sleep(0.2)
    return seen[-1]


@pytest.mark.slow
def test_a_slow_reader_holds_the_upstream_back_instead_of_the_proxy_buffering_its_stream(make_proxy, fake):
    deltas, piece, produced = 2000, "x" * 16384, []  # 32 MiB of text, more than the buffers between hold
    proxy = make_proxy(upstream=fake.url, max_reply_bytes=512 * 1024 * 1024)
    fake.script(Events(_long_text_stream(deltas, piece, produced)))

    with RawSocket(proxy.port, "/v1/responses", KEY) as connection:  # reads only when asked: no library buffer
        connection.send_text(_create(input="Write a lot."))
        stalled = _settled(lambda: len(produced))  # the client reads nothing meanwhile
        received = connection.texts_until(lambda event: event["type"] == "response.completed")

    assert stalled < deltas * 3 // 4  # what the proxy took from the upstream is bounded, not the whole stream
    assert sum(event["type"] == "response.output_text.delta" for event in received) == deltas
    assert received[-1]["type"] == "response.completed"


def test_a_message_over_the_size_cap_closes_the_socket_with_1009(make_proxy, fake):
    proxy = make_proxy(upstream=fake.url, max_body_bytes=4096)

    with _socket(proxy) as connection:
        connection.send(_create(input="x" * 8192))
        with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
            connection.recv(timeout=30)

    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1009
    assert fake.requests == []


def test_a_client_closing_mid_response_cancels_the_upstream_call(proxy, fake):
    fake.script(Hang(30))

    with _socket(proxy) as connection:
        connection.send(_create(input="Hello?"))
        assert wait_for(lambda: fake.requests)

    assert wait_for(lambda: fake.hangups)
    assert wait_for(
        lambda: 'route="responses",status="client_disconnected"' in httpx.get(f"{proxy.metrics_url}/metrics").text
    )


def test_a_stopping_proxy_finishes_the_response_in_flight_then_closes_with_1001(proxy, fake):
    fake.script(Json(text_response("Finished before the stop."), delay=1.0))

    with _socket(proxy) as connection:
        connection.send(_create(input="Hello?"))
        assert wait_for(lambda: fake.requests)
        proxy.server.handle_exit(signal.SIGTERM, None)
        events = _until_terminal(connection)
        with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
            connection.recv(timeout=30)

    assert events[-1]["type"] == "response.completed"
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1001

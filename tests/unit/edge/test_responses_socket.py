"""One client socket's events in ASGI terms: a response.create runs as one request of the route,
its stream's events go out as messages, and every misuse is an ``error`` event."""

from __future__ import annotations

import asyncio
import json

from proxy.edge.responses_socket import EventRelay, ResponsesSocket, error_event, turn_scope

HANDSHAKE = {
    "type": "websocket",
    "path": "/v1/responses",
    "headers": [
        (b"authorization", b"Bearer sk-p"),
        (b"upgrade", b"websocket"),
        (b"sec-websocket-key", b"k"),
        (b"openai-beta", b"responses_websockets=2026-02-06"),
        (b"x-session-id", b"s1"),
    ],
}


class Client:
    """The socket's far end: queued events in, messages out."""

    def __init__(self, *events: object) -> None:
        self.incoming: asyncio.Queue[dict] = asyncio.Queue()
        for event in events:
            self.incoming.put_nowait({"type": "websocket.receive", "text": json.dumps(event)})
        self.sent: list[dict] = []

    async def receive(self) -> dict:
        return await self.incoming.get()

    async def send(self, message: dict) -> None:
        self.sent.append(message)

    def leave(self) -> None:
        self.incoming.put_nowait({"type": "websocket.disconnect", "code": 1000})

    @property
    def events(self) -> list[dict]:
        return [json.loads(message["text"]) for message in self.sent if message["type"] == "websocket.send"]


def _sse(*events: dict) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


DONE = {"type": "response.completed", "response": {"id": "resp_1", "output": []}}


def test_a_turn_is_a_post_with_the_handshakes_headers_but_the_upgrades():
    scope = turn_scope(HANDSHAKE)  # type: ignore[arg-type]

    assert (scope["type"], scope["method"]) == ("http", "POST")
    assert [name for name, _ in scope["headers"]] == [b"authorization", b"x-session-id"]


async def test_a_stream_split_anywhere_goes_out_as_one_message_per_event():
    client = Client()
    delivered: list[dict] = []
    relay = EventRelay(client.send, delivered.append)
    stream = _sse({"type": "response.created"}, DONE) + b": keep-alive\n\n"

    await relay({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    for cut in range(0, len(stream), 7):
        await relay({"type": "http.response.body", "body": stream[cut : cut + 7], "more_body": True})

    assert [event["type"] for event in client.events] == ["response.created", "response.completed"]
    assert delivered == [DONE["response"]]


async def test_an_unnamed_streams_events_go_out_as_messages_and_its_terminal_response_is_delivered():
    client = Client()
    delivered: list[dict] = []
    relay = EventRelay(client.send, delivered.append)
    stream = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in ({"type": "response.created"}, DONE))

    await relay({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    await relay({"type": "http.response.body", "body": stream + b"data: [DONE]\n\n"})

    assert [event["type"] for event in client.events] == ["response.created", "response.completed"]
    assert delivered == [DONE["response"]]


async def test_a_chunk_of_many_events_goes_out_as_one_batch_where_the_server_sends_batches():
    client, batches = Client(), []

    async def many(texts: list[bytes]) -> None:
        batches.append([json.loads(text)["type"] for text in texts])

    relay = EventRelay(client.send, lambda _: None, many=many)
    await relay({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    await relay({"type": "http.response.body", "body": _sse({"type": "response.created"}, DONE)})

    assert batches == [["response.created", "response.completed"]]
    assert client.sent == []


async def test_an_error_answer_is_the_apis_error_event_with_its_status():
    client = Client()
    relay = EventRelay(client.send, lambda _: None)
    body = json.dumps({"error": {"message": "No key.", "type": "invalid_request_error", "code": "invalid_api_key"}})

    await relay({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"application/json")]})
    await relay({"type": "http.response.body", "body": body.encode()})

    (event,) = client.events
    assert (event["type"], event["status"], event["code"]) == ("error", 401, "invalid_api_key")
    assert event["message"] == "No key."
    assert event["error"]["type"] == "invalid_request_error"


def test_an_error_event_carries_its_fields_at_the_top_and_as_error():
    event = json.loads(error_event(400, "Bad.", "unknown_event_type", "type"))

    assert event == {
        "type": "error",
        "status": 400,
        "code": "unknown_event_type",
        "message": "Bad.",
        "param": "type",
        "error": {"type": "invalid_request_error", "code": "unknown_event_type", "message": "Bad.", "param": "type"},
    }


async def _serve(client: Client, turn) -> int:
    socket = ResponsesSocket(HANDSHAKE, client.receive, client.send, turn, 0, lambda: False)  # type: ignore[arg-type]
    return await socket.serve()


async def _answering(scope, body, respond, watch) -> None:
    await respond({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    await respond({"type": "http.response.body", "body": _sse(DONE), "more_body": False})


async def test_a_turns_payload_is_its_body_decoded():
    given: list[tuple[dict, dict]] = []

    async def turn(scope, body, payload, respond, watch) -> None:
        given.append((json.loads(body), payload))
        await _answering(scope, body, respond, watch)
        client.leave()

    client = Client({"type": "response.create", "model": "m", "input": "a"})

    await _serve(client, turn)
    assert given == [({"model": "m", "input": "a", "stream": True}, {"model": "m", "input": "a", "stream": True})]


async def test_each_response_create_runs_as_one_request_with_stream_implicit():
    bodies: list[dict] = []

    async def turn(scope, body, payload, respond, watch) -> None:
        bodies.append(json.loads(body))
        await _answering(scope, body, respond, watch)
        if len(bodies) == 2:
            client.leave()

    client = Client({"type": "response.create", "model": "m", "input": "a"}, {"type": "response.create", "input": "b"})

    assert await _serve(client, turn) == 1000
    assert bodies == [{"model": "m", "input": "a", "stream": True}, {"input": "b", "stream": True}]


async def test_an_unknown_event_type_is_an_error_event_and_the_socket_stays_open():
    client = Client({"type": "session.update", "input": "x"}, {"type": "response.create", "input": "b"})

    async def turn(scope, body, payload, respond, watch) -> None:
        await _answering(scope, body, respond, watch)
        client.leave()

    await _serve(client, turn)

    assert [(e["type"], e.get("code")) for e in client.events] == [
        ("error", "unknown_event_type"),
        ("response.completed", None),
    ]


async def test_steering_is_refused_with_the_input_handed_back_and_the_socket_stays_open():
    steer = {"type": "response.steer", "previous_response_id": "resp_1", "input": "x", "stream_id": "s1"}
    client = Client(steer, {"type": "response.create", "input": "b"})

    async def turn(scope, body, payload, respond, watch) -> None:
        await _answering(scope, body, respond, watch)
        client.leave()

    await _serve(client, turn)

    refused, done = client.events
    assert (refused["type"], refused["error"]["code"]) == ("response.steer.failed", "steering_not_supported")
    assert (refused["steer"], refused["stream_id"]) == ({"previous_response_id": "resp_1", "input": "x"}, "s1")
    assert done["type"] == "response.completed"


async def test_a_message_that_is_not_a_json_object_is_an_error_event():
    client = Client()
    client.incoming.put_nowait({"type": "websocket.receive", "text": "[1, 2"})
    client.leave()

    await _serve(client, _answering)

    assert [e["code"] for e in client.events] == ["invalid_json"]


async def test_a_second_response_create_while_one_is_in_flight_is_refused_and_the_first_goes_on():
    release = asyncio.Event()

    async def turn(scope, body, payload, respond, watch) -> None:
        await release.wait()
        await _answering(scope, body, respond, watch)
        client.leave()

    client = Client({"type": "response.create", "input": "a"}, {"type": "response.create", "input": "b"})
    served = asyncio.ensure_future(_serve(client, turn))
    while not client.events:
        await asyncio.sleep(0)
    release.set()
    await served

    assert [(e["type"], e.get("code")) for e in client.events] == [
        ("error", "response_in_progress"),
        ("response.completed", None),
    ]


async def test_a_client_leaving_mid_response_is_told_to_the_turn_as_a_disconnect():
    watched: list[dict] = []

    async def turn(scope, body, payload, respond, watch) -> None:
        client.leave()
        watched.append(await watch())

    client = Client({"type": "response.create", "input": "a"})

    await _serve(client, turn)

    assert watched == [{"type": "http.disconnect"}]


async def test_a_store_false_continuation_of_an_unknown_response_is_not_found():
    client = Client({"type": "response.create", "store": False, "previous_response_id": "resp_x", "input": []})
    client.leave()

    await _serve(client, _answering)

    assert [(e["code"], e["param"]) for e in client.events] == [("previous_response_not_found", "previous_response_id")]


async def test_an_idle_socket_is_closed_normally():
    client = Client()
    socket = ResponsesSocket(HANDSHAKE, client.receive, client.send, _answering, 0.01, lambda: False)  # type: ignore[arg-type]

    assert await socket.serve() == 1000
    assert client.sent[-1]["type"] == "websocket.close"


async def test_a_draining_proxy_closes_the_socket_going_away_once_no_response_is_in_flight():
    client = Client()
    socket = ResponsesSocket(HANDSHAKE, client.receive, client.send, _answering, 0, lambda: True)  # type: ignore[arg-type]

    assert await socket.serve() == 1001


async def test_a_warm_up_is_answered_by_the_proxy_without_a_request():
    client = Client({"type": "response.create", "model": "m", "input": "a", "store": False, "generate": False})
    client.leave()
    turns: list[bytes] = []

    async def turn(scope, body, payload, respond, watch) -> None:
        turns.append(body)

    await _serve(client, turn)

    assert turns == []
    assert [e["type"] for e in client.events] == ["response.created", "response.in_progress", "response.completed"]


async def test_a_socket_that_asked_gets_the_proxys_own_headers_before_each_response():
    client = Client()
    relay = EventRelay(client.send, lambda _: None, headers=True)
    headers = [(b"content-type", b"text/event-stream"), (b"X-LoopWarden-Step", b"2"), (b"x-request-id", b"r")]

    await relay({"type": "http.response.start", "status": 200, "headers": headers})

    assert client.events == [{"type": "loopwarden.headers", "status": 200, "headers": {"x-loopwarden-step": "2"}}]


async def test_the_socket_wakes_for_a_message_or_the_end_of_the_turn_and_idles_out_without_either():
    from proxy.edge.responses_socket import _either

    loop = asyncio.get_running_loop()
    reading, running = loop.create_future(), loop.create_future()
    loop.call_soon(reading.set_result, {"type": "websocket.receive"})
    assert await _either(reading, running, None)

    reading = loop.create_future()
    loop.call_soon(running.set_result, None)
    assert await _either(reading, running, None)

    assert not await _either(loop.create_future(), None, 0.01)
    assert await _either(reading, None, 0.01) is False  # nothing to wake for: idled out

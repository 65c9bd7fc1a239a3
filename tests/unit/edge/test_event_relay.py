"""A turn's answer as the socket's messages: the events that pass through from the upstream
(one data line, the type first) read in one pass give what reading them one by one gives (the
relay's other framings and its batches: test_responses_socket.py)."""

from __future__ import annotations

import json

import pytest

from proxy.edge.event_relay import EventRelay

START = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
CREATED = b'{"type":"response.created","response":{"id":"resp_1"}}'
DELTA = b'{"type":"response.output_text.delta","delta":"data: \\"hi\\""}'
DONE = b'{"type":"response.completed","response":{"id":"resp_1","output":[]}}'


async def relayed(*chunks: bytes) -> tuple[list[bytes], list[dict], list[bytes]]:
    """What the client is sent, what is delivered, and the batches sent together."""
    sent: list[bytes] = []
    delivered: list[dict] = []
    batches: list[bytes] = []

    async def send(message: dict) -> None:
        sent.append(message["text"].encode())

    async def many(texts: list[bytes]) -> None:
        sent.extend(texts)
        batches.extend(texts)

    relay = EventRelay(send, delivered.append, many=many)
    await relay(START)
    for chunk in chunks:
        await relay({"type": "http.response.body", "body": chunk, "more_body": True})
    return sent, delivered, batches


def data(*events: bytes) -> bytes:
    return b"".join(b"data: " + event + b"\n\n" for event in events)


async def test_passed_through_events_go_out_in_one_batch_and_the_terminal_response_is_delivered_once():
    sent, delivered, batches = await relayed(data(CREATED, DELTA, DONE))

    assert sent == batches == [CREATED, DELTA, DONE]
    assert delivered == [{"id": "resp_1", "output": []}]


@pytest.mark.parametrize(
    "chunk",
    [
        data(CREATED, DELTA) + b"data: [DONE]\n\n" + data(DONE),  # a terminator among them
        data(CREATED) + b": keep-alive\n\n" + data(DELTA, DONE),  # a comment
        data(CREATED) + b"event: response.output_text.delta\ndata: " + DELTA + b"\n\n" + data(DONE),  # named
        data(b'{"sequence_number":1,"type":"response.created"}', DELTA, DONE),  # the type not first
    ],
    ids=["terminator", "comment", "named", "type-not-first"],
)
async def test_any_other_framing_among_them_gives_the_same_messages(chunk):
    sent, delivered, _ = await relayed(chunk)

    assert [json.loads(text)["type"] for text in sent][-2:] == ["response.output_text.delta", "response.completed"]
    assert delivered == [{"id": "resp_1", "output": []}]


async def test_a_terminal_event_that_does_not_decode_is_dropped_in_one_pass_as_one_by_one():
    broken = b'{"type":"response.completed",oops}'

    together, delivered, _ = await relayed(data(CREATED, broken, DELTA))
    one_by_one = [(await relayed(data(event)))[0] for event in (CREATED, broken, DELTA)]

    assert together == [CREATED, DELTA] == [text for texts in one_by_one for text in texts]
    assert delivered == []

"""The response tracker of the raw routes: status, overhead header, time to first byte."""

from __future__ import annotations

import pytest

from proxy.edge.client_watch import ResponseTracker
from proxy.observe.timing import begin


async def _send_all(messages):
    sent = []

    async def send(message):
        sent.append(message)

    tracker = ResponseTracker(send, begin())
    for message in messages:
        await tracker.send(message)
    return tracker, sent


def _start(content_type: bytes):
    return {"type": "http.response.start", "status": 200, "headers": [(b"content-type", content_type)]}


@pytest.mark.parametrize(
    "bodies",
    [
        [{"type": "http.response.body", "body": b"data: x\n\n", "more_body": False}],
        [
            {"type": "http.response.body", "body": b"data: x\n\n", "more_body": True},
            {"type": "http.response.body", "body": b"", "more_body": False},
        ],
    ],
    ids=["in-one-go", "chunked"],
)
async def test_a_streams_first_byte_is_timed_however_it_is_written(bodies):
    tracker, _ = await _send_all([_start(b"text/event-stream; charset=utf-8"), *bodies])

    assert tracker._timing.first_byte is not None
    assert tracker.finished


async def test_a_plain_reply_has_no_first_byte_time():
    tracker, _ = await _send_all(
        [_start(b"application/json"), {"type": "http.response.body", "body": b"{}", "more_body": False}]
    )

    assert tracker._timing.first_byte is None


async def test_every_reply_carries_the_overhead_header():
    _, sent = await _send_all([_start(b"application/json")])

    assert any(name == b"x-loopwarden-overhead-ms" for name, _ in sent[0]["headers"])

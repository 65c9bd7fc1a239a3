"""The response tracker of the raw routes: status, overhead header, time to first byte."""

from __future__ import annotations

import asyncio

import pytest

from proxy.edge.client_watch import ClientWatch, ResponseTracker, unless_client_leaves
from proxy.edge.http import ClientDisconnected
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


async def test_a_watch_stopped_before_its_timer_never_reads_the_client():
    async def receive():
        raise AssertionError("the client was read")

    async def send(message):
        pass

    watch = ClientWatch(receive, ResponseTracker(send, begin()))
    watch.stop()
    await asyncio.sleep(0.05)  # past the watch's delay: its timer was cancelled

    watch.left({})  # nothing watched: a cancellation is not the client's, and is left to propagate


async def test_a_client_that_leaves_cancels_the_work_and_is_told_apart():
    async def receive():
        return {"type": "http.disconnect"}

    async def send(message):
        pass

    facts: dict[str, object] = {}
    with pytest.raises(ClientDisconnected):
        await unless_client_leaves(asyncio.sleep(5), receive, facts, ResponseTracker(send, begin()))

    assert facts == {"outcome": "client_disconnected"}

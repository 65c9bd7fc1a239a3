"""The response tracker of the raw routes: status, overhead header, time to first byte."""

from __future__ import annotations

import asyncio

import pytest

from proxy.edge.client_watch import ClientWatch, ResponseTracker, unless_client_leaves
from proxy.edge.connections import WholeReplies
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


async def test_watches_share_their_loops_timer_and_each_client_that_leaves_is_noticed():
    async def receive():
        return {"type": "http.disconnect"}

    async def send(message):
        pass

    async def served(delay: float) -> dict[str, object]:
        await asyncio.sleep(delay)  # made while the first one's watch is still waiting
        facts: dict[str, object] = {}
        with pytest.raises(ClientDisconnected):
            await unless_client_leaves(asyncio.sleep(5), receive, facts, ResponseTracker(send, begin()))
        return facts

    assert await asyncio.gather(served(0), served(0.01), served(0.02)) == [{"outcome": "client_disconnected"}] * 3


async def test_a_watch_stopped_early_leaves_the_next_one_due_on_the_shared_timer():
    async def never():
        raise AssertionError("the client was read")

    async def receive():
        return {"type": "http.disconnect"}

    async def send(message):
        pass

    stopped = ClientWatch(never, ResponseTracker(send, begin()))
    await asyncio.sleep(0.01)
    facts: dict[str, object] = {}
    stopped.stop()  # before its time: it never reads the client, and the next watch still does
    with pytest.raises(ClientDisconnected):
        await unless_client_leaves(asyncio.sleep(5), receive, facts, ResponseTracker(send, begin()))

    assert facts == {"outcome": "client_disconnected"}


class _Cycle:
    """What :class:`WholeReplies` reads of uvicorn's request cycle."""

    def __init__(self, disconnected: bool = False) -> None:
        self.disconnected = disconnected

    async def send(self, message):
        pass


async def _watched_by_the_connection(whole: WholeReplies, lose: bool) -> dict[str, object]:
    async def receive():
        raise AssertionError("the client was read: the connection tells the watch")

    facts: dict[str, object] = {}
    work = asyncio.ensure_future(
        unless_client_leaves(asyncio.sleep(5), receive, facts, ResponseTracker(whole, begin()))
    )
    await asyncio.sleep(0)
    if lose:
        assert whole.watch is not None
        whole.watch()  # what the protocol does when the connection is lost before the reply is whole
    with pytest.raises(ClientDisconnected):
        await asyncio.wait_for(work, 2)
    assert whole.watch is None  # stopped
    return facts


async def test_on_the_proxys_own_server_the_lost_connection_cancels_the_work():
    whole = WholeReplies(_Cycle())  # type: ignore[arg-type]

    assert await _watched_by_the_connection(whole, lose=True) == {"outcome": "client_disconnected"}


async def test_a_connection_lost_before_the_watch_was_made_cancels_the_work_at_once():
    whole = WholeReplies(_Cycle(disconnected=True))  # type: ignore[arg-type]

    assert await _watched_by_the_connection(whole, lose=False) == {"outcome": "client_disconnected"}

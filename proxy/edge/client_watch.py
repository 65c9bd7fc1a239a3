"""Watching the client of a request: what it got so far, and whether it is still there.

:class:`ResponseTracker` wraps ``send`` (started, status, finished, the overhead header, the
first byte of a stream); :func:`unless_client_leaves` (or, inline, :class:`ClientWatch`)
runs work that a client hanging up cancels, so the upstream stops generating for nobody.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from litestar.types import Receive, Send

from proxy.edge.connections import WholeReplies
from proxy.edge.http import ClientDisconnected
from proxy.observe.timing import RequestTiming

__all__ = ["ClientWatch", "ResponseTracker", "unless_client_leaves"]

_T = TypeVar("_T")
_EVENT_STREAM = b"text/event-stream"
_WATCH_AFTER = 0.03
"""Seconds before a request starts watching for its client leaving."""


async def unless_client_leaves(
    work: Awaitable[_T], receive: Receive, facts: dict[str, object], tracker: ResponseTracker
) -> _T:
    """Run work while watching the client: when it leaves, the work (and with it the upstream
    request) is cancelled; the pipeline still commits what it used. See :class:`ClientWatch`,
    which a caller on the hot path uses inline (no coroutine of its own)."""
    watch = ClientWatch(receive, tracker)
    try:
        return await work
    except asyncio.CancelledError:
        watch.left(facts)
        raise
    finally:
        watch.stop()


class ClientWatch:
    """Watching the client of the task that makes one: a client that hangs up cancels the task.

    On the proxy's own server (``send`` is its :class:`~proxy.edge.connections.WholeReplies`)
    the connection tells the watch when it is lost: no timer, no task. Elsewhere the watch (a
    task waiting on ``receive``) starts after ``_WATCH_AFTER``: fast calls are over by then and
    pay only a timer, and a client that left earlier is still noticed the moment the watch
    starts (well within 100 ms). Use: make it, await the work, on ``CancelledError`` call
    :meth:`left`, and :meth:`stop` it whatever happens."""

    __slots__ = ("_gone", "_task", "_timer", "_tracker", "_watching", "_whole")

    def __init__(self, receive: Receive, tracker: ResponseTracker) -> None:
        self._task = task = asyncio.current_task()
        self._tracker = tracker
        self._watching: list[asyncio.Task[None]] = []
        self._timer: asyncio.TimerHandle | None = None  # not under a running task: nothing to watch
        self._gone = False
        self._whole: WholeReplies | None = None
        if task is None:
            return
        whole = tracker.sending
        if isinstance(whole, WholeReplies) and whole.watch is None:  # told by the connection
            self._whole = whole
            whole.watch = self._client_left
            if whole.client_gone:  # gone already: cancelled at the work's first wait
                self._client_left()
            return
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(_WATCH_AFTER, _watch, self._watching, receive, task, tracker)

    def left(self, facts: dict[str, object]) -> None:
        """On the work's ``CancelledError``: when the client left, the task is uncancelled and
        ``ClientDisconnected`` raised; else (cancelled from elsewhere: shutdown) nothing, and the
        caller re-raises."""
        watching = self._watching
        if self._task is None:
            return
        if not self._gone and (not watching or not watching[0].done() or watching[0].cancelled()):
            return  # cancelled from elsewhere (shutdown): not ours to swallow
        self._task.uncancel()
        facts["outcome"] = "client_disconnected"
        raise ClientDisconnected from None

    def stop(self) -> None:
        if self._whole is not None:
            self._whole.watch = None
            self._whole = None
        if self._timer is not None:
            self._timer.cancel()
        for watcher in self._watching:
            watcher.cancel()

    def _client_left(self) -> None:
        """The connection was lost: the work is cancelled, unless its reply was already whole."""
        if self._task is not None and not self._gone and not self._tracker.finished:
            self._gone = True
            self._task.cancel()


def _watch(
    watching: list[asyncio.Task[None]], receive: Receive, task: asyncio.Task[object], tracker: ResponseTracker
) -> None:
    """Start the watch (a module function the timer calls with its arguments: no closure per request)."""
    watching.append(asyncio.ensure_future(_cancel_on_disconnect(receive, task, tracker)))


async def _cancel_on_disconnect(receive: Receive, task: asyncio.Task[object], tracker: ResponseTracker) -> None:
    """Servers also say ``http.disconnect`` once the response is complete: only a client that
    left before that cancels the work."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            if not tracker.finished:
                task.cancel()
            return


class ResponseTracker:
    """Wraps ``send``: knows whether the response started and with which status, stamps the
    proxy's overhead on every reply, and notes when a streamed body's first bytes left."""

    __slots__ = ("_send", "_timing", "finished", "started", "status", "streaming", "tenant")

    def __init__(self, send: Send, timing: RequestTiming) -> None:
        self._send = send
        self._timing = timing
        self.started = False
        self.finished = False
        self.streaming = False
        self.status: int = 0
        self.tenant: str | None = None
        """The authenticated tenant, once known (for the metric and log line of a failure)."""

    @property
    def sending(self) -> Send:
        """The ``send`` it wraps."""
        return self._send

    async def send(self, message: dict[str, object]) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            self.status = int(message["status"])  # type: ignore[call-overload]
            headers: list[tuple[bytes, bytes]] = message["headers"]  # type: ignore[assignment]
            for k, v in headers:  # a loop, not any() over a generator: no generator per reply
                if k.lower() == b"content-type" and v.lower().startswith(_EVENT_STREAM):
                    self.streaming = True
                    break
            overhead = f"{self._timing.overhead() * 1000:.3f}".encode()
            message["headers"] = [*headers, (b"x-loopwarden-overhead-ms", overhead)]
        else:
            # A stream's first bytes, whether it comes in chunks or all at once (an ending replayed).
            if self.streaming and self._timing.first_byte is None and message.get("body"):
                self._timing.first_byte = self._timing.elapsed()
            if not message.get("more_body"):
                self.finished = True
        await self._send(message)  # type: ignore[arg-type]

"""The client's side of a guarded stream: pass on what may flow, keep back what a guard holds.

One ``ClientStream`` per streamed request, across all of its upstream attempts. Events
whose channels are released go out as the upstream framed them; events that carry a held
channel wait in a queue (split when only part of them may go). The finish chunk and the
usage chunk always wait for the verdict on the whole reply. After a nudge the held part of
the failed attempt is dropped and the next attempt streams on; after a finalize the client
gets the ending as ordinary chunks.

The response starts lazily, with the first byte that has to go: an attempt that is held
back whole and then replaced is answered as if it had never been streamed (status and
headers included). While nothing flows, the format's keep-alive (an SSE comment; Messages'
``ping``) goes out every ``keepalive`` seconds so proxies and clients do not give up on a long
judge or a held tool call. The format's :class:`~proxy.wire.base.StreamCodec` frames what goes.

A format whose stream must read as one sequence across attempts and endings has a relay
(:class:`~proxy.wire.base.StreamRelay`) that every outgoing event passes through: Responses
renumbers its events and items; Messages keeps one message with contiguous block indexes,
and its events go out strictly in order (``in_order``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

from litestar.types import Send

from proxy.errors import ProxyError
from proxy.exchange import Channel
from proxy.upstream.headers import reply_headers
from proxy.wire.base import StreamCodec, StreamRelay

__all__ = ["ClientStream"]

_SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
_OWN_HEADERS = {name for name, _ in _SSE_HEADERS}


class ClientStream:
    """One streamed response to one client, written across every upstream attempt."""

    def __init__(
        self,
        send: Send,
        headers: Callable[[], list[tuple[bytes, bytes]]],
        *,
        include_usage: bool,
        keepalive: float,
        stream: StreamCodec,
    ) -> None:
        self._stream = stream
        self._send = send
        self._headers = headers
        self._include_usage = include_usage
        self._keepalive = keepalive
        self._lock = asyncio.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._pinging: asyncio.Future[None] | None = None
        self._last_write = 0.0
        self.upstream_headers: list[tuple[bytes, bytes]] = []
        """The current attempt's response headers (end-to-end ones are passed on)."""
        self.started = False
        self.finished = False
        self.sent_text = False
        """Text of some attempt reached the client (a later ending is appended to it)."""
        self.released = Channel.NONE
        self._queue: list[tuple[bytes | None, Mapping[str, Any], int]] = []
        self._final: list[tuple[bytes, Mapping[str, Any] | None]] = []
        self._relay = stream.relay()
        """The client's view of the stream, for a format whose stream must read as one sequence
        across attempts (Responses renumbers; Messages keeps one message, in order)."""
        self.passing = frozenset() if self._relay is None else self._relay.passing
        """Names of events that may pass without being assembled (:meth:`passes`)."""
        self._out: list[bytes] = []
        """What may go, gathered per upstream read and written in one piece by ``flush``."""
        self._out_text = False

    # -- one attempt ----------------------------------------------------------------

    def new_attempt(self) -> None:
        """Drop what the last attempt held back; hold everything again. What it already let
        through stays let through (it goes out with the next write)."""
        self._queue.clear()
        self._final.clear()
        if self._relay is not None:
            self._relay.new_attempt()
        self.released = Channel.NONE

    @property
    def holding(self) -> bool:
        return bool(self._queue)

    def push(self, raw: bytes, chunk: Mapping[str, Any], channels: int) -> None:
        """One upstream event: out now if all it carries is released, else into the queue."""
        if channels & ~self.released or (channels == Channel.NONE and not self.started):
            self._queue.append((raw, chunk, channels))
            self._hold()
            return
        if self._queue:
            self._out.append(self._drain(self.released, substantive=True))
        if self._relay is not None:
            if self._relay.in_order and self._queue:  # nothing overtakes what still waits
                self._queue.append((raw, chunk, channels))
                return
            raw = self._relay.event(raw, chunk)
        self._out.append(raw)
        self._out_text = self._out_text or bool(channels & Channel.TEXT)

    def passes(self, raw: bytes, chunk: Mapping[str, Any]) -> bool:
        """An event named in ``passing`` gone out as the upstream framed it, not assembled, when
        nothing waits before it and the relay lets it through (False: it must be assembled and
        pushed)."""
        if self._queue or self._relay is None:
            return False
        passed = self._relay.passes(raw, chunk, self.released)
        if passed is None:
            return False
        raw, channels = passed
        self._out.append(raw)
        self._out_text = self._out_text or bool(channels & Channel.TEXT)
        return True

    def defer(self, raw: bytes, *, usage_only: bool, chunk: Mapping[str, Any] | None = None) -> None:
        """The finish chunk or the usage chunk: kept until the verdict."""
        if not usage_only or self._include_usage:
            self._final.append((raw, chunk))
        self._hold()

    def release(self, channels: int) -> None:
        """These channels may flow from now on: what the queue holds of them goes next."""
        self.released |= channels
        if self._queue:
            out = self._drain(self.released)
            if out:
                self._out.append(out)
                self._out_text = self._out_text or bool(channels & Channel.TEXT)

    async def flush(self) -> None:
        """Write what was let through since the last flush (one write per upstream read)."""
        if self._out:
            data = self._take_out()
            if data:  # a relay may keep an event back (nothing to write yet)
                await self._write(data)

    def _take_out(self) -> bytes:
        data = b"".join(self._out)
        self.sent_text = self.sent_text or self._out_text
        self._out.clear()
        self._out_text = False
        return data

    def _drain(self, released: int, *, substantive: bool = False) -> bytes:
        """Take the released parts out of the queue (in order), keep the held rest. Events that
        carry nothing (the role chunk) go only with something that does, so the response does
        not start before there is something to say."""
        if not (self.started or substantive) and not any(channels & released for _, _, channels in self._queue):
            return b""
        if self._relay is not None and self._relay.in_order:
            return self._drain_in_order(self._relay, released, substantive)
        out: list[bytes] = []
        kept: list[tuple[bytes | None, Mapping[str, Any], int]] = []
        for raw, chunk, channels in self._queue:
            if not channels & ~released:
                out.append(self._framed(raw, chunk))
                continue
            if channels & released:
                going, staying = self._stream.split_event(chunk, released)
                if going is not None:
                    out.append(self._framed(None, going))
                if staying is not None:
                    kept.append((None, staying, channels & ~released))
            else:
                kept.append((raw, chunk, channels))
        self._queue = kept
        return b"".join(out)

    def _framed(self, raw: bytes | None, chunk: Mapping[str, Any]) -> bytes:
        """An event as it goes out: as the upstream framed it, or framed here when cut, and
        through the relay when the format has one."""
        if self._relay is not None:
            return self._relay.event(raw, chunk)
        return raw if raw is not None else self._stream.framed(chunk)

    def _drain_in_order(self, relay: StreamRelay, released: int, substantive: bool) -> bytes:
        """:meth:`_drain` for an ordered stream: the released events at the head of the queue;
        what follows a held one waits with it. Events that carry nothing (``message_start``,
        ``ping``) go only ahead of something that does."""
        going = 0
        for _, _, channels in self._queue:
            if channels & ~released:
                break
            going += 1
        head = self._queue[:going]
        says = any(channels for _, _, channels in head) or (substantive and going == len(self._queue))
        if not (self.started or says):
            return b""
        self._queue = self._queue[going:]
        return b"".join(relay.event(raw, chunk) for raw, chunk, _ in head)

    # -- endings --------------------------------------------------------------------

    async def finish(self) -> None:
        """The verdict passed the reply: everything held, then the finish and usage chunks."""
        out = (
            self._take_out()
            + self._drain(Channel.ALL, substantive=True)
            + b"".join(self._framed(raw, chunk) if chunk is not None else raw for raw, chunk in self._final)
            + self._stream.trailer
        )
        await self._write(out, last=True)

    @property
    def text_started(self) -> bool:
        """Text of some attempt reached the client, or is on its way."""
        return self.sent_text or self._out_text

    async def replace(self, body: Mapping[str, Any]) -> None:
        """End with ``body`` (an ending or a non-streamed reply) instead of the held attempt."""
        self.new_attempt()
        if self.text_started:
            body = self._stream.appended(body)
        if self._relay is not None:
            streamed = self._relay.ending(body)
        else:
            streamed = self._stream.streamed(body, include_usage=self._include_usage)
        await self._write(self._take_out() + streamed, last=True)

    async def fail(self, error: ProxyError) -> None:
        """The stream cannot be completed: an error event the SDKs raise, then the end."""
        self.new_attempt()
        ended = self._stream.error_event(error) if self._relay is None else self._relay.error(error)
        await self._write(self._take_out() + ended, last=True)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- writing --------------------------------------------------------------------

    async def _write(self, data: bytes, *, last: bool = False) -> None:
        if last:
            self.close()  # no keep-alive can start from here on
            if self._pinging is None:  # and none is writing: no one to take turns with
                await self._emit(data, last)
                return
        async with self._lock:  # a keep-alive may write from its own task
            await self._emit(data, last)

    async def _emit(self, data: bytes, last: bool) -> None:
        if self.finished:
            return
        if not self.started:
            await self._start()
        self._last_write = time.monotonic()
        self.finished = last
        await self._send({"type": "http.response.body", "body": data, "more_body": not last})

    async def _start(self) -> None:
        self.started = True
        upstream = [(k, v) for k, v in self.upstream_headers if k.lower() not in _OWN_HEADERS]
        headers = reply_headers(upstream, [*_SSE_HEADERS, *self._headers()])
        await self._send({"type": "http.response.start", "status": 200, "headers": headers})

    def _hold(self) -> None:
        """Something waits: make sure the keep-alive clock runs."""
        if self._timer is None and self._keepalive > 0 and not self.finished:
            self._last_write = time.monotonic()
            self._timer = asyncio.get_running_loop().call_later(self._keepalive, self._tick)

    def _tick(self) -> None:
        self._timer = None
        if self.finished:
            return
        idle = time.monotonic() - self._last_write
        if idle >= self._keepalive * 0.99 and self._pinging is None:
            self._pinging = asyncio.ensure_future(self._ping())
            idle = 0.0
        self._timer = asyncio.get_running_loop().call_later(self._keepalive - idle, self._tick)

    async def _ping(self) -> None:
        try:
            await self._write(self._stream.keepalive)
        except Exception:  # a ping to a client that already left is nobody's problem
            return
        finally:
            self._pinging = None

"""A small TCP fault proxy for the reliability tests (toxiproxy cannot be installed here).

It sits between the proxy and what the proxy talks to (the fake upstream, or Redis) and
forwards bytes both ways, with one fault at a time:

    Pass()                 forward untouched
    Latency(seconds)       delay every chunk, both directions
    Hang()                 accept, read and discard everything, never forward, never close
    Cut(after_bytes)       forward the request; close the connection (FIN) once ``after_bytes``
                           bytes of the reply have been forwarded (0: right after the request)
    Reset(after_bytes)     like Cut, but abort with a TCP RST (SO_LINGER 0)

It runs on its own event loop in a background thread (like the fake upstream), so sync and
async tests use it alike. A fault applies to connections accepted after it is set; reply
bytes are counted per connection. ``received`` counts the request bytes that reached the
target, so a test can tell whether a request got through; ``swallowed`` keeps what Hang took
in, so a test can count the commands a server that never answers was sent (each one a timeout).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class Pass:
    """Forward untouched."""


@dataclass(frozen=True)
class Latency:
    """Delay every chunk, in both directions, by ``seconds``."""

    seconds: float


@dataclass(frozen=True)
class Hang:
    """Accept the connection, swallow what arrives, never answer and never close."""


@dataclass(frozen=True)
class Cut:
    """Close (FIN) after ``after_bytes`` bytes of the reply reached the client."""

    after_bytes: int = 0


@dataclass(frozen=True)
class Reset:
    """Abort with a TCP RST after ``after_bytes`` bytes of the reply reached the client."""

    after_bytes: int = 0


Fault = Pass | Latency | Hang | Cut | Reset

_CHUNK = 65536


class FaultProxy:
    """Listens on a free loopback port and forwards to ``target_port`` with the current fault."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.fault: Fault = Pass()
        self.port = 0
        self.accepted = 0
        self.received = 0
        self.swallowed = bytearray()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def set(self, fault: Fault) -> None:
        """The fault for connections accepted from now on."""
        self.fault = fault

    def drop_connections(self) -> None:
        """Close every open connection (so pooled clients reconnect and meet the new fault)."""
        for task in list(self._tasks):
            self._loop.call_soon_threadsafe(task.cancel)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- forwarding -------------------------------------------------------------------

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.accepted += 1
        fault = self.fault
        upstream_writer: asyncio.StreamWriter | None = None
        try:
            if isinstance(fault, Hang):
                while data := await client_reader.read(_CHUNK):
                    self.swallowed += data
                await asyncio.Event().wait()  # the peer closed its side; keep ours open forever
                return
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
            request = asyncio.ensure_future(self._pipe(client_reader, upstream_writer, fault, reply=False))
            reply = asyncio.ensure_future(self._pipe(upstream_reader, client_writer, fault, reply=True))
            try:
                done, _ = await asyncio.wait((request, reply), return_when=asyncio.FIRST_EXCEPTION)
                if reply in done and reply.exception() is None and reply.result():
                    return  # the fault fired: the connection is already cut
                await asyncio.gather(request, reply)
            finally:
                request.cancel()
                reply.cancel()
                await asyncio.gather(request, reply, return_exceptions=True)
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            for writer in (client_writer, upstream_writer):
                if writer is not None:
                    with contextlib.suppress(OSError, RuntimeError):
                        writer.close()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, fault: Fault, *, reply: bool
    ) -> bool:
        """Copy one direction until EOF; True when a Cut or Reset ended the connection."""
        sent = 0
        while True:
            if reply and isinstance(fault, Cut | Reset) and sent >= fault.after_bytes and sent > 0:
                return self._break(writer, fault)
            data = await reader.read(_CHUNK)
            if not data:
                with contextlib.suppress(OSError):
                    if writer.can_write_eof():
                        writer.write_eof()
                return False
            if isinstance(fault, Latency):
                await asyncio.sleep(fault.seconds)
            if reply and isinstance(fault, Cut | Reset):
                data = data[: fault.after_bytes - sent]
                if not data:
                    return self._break(writer, fault)
            else:
                if not reply:
                    self.received += len(data)
            writer.write(data)
            await writer.drain()
            sent += len(data)

    @staticmethod
    def _break(writer: asyncio.StreamWriter, fault: Cut | Reset) -> bool:
        if isinstance(fault, Reset):
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        else:
            writer.close()
        return True

"""Read one streamed upstream reply: parse, assemble, and let through what the guards release.

Each event is decoded once; the assembler keeps the reply so far, and whenever an event
touches a channel that is still held (or something waits in the queue) the guards are
asked again what they hold. A stream is complete only with the event its assembler says
ends it (chat completions' ``data: [DONE]``, or an event it took that completes the reply):
one that is cut, stalls past the read timeout, grows past ``max_reply_bytes``, or carries a
chunk that is not a JSON object ends as an error, never as a reply. An event whose data has a
``type`` (Responses', Messages') goes out named by it, whatever the upstream named it: clients
dispatch on the name.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import msgspec

from proxy.errors import ProxyError, UpstreamDisconnected, UpstreamError, UpstreamMalformed, UpstreamReplyTooLarge
from proxy.exchange import Channel
from proxy.observe.timing import current
from proxy.streaming.client import ClientStream
from proxy.upstream.relayed_errors import masked_json, masked_text
from proxy.wire.base import StreamAssembler
from proxy.wire.sse import SSEParser, frame

__all__ = ["read_streamed_reply"]

_decode = msgspec.json.decode
_SHOWN_CHARS = 560
"""The upstream's error message as relayed: about 500 characters after the proxy's prefix."""


async def read_streamed_reply(
    response: httpx.Response,
    assembler: StreamAssembler,
    client: ClientStream,
    held: Callable[[StreamAssembler], int],
    secrets: Callable[[], Sequence[bytes]] = tuple,
) -> ProxyError | None:
    """Feed the upstream's stream through ``assembler`` into ``client``; the error, if it failed.

    ``secrets`` (asked only when the stream carries an error event): the keys to mask in the
    upstream's error message, which the client gets."""
    client.upstream_headers = response.headers.raw  # a fresh list on every access
    held = _asked_on_change(held)
    client.release(Channel.ALL & ~held(assembler))
    parser = SSEParser()
    ends = assembler.ends
    timing = current()
    waited = 0.0
    # The transport's own iterator, not httpx's aiter_raw (an async generator and a re-chunker
    # per reply); closing the response still closes it.
    chunks = aiter(response.stream)  # type: ignore[arg-type]
    try:
        while True:
            asked = time.perf_counter()
            try:
                data = await anext(chunks)
            except StopAsyncIteration:
                data = None
            finally:
                waited += time.perf_counter() - asked
            for event, name in parser.feed(data) if data is not None else parser.close():
                if ends(event):
                    await _ended(client)
                    return None
                error = _take(event, name, assembler, client, held, secrets)
                if error is not None:
                    return _shown(error, secrets) if isinstance(error, _ErrorEvent) else error
                if assembler.complete:  # a format whose last event carries data (Messages' message_stop)
                    await _ended(client)
                    return None
            await client.flush()
            if data is None:
                return _ended_early(parser, assembler)
    except UpstreamReplyTooLarge as exc:  # the transport's bound (max_reply_bytes): nothing more is read
        return exc
    except httpx.TimeoutException:
        return UpstreamDisconnected("The upstream model API stopped sending (read timeout).")
    except httpx.TransportError:
        return UpstreamDisconnected("The upstream model API broke off the stream.")
    finally:
        if timing is not None:
            timing.waited += waited


async def _ended(client: ClientStream) -> None:
    """The stream is whole. What it let through goes now when nothing of it waits for the
    verdict, as it would have gone read by read from a stream the network split: a reply read
    in one piece is not held back for the judgment and the books that only its end awaits.
    One that a guard holds goes whole with the verdict (or is replaced unseen)."""
    if not client.holding:
        await client.flush()


def _take(
    data: bytes,
    name: bytes,
    assembler: StreamAssembler,
    client: ClientStream,
    held: Callable[[StreamAssembler], int],
    secrets: Callable[[], Sequence[bytes]] = tuple,
) -> ProxyError | None:
    try:
        chunk: Any = _decode(data)
    except (msgspec.DecodeError, RecursionError):
        return UpstreamMalformed("The upstream model API sent a stream chunk that is not valid JSON.")
    if not isinstance(chunk, dict):
        return UpstreamMalformed("The upstream model API sent a stream chunk that is not a JSON object.")
    kind = chunk.get("type")
    named = name
    if isinstance(kind, str):  # Responses' and Messages' events say what they are
        typed = _NAMES.get(kind) or _as_name(kind)
        if typed is None:  # as an event's name it would frame events of its own
            return UpstreamMalformed("The upstream model API sent a stream event whose type breaks a line.")
        named = typed
        if name and name != named:
            name = named  # the data decides: a client dispatching on the name reads what the data is
    if name == b"error" or "error" in chunk:
        return _stream_error(chunk)
    if "response" in chunk and _failed(chunk):  # Responses' response.failed: relayed, its message masked
        data = masked_json(data, secrets())
        chunk = _decode(data)
    raw = frame(data, name)
    if named in client.passing and client.passes(raw, chunk):  # nothing in it for the guards (named or not)
        return None
    channels = assembler.add(chunk)
    if channels & (Channel.FINISH | Channel.BARE):
        client.defer(raw, usage_only=bool(channels & Channel.BARE), chunk=chunk)
        return None
    if channels & ~client.released or client.holding:
        released = Channel.ALL & ~held(assembler) & ~client.released
        if released:
            client.release(released)
    client.push(raw, chunk, channels)
    return None


_NAMES: dict[str, bytes] = {}
"""Event types as event names: a format has a few dozen, met on every event of every stream."""
_KEPT_NAMES = 256
_KEPT_LENGTH = 96
"""At most this many kept, none longer than this (the APIs' longest is under 50): an upstream
that invents types gets them encoded each time, and never holds memory across requests."""


def _as_name(kind: str) -> bytes | None:
    """``kind`` as an event's name; None when it breaks a line."""
    if "\n" in kind or "\r" in kind:
        return None
    named = kind.encode()
    if len(_NAMES) < _KEPT_NAMES and len(kind) <= _KEPT_LENGTH:
        _NAMES[kind] = named
    return named


def _asked_on_change(held: Callable[[StreamAssembler], int]) -> Callable[[StreamAssembler], int]:
    """``held``, asked again only when what a guard reads of the reply so far (a
    :class:`~proxy.exchange.PartialReply`: its text, grown only by appending, and which channels
    have content) changed since it was last asked: lifecycle events change none of it."""
    last: list[Any] = [None, Channel.NONE]

    def asked(partial: StreamAssembler) -> int:
        seen = (partial.text_length, partial.has_text, partial.has_reasoning, partial.has_tool_calls)
        if seen != last[0]:
            last[0], last[1] = seen, held(partial)
        return int(last[1])

    return asked


def _failed(chunk: dict[str, Any]) -> bool:
    """A terminal event whose response carries the upstream's error (Responses' ``response.failed``)."""
    response = chunk.get("response")
    return isinstance(response, dict) and isinstance(response.get("error"), dict)


def _ended_early(parser: SSEParser, assembler: StreamAssembler) -> ProxyError:
    if parser.pending:
        return UpstreamDisconnected("The upstream model API broke off the stream mid-event.")
    return UpstreamDisconnected(f"The upstream model API ended the stream without {assembler.end_name}.")


class _ErrorEvent(UpstreamError):
    """The upstream's own error event, its message whole until :func:`_shown` bounds it."""


def _stream_error(chunk: dict[str, Any]) -> ProxyError:
    error = chunk.get("error")  # chat's and Messages' shape; a Responses error event carries its own
    message = error.get("message") if isinstance(error, dict) else chunk.get("message")
    text = message if isinstance(message, str) and message else "an error"
    return _ErrorEvent(f"The upstream model API ended the stream with an error: {text}")


def _shown(error: _ErrorEvent, secrets: Callable[[], Sequence[bytes]]) -> UpstreamError:
    """The upstream's message as the client may see it: keys masked, then cut to length (in
    that order, so no key is cut in two and half of it shown)."""
    return UpstreamError(masked_text(error.message, secrets())[:_SHOWN_CHARS])

"""One attempt of the guard loop, from request body to reply: whole, or streamed and assembled.

The upstream is always asked for usage, so streamed tokens are metered (a client that did
not ask never sees the usage chunk). The reply is read through the guards' holds into the
client's stream; an upstream that ignores ``stream`` and answers with a whole reply is
read as one. A stream that does not finish (cut, stalled, malformed, or the client left)
still costs its step and its tokens. Tokens the upstream did not report (a stream cut before
its usage event, or an upstream that does not send usage in a stream) are estimated,
and every estimate is counted.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from proxy.books.ledger import Ledger
from proxy.exchange import Channel, Reply, Turn, Usage
from proxy.guards.base import GuardContext, ResponseGuard
from proxy.observe.metrics import Metrics
from proxy.request import AgentRequest
from proxy.session.base import FIELDS, SessionDelta
from proxy.streaming.client import ClientStream
from proxy.streaming.holdback import held_channels
from proxy.streaming.reader import read_streamed_reply
from proxy.upstream.client import UpstreamClient, UpstreamReply
from proxy.upstream.relayed_errors import credential_values, secret_forms

if TYPE_CHECKING:
    from proxy.wire.base import StreamAssembler

__all__ = ["Attempts"]

_EVENT_STREAM = b"text/event-stream"


class Attempts:
    def __init__(
        self, upstream: UpstreamClient, ledger: Ledger, metrics: Metrics, guards: Sequence[ResponseGuard]
    ) -> None:
        self._upstream = upstream
        self._ledger = ledger
        self._metrics = metrics
        self._guards = tuple(guards)

    async def whole(
        self,
        request: AgentRequest,
        payload: Mapping[str, Any],
        extra: Sequence[Turn],
        delta: SessionDelta,
        attempt: int,
    ) -> tuple[UpstreamReply, Reply | None]:
        """(upstream reply, the reply or None) of a call not streamed: the request as it came when
        nothing was added. A call the client's leaving cancels still took its step and prompt."""
        unchanged = payload is request.payload and not extra
        body = request.body if unchanged else request.wire.codec.render_request(payload, extra)
        try:
            upstream = await self._upstream.send("POST", request.url, request.headers, body)
        except asyncio.CancelledError:  # the client left: the call was made all the same
            self._ledger.charge_cancelled(request, delta, len(body), attempt)
            raise
        ok = upstream.response.status_code == 200
        return upstream, request.wire.codec.parse_reply(upstream.response.content) if ok else None

    async def attempt(
        self,
        request: AgentRequest,
        payload: Mapping[str, Any],
        extra: Sequence[Turn],
        client: ClientStream,
        context: GuardContext,
        delta: SessionDelta,
        hold: int = Channel.NONE,
    ) -> tuple[UpstreamReply, Reply | None, StreamAssembler | None]:
        """(upstream reply, the reply or None, its assembler if it streamed). ``hold``: channels
        held besides what the guards hold (goal mode's text)."""
        body = request.wire.stream.render_request(
            request.body, payload, extra, payload is request.payload and not extra
        )
        await client.flush()  # text an earlier attempt let through goes out before the next wait
        reply = await self._upstream.send("POST", request.url, request.headers, body, stream=True)
        response = reply.response
        if response.status_code != 200 or not _is_event_stream(response.headers.raw):
            try:
                await response.aread()
            finally:
                await response.aclose()
            ok = response.status_code == 200
            return reply, request.wire.codec.parse_reply(response.content) if ok else None, None
        # Shadow mode changes nothing, on streams too. Partials of module functions: no closures per call.
        enforce = request.policy.mode == "enforce"
        held = partial(_held, self._guards, context, hold) if enforce else _nothing_held
        assembler = request.wire.stream.assembler()
        client.new_attempt()
        try:
            failure = await read_streamed_reply(response, assembler, client, held, partial(_secrets, request.headers))
        except asyncio.CancelledError:
            self._charge_unfinished(request, delta, assembler, len(body), "client_disconnected")
            raise
        finally:
            await response.aclose()
        if failure is not None:
            self._charge_unfinished(request, delta, assembler, len(body), failure.code or "upstream_error")
            raise failure
        parsed = assembler.reply()
        if assembler.usage is None:  # complete, but no usage chunk: not free
            parsed = dataclasses.replace(parsed, usage=self._estimate(request, assembler, len(body), "no_usage_chunk"))
        return reply, parsed, assembler

    def _charge_unfinished(
        self, request: AgentRequest, delta: SessionDelta, assembler: StreamAssembler, prompt_bytes: int, reason: str
    ) -> None:
        """A stream that did not complete still cost tokens: count what the upstream reported,
        or an estimate (4 bytes a token), and the step."""
        usage = assembler.usage or self._estimate(request, assembler, prompt_bytes, "unfinished")
        delta.incr(FIELDS.STEPS)
        self._ledger.charge(request, delta, usage, assembler.model, kind="agent")
        self._metrics.of(self._metrics.stream_failures, request.tenant, request.policy.name, reason).inc()
        request.log("stream_unfinished", {"reason": reason, "usage_estimated": assembler.usage is None})

    def _estimate(self, request: AgentRequest, assembler: StreamAssembler, prompt_bytes: int, reason: str) -> Usage:
        """The tokens of a stream the upstream reported none for: its prompt and what it produced,
        about 4 bytes a token (counted by ``reason``, so a dashboard shows how much is guessed)."""
        self._metrics.of(self._metrics.usage_estimated, request.tenant, request.policy.name, reason).inc()
        return Usage(prompt_bytes // 4, assembler.produced_chars // 4 + 1)


def _held(guards: Sequence[ResponseGuard], context: GuardContext, hold: int, so_far: StreamAssembler) -> int:
    """What the guards (and ``hold``) hold of a stream so far."""
    return held_channels(guards, so_far, context) | hold


def _nothing_held(so_far: StreamAssembler) -> int:
    return Channel.NONE


def _secrets(headers: Sequence[tuple[str, str]]) -> list[bytes]:
    """The keys an upstream's error event could quote (asked only when a stream carries one)."""
    return secret_forms(credential_values(headers))


def _is_event_stream(raw_headers: Sequence[tuple[bytes, bytes]]) -> bool:
    """From the raw headers: httpx's decoded views cost more than the whole check."""
    for name, value in raw_headers:
        if name.lower() == b"content-type":
            return value.lower().startswith(_EVENT_STREAM)
    return False

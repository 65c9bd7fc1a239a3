"""What a request answers, as a value the guard loop returns, and the one place it is written.

The loop decides; :func:`render` writes: the upstream's reply copied or its stream finished,
a body the proxy wrote (an ending, a rewrite), or an error event for a stream that already
reached the client. The ledger commits between the two, so what the client reads (headers,
a stream's last event) reflects the books.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from proxy.errors import ProxyError, UpstreamError
from proxy.exchange import Reply
from proxy.loop.answer_channel import ending_for
from proxy.request import SSE, AgentRequest, Outcome
from proxy.streaming.client import ClientStream
from proxy.upstream.client import UpstreamReply

__all__ = ["Answer", "Failed", "Passed", "Tried", "Unusable", "Written", "client_stream", "delivered_reply", "render"]


@dataclass(slots=True)
class Tried:
    """An upstream attempt with a usable reply."""

    upstream: UpstreamReply
    reply: Reply
    streamed: Callable[[], dict[str, Any]] | None
    """For a reply that streamed: its whole completion, as assembled."""
    latency: float


@dataclass(frozen=True, slots=True)
class Written:
    """A body the proxy wrote: an ending (``shaped`` for the request's answer channel), a
    rewrite, the reply without the goal tool's calls."""

    body: dict[str, Any]
    shaped: bool = False
    upstream_saw: tuple[Reply, Mapping[str, str]] | None = None
    """For the reply without the goal tool's calls: the reply whole, and the calls the proxy
    answered itself (id: result), as the upstream saw them (the session records them)."""


@dataclass(frozen=True, slots=True)
class Passed:
    """The upstream's reply, passed by the guards: the client gets it as it came."""

    tried: Tried


@dataclass(frozen=True, slots=True)
class Unusable:
    """An upstream error status or a body that is no completion: passed on as it came."""

    upstream: UpstreamReply


@dataclass(frozen=True, slots=True)
class Failed:
    """The stream failed after part of it reached the client."""

    error: ProxyError


Answer = Written | Passed | Unusable | Failed


def delivered_reply(request: AgentRequest, answer: Answer) -> Reply | None:
    """The reply the client gets, as the guards read it (None: an error, or no reply)."""
    if isinstance(answer, Passed):
        return answer.tried.reply
    if isinstance(answer, Written):
        body = ending_for(request, answer.body, text_started=False) if answer.shaped else answer.body
        return request.wire.codec.parse_reply(request.wire.codec.encode(body))
    return None


def client_stream(
    request: AgentRequest, headers: Callable[[], list[tuple[bytes, bytes]]], keepalive: float
) -> ClientStream | None:
    """Where a streaming request's answer goes as it may (None: the answer goes whole, or a
    caller outside the server has nowhere to stream to); ``headers``: the reply's own, when it
    starts."""
    if not request.stream or request.respond is None:
        return None
    return ClientStream(
        request.respond,
        headers,
        include_usage=request.include_usage(),
        keepalive=keepalive,
        stream=request.wire.stream,
    )


async def render(
    request: AgentRequest,
    client: ClientStream | None,
    answer: Answer,
    headers: Callable[[], list[tuple[bytes, bytes]]],
) -> Outcome:
    """The request's answer: JSON, a copy of the upstream's, or SSE (to ``client`` when the
    server streams it, else as a body)."""
    if isinstance(answer, Passed):  # the common case first
        upstream = answer.tried.upstream
        if client is None:
            return Outcome(upstream.response.status_code, headers(), upstream=upstream)
        if answer.tried.streamed is not None:
            await client.finish()
            return Outcome(200, [], delivered=True)
        body = request.wire.codec.decode(upstream.response.content)  # a whole completion, where a stream was asked
    elif isinstance(answer, Written):
        body = answer.body
        if answer.shaped:
            # In the channel this request reads its answer from (a later request of an ended
            # session may ask differently from the one that ended it): a call to its answer
            # tool, a refusal when it asked for a JSON answer, else text; and text when text of
            # the answer already streamed.
            body = ending_for(request, body, text_started=client is not None and client.text_started)
    elif isinstance(answer, Unusable) and (client is None or not client.started):
        return Outcome(answer.upstream.response.status_code, headers(), upstream=answer.upstream)
    else:  # part of the stream already reached the client: an error event ends it
        if isinstance(answer, Unusable):
            status = answer.upstream.response.status_code
            error: ProxyError = UpstreamError(f"The upstream model API answered {status}.")
        else:
            error = answer.error
        if client is not None:
            await client.fail(error)
        return Outcome(200, [], delivered=True)
    if client is not None:
        await client.replace(body)
        return Outcome(200, [], delivered=True)
    wire = request.wire
    if request.stream:  # no client stream to write to (a caller outside the server)
        return Outcome(200, headers(), wire.stream.streamed(body, include_usage=request.include_usage()), SSE)
    return Outcome(200, headers(), wire.codec.encode(body))

"""A scriptable fake Anthropic Messages upstream, and a strict checker of Messages streams
(the fixtures below are a pytest plugin of ``tests/conftest.py``).

Tests queue the messages they want (content blocks and a ``stop_reason``); the fake answers
each request in the form it asks for: a JSON message, or the named-event SSE stream the API
sends (``message_start``, blocks with their deltas, ``message_delta``, ``message_stop``, a
``ping``). Like the API since "preserved thinking", it signs every thinking block over its
prefix (``system``, ``tools`` and every earlier message) and answers 400 "bound to a
different conversation" to a request that replays a thinking block under another prefix.
Serving, recording and the judge are the base fake's (``fake_upstream.FakeUpstream``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from tests.support.fake_upstream import (
    CloseAfterRequest,
    FakeUpstream,
    Hang,
    Json,
    Recorded,
    emptied,
    judged,
    running,
)
from tests.support.messages_checker import check_stream, streamed_message
from tests.support.turns import Turn

__all__ = [
    "BOUND_ELSEWHERE",
    "Events",
    "FakeMessages",
    "Said",
    "check_stream",
    "checking_client",
    "judge_verdict",
    "message_body",
    "said",
    "signature",
    "sse_bytes",
    "stream_events",
    "streamed_message",
    "text",
    "thinking",
    "tool_use",
]

BOUND_ELSEWHERE = "The block is bound to a different conversation"


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def thinking(value: str) -> dict[str, Any]:
    """A thinking block; the fake signs it when it answers (over the request's prefix)."""
    return {"type": "thinking", "thinking": value, "signature": None}


def tool_use(name: str, arguments: dict[str, Any], call_id: str = "toolu_1") -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


@dataclass
class Said:
    """One scripted message: its content blocks and why it stopped."""

    content: list[dict[str, Any]]
    stop_reason: str = "end_turn"
    usage: dict[str, Any] = field(default_factory=lambda: {"input_tokens": 12, "output_tokens": 8})
    model: str | None = None
    """The model that answers (None: the one the request names)."""
    delay: float = 0.0
    """Seconds to wait before answering."""


def said(*blocks: dict[str, Any], stop_reason: str | None = None) -> Said:
    """A message of ``blocks``; it stops for ``tool_use`` when it calls one, else ``end_turn``."""
    calls = any(b.get("type") == "tool_use" for b in blocks)
    return Said(list(blocks), stop_reason or ("tool_use" if calls else "end_turn"))


def rendered(reply: Turn) -> Said:
    """A neutral reply as a message: thinking, text, then tool_use blocks."""
    blocks = [thinking(reply.reasoning)] if reply.reasoning is not None else []
    blocks += [text(reply.text)] if reply.text is not None else []
    blocks += [
        tool_use(c.name, c.arguments if isinstance(c.arguments, dict) else json.loads(c.arguments), c.id)
        for c in reply.calls
    ]
    made = said(*blocks)
    made.usage = {"input_tokens": reply.usage[0], "output_tokens": reply.usage[1]}
    return made


@dataclass
class Events:
    """A raw stream of (event name, data) pairs, sent as they are (``cut`` closes the connection after them)."""

    events: list[tuple[str, Any]]
    cut: bool = False


def _stripped(value: Any) -> Any:
    """What a signature binds: the value without ``cache_control`` (excluded by the API) and
    without null fields (SDKs differ in writing them back)."""
    if isinstance(value, dict):
        return {k: _stripped(v) for k, v in value.items() if k != "cache_control" and v is not None}
    if isinstance(value, list):
        return [_stripped(v) for v in value]
    return value


def signature(payload: dict[str, Any], before: int, thought: str) -> str:
    """The signature of a thinking block that follows the first ``before`` messages."""
    prefix = [payload.get("system"), payload.get("tools"), payload.get("messages", [])[:before], thought]
    canonical = json.dumps(_stripped(prefix), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sig-" + hashlib.sha256(canonical.encode()).hexdigest()[:40]


def bound_elsewhere(payload: dict[str, Any]) -> str | None:
    """Where the request replays a thinking block under another prefix than it was made on."""
    for position, message in enumerate(payload.get("messages", [])):
        content = message.get("content") if isinstance(message, dict) else None
        if message.get("role") != "assistant" or not isinstance(content, list):
            continue
        for index, block in enumerate(content):
            if not isinstance(block, dict) or block.get("type") != "thinking":
                continue
            if block.get("signature") != signature(payload, position, block.get("thinking", "")):
                where = f"messages.{position}.content.{index}"
                return f"{where}: Invalid `signature` in `thinking` block. {BOUND_ELSEWHERE}."
    return None


def message_body(reply: Said, payload: dict[str, Any], message_id: str = "msg_fake") -> dict[str, Any]:
    """The reply as the API's ``message`` for ``payload`` (thinking signed over its prefix)."""
    before = len(payload.get("messages", []))
    content = [
        {**b, "signature": signature(payload, before, b["thinking"])}
        if b.get("type") == "thinking" and b.get("signature") is None
        else b
        for b in reply.content
    ]
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": reply.model or payload.get("model") or "claude-fake",
        "content": content,
        "stop_reason": reply.stop_reason,
        "stop_sequence": None,
        "usage": reply.usage,
    }


def _pieces(value: str, count: int = 3) -> list[str]:
    size = max(1, -(-len(value) // count))
    return [value[i : i + size] for i in range(0, len(value), size)] or [""]


def stream_events(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The message as the API streams it (text, thinking and input split into pieces)."""
    head = {k: v for k, v in body.items() if k not in ("content", "stop_reason", "usage")}
    usage = dict(body["usage"])
    events: list[tuple[str, dict[str, Any]]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {**head, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}},
            },
        ),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(body["content"]):
        kind = block["type"]
        start: dict[str, Any] = dict(block)
        deltas: list[dict[str, Any]] = []
        if kind == "text":
            start["text"] = ""
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"])]
        elif kind == "thinking":
            start.update(thinking="", signature="")
            deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(block["thinking"])]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind in ("tool_use", "server_tool_use"):
            start["input"] = {}
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(json.dumps(block["input"]))]
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}))
        events += [("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}) for d in deltas]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    delta = {"stop_reason": body["stop_reason"], "stop_sequence": None}
    events.append(
        ("message_delta", {"type": "message_delta", "delta": delta, "usage": {"output_tokens": usage["output_tokens"]}})
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def events_of(*blocks: dict[str, Any], stop_reason: str | None = None) -> list[dict[str, Any]]:
    """The events of a streamed message of ``blocks`` (a one-turn request for model ``m``)."""
    payload = {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
    return [data for _, data in stream_events(message_body(said(*blocks, stop_reason=stop_reason), payload))]


def sse_bytes(events: list[tuple[str, Any]]) -> bytes:
    """Events framed as the API frames them (``event:`` name, then ``data:``)."""
    return b"".join(
        f"event: {name}\ndata: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()
        for name, data in events
    )


def judge_verdict(request: dict[str, Any], done: bool, reason: str = "checked") -> Said:
    """What an honest judge model answers, as a message (a test may delay it)."""
    return rendered(judged(request, done, reason))


class FakeMessages(FakeUpstream):
    """The scripted Messages server: the base fake's serving, recording and judge, with the
    format's routes (token counts, model list, telemetry), messages, streams and signatures."""

    def __init__(self) -> None:
        super().__init__()
        self.rejected: list[str] = []
        """The 400s answered to prefixes that did not match their thinking blocks."""
        self.counter = 0
        self.summary: Said | Turn | None = None
        """When set, the answer to every ending's summary call (tools forbidden), apart from the script."""

    def reset(self) -> None:
        super().reset()
        self.rejected.clear()
        self.summary = None

    def script(self, *replies: Said | Events | Json | Hang | CloseAfterRequest | Turn) -> None:  # type: ignore[override]
        super().script(*replies)  # type: ignore[arg-type]

    def _route(self, request: web.Request, recorded: Recorded, payload: Any) -> web.StreamResponse | None:
        path = request.rel_url.path
        if path.endswith("/count_tokens"):
            self.requests.append(recorded)
            return web.json_response({"input_tokens": len(recorded.body) // 4})
        if path == "/api/event_logging/batch":  # Claude Code's telemetry
            self.requests.append(recorded)
            return web.json_response({})
        if path.endswith("/models"):
            self.requests.append(recorded)
            return web.json_response({"data": [{"type": "model", "id": "claude-fake"}], "has_more": False})
        if not isinstance(payload, dict):  # a client's probe (HEAD /, a GET): answered, not scripted
            self.requests.append(recorded)
            return web.json_response({})
        return None

    def _next(self, payload: Any) -> Any:
        if self.summary is not None and payload.get("tool_choice") == {"type": "none"}:
            return self.summary
        return super()._next(payload)

    def _plain_answer(self) -> Any:
        return said(text("Hello from the fake model."))

    def _render(self, reply: Turn, payload: Any) -> Any:
        return rendered(reply)

    def _refused(self, payload: Any) -> web.StreamResponse | None:
        wrong = bound_elsewhere(payload)
        if wrong is None:
            return None
        self.rejected.append(wrong)
        error = {"type": "error", "error": {"type": "invalid_request_error", "message": wrong}}
        return web.json_response(error, status=400)

    async def _serve(self, request: web.Request, payload: Any, reply: Any, *, judging: bool) -> web.StreamResponse:
        self.counter += 1
        if isinstance(reply, Events):  # written in one piece, as the API's stream arrives from a fast model
            return await self._stream(request, [sse_bytes(reply.events)], headers=_SSE, cut=1 if reply.cut else None)
        assert isinstance(reply, Said), f"the Messages fake cannot serve {reply!r}"
        if reply.delay and await self._hold(request, reply.delay):
            return web.Response(status=599)
        message = message_body(reply, payload, f"msg_fake{self.counter:04d}")
        if payload.get("stream") is True:
            return await self._stream(request, [sse_bytes(stream_events(message))], headers=_SSE)
        return web.Response(body=json.dumps(message).encode(), headers={"Content-Type": "application/json"})


_SSE = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


# -- fixtures (imported by the Messages test modules) ----------------------------------------


@pytest.fixture(scope="session")
def messages_server() -> Iterator[FakeMessages]:
    yield from running(FakeMessages)


@pytest.fixture
def anthropic_upstream(messages_server: FakeMessages) -> Iterator[FakeMessages]:
    """The fake Messages API, with an empty script and no recorded requests."""
    yield from emptied(messages_server)


@pytest.fixture
def messages_proxy(make_proxy: Callable[..., Any], anthropic_upstream: FakeMessages) -> Any:
    """A default proxy (no tenants file) in front of the fake Messages API."""
    return make_proxy(upstream=anthropic_upstream.url)


# -- every stream an SDK client reads, checked ------------------------------------------------


def checking_client(proxy: Any, streams: list[bytes], **options: Any) -> Any:
    """An ``anthropic.Anthropic`` pointed at ``proxy`` whose streamed replies are kept in
    ``streams`` (check them with :func:`check_stream`)."""
    import anthropic
    import httpx2

    class Tee(httpx2.SyncByteStream):
        """A response body passed on as it arrives, and kept whole for the checker."""

        def __init__(self, inner: Any) -> None:
            self._inner = inner
            self._parts: list[bytes] = []

        def __iter__(self) -> Iterator[bytes]:
            for part in self._inner:
                self._parts.append(part)
                yield part
            streams.append(b"".join(self._parts))

        def close(self) -> None:
            self._inner.close()

    class Keeping(httpx2.HTTPTransport):
        def handle_request(self, request: httpx2.Request) -> httpx2.Response:
            response = super().handle_request(request)
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                response.stream = Tee(response.stream)
            return response

    options.setdefault("api_key", "sk-ant")
    options.setdefault("max_retries", 0)
    return anthropic.Anthropic(base_url=proxy.url, http_client=httpx2.Client(transport=Keeping()), **options)


@pytest.fixture
def sdk_streams() -> Iterator[list[bytes]]:
    """Streams read by :func:`checking_client` clients in a test; each checked at its end."""
    streams: list[bytes] = []
    yield streams
    for raw in streams:
        check_stream(raw)

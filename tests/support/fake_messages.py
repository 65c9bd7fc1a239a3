"""A scriptable fake Anthropic Messages upstream, and a strict checker of Messages streams
(the fixtures below are a pytest plugin of ``tests/conftest.py``).

Tests queue the messages they want (content blocks and a ``stop_reason``); the fake answers
each request in the form it asks for: a JSON message, or the named-event SSE stream the API
sends (``message_start``, blocks with their deltas, ``message_delta``, ``message_stop``, a
``ping``). Like the API since "preserved thinking", it signs every thinking block over its
prefix (``system``, ``tools`` and every earlier message) and answers 400 "bound to a
different conversation" to a request that replays a thinking block under another prefix.
Judge calls (the judge's system prompt) are answered by ``self.judge``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from tests.support.fake_upstream import (
    JUDGE_PROMPT,
    PROGRESS_PROMPT,
    CloseAfterRequest,
    FakeUpstream,
    Hang,
    Json,
    Recorded,
    Turn,
)

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


def sse_bytes(events: list[tuple[str, Any]]) -> bytes:
    """Events framed as the API frames them (``event:`` name, then ``data:``)."""
    return _sse(events)


def _sse(events: list[tuple[str, Any]]) -> bytes:
    return b"".join(
        f"event: {name}\ndata: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()
        for name, data in events
    )


def judge_verdict(request: dict[str, Any], done: bool, reason: str = "checked") -> Said:
    """What an honest judge model answers (the nonce its system prompt asks to be echoed)."""
    system = request.get("system")
    prompt = system if isinstance(system, str) else "".join(b.get("text", "") for b in system or [])
    nonce = prompt.split('"nonce": "', 1)[1].split('"', 1)[0]
    flag = "progress" if prompt.startswith(PROGRESS_PROMPT) else "done"  # the progress question's verdict
    return said(text(json.dumps({"nonce": nonce, flag: done, "reason": reason})))


def _honest(request: dict[str, Any]) -> Said:
    return judge_verdict(request, True)


def _judge_call(payload: Any) -> bool:
    system = payload.get("system") if isinstance(payload, dict) else None
    prompt = (
        system if isinstance(system, str) else "".join(b.get("text", "") for b in system or [] if isinstance(b, dict))
    )
    return prompt.startswith((JUDGE_PROMPT, PROGRESS_PROMPT))


class FakeMessages(FakeUpstream):
    """The scripted Messages server (the chat fake's lifecycle and recording, its own answers)."""

    def __init__(self) -> None:
        super().__init__()
        self.judge = _honest  # type: ignore[assignment]
        self.rejected: list[str] = []
        """The 400s answered to prefixes that did not match their thinking blocks."""
        self.counter = 0
        self.summary: Said | None = None
        """When set, the answer to every ending's summary call (tools forbidden), apart from the script."""

    def reset(self) -> None:
        super().reset()
        self.judge = _honest  # type: ignore[assignment]
        self.rejected.clear()
        self.summary = None

    def script(self, *replies: Said | Events | Json | Hang | CloseAfterRequest | Turn) -> None:  # type: ignore[override]
        super().script(*replies)  # type: ignore[arg-type]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        recorded = Recorded(
            request.method,
            request.rel_url.raw_path,
            request.rel_url.raw_query_string,
            [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.raw_headers],
            body,
        )
        path = request.rel_url.path
        if path.endswith("/count_tokens"):
            self.requests.append(recorded)
            return web.json_response({"input_tokens": len(body) // 4})
        if path == "/api/event_logging/batch":  # Claude Code's telemetry
            self.requests.append(recorded)
            return web.json_response({})
        if path.endswith("/models"):
            self.requests.append(recorded)
            return web.json_response({"data": [{"type": "model", "id": "claude-fake"}], "has_more": False})
        try:
            payload = json.loads(body)
        except ValueError:
            payload = None
        if not isinstance(payload, dict):  # a client's probe (HEAD /, a GET): answered, not scripted
            self.requests.append(recorded)
            return web.json_response({})
        with self._lock:
            if _judge_call(payload):
                self.judge_requests.append(recorded)
                reply: Any = self.judge(payload)
            elif self.summary is not None and payload.get("tool_choice") == {"type": "none"}:
                self.requests.append(recorded)
                reply = self.summary
            else:
                self.requests.append(recorded)
                reply = self._replies.popleft() if self._replies else said(text("Hello from the fake model."))
            if isinstance(reply, Turn):
                reply = rendered(reply)
            self.counter += 1
            number = self.counter
        wrong = bound_elsewhere(payload)
        if wrong is not None:
            self.rejected.append(wrong)
            error = {"type": "error", "error": {"type": "invalid_request_error", "message": wrong}}
            return web.json_response(error, status=400)
        if isinstance(reply, Hang):
            await self._hold(request, reply.seconds)
            return web.Response(status=599)
        if isinstance(reply, CloseAfterRequest):
            assert request.transport is not None
            request.transport.close()
            raise asyncio.CancelledError
        if isinstance(reply, Json):
            raw = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            return web.Response(
                body=raw, status=reply.status, headers={"Content-Type": "application/json", **reply.headers}
            )
        if isinstance(reply, Events):
            return await self._write(request, _sse(reply.events), cut=reply.cut)
        assert isinstance(reply, Said)
        if reply.delay and await self._hold(request, reply.delay):
            return web.Response(status=599)
        message = message_body(reply, payload, f"msg_fake{number:04d}")
        if payload.get("stream") is True:
            return await self._write(request, _sse(stream_events(message)))
        return web.Response(body=json.dumps(message).encode(), headers={"Content-Type": "application/json"})

    async def _write(self, request: web.Request, data: bytes, *, cut: bool = False) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        try:
            await response.write(data)
            if cut:
                assert request.transport is not None
                request.transport.close()
                return response
            await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            self.stream_aborts.append(asyncio.get_running_loop().time())
        return response


# -- the strict checker --------------------------------------------------------------------

_DELTAS_OF = {
    "text": {"text_delta", "citations_delta"},
    "thinking": {"thinking_delta", "signature_delta"},
    "tool_use": {"input_json_delta"},
    "server_tool_use": {"input_json_delta"},
}


def check_stream(raw: bytes) -> list[dict[str, Any]]:
    """The events of a Messages stream, asserting it is well-formed as the SDKs and Claude Code
    need it: every event named as its ``type``; one ``message_start`` first; blocks opened in
    index order from 0, each closed before the next opens, its deltas of its kind (a tool's
    partial JSON whole at its end); one ``message_delta`` after the last block; one
    ``message_stop`` last. ``ping`` may come anywhere; an ``error`` event ends the stream."""
    events: list[dict[str, Any]] = []
    for part in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        lines = [line for line in part.split(b"\n") if line and not line.startswith(b":")]
        if not lines:
            continue
        fields: dict[bytes, list[bytes]] = {}
        for line in lines:
            name, _, value = line.partition(b":")
            fields.setdefault(name, []).append(value[1:] if value.startswith(b" ") else value)
        assert b"event" in fields, f"an event without an event: line: {part!r}"
        name = fields[b"event"][0].decode()
        data = json.loads(b"\n".join(fields[b"data"]))
        assert data.get("type") == name, f"event {name!r} carries type {data.get('type')!r}"
        events.append(data)
    state = "before"
    open_block: tuple[int, str] | None = None
    next_index = 0
    partial = ""
    for event in events:
        kind = event["type"]
        assert state != "stopped", f"{kind} after message_stop"
        if kind == "ping":
            continue
        if kind == "error":
            state = "stopped"
            continue
        if state == "before":
            assert kind == "message_start", f"the stream starts with {kind}, not message_start"
            state = "blocks"
            continue
        assert kind != "message_start", "a second message_start"
        if kind == "content_block_start":
            assert state == "blocks", "a block after message_delta"
            assert open_block is None, f"block {next_index} opened before block {open_block} closed"
            assert event["index"] == next_index, f"block index {event['index']}, expected {next_index}"
            open_block = (event["index"], event["content_block"]["type"])
            next_index += 1
            partial = ""
        elif kind == "content_block_delta":
            assert open_block is not None, "a delta outside a block"
            assert event["index"] == open_block[0], f"a delta for block {event['index']} inside block {open_block[0]}"
            allowed = _DELTAS_OF.get(open_block[1])
            assert allowed is None or event["delta"]["type"] in allowed, (
                f"{event['delta']['type']} in a {open_block[1]} block"
            )
            partial += event["delta"].get("partial_json", "")
        elif kind == "content_block_stop":
            assert open_block is not None, f"stop of no open block: {event}"
            assert event["index"] == open_block[0], f"stop of a block not open: {event}"
            if open_block[1] in ("tool_use", "server_tool_use") and partial:
                json.loads(partial)
            open_block = None
        elif kind == "message_delta":
            assert state == "blocks", "a second message_delta"
            assert open_block is None, "message_delta with a block open"
            state = "delta"
        elif kind == "message_stop":
            assert state == "delta", "message_stop without message_delta"
            state = "stopped"
    assert state == "stopped", f"the stream ended without message_stop (in state {state})"
    return events


def streamed_message(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The message a checked stream carries (blocks assembled), for comparing with a JSON reply."""
    message: dict[str, Any] = {}
    blocks: list[dict[str, Any]] = []
    partial: dict[int, str] = {}
    for event in events:
        kind = event["type"]
        if kind == "message_start":
            message = dict(event["message"])
        elif kind == "content_block_start":
            blocks.append(dict(event["content_block"]))
        elif kind == "content_block_delta":
            block, delta = blocks[event["index"]], event["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] += delta["signature"]
            elif delta["type"] == "input_json_delta":
                partial[event["index"]] = partial.get(event["index"], "") + delta["partial_json"]
        elif kind == "message_delta":
            message.update(event["delta"])
    for index, text_ in partial.items():
        blocks[index]["input"] = json.loads(text_) if text_ else {}
    message["content"] = blocks
    return message


# -- fixtures (imported by the Messages test modules) ----------------------------------------


@pytest.fixture(scope="session")
def messages_server() -> Iterator[FakeMessages]:
    server = FakeMessages().start()
    yield server  # type: ignore[misc]
    server.stop()


@pytest.fixture
def anthropic_upstream(messages_server: FakeMessages) -> Iterator[FakeMessages]:
    """The fake Messages API, with an empty script and no recorded requests."""
    messages_server.reset()
    yield messages_server
    messages_server.reset()


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

"""A deliberately dumb, fast fake model API for the benchmark: one fixed chat completion
(a tool call when tools are offered; for ``"stream":true``, one fixed text stream, or a tool-call
stream when tools are offered);
for a Responses request (a body with ``"input"``) the same three as a Responses API answers them.
the same three as Anthropic Messages for ``POST /v1/messages``; a Gemini answer (plain or
``alt=sse``, a function call when tools are offered to a stream) for ``…:generateContent`` and
``…:streamGenerateContent``.

It must never be the bottleneck, so it is a raw asyncio ``Protocol`` on uvloop that parses
only what HTTP/1.1 framing needs (end of headers, ``Content-Length``) and answers every
request with the same pre-rendered bytes, whatever the method or path (so ``GET /healthz``
works as a readiness probe too). Keep-alive by default; pipelined requests are answered in
order. Chunked request bodies are not supported (nothing in the benchmark sends them).

Run: ``python tests/bench/fast_upstream.py --port 9000``
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import signal
from typing import cast

import uvloop

_COMPLETION = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello from the benchmark upstream."},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 8, "completion_tokens": 7, "total_tokens": 15},
        "system_fingerprint": "fp_bench",
    },
    separators=(",", ":"),
).encode()

RESPONSE = (
    b"HTTP/1.1 200 OK\r\n"
    b"Content-Type: application/json\r\n"
    b"Content-Length: " + str(len(_COMPLETION)).encode() + b"\r\n"
    b"\r\n" + _COMPLETION
)
_TOOL_COMPLETION = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_2",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"query":"Lyon"}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 480, "completion_tokens": 12, "total_tokens": 492},
    },
    separators=(",", ":"),
).encode()
TOOL_RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
    + str(len(_TOOL_COMPLETION)).encode()
    + b"\r\n\r\n"
    + _TOOL_COMPLETION
)
"""A chat completion that calls a tool (tools offered, not streamed): an agent's step in its loop."""


def _sse(chunks: list[dict[str, object]]) -> bytes:
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000, "model": "m"}
    events = b"".join(
        b"data: " + json.dumps({**base, **chunk}, separators=(",", ":")).encode() + b"\n\n" for chunk in chunks
    )
    events += b"data: [DONE]\n\n"
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        + f"{len(events):x}".encode()
        + b"\r\n"
        + events
        + b"\r\n0\r\n\r\n"
    )


def _delta(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


_USAGE = {"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": 7, "total_tokens": 15}}
_WORDS = ["Hello ", "from ", "the ", "benchmark ", "upstream", "."]
STREAM_RESPONSE = _sse(
    [
        _delta({"role": "assistant", "content": ""}),
        *(_delta({"content": w}) for w in _WORDS),
        _delta({}, "stop"),
        _USAGE,
    ]
)
"""A streamed text answer (``"stream": true`` without tools)."""
_CALL = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "search", "arguments": ""}}
STREAM_TOOLS_RESPONSE = _sse(
    [
        _delta({"role": "assistant", "content": None}),
        _delta({"tool_calls": [_CALL]}),
        *(
            _delta({"tool_calls": [{"index": 0, "function": {"arguments": p}}]})
            for p in ('{"q":', '"Lyon', ' population"}')
        ),
        _delta({}, "tool_calls"),
        _USAGE,
    ]
)
"""A streamed tool call (``"stream": true`` with ``"tools"``)."""


_ANTHROPIC_MESSAGE = json.dumps(
    {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "Hello from the benchmark upstream."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 8, "output_tokens": 7},
    },
    separators=(",", ":"),
).encode()
MESSAGE_RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
    + str(len(_ANTHROPIC_MESSAGE)).encode()
    + b"\r\n\r\n"
    + _ANTHROPIC_MESSAGE
)
"""An Anthropic Messages answer (``POST /v1/messages``)."""


def _named_sse(events: list[dict[str, object]], *, numbered: bool = False) -> bytes:
    """A chunked SSE reply of named events (``numbered``: with Responses' ``sequence_number``)."""
    body = b"".join(
        b"event: "
        + str(e["type"]).encode()
        + b"\ndata: "
        + json.dumps({**e, "sequence_number": n} if numbered else e, separators=(",", ":")).encode()
        + b"\n\n"
        for n, e in enumerate(events)
    )
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        + f"{len(body):x}".encode()
        + b"\r\n"
        + body
        + b"\r\n0\r\n\r\n"
    )


_RESPONSE_USAGE = {
    "input_tokens": 8,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 7,
    "total_tokens": 15,
}
_MESSAGE = {
    "type": "message",
    "id": "msg_bench",
    "status": "completed",
    "role": "assistant",
    "content": [{"type": "output_text", "text": "".join(_WORDS), "annotations": []}],
}
_FUNCTION_CALL = {
    "type": "function_call",
    "id": "fc_bench",
    "call_id": "call_1",
    "name": "search",
    "arguments": '{"q":"Lyon population"}',
    "status": "completed",
}


def _response(*output: dict[str, object]) -> dict[str, object]:
    return {
        "id": "resp_bench",
        "object": "response",
        "created_at": 1700000000,
        "status": "completed",
        "model": "m",
        "output": list(output),
        "usage": _RESPONSE_USAGE,
    }


_RESPONSE_BODY = json.dumps(_response(_MESSAGE), separators=(",", ":")).encode()
RESPONSES_RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
    + str(len(_RESPONSE_BODY)).encode()
    + b"\r\n\r\n"
    + _RESPONSE_BODY
)
"""A Responses API answer (a body with ``"input"``, not streamed)."""
_OPENING = {**_response(), "status": "in_progress", "usage": None}
_AT = {"item_id": "msg_bench", "output_index": 0, "content_index": 0}
_RESPONSES_EVENTS: list[dict[str, object]] = [
    {"type": "response.created", "response": _OPENING},
    {"type": "response.in_progress", "response": _OPENING},
    {
        "type": "response.output_item.added",
        "output_index": 0,
        "item": {**_MESSAGE, "status": "in_progress", "content": []},
    },
    {"type": "response.content_part.added", **_AT, "part": {"type": "output_text", "text": "", "annotations": []}},
    *({"type": "response.output_text.delta", **_AT, "delta": w} for w in _WORDS),
    {"type": "response.output_text.done", **_AT, "text": "".join(_WORDS)},
    {"type": "response.content_part.done", **_AT, "part": _MESSAGE["content"][0]},  # type: ignore[index]
    {"type": "response.output_item.done", "output_index": 0, "item": _MESSAGE},
    {"type": "response.completed", "response": _response(_MESSAGE)},
]
RESPONSES_STREAM = _named_sse(_RESPONSES_EVENTS, numbered=True)
"""A streamed Responses text answer."""
_CALL_AT = {"item_id": "fc_bench", "output_index": 0}
_RESPONSES_TOOL_EVENTS: list[dict[str, object]] = [
    {"type": "response.created", "response": _OPENING},
    {"type": "response.in_progress", "response": _OPENING},
    {
        "type": "response.output_item.added",
        "output_index": 0,
        "item": {**_FUNCTION_CALL, "arguments": "", "status": "in_progress"},
    },
    *(
        {"type": "response.function_call_arguments.delta", **_CALL_AT, "delta": p}
        for p in ('{"q":', '"Lyon', ' population"}')
    ),
    {"type": "response.function_call_arguments.done", **_CALL_AT, "arguments": _FUNCTION_CALL["arguments"]},
    {"type": "response.output_item.done", "output_index": 0, "item": _FUNCTION_CALL},
    {"type": "response.completed", "response": _response(_FUNCTION_CALL)},
]
RESPONSES_STREAM_TOOLS = _named_sse(_RESPONSES_TOOL_EVENTS, numbered=True)
"""A streamed Responses function call (held back by the proxy until checked)."""


def _ws_frames(events: list[dict[str, object]]) -> bytes:
    """The same events as the server's text frames of the Responses WebSocket mode (unmasked)."""
    frames = b""
    for number, event in enumerate(events):
        data = json.dumps({**event, "sequence_number": number}, separators=(",", ":")).encode()
        size = len(data)
        if size < 126:
            head = bytes([0x81, size])
        elif size < 65536:
            head = bytes([0x81, 126]) + size.to_bytes(2, "big")
        else:
            head = bytes([0x81, 127]) + size.to_bytes(8, "big")
        frames += head + data
    return frames


RESPONSES_SOCKET = _ws_frames(_RESPONSES_EVENTS)
RESPONSES_SOCKET_TOOLS = _ws_frames(_RESPONSES_TOOL_EVENTS)
"""The Responses answers over the WebSocket mode: a ``response.create`` gets the stream's events."""
_WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def _message_stream(block: dict[str, object], deltas: list[dict[str, object]], stop: str) -> bytes:
    start = {k: v for k, v in json.loads(_ANTHROPIC_MESSAGE).items() if k not in ("content", "stop_reason")}
    return _named_sse(
        [
            {"type": "message_start", "message": {**start, "content": [], "stop_reason": None}},
            {"type": "content_block_start", "index": 0, "content_block": block},
            *({"type": "content_block_delta", "index": 0, "delta": d} for d in deltas),
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 7},
            },
            {"type": "message_stop"},
        ]
    )


MESSAGE_STREAM_RESPONSE = _message_stream(
    {"type": "text", "text": ""}, [{"type": "text_delta", "text": w} for w in _WORDS], "end_turn"
)
MESSAGE_STREAM_TOOLS_RESPONSE = _message_stream(
    {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}},
    [{"type": "input_json_delta", "partial_json": p} for p in ('{"q":', '"Lyon', ' population"}')],
    "tool_use",
)


def _gemini_chunk(parts: list[dict[str, object]], finish: str | None = None) -> dict[str, object]:
    candidate: dict[str, object] = {"content": {"role": "model", "parts": parts}, "index": 0}
    chunk: dict[str, object] = {"candidates": [candidate], "modelVersion": "m", "responseId": "gemini-bench"}
    if finish:
        candidate["finishReason"] = finish
        chunk["usageMetadata"] = {"promptTokenCount": 8, "candidatesTokenCount": 7, "totalTokenCount": 15}
    return chunk


_GEMINI = json.dumps(_gemini_chunk([{"text": "".join(_WORDS)}], "STOP"), separators=(",", ":")).encode()
GEMINI_RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
    + str(len(_GEMINI)).encode()
    + b"\r\n\r\n"
    + _GEMINI
)
"""A Gemini ``generateContent`` answer."""
_GEMINI_EVENTS = b"".join(
    b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\r\n\r\n"
    for chunk in [
        *(_gemini_chunk([{"text": w}]) for w in _WORDS[:-1]),
        _gemini_chunk([{"text": _WORDS[-1]}], "STOP"),
    ]
)
GEMINI_STREAM_RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    + f"{len(_GEMINI_EVENTS):x}".encode()
    + b"\r\n"
    + _GEMINI_EVENTS
    + b"\r\n0\r\n\r\n"
)
"""A Gemini ``streamGenerateContent?alt=sse`` answer (no sentinel: the last chunk has the finish)."""
_GEMINI_TOOL_EVENTS = b"".join(
    b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\r\n\r\n"
    for chunk in [
        _gemini_chunk([{"functionCall": {"name": "search", "args": {"q": "Lyon population"}}}]),
        _gemini_chunk([], "STOP"),
    ]
)
GEMINI_STREAM_TOOLS_RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    + f"{len(_GEMINI_TOOL_EVENTS):x}".encode()
    + b"\r\n"
    + _GEMINI_TOOL_EVENTS
    + b"\r\n0\r\n\r\n"
)
"""A streamed Gemini function call (tools offered): the call whole in one chunk, then the finish."""

_NOT_IMPLEMENTED = b"HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_MAX_HEAD = 64 * 1024


class _Upstream(asyncio.Protocol):
    __slots__ = ("_buffer", "_socket", "_transport")

    _transport: asyncio.Transport

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._socket = False
        """The connection was upgraded to a WebSocket: the buffer holds the client's frames."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A cast, not an isinstance check: uvloop's transports do not subclass asyncio's.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        transport = self._transport
        buffer = self._buffer
        buffer += data
        while True:
            if self._socket:
                self._frames()
                return
            head_end = buffer.find(b"\r\n\r\n")
            if head_end < 0:
                if len(buffer) > _MAX_HEAD:
                    transport.close()
                return
            head = bytes(buffer[:head_end]).lower()
            if b"\r\ntransfer-encoding:" in head:
                transport.write(_NOT_IMPLEMENTED)
                transport.close()
                return
            total = head_end + 4 + _content_length(head)
            if len(buffer) < total:
                return  # the body is still arriving
            body = bytes(buffer[head_end + 4 : total])
            if b"\r\nupgrade: websocket" in head:
                transport.write(_accepted(head, bytes(buffer[:head_end])))
                del buffer[:total]
                self._socket = True
                continue
            del buffer[:total]
            transport.write(_answer(head, body))
            if b"\r\nconnection: close" in head:
                transport.close()
                return

    def _frames(self) -> None:
        """Answer each complete client frame: a text frame (a ``response.create``) with the
        stream's events, a ping with a pong, a close with a close."""
        buffer = self._buffer
        while len(buffer) >= 6:
            opcode, size, at = buffer[0] & 0x0F, buffer[1] & 0x7F, 2
            if size == 126:
                size, at = int.from_bytes(buffer[2:4], "big"), 4
            elif size == 127:
                size, at = int.from_bytes(buffer[2:10], "big"), 10
            if len(buffer) < at + 4 + size:
                return
            mask = bytes(buffer[at : at + 4])
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(buffer[at + 4 : at + 4 + size]))
            del buffer[: at + 4 + size]
            if opcode == 0x1:
                self._transport.write(RESPONSES_SOCKET_TOOLS if b'"tools"' in payload else RESPONSES_SOCKET)
            elif opcode == 0x9:
                self._transport.write(bytes([0x8A, len(payload)]) + payload)
            elif opcode == 0x8:
                self._transport.write(b"\x88\x02\x03\xe8")
                self._transport.close()
                return


def _accepted(head: bytes, raw: bytes) -> bytes:
    """The 101 answer to a WebSocket handshake (RFC 6455, 4.2.2); ``raw``: the head as sent
    (the key is case-sensitive), ``head`` lower-cased."""
    start = head.find(b"\r\nsec-websocket-key:") + len(b"\r\nsec-websocket-key:")
    end = head.find(b"\r\n", start)
    key = raw[start : end if end >= 0 else len(raw)].strip()
    accept = base64.b64encode(hashlib.sha1(key + _WS_GUID, usedforsecurity=False).digest())
    return (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "
        + accept
        + b"\r\n\r\n"
    )


def _answer(head: bytes, body: bytes) -> bytes:
    """The one fixed answer for a request: by its format (Messages and Gemini by path, Responses by an
    ``input`` field, else chat), streamed or not, a tool call when tools are offered."""
    stream, tools = b'"stream":true' in body, b'"tools"' in body
    line = head.partition(b"\r\n")[0]
    if b":streamgeneratecontent" in line:
        return GEMINI_STREAM_TOOLS_RESPONSE if tools else GEMINI_STREAM_RESPONSE
    if b":generatecontent" in line:
        return GEMINI_RESPONSE
    if head.startswith(b"post /v1/messages"):
        if stream:
            return MESSAGE_STREAM_TOOLS_RESPONSE if tools else MESSAGE_STREAM_RESPONSE
        return MESSAGE_RESPONSE
    if b'"input"' in body:
        if stream:
            return RESPONSES_STREAM_TOOLS if tools else RESPONSES_STREAM
        return RESPONSES_RESPONSE
    if stream:
        return STREAM_TOOLS_RESPONSE if tools else STREAM_RESPONSE
    return TOOL_RESPONSE if tools else RESPONSE


def _content_length(head: bytes) -> int:
    """The declared body length in a lower-cased header block; 0 when absent."""
    start = head.find(b"\r\ncontent-length:")
    if start < 0:
        return 0
    start += len(b"\r\ncontent-length:")
    end = head.find(b"\r\n", start)
    return int(head[start : end if end >= 0 else len(head)])


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    stop: asyncio.Future[None] = loop.create_future()

    def request_stop() -> None:
        if not stop.done():  # a second signal must not raise InvalidStateError
            stop.set_result(None)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, request_stop)
    server = await loop.create_server(_Upstream, host, port, backlog=1024, reuse_address=True)
    async with server:
        await stop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvloop.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()

"""Long streamed replies in each wire format, generated lazily: megabytes of text deltas that
the test never holds whole (so a memory measurement sees only what the proxy keeps)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from tests.support.fake_upstream import Sse

PIECE = "lorem ipsum " * 800
"""One text delta: about 10 kB (the same string every time, so generating costs nothing)."""

ROUTES = {"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}


def request_body(fmt: str, text: str = "Write a long story.") -> dict[str, Any]:
    """A streamed agent call of ``fmt`` as its clients send it."""
    if fmt == "chat":
        return {"model": "fake-model", "stream": True, "messages": [{"role": "user", "content": text}]}
    if fmt == "responses":
        return {"model": "fake-model", "stream": True, "input": text}
    return {
        "model": "claude-fake",
        "max_tokens": 64000,
        "stream": True,
        "messages": [{"role": "user", "content": text}],
    }


def long_stream(fmt: str, megabytes: float) -> Sse:
    """About ``megabytes`` of text deltas in ``fmt``'s stream, properly opened and closed."""
    count = max(1, int(megabytes * 1_000_000 / len(PIECE)))
    events = {"chat": _chat, "responses": _responses, "messages": _messages}[fmt](count)
    return Sse((json.dumps(event) for event in events), done=fmt == "chat")


def _chat(count: int) -> Iterator[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {
            "id": "chatcmpl-long",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "fake-model",
            "choices": [choice],
        }

    yield chunk({"role": "assistant", "content": ""})
    for _ in range(count):
        yield chunk({"content": PIECE})
    yield chunk({}, "stop")
    usage = {"prompt_tokens": 5, "completion_tokens": count * 2000, "total_tokens": 5 + count * 2000}
    yield {
        "id": "chatcmpl-long",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "fake-model",
        "choices": [],
        "usage": usage,
    }


def _responses(count: int) -> Iterator[dict[str, Any]]:
    response: dict[str, Any] = {
        "id": "resp_long",
        "object": "response",
        "model": "fake-model",
        "status": "in_progress",
        "output": [],
    }
    at = {"item_id": "msg_long", "output_index": 0, "content_index": 0}
    yield {"type": "response.created", "response": response}
    yield {
        "type": "response.output_item.added",
        "output_index": 0,
        "item": {"id": "msg_long", "type": "message", "role": "assistant", "status": "in_progress", "content": []},
    }
    yield {"type": "response.content_part.added", **at, "part": {"type": "output_text", "text": "", "annotations": []}}
    for _ in range(count):
        yield {"type": "response.output_text.delta", **at, "delta": PIECE}
    text = PIECE * count
    part = {"type": "output_text", "text": text, "annotations": []}
    item = {"id": "msg_long", "type": "message", "role": "assistant", "status": "completed", "content": [part]}
    yield {"type": "response.output_text.done", **at, "text": text}
    yield {"type": "response.content_part.done", **at, "part": part}
    yield {"type": "response.output_item.done", "output_index": 0, "item": item}
    usage = {"input_tokens": 5, "output_tokens": count * 2000, "total_tokens": 5 + count * 2000}
    yield {
        "type": "response.completed",
        "response": {**response, "status": "completed", "output": [item], "usage": usage},
    }


def _messages(count: int) -> Iterator[dict[str, Any]]:
    message = {
        "id": "msg_long",
        "type": "message",
        "role": "assistant",
        "model": "claude-fake",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 1},
    }
    yield {"type": "message_start", "message": message}
    yield {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    for _ in range(count):
        yield {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": PIECE}}
    yield {"type": "content_block_stop", "index": 0}
    yield {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": count * 2000},
    }
    yield {"type": "message_stop"}

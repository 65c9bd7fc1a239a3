"""The wire contract suite's table: what differs per format, and the helpers its tests share.

A new format in :data:`~proxy.wire.registry.FORMATS` needs one row in :data:`SPEAKS`; every
test of :mod:`tests.unit.wire.test_contract` then runs over it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from proxy.exchange import Message, Reply, ToolCall, Usage
from proxy.session.base import FIELDS, SessionState
from proxy.wire.base import StreamAssembler, WireFormat
from proxy.wire.sse import SSEEvent, SSEParser


@dataclass(frozen=True)
class Speaks:
    """What differs per format: how its clients write a request, and where its errors say what."""

    request: dict[str, Any]
    """A system prompt, one user turn (with a field the proxy does not know, ``x_msg``), one
    tool offered, and a top-level field the proxy does not know (``x_top``)."""
    json_mode: dict[str, Any]
    """What the request adds to ask for a JSON answer."""
    error_message: Callable[[dict[str, Any]], str]
    """Where an error body (or an in-stream error event's data) carries its message."""
    error_event: bytes
    """The SSE event name of the in-stream error ("": a data-only event)."""
    session: tuple[dict[str, Any], dict[bytes, str]] | None = None
    """How a client of the format names its session ``s-42`` (body fields, headers); None: it cannot."""
    stream_error_message: Callable[[dict[str, Any]], str] | None = field(default=None)
    """Where the in-stream error event carries its message, when not where the error body does."""


def _openai_error(body: dict[str, Any]) -> str:
    return body["error"]["message"]


SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}

SPEAKS: dict[str, Speaks] = {
    "chat.completions": Speaks(
        request={
            "model": "m",
            "x_top": 1,
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Find it.", "x_msg": 2},
            ],
            "tools": [{"type": "function", "function": {"name": "search", "parameters": SCHEMA}}],
        },
        json_mode={"response_format": {"type": "json_object"}},
        error_message=_openai_error,
        error_event=b"",
    ),
    "responses": Speaks(
        request={
            "model": "m",
            "x_top": 1,
            "instructions": "Be brief.",
            "input": [{"role": "user", "content": "Find it.", "x_msg": 2}],
            "tools": [{"type": "function", "name": "search", "parameters": SCHEMA}],
        },
        json_mode={"text": {"format": {"type": "json_object"}}},
        error_message=_openai_error,
        error_event=b"error",
        session=({}, {b"session_id": "s-42"}),
        stream_error_message=lambda event: event["message"],
    ),
    "messages": Speaks(
        request={
            "model": "m",
            "x_top": 1,
            "max_tokens": 100,
            "system": "Be brief.",
            "messages": [{"role": "user", "content": "Find it.", "x_msg": 2}],
            "tools": [{"name": "search", "input_schema": SCHEMA}],
        },
        json_mode={"output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}},
        error_message=_openai_error,
        error_event=b"error",
        session=({"metadata": {"user_id": json.dumps({"session_id": "s-42"})}}, {}),
    ),
    "gemini": Speaks(
        request={
            "x_top": 1,
            "systemInstruction": {"parts": [{"text": "Be brief."}]},
            "contents": [{"role": "user", "parts": [{"text": "Find it."}], "x_msg": 2}],
            "tools": [{"functionDeclarations": [{"name": "search", "parametersJsonSchema": SCHEMA}]}],
        },
        json_mode={"generationConfig": {"responseMimeType": "application/json"}},
        error_message=_openai_error,
        error_event=b"",
    ),
}


def upstream_reply(wire: WireFormat, reply: Reply) -> Reply:
    """``reply`` as it arrives from an upstream of ``wire``'s format (its source body attached)."""
    parsed = wire.codec.parse_reply(wire.codec.encode(wire.codec.render_reply(reply)))
    assert parsed is not None
    return parsed


def sent(wire: WireFormat, payload: dict[str, Any], turns: tuple[Any, ...]) -> list[Message]:
    """The conversation the upstream reads in ``payload`` with ``turns`` appended."""
    return list(wire.codec.parse_request(json.loads(wire.codec.render_request(payload, turns))).messages)


def found(value: Any, key: str) -> list[Any]:
    """Every value of ``key`` anywhere in ``value``."""
    if isinstance(value, dict):
        return [v for k, v in value.items() if k == key] + [x for v in value.values() for x in found(v, key)]
    if isinstance(value, list):
        return [x for item in value for x in found(item, key)]
    return []


CALLS = (ToolCall("call_1", "search", '{"q":"x"}'), ToolCall("call_2", "search", '{"q":"y"}'))
TEXT = Reply("Lyon is the answer.", None, (), "stop", Usage(12, 5), model="m")
ACTING = Reply("Let me look.", None, CALLS, "tool_calls", Usage(12, 9), model="m")


def assembled(wire: WireFormat, events: list[SSEEvent]) -> StreamAssembler:
    """The format's assembler fed ``events`` as the streaming reader feeds it."""
    assembler = wire.stream.assembler()
    for event in events:
        if assembler.ends(event.data):
            break
        assembler.add(json.loads(event.data))
    return assembler


def parsed(pieces: Iterator[bytes]) -> list[SSEEvent]:
    """The events of a stream that arrives in ``pieces``, as the network splits it."""
    parser = SSEParser()
    return [event for piece in pieces for event in parser.feed(piece)] + parser.close()


def stored(ending_in: WireFormat, body: dict[str, Any]) -> SessionState:
    """A session that ended with ``body``, stored by a request of ``ending_in``'s format."""
    ending = ending_in.codec.encode(body).decode()
    return SessionState({FIELDS.TERMINATION: "loop", FIELDS.ENDING: ending, FIELDS.ENDING_WIRE: ending_in.name})

"""Anthropic Messages (``POST /v1/messages``) as a :class:`~proxy.wire.base.WireFormat`: reading
in :mod:`~proxy.wire.messages.parse`, writing in :mod:`~proxy.wire.messages.render`, the stream's
events in :mod:`~proxy.wire.messages.stream`, one message across attempts in
:mod:`~proxy.wire.messages.relay`, and the transcript signed thinking binds in
:mod:`~proxy.wire.messages.transcript`. No chains: every request carries its whole history.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.exchange import Tool, Turn
from proxy.wire.base import WireFormat
from proxy.wire.common import JsonCodec, JsonJudge, encode
from proxy.wire.messages import parse, render
from proxy.wire.messages.relay import MessagesRelay
from proxy.wire.messages.stream import PING, MessagesAssembler, event_frame, message_events, split_event
from proxy.wire.messages.transcript import MessagesTranscript

__all__ = ["ANTHROPIC_VERSION", "MESSAGES", "MessagesCodec", "MessagesJudge", "MessagesStream"]

UPSTREAM_PATH = "/messages"
ANTHROPIC_VERSION = "2023-06-01"
"""The API version a judge call made with the judge's own key asks for (the client's is used otherwise)."""


def _tool_entry(tool: Tool) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description, "input_schema": dict(tool.parameters)}


class MessagesCodec(JsonCodec):
    """Anthropic Messages' bodies: the module functions of ``parse`` and ``render``, bound."""

    parse_request = staticmethod(parse.parse_conversation)
    parse_reply = staticmethod(parse.parse_reply)
    session_hint = staticmethod(parse.session_hint)
    declared_schemas = staticmethod(parse.declared_schemas)
    wants_structured_output = staticmethod(parse.wants_structured_output)
    offered_tool = staticmethod(_tool_entry)
    render_request = staticmethod(render.render_request)
    amended = staticmethod(render.amended)
    rendered_turns = staticmethod(render.rendered_turns)
    ending = staticmethod(render.ending)
    render_reply = staticmethod(render.reply_message)
    as_refusal = staticmethod(render.as_refusal)
    without_calls = staticmethod(render.without_calls)
    summary_overrides = staticmethod(render.summary_overrides)
    forced_choice = staticmethod(render.forced_choice)
    error_body = staticmethod(render.error_body)
    """Anthropic's error shape (``{"type": "error", "error": {…}}``)."""


class MessagesStream:
    """Anthropic Messages' streams: named events of one message, in order (the relay)."""

    trailer = b""
    """``message_stop`` ends the stream; it is the upstream's own (or the ending's) last event."""
    keepalive = PING
    assembler = MessagesAssembler
    relay = MessagesRelay
    split_event = staticmethod(split_event)
    framed = staticmethod(event_frame)
    appended = staticmethod(render.set_apart)
    error_event = staticmethod(render.error_event)

    def render_request(self, body: bytes, payload: Mapping[str, Any], turns: Sequence[Turn], untouched: bool) -> bytes:
        if untouched and payload.get("stream") is True:
            return body
        return render.render_request(payload, turns, stream=True)

    def include_usage(self, payload: Mapping[str, Any]) -> bool:
        """Usage is part of every Messages stream (``message_start``, ``message_delta``)."""
        return True

    def streamed(self, body: Mapping[str, Any], *, include_usage: bool) -> bytes:
        return b"".join(event_frame(event) for event in message_events(body))


class MessagesJudge(JsonJudge):
    """The judge's call as a Messages request: deterministic, its shape in ``output_config``."""

    path = UPSTREAM_PATH
    answer = staticmethod(parse.parse_reply)

    def headers(self, key: str) -> list[tuple[str, str]]:
        return [("content-type", "application/json"), ("x-api-key", key), ("anthropic-version", ANTHROPIC_VERSION)]

    def request(
        self, system: str, user: str, *, model: str | None, max_tokens: int, schema: Mapping[str, Any] | None
    ) -> bytes:
        payload: dict[str, Any] = {
            "max_tokens": max_tokens,
            "temperature": 0,
            "system": system,
            "messages": [{"role": "user", "content": user}],
        }
        if model:
            payload["model"] = model
        if schema is not None:
            payload["output_config"] = {"format": {"type": "json_schema", "schema": dict(schema)}}
        return encode(payload)


MESSAGES = WireFormat(
    name="messages",
    route="/v1/messages",
    upstream_path=UPSTREAM_PATH,
    key_header="x-api-key",
    codec=MessagesCodec(),
    stream=MessagesStream(),
    judge=MessagesJudge(),
    chains=None,
    transcript=MessagesTranscript(),
)

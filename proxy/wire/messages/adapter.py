"""Anthropic Messages (``POST /v1/messages``) as a :class:`~proxy.wire.base.WireAdapter`:
reading in ``messages_parse``, writing in ``messages_render``, the stream in ``messages_stream``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from proxy.errors import ProxyError
from proxy.exchange import Conversation, Note, Reply, Tool, Turn, Usage
from proxy.wire.common import JsonFormat, NoChains
from proxy.wire.messages.parse import (
    declared_schemas,
    parse_conversation,
    parse_reply,
    session_hint,
    wants_structured_output,
)
from proxy.wire.messages.render import (
    amended,
    as_refusal,
    ending,
    error_body,
    error_event,
    render_request,
    rendered_turns,
    reply_message,
    set_apart,
    summary_overrides,
    without_calls,
)
from proxy.wire.messages.stream import (
    PING,
    MessageAssembler,
    MessageSequencer,
    event_frame,
    message_events,
    split_event,
)
from proxy.wire.messages.transcript import recorded, spliced

__all__ = ["ANTHROPIC_VERSION", "MESSAGES", "AnthropicMessages"]

_encode = msgspec.json.Encoder().encode

ANTHROPIC_VERSION = "2023-06-01"
"""The API version a judge call made with the judge's own key asks for (the client's is used otherwise)."""


class AnthropicMessages(JsonFormat, NoChains):
    """Anthropic's Messages API as a :class:`~proxy.wire.base.WireAdapter`."""

    name = "messages"
    stream_trailer = b""
    """``message_stop`` ends the stream; it is the upstream's own (or the ending's) last event."""
    keepalive = PING
    key_header = "x-api-key"
    route = "/v1/messages"
    upstream_path = "/messages"

    def parse_request(self, payload: Mapping[str, Any]) -> Conversation:
        return parse_conversation(payload)

    def session_hint(self, payload: Mapping[str, Any], header: Callable[[bytes], str | None]) -> str | None:
        return session_hint(payload)

    def declared_schemas(self, payload: Mapping[str, Any]) -> list[tuple[str, str, Mapping[str, Any]]]:
        return declared_schemas(payload)

    def parse_reply(self, body: bytes) -> Reply | None:
        return parse_reply(body)

    def assembler(self) -> MessageAssembler:
        return MessageAssembler()

    def relay(self) -> MessageSequencer:
        """One message across attempts and endings, its events in the upstream's order."""
        return MessageSequencer()

    def split_event(
        self, event: Mapping[str, Any], released: int
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        return split_event(event, released)

    def framed(self, event: Mapping[str, Any]) -> bytes:
        return event_frame(event)

    def wants_structured_output(self, payload: Mapping[str, Any]) -> bool:
        return wants_structured_output(payload)

    def include_usage(self, payload: Mapping[str, Any]) -> bool:
        """Usage is part of every Messages stream (``message_start``, ``message_delta``)."""
        return True

    def render_request(self, payload: Mapping[str, Any], turns: Sequence[Turn]) -> bytes:
        return render_request(payload, turns)

    def render_stream_request(
        self, body: bytes, payload: Mapping[str, Any], turns: Sequence[Turn], untouched: bool
    ) -> bytes:
        if untouched and payload.get("stream") is True:
            return body
        return render_request(payload, turns, stream=True)

    def render_summary_request(
        self,
        payload: Mapping[str, Any],
        turns: Sequence[Turn],
        instruction: str,
        max_tokens: int | None,
        force_cap: bool,
        answer_tool: str | None = None,
    ) -> bytes:
        overrides = summary_overrides(payload, max_tokens, force_cap)
        if answer_tool is not None:  # a structured answer tool: forced, its call is the ending
            # (the API refuses a forced tool while thinking is on: the ending then falls back)
            overrides["tool_choice"] = {"type": "tool", "name": answer_tool}
        return render_request(payload, [*turns, Note(instruction)], **overrides)

    def amended(
        self, payload: Mapping[str, Any], tool_notes: Mapping[str, str], drop_tools: Sequence[str]
    ) -> Mapping[str, Any]:
        return amended(payload, tool_notes, drop_tools)

    def with_tool(self, payload: Mapping[str, Any], tool: Tool) -> Mapping[str, Any]:
        tools = payload.get("tools")
        offered = [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []
        added = {"name": tool.name, "description": tool.description, "input_schema": dict(tool.parameters)}
        return {**payload, "tools": [*offered, added]}

    def rendered_turns(self, turns: Sequence[Turn]) -> list[dict[str, Any]]:
        return rendered_turns(turns)

    def ending(self, text: str, *, model: str | None, usage: Usage | None = None) -> dict[str, Any]:
        return ending(text, model=model, usage=usage)

    def render_reply(self, reply: Reply) -> dict[str, Any]:
        return reply_message(reply)

    def shaped(self, payload: Mapping[str, Any], body: dict[str, Any], *, text_started: bool) -> dict[str, Any]:
        if not wants_structured_output(payload) or text_started:
            return body
        return as_refusal(body)

    def without_calls(self, body: Mapping[str, Any], name: str) -> dict[str, Any]:
        return without_calls(body, name)

    def streamed(self, body: Mapping[str, Any], *, include_usage: bool) -> bytes:
        return b"".join(event_frame(event) for event in message_events(body))

    def appended(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return set_apart(body)

    def error_body(self, error: ProxyError) -> bytes:
        return error_body(error)

    def error_event(self, error: ProxyError) -> bytes:
        return error_event(error)

    def spliced(self, payload: Mapping[str, Any], values: Mapping[str, str]) -> Mapping[str, Any]:
        return spliced(payload, values)

    def recorded(
        self,
        client: Mapping[str, Any],
        amended: Mapping[str, Any],
        turns: Sequence[Turn],
        reply: Reply,
        answered: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        return recorded(client, amended, turns, reply, answered)

    def judge_headers(self, key: str) -> list[tuple[str, str]]:
        return [("content-type", "application/json"), ("x-api-key", key), ("anthropic-version", ANTHROPIC_VERSION)]

    def judge_request(
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
        return _encode(payload)


MESSAGES = AnthropicMessages()

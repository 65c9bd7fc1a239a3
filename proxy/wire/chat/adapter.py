"""OpenAI chat completions as a :class:`~proxy.wire.base.WireAdapter`: reading in ``chat_parse``,
writing in ``chat_render``, the stream's chunks in ``chat_stream``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from proxy.errors import ProxyError
from proxy.exchange import Conversation, Note, Reply, Tool, Turn, Usage
from proxy.wire.chat.parse import (
    declared_schemas,
    function_tool,
    parse_conversation,
    parse_reply,
    wants_structured_output,
)
from proxy.wire.chat.render import (
    ANSWER_CONSTRAINTS,
    DONE,
    amended,
    as_refusal,
    capped_output,
    completion,
    completion_as_sse,
    render_request,
    rendered_turns,
    reply_completion,
    set_apart,
    with_usage_requested,
    without_calls,
)
from proxy.wire.chat.stream import ReplyAssembler, split_chunk
from proxy.wire.common import JsonFormat, NoChains, NoTranscript
from proxy.wire.sse import comment, frame

__all__ = ["CHAT_COMPLETIONS", "ChatCompletions"]

_encode = msgspec.json.Encoder().encode


class ChatCompletions(JsonFormat, NoChains, NoTranscript):
    """OpenAI chat completions (``POST /v1/chat/completions``) as a :class:`~proxy.wire.base.WireAdapter`."""

    name = "chat.completions"
    route = "/v1/chat/completions"
    upstream_path = "/chat/completions"
    stream_trailer = DONE
    keepalive = comment(b"keep-alive")
    key_header = "authorization"

    def session_hint(self, payload: Mapping[str, Any], header: Callable[[bytes], str | None]) -> str | None:
        return None  # no chat client sends one of its own: X-Session-Id, or the derived hash

    def parse_request(self, payload: Mapping[str, Any]) -> Conversation:
        return parse_conversation(payload)

    def declared_schemas(self, payload: Mapping[str, Any]) -> list[tuple[str, str, Mapping[str, Any]]]:
        return declared_schemas(payload)

    def parse_reply(self, body: bytes) -> Reply | None:
        return parse_reply(body)

    def assembler(self) -> ReplyAssembler:
        return ReplyAssembler()

    def relay(self) -> None:
        return None  # chunks are independent: they go out as the upstream framed them

    def split_event(
        self, event: Mapping[str, Any], released: int
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        return split_chunk(event, released)

    def framed(self, event: Mapping[str, Any]) -> bytes:
        return frame(_encode(event))

    def wants_structured_output(self, payload: Mapping[str, Any]) -> bool:
        return wants_structured_output(payload)

    def include_usage(self, payload: Mapping[str, Any]) -> bool:
        options = payload.get("stream_options")
        return isinstance(options, dict) and options.get("include_usage") is True

    def render_request(self, payload: Mapping[str, Any], turns: Sequence[Turn]) -> bytes:
        return render_request(payload, turns)

    def render_stream_request(
        self, body: bytes, payload: Mapping[str, Any], turns: Sequence[Turn], untouched: bool
    ) -> bytes:
        options = payload.get("stream_options")
        if untouched and isinstance(options, dict) and options.get("include_usage"):
            return body
        if untouched and "stream_options" not in payload:  # spliced: the key must not be there already
            return with_usage_requested(body)
        with_usage = {**(options if isinstance(options, dict) else {}), "include_usage": True}
        return render_request(payload, turns, stream=True, stream_options=with_usage)

    def render_summary_request(
        self,
        payload: Mapping[str, Any],
        turns: Sequence[Turn],
        instruction: str,
        max_tokens: int | None,
        force_cap: bool,
        answer_tool: str | None = None,
    ) -> bytes:
        if answer_tool is not None:
            choice: Any = {"type": "function", "function": {"name": answer_tool}}
        else:
            choice = "none" if payload.get("tools") else None
        return render_request(
            payload,
            [*turns, Note(instruction)],
            tool_choice=choice,
            function_call=None,
            **dict.fromkeys(ANSWER_CONSTRAINTS),
            stream=None,
            stream_options=None,
            parallel_tool_calls=None,
            **capped_output(payload, max_tokens, force=force_cap),
        )

    def amended(
        self, payload: Mapping[str, Any], tool_notes: Mapping[str, str], drop_tools: Sequence[str]
    ) -> Mapping[str, Any]:
        return amended(payload, tool_notes, drop_tools)

    def with_tool(self, payload: Mapping[str, Any], tool: Tool) -> Mapping[str, Any]:
        tools = payload.get("tools")
        offered = [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []
        return {**payload, "tools": [*offered, function_tool(tool)]}

    def rendered_turns(self, turns: Sequence[Turn]) -> list[dict[str, Any]]:
        return rendered_turns(turns)

    def ending(self, text: str, *, model: str | None, usage: Usage | None = None) -> dict[str, Any]:
        return completion(text, model=model, usage=usage)

    def render_reply(self, reply: Reply) -> dict[str, Any]:
        return reply_completion(reply)

    def shaped(self, payload: Mapping[str, Any], body: dict[str, Any], *, text_started: bool) -> dict[str, Any]:
        if not wants_structured_output(payload) or text_started:
            return body
        return as_refusal(body)

    def without_calls(self, body: Mapping[str, Any], name: str) -> dict[str, Any]:
        return without_calls(body, name)

    def streamed(self, body: Mapping[str, Any], *, include_usage: bool) -> bytes:
        return completion_as_sse(body, include_usage=include_usage)

    def appended(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return set_apart(body)

    def error_body(self, error: ProxyError) -> bytes:
        return error.body()

    def error_event(self, error: ProxyError) -> bytes:
        return frame(self.error_body(error))

    def judge_headers(self, key: str) -> list[tuple[str, str]]:
        return [("content-type", "application/json"), ("authorization", f"Bearer {key}")]

    def judge_request(
        self, system: str, user: str, *, model: str | None, max_tokens: int, schema: Mapping[str, Any] | None
    ) -> bytes:
        payload: dict[str, Any] = {
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "temperature": 0,
            "max_tokens": max_tokens,
        }
        if model:
            payload["model"] = model
        if schema is not None:
            payload["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "completion_verdict", "strict": True, "schema": schema},
            }
        return _encode(payload)


CHAT_COMPLETIONS = ChatCompletions()

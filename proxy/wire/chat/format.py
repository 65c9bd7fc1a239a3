"""OpenAI chat completions (``POST /v1/chat/completions``) as a :class:`~proxy.wire.base.WireFormat`:
reading in :mod:`~proxy.wire.chat.parse`, writing in :mod:`~proxy.wire.chat.render`, the stream's
chunks in :mod:`~proxy.wire.chat.stream`. Chunks are independent (no relay), and every request
carries its whole history (no chains, no transcript).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.errors import ProxyError
from proxy.exchange import Turn
from proxy.wire.base import WireFormat
from proxy.wire.chat import parse, render
from proxy.wire.chat.stream import ChatAssembler, split_chunk
from proxy.wire.common import JsonCodec, JsonJudge, bearer_headers, encode, openai_error_body
from proxy.wire.sse import comment, frame

__all__ = ["CHAT_COMPLETIONS", "ChatCodec", "ChatJudge", "ChatStream"]

UPSTREAM_PATH = "/chat/completions"


class ChatCodec(JsonCodec):
    """Chat completions' bodies: the module functions of ``parse`` and ``render``, bound."""

    parse_request = staticmethod(parse.parse_conversation)
    parse_reply = staticmethod(parse.parse_reply)
    session_hint = staticmethod(parse.session_hint)
    declared_schemas = staticmethod(parse.declared_schemas)
    wants_structured_output = staticmethod(parse.wants_structured_output)
    offered_tool = staticmethod(parse.function_tool)
    render_request = staticmethod(render.render_request)
    amended = staticmethod(render.amended)
    rendered_turns = staticmethod(render.rendered_turns)
    ending = staticmethod(render.completion)
    render_reply = staticmethod(render.reply_completion)
    as_refusal = staticmethod(render.as_refusal)
    without_calls = staticmethod(render.without_calls)
    summary_overrides = staticmethod(render.summary_overrides)
    forced_choice = staticmethod(render.forced_choice)


class ChatStream:
    """Chat completions' streams: independent ``data:`` chunks, ``[DONE]`` after the last."""

    trailer = render.DONE
    keepalive = comment(b"keep-alive")
    assembler = ChatAssembler
    split_event = staticmethod(split_chunk)
    streamed = staticmethod(render.completion_as_sse)
    appended = staticmethod(render.set_apart)

    def render_request(self, body: bytes, payload: Mapping[str, Any], turns: Sequence[Turn], untouched: bool) -> bytes:
        options = payload.get("stream_options")
        if untouched and isinstance(options, dict) and options.get("include_usage"):
            return body
        if untouched and "stream_options" not in payload:  # spliced: the key must not be there already
            return render.with_usage_requested(body)
        with_usage = {**(options if isinstance(options, dict) else {}), "include_usage": True}
        return render.render_request(payload, turns, stream=True, stream_options=with_usage)

    def include_usage(self, payload: Mapping[str, Any]) -> bool:
        options = payload.get("stream_options")
        return isinstance(options, dict) and options.get("include_usage") is True

    def relay(self) -> None:
        return None  # chunks are independent: they go out as the upstream framed them

    def framed(self, event: Mapping[str, Any]) -> bytes:
        return frame(encode(event))

    def error_event(self, error: ProxyError) -> bytes:
        return frame(openai_error_body(error))


class ChatJudge(JsonJudge):
    """The judge's call as a chat completion: deterministic, its shape in ``response_format``."""

    path = UPSTREAM_PATH
    headers = staticmethod(bearer_headers)
    answer = staticmethod(parse.parse_reply)

    def request(
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
        return encode(payload)


CHAT_COMPLETIONS = WireFormat(
    name="chat.completions",
    route="/v1/chat/completions",
    upstream_path=UPSTREAM_PATH,
    key_header="authorization",
    codec=ChatCodec(),
    stream=ChatStream(),
    judge=ChatJudge(),
    chains=None,
    transcript=None,
)

"""The OpenAI Responses API (``POST /v1/responses``) as a :class:`~proxy.wire.base.WireFormat`:
reading in :mod:`~proxy.wire.responses.parse`, writing in :mod:`~proxy.wire.responses.render`,
the stream's events in :mod:`~proxy.wire.responses.stream`, the client's view of a stream
across attempts in :mod:`~proxy.wire.responses.relay`, and the server-side chains a request
may continue in :mod:`~proxy.wire.responses.chains`. No transcript: a chained request sends
only what is new, and the server holds the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.errors import ProxyError
from proxy.exchange import Turn
from proxy.wire.base import WireFormat
from proxy.wire.common import JsonCodec, JsonJudge, bearer_headers, encode
from proxy.wire.responses import parse, render
from proxy.wire.responses.chains import ResponsesChains
from proxy.wire.responses.relay import ResponsesRelay
from proxy.wire.responses.stream import ResponsesAssembler, event_frame, split_event
from proxy.wire.sse import comment

__all__ = ["RESPONSES", "ResponsesCodec", "ResponsesJudge", "ResponsesStream"]

UPSTREAM_PATH = "/responses"


class ResponsesCodec(JsonCodec):
    """The Responses API's bodies: the module functions of ``parse`` and ``render``, bound."""

    parse_request = staticmethod(parse.parse_conversation)
    parse_reply = staticmethod(parse.parse_reply)
    session_hint = staticmethod(parse.session_hint)
    declared_schemas = staticmethod(parse.declared_schemas)
    wants_structured_output = staticmethod(parse.wants_structured_output)
    offered_tool = staticmethod(render.function_tool)
    render_request = staticmethod(render.render_request)
    amended = staticmethod(render.amended)
    rendered_turns = staticmethod(render.rendered_turns)
    ending = staticmethod(render.response)
    render_reply = staticmethod(render.reply_response)
    as_refusal = staticmethod(render.as_refusal)
    without_calls = staticmethod(render.without_calls)
    summary_overrides = staticmethod(render.summary_overrides)
    forced_choice = staticmethod(render.forced_choice)


class ResponsesStream:
    """The Responses API's streams: typed events, one response across attempts (the relay)."""

    trailer = b""
    """A Responses stream ends with its terminal event, no sentinel after it."""
    keepalive = comment(b"keep-alive")
    assembler = ResponsesAssembler
    relay = ResponsesRelay
    split_event = staticmethod(split_event)
    framed = staticmethod(event_frame)
    appended = staticmethod(render.set_apart)

    def render_request(self, body: bytes, payload: Mapping[str, Any], turns: Sequence[Turn], untouched: bool) -> bytes:
        if untouched and payload.get("stream") is True:
            return body
        return render.render_request(payload, turns, stream=True)

    def include_usage(self, payload: Mapping[str, Any]) -> bool:
        """Usage rides in the terminal event, which every stream ends with."""
        return True

    def streamed(self, body: Mapping[str, Any], *, include_usage: bool) -> bytes:
        return ResponsesRelay().ending(body)

    def error_event(self, error: ProxyError) -> bytes:
        return ResponsesRelay().error(error)


class ResponsesJudge(JsonJudge):
    """The judge's call as a Responses request: not stored, its answer's shape in ``text.format``."""

    path = UPSTREAM_PATH
    headers = staticmethod(bearer_headers)
    answer = staticmethod(parse.parse_reply)

    def request(
        self, system: str, user: str, *, model: str | None, max_tokens: int, schema: Mapping[str, Any] | None
    ) -> bytes:
        payload: dict[str, Any] = {
            "model": model,
            "instructions": system,
            "input": [{"role": "user", "content": user}],
            "max_output_tokens": max_tokens,
            "store": False,
        }
        if schema is not None:
            payload["text"] = {"format": {"type": "json_schema", "name": "verdict", "schema": dict(schema)}}
        return encode(payload)


RESPONSES = WireFormat(
    name="responses",
    route="/v1/responses",
    upstream_path=UPSTREAM_PATH,
    key_header="authorization",
    codec=ResponsesCodec(),
    stream=ResponsesStream(),
    judge=ResponsesJudge(),
    chains=ResponsesChains(),
    transcript=None,
)

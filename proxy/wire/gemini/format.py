"""The Gemini API (``POST /v1beta/models/{model}:generateContent`` and
``:streamGenerateContent?alt=sse``) as a :class:`~proxy.wire.base.WireFormat`: reading in
:mod:`~proxy.wire.gemini.parse`, writing in :mod:`~proxy.wire.gemini.render`, the stream's
chunks in :mod:`~proxy.wire.gemini.stream`, the path in :mod:`~proxy.wire.gemini.address`.
Chunks are independent (no relay) and every request carries its whole history (no chains,
no transcript: the client sends each ``thoughtSignature`` back itself).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.errors import ProxyError
from proxy.exchange import Reply, Tool, Turn
from proxy.wire.base import WireFormat
from proxy.wire.common import JsonCodec, JsonJudge, encode
from proxy.wire.gemini import parse, render
from proxy.wire.gemini.address import ADDRESSING, ROUTE
from proxy.wire.gemini.stream import GeminiAssembler, joined, split_chunk
from proxy.wire.sse import comment, frame

__all__ = ["GEMINI", "GeminiCodec", "GeminiJudge", "GeminiStream", "error_body", "status_name"]

_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "INVALID_ARGUMENT",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def status_name(status: int) -> str:
    """The ``google.rpc.Code`` name Google's APIs answer an HTTP status with."""
    return _STATUS.get(status, "FAILED_PRECONDITION" if status < 500 else "INTERNAL")


def error_body(error: ProxyError) -> bytes:
    """Google's error shape: ``{"error": {"code", "message", "status"}}``."""
    return encode({"error": {"code": error.status, "message": error.message, "status": status_name(error.status)}})


def parse_reply(body: bytes) -> Reply | None:
    """A ``GenerateContentResponse``, or a whole ``alt=sse`` stream of them (the last call of
    an ending and the judge's call go to the client's URL, which may stream)."""
    if body.lstrip()[:5] == b"data:":
        return joined(body)
    return parse.parse_reply(body)


class GeminiCodec(JsonCodec):
    """Gemini's bodies: the module functions of ``parse`` and ``render``, bound."""

    parse_request = staticmethod(parse.parse_conversation)
    parse_reply = staticmethod(parse_reply)
    session_hint = staticmethod(parse.session_hint)
    declared_schemas = staticmethod(parse.declared_schemas)
    wants_structured_output = staticmethod(parse.wants_structured_output)
    render_request = staticmethod(render.render_request)
    amended = staticmethod(render.amended)
    rendered_turns = staticmethod(render.rendered_turns)
    ending = staticmethod(render.completion)
    render_reply = staticmethod(render.reply_body)
    without_calls = staticmethod(render.without_calls)
    summary_overrides = staticmethod(render.summary_overrides)
    error_body = staticmethod(error_body)
    as_refusal = staticmethod(render.as_refusal)
    forced_choice = staticmethod(render.forced_config)
    forced_field = "toolConfig"

    @staticmethod
    def offered_tool(tool: Tool) -> dict[str, Any]:
        return {
            "functionDeclarations": [
                {"name": tool.name, "description": tool.description, "parametersJsonSchema": dict(tool.parameters)}
            ]
        }


class GeminiStream:
    """Gemini's streams: independent ``data:`` chunks, nothing after the last."""

    trailer = b""
    keepalive = comment(b"keep-alive")
    assembler = GeminiAssembler
    split_event = staticmethod(split_chunk)
    streamed = staticmethod(render.as_sse)
    appended = staticmethod(render.set_apart)

    def render_request(self, body: bytes, payload: Mapping[str, Any], turns: Sequence[Turn], untouched: bool) -> bytes:
        """The body is the same streamed or not (the path streams): ``body`` itself when untouched."""
        return body if untouched else render.render_request(payload, turns)

    def include_usage(self, payload: Mapping[str, Any]) -> bool:
        return True  # every chunk may carry usageMetadata

    def relay(self) -> None:
        return None  # chunks are independent: they go out as the upstream framed them

    def framed(self, event: Mapping[str, Any]) -> bytes:
        return frame(encode(event))

    def error_event(self, error: ProxyError) -> bytes:
        return frame(error_body(error))


class GeminiJudge(JsonJudge):
    """The judge's call as a ``generateContent`` request: deterministic, its shape in
    ``generationConfig.responseJsonSchema``. A judge with its own endpoint takes
    ``judge.base_url`` as the model's URL (``…/v1beta/models/gemini-2.5-flash``)."""

    path = ":generateContent"
    answer = staticmethod(parse_reply)

    @staticmethod
    def headers(key: str) -> list[tuple[str, str]]:
        return [("content-type", "application/json"), ("x-goog-api-key", key)]

    def request(
        self, system: str, user: str, *, model: str | None, max_tokens: int, schema: Mapping[str, Any] | None
    ) -> bytes:
        config: dict[str, Any] = {"temperature": 0, "maxOutputTokens": max_tokens}
        if schema is not None:
            config.update(responseMimeType="application/json", responseJsonSchema=dict(schema))
        payload = {
            "systemInstruction": {"parts": [{"text": system}]},
            "contents": [{"role": "user", "parts": [{"text": user}]}],
            "generationConfig": config,
        }
        return encode(payload)


GEMINI = WireFormat(
    name="gemini",
    route=ROUTE,
    upstream_path="/models",
    key_header="x-goog-api-key",
    codec=GeminiCodec(),
    stream=GeminiStream(),
    judge=GeminiJudge(),
    chains=None,
    transcript=None,
    addressing=ADDRESSING,
)

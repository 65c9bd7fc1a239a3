"""What every JSON wire format does alike, for its roles to build on: bodies decoded and
encoded as JSON (a request's top-level overrides applied alike), a tool's declared schema and
OpenAI's usage object read alike, the progress a typed-event stream assembler counts, an ending
shaped as a refusal where the client asked for JSON, goal mode's tool offered beside the
client's, and a judge at its own base URL plus the format's path."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

import msgspec

from proxy.errors import ProxyError
from proxy.exchange import Note, Tool, Turn, Usage

__all__ = [
    "AssemblyProgress",
    "JsonCodec",
    "JsonJudge",
    "bearer_headers",
    "declare_schema",
    "decode_object",
    "encode",
    "encode_overridden",
    "openai_error_body",
    "openai_usage",
]

_decode = msgspec.json.decode
encode = msgspec.json.Encoder().encode


def decode_object(raw: str | bytes) -> dict[str, Any]:
    """A JSON object the proxy wrote or already accepted (so it is one)."""
    body: dict[str, Any] = _decode(raw)
    return body


def openai_error_body(error: ProxyError) -> bytes:
    """OpenAI's error shape (``{"error": {…}}``), which the proxy's errors render by default."""
    return error.body()


def encode_overridden(rendered: dict[str, Any], overrides: Mapping[str, Any]) -> bytes:
    """A request body with top-level ``overrides`` applied (None removes the field), encoded:
    how every format's ``render_request`` finishes."""
    for name, value in overrides.items():
        if value is None:
            rendered.pop(name, None)
        else:
            rendered[name] = value
    return encode(rendered)


def declare_schema(declared: list[tuple[str, str, Mapping[str, Any]]], param: str, name: str, schema: Any) -> None:
    """Add a tool's schema to ``declared`` as (the param naming it in an error, tool name,
    schema), when it is one: an empty or missing schema declares nothing to check."""
    if isinstance(schema, dict) and schema:
        declared.append((param, name, schema))


def openai_usage(raw: Any, prompt: str, completion: str, details: str) -> Usage:
    """An OpenAI ``usage`` object (chat completions' and the Responses API's, under their own
    field names): its prompt and completion tokens, and the cached part of the prompt."""
    if not isinstance(raw, dict):
        return Usage()
    prompt_tokens = raw.get(prompt)
    completion_tokens = raw.get(completion)
    cached_in = raw.get(details)
    cached = cached_in.get("cached_tokens") if isinstance(cached_in, dict) else None
    return Usage(
        prompt_tokens=prompt_tokens if isinstance(prompt_tokens, int) else 0,
        completion_tokens=completion_tokens if isinstance(completion_tokens, int) else 0,
        cached_tokens=cached if isinstance(cached, int) else 0,
    )


class AssemblyProgress:
    """What a stream assembler of typed events counts as they arrive (the Responses API's and
    Messages'), for the holdback to read mid-stream: the answer's text so far and its length,
    every character produced (reasoning and call arguments too), and which channels have
    content yet. The assembler adds to the counts; the text is joined once per read."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._joined: str | None = None
        self.text_length = 0
        self.produced_chars = 0
        self.has_text = False
        self.has_reasoning = False
        self.has_tool_calls = False

    def _answer_text(self, part: str) -> None:
        """``part`` of the answer's text arrived (not yet counted in ``produced_chars``)."""
        self._text.append(part)
        self._joined = None
        self.text_length += len(part)
        self.has_text = self.has_text or (bool(part) and not part.isspace())

    @property
    def content(self) -> str:
        if self._joined is None:
            self._joined = "".join(self._text)
        return self._joined


def bearer_headers(key: str) -> list[tuple[str, str]]:
    """A JSON call with an OpenAI-style key (a bearer token)."""
    return [("content-type", "application/json"), ("authorization", f"Bearer {key}")]


class _RendersRequest(Protocol):
    def __call__(self, payload: Mapping[str, Any], turns: Sequence[Turn], **overrides: Any) -> bytes: ...


class JsonCodec:
    """The parts of a :class:`~proxy.wire.base.Codec` every JSON format shares; a format's codec
    states its own readers and writers (``render_request``, ``summary_overrides``,
    ``as_refusal``...) and inherits these."""

    render_request: _RendersRequest
    """The request with the proxy's turns appended and top-level fields overridden (None: removed)."""
    summary_overrides: Callable[[Mapping[str, Any], int | None, bool], dict[str, Any]]
    """What an ending's summary call changes: tools forbidden, prose, not streamed, its length
    capped at the given cap (always, when forced)."""
    forced_choice: Callable[[str], dict[str, Any]]
    """``tool_choice`` forcing a call of the named tool."""
    forced_field: ClassVar[str] = "tool_choice"
    """The top-level field :attr:`forced_choice` goes in (Gemini's ``toolConfig``)."""
    wants_structured_output: Callable[[Mapping[str, Any]], bool]
    as_refusal: Callable[[Mapping[str, Any]], dict[str, Any]]
    """A complete reply carrying its text as a refusal (an ending for a JSON-mode request)."""
    offered_tool: Callable[[Tool], dict[str, Any]]
    """A neutral tool as an entry of the request's ``tools``."""

    encode = staticmethod(encode)
    decode = staticmethod(decode_object)
    error_body = staticmethod(openai_error_body)

    def render_summary_request(
        self,
        payload: Mapping[str, Any],
        turns: Sequence[Turn],
        instruction: str,
        max_tokens: int | None,
        force_cap: bool,
        answer_tool: str | None = None,
    ) -> bytes:
        overrides = self.summary_overrides(payload, max_tokens, force_cap)
        if answer_tool is not None:  # a structured answer tool: forced, its call is the ending
            overrides[self.forced_field] = self.forced_choice(answer_tool)
        return self.render_request(payload, [*turns, Note(instruction)], **overrides)

    def shaped(self, payload: Mapping[str, Any], body: dict[str, Any], *, text_started: bool) -> dict[str, Any]:
        if text_started or not self.wants_structured_output(payload):
            return body
        return self.as_refusal(body)

    def with_tool(self, payload: Mapping[str, Any], tool: Tool) -> Mapping[str, Any]:
        tools = payload.get("tools")
        offered = [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []
        return {**payload, "tools": [*offered, self.offered_tool(tool)]}


class JsonJudge:
    """The parts of a :class:`~proxy.wire.base.JudgeDialect` every JSON format shares: a judge
    with its own endpoint takes the format's requests at its base URL plus the format's path."""

    path: ClassVar[str]

    def url(self, base_url: str) -> str:
        return base_url.rstrip("/") + self.path

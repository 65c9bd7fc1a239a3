"""The OpenAI Responses API (``POST /v1/responses``) as a :class:`~proxy.wire.base.WireAdapter`:
reading in ``responses_parse``, writing in ``responses_render``, the stream's events in
``responses_stream``, and the client's view of a stream across attempts in ``responses_relay``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from proxy.errors import ProxyError
from proxy.exchange import Conversation, Note, Reply, Tool, Turn, Usage
from proxy.wire.common import JsonFormat, NoTranscript
from proxy.wire.responses.parse import (
    declared_schemas,
    parse_conversation,
    parse_reply,
    wants_structured_output,
)
from proxy.wire.responses.relay import ResponsesRelay
from proxy.wire.responses.render import (
    amended,
    as_refusal,
    function_tool,
    is_proxy_id,
    proxy_references,
    rechained,
    render_request,
    rendered_turns,
    reply_response,
    response,
    set_apart,
    summary_overrides,
    without_calls,
)
from proxy.wire.responses.stream import ResponsesAssembler, event_frame, split_event
from proxy.wire.sse import comment

__all__ = ["RESPONSES", "Responses"]

_encode = msgspec.json.Encoder().encode

_SESSION_HEADERS = (b"session_id", b"conversation_id")
"""The headers Codex sends its conversation's id in."""


class Responses(JsonFormat, NoTranscript):
    """The OpenAI Responses API as a :class:`~proxy.wire.base.WireAdapter`."""

    name = "responses"
    route = "/v1/responses"
    upstream_path = "/responses"
    stream_trailer = b""
    key_header = "authorization"
    """A Responses stream ends with its terminal event, no sentinel after it."""
    keepalive = comment(b"keep-alive")

    # -- reading ----------------------------------------------------------------------

    def parse_request(self, payload: Mapping[str, Any]) -> Conversation:
        return parse_conversation(payload)

    def declared_schemas(self, payload: Mapping[str, Any]) -> list[tuple[str, str, Mapping[str, Any]]]:
        return declared_schemas(payload)

    def parse_reply(self, body: bytes) -> Reply | None:
        return parse_reply(body)

    def assembler(self) -> ResponsesAssembler:
        return ResponsesAssembler()

    def relay(self) -> ResponsesRelay:
        """What the client has of one stream: renumbers what goes out, across attempts."""
        return ResponsesRelay()

    def split_event(
        self, event: Mapping[str, Any], released: int
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        return split_event(event, released)

    def framed(self, event: Mapping[str, Any]) -> bytes:
        return event_frame(event)

    def wants_structured_output(self, payload: Mapping[str, Any]) -> bool:
        return wants_structured_output(payload)

    def include_usage(self, payload: Mapping[str, Any]) -> bool:
        """Usage rides in the terminal event, which every stream ends with."""
        return True

    def continues(self, payload: Mapping[str, Any]) -> str | None:
        previous = payload.get("previous_response_id")
        return previous if isinstance(previous, str) and previous else None

    def chain_links(
        self, payload: Mapping[str, Any], replies: Sequence[Reply], answer: Reply | Mapping[str, Any] | None
    ) -> list[tuple[str, str | None, str | None]]:
        """The ids the client may hold: its answer's, and on a stream every attempt's (a
        stream shows the client the id of the attempt it began with), each continued from the
        upstream response the answer is: the relayed reply itself, or for the proxy's own body
        (an ending) the chain point the request came with; the proxy's own body is kept whole,
        for the items a later request refers to by id."""
        if answer is None or (payload.get("store") is False and isinstance(answer, Reply)):
            return []
        shown: list[Any] = [reply.source for reply in replies] if payload.get("stream") is True else []
        own: str | None = None
        if isinstance(answer, Reply):
            target = _response_id(answer.source)
            shown.append(answer.source)
        else:
            target = self.continues(payload)
            shown.append(answer)
            own = _response_id(answer) if is_proxy_id(_response_id(answer)) else None
        if payload.get("store") is False:  # nothing stored upstream: only the proxy's own items matter
            shown = [answer] if own is not None else []
        return [
            (found, target, _encode(answer).decode() if found == own else None)
            for found in dict.fromkeys(map(_response_id, shown))
            if found is not None
        ]

    def references(self, payload: Mapping[str, Any]) -> list[str]:
        return proxy_references(payload)

    def rechained(
        self, payload: Mapping[str, Any], continue_from: str | None, bodies: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, Any]:
        return rechained(payload, continue_from, bodies)

    def session_hint(self, payload: Mapping[str, Any], header: Callable[[bytes], str | None]) -> str | None:
        """The conversation the client already names: Codex's ``session_id`` /
        ``conversation_id`` headers or ``client_metadata.session_id``, a ``conversation``.
        Never ``prompt_cache_key``: a cache key is shared by design (one per app or prompt is
        common), and runs sharing a session share its strikes, budgets and stored ending, the
        text of one user's run replayed to another."""
        for name in _SESSION_HEADERS:
            value = header(name)
            if value and value.strip():
                return value
        metadata = payload.get("client_metadata")  # Codex 0.17x sends its session id here
        session = metadata.get("session_id") if isinstance(metadata, dict) else None
        if isinstance(session, str) and session.strip():
            return session
        conversation = payload.get("conversation")
        if isinstance(conversation, dict):
            conversation = conversation.get("id")
        return conversation if isinstance(conversation, str) and conversation.strip() else None

    # -- the request upstream -------------------------------------------------------------

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
        overrides = summary_overrides(payload, max_tokens, force=force_cap)
        if answer_tool is not None:  # a structured answer tool: forced, its call is the ending
            overrides["tool_choice"] = {"type": "function", "name": answer_tool}
        return render_request(payload, [*turns, Note(instruction)], **overrides)

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

    def judge_request(
        self, system: str, user: str, *, model: str | None, max_tokens: int, schema: Mapping[str, Any] | None
    ) -> bytes:
        """The judge's call as a Responses request: not stored, its answer's shape in ``text.format``."""
        payload: dict[str, Any] = {
            "model": model,
            "instructions": system,
            "input": [{"role": "user", "content": user}],
            "max_output_tokens": max_tokens,
            "store": False,
        }
        if schema is not None:
            payload["text"] = {"format": {"type": "json_schema", "name": "verdict", "schema": dict(schema)}}
        return _encode(payload)

    # -- what goes back to the client -----------------------------------------------------

    def ending(self, text: str, *, model: str | None, usage: Usage | None = None) -> dict[str, Any]:
        return response(text, model=model, usage=usage)

    def render_reply(self, reply: Reply) -> dict[str, Any]:
        return reply_response(reply)

    def shaped(self, payload: Mapping[str, Any], body: dict[str, Any], *, text_started: bool) -> dict[str, Any]:
        if not wants_structured_output(payload) or text_started:
            return body
        return as_refusal(body)

    def without_calls(self, body: Mapping[str, Any], name: str) -> dict[str, Any]:
        return without_calls(body, name)

    def streamed(self, body: Mapping[str, Any], *, include_usage: bool) -> bytes:
        return ResponsesRelay().ending(body)

    def appended(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return set_apart(body)

    def error_body(self, error: ProxyError) -> bytes:
        return error.body()

    def error_event(self, error: ProxyError) -> bytes:
        return ResponsesRelay().error(error)

    # -- the judge ----------------------------------------------------------------------

    def judge_headers(self, key: str) -> list[tuple[str, str]]:
        return [("content-type", "application/json"), ("authorization", f"Bearer {key}")]


def _response_id(body: Any) -> str | None:
    value = body.get("id") if isinstance(body, Mapping) else None
    return value if isinstance(value, str) and value else None


RESPONSES = Responses()

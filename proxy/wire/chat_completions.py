"""OpenAI chat completions: parse requests and replies, render nudged requests and endings.

Decoding is msgspec into plain dicts (no validation pass on the hot path); rendering
changes only what it must, so every field the proxy does not understand survives.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from proxy.errors import ProxyError
from proxy.exchange import Conversation, Echo, Message, Note, Reply, Tool, ToolCall, Turn, Usage
from proxy.streaming.sse import frame
from proxy.wire.chat_stream import ReplyAssembler, parse_usage, split_chunk, wire_call

__all__ = [
    "CHAT_COMPLETIONS",
    "JUDGE_PATH",
    "ChatCompletions",
    "amended",
    "as_refusal",
    "calls_returned",
    "completion",
    "completion_as_sse",
    "content_text",
    "declared_schemas",
    "offered_tools",
    "output_cap",
    "parse_conversation",
    "parse_reply",
    "parse_usage",
    "render_request",
    "rendered_turns",
    "requested_schema",
    "tool_call",
    "wants_structured_output",
    "wire_call",
    "with_usage_requested",
]

_decode = msgspec.json.decode
_encode = msgspec.json.Encoder().encode


def parse_conversation(payload: Mapping[str, Any]) -> Conversation:
    """The request's conversation in the neutral vocabulary (one pass over its messages)."""
    messages = payload.get("messages")
    model = payload.get("model")
    return Conversation(
        messages=[_message(m) for m in messages if isinstance(m, dict)] if isinstance(messages, list) else [],
        model=model if isinstance(model, str) else None,
        tools=offered_tools(payload),
        output_schema=requested_schema(payload),
        stream=payload.get("stream") is True,
        output_cap=output_cap(payload),
    )


def output_cap(payload: Mapping[str, Any]) -> tuple[str, int] | None:
    """The output limit the request sets (``max_completion_tokens`` wins, as upstream), if any."""
    for name in ("max_completion_tokens", "max_tokens"):
        value = payload.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return name, value
    return None


def _message(raw: Mapping[str, Any]) -> Message:
    role = raw.get("role")
    calls = raw.get("tool_calls")
    call_id = raw.get("tool_call_id")
    reasoning = raw.get("reasoning_content") or raw.get("reasoning")
    return Message(
        role if isinstance(role, str) else "",
        content_text(raw.get("content")),
        _tool_calls(calls) if calls else (),
        None if call_id is None else str(call_id),
        reasoning if isinstance(reasoning, str) else "",
    )


def offered_tools(payload: Mapping[str, Any]) -> list[Tool]:
    """The request's ``tools`` (functions and custom tools), and the legacy ``functions``."""
    offered: list[Tool] = []
    tools = payload.get("tools")
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, dict):
            continue
        function = tool.get("function")
        custom = tool.get("custom")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            offered.append(_function(function))
        elif tool.get("type") == "custom" and isinstance(custom, dict) and isinstance(custom.get("name"), str):
            description = custom.get("description")
            offered.append(Tool(custom["name"], {}, "custom", description if isinstance(description, str) else ""))
    functions = payload.get("functions")  # the legacy form; some layers answer it with tool_calls
    for function in functions if isinstance(functions, list) else ():
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            offered.append(_function(function))
    return offered


def _function(function: Mapping[str, Any]) -> Tool:
    parameters = function.get("parameters")
    description = function.get("description")
    return Tool(
        function["name"],
        parameters if isinstance(parameters, dict) else {},
        "function",
        description if isinstance(description, str) else "",
    )


def tool_call(raw: Any) -> ToolCall | None:
    """A ``tool_calls`` item as the chat-completions wire carries it (None: not an object)."""
    if not isinstance(raw, Mapping):
        return None
    custom = raw.get("custom")
    if raw.get("type") == "custom" and isinstance(custom, Mapping):
        text = custom.get("input")
        return ToolCall(
            str(raw.get("id", "")), str(custom.get("name", "")), text if isinstance(text, str) else "", "custom"
        )
    function = raw.get("function")
    if not isinstance(function, Mapping):
        function = {}
    arguments = function.get("arguments")
    name = str(function.get("name", ""))
    return ToolCall(str(raw.get("id", "")), name, arguments if isinstance(arguments, str) else "")


def function_tool(tool: Tool) -> dict[str, Any]:
    """An offered tool as a ``tools`` item."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": dict(tool.parameters)},
    }


def content_text(content: Any) -> str:
    """A message's text, whether content is a string or a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part.get("text", "") for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def declared_schemas(payload: Mapping[str, Any]) -> list[tuple[str, str, Mapping[str, Any]]]:
    """Every tool's ``parameters`` schema as (param, tool name, schema), the param naming it as
    an error names it (``tools[3].function.parameters``); the legacy ``functions`` too."""
    declared: list[tuple[str, str, Mapping[str, Any]]] = []
    tools = payload.get("tools")
    for index, tool in enumerate(tools if isinstance(tools, list) else ()):
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            parameters = function.get("parameters")
            if isinstance(parameters, dict) and parameters:
                declared.append((f"tools[{index}].function.parameters", function["name"], parameters))
    functions = payload.get("functions")
    for index, function in enumerate(functions if isinstance(functions, list) else ()):
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            parameters = function.get("parameters")
            if isinstance(parameters, dict) and parameters:
                declared.append((f"functions[{index}].parameters", function["name"], parameters))
    return declared


def requested_schema(payload: Mapping[str, Any]) -> dict[str, Any] | None:
    """The schema of ``response_format: {"type": "json_schema", "json_schema": {"schema": …}}``."""
    response_format = payload.get("response_format")
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return None
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    return schema if isinstance(schema, dict) else None


def wants_structured_output(payload: Mapping[str, Any]) -> bool:
    """The request asked for a JSON answer (``response_format`` ``json_schema`` or ``json_object``)."""
    response_format = payload.get("response_format")
    return isinstance(response_format, dict) and response_format.get("type") in ("json_schema", "json_object")


def parse_reply(body: bytes) -> Reply | None:
    """The first choice of a chat.completion body; None when it is not one."""
    try:
        payload = _decode(body)
    except (msgspec.DecodeError, RecursionError):
        return None
    if not isinstance(payload, dict):
        return None
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    if not isinstance(message, dict):
        return None
    return Reply(
        content=_text_or_none(message.get("content")),
        reasoning=_text_or_none(message.get("reasoning_content")) or _text_or_none(message.get("reasoning")),
        tool_calls=_tool_calls(message.get("tool_calls")),
        finish_reason=choices[0].get("finish_reason"),
        usage=parse_usage(payload.get("usage")),
        model=payload.get("model") if isinstance(payload.get("model"), str) else None,
        refusal=_text_or_none(message.get("refusal")) or None,
        other_output=bool(message.get("audio") or message.get("function_call")),
    )


def _text_or_none(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return content_text(value)
    return None


def _tool_calls(raw: Any) -> tuple[ToolCall, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(call for call in map(tool_call, raw) if call is not None)


def calls_returned(reply: Reply, results: Mapping[str, str]) -> tuple[dict[str, Any], ...]:
    """The reply as an assistant turn, then one tool result per call (by call id, in order).

    How a guard hands the model its own tool calls back, unexecuted, with the reason: the
    transcript stays protocol-valid (every call answered by its id).
    """
    calls = [wire_call(c) for c in reply.tool_calls]
    assistant = {"role": "assistant", "content": reply.content, "tool_calls": calls}
    return (assistant, *({"role": "tool", "tool_call_id": c.id, "content": results[c.id]} for c in reply.tool_calls))


def rendered_turns(turns: Sequence[Turn]) -> list[dict[str, Any]]:
    """The proxy's neutral turns as chat messages."""
    messages: list[dict[str, Any]] = []
    for turn in turns:
        if isinstance(turn, Note):
            messages.append({"role": "user", "content": turn.text})
        elif isinstance(turn, Echo):
            messages.append({"role": "assistant", "content": turn.reply.content})
        else:
            messages.extend(calls_returned(turn.reply, turn.results))
    return messages


def amended(
    payload: Mapping[str, Any], tool_notes: Mapping[str, str], drop_tools: Sequence[str] = ()
) -> dict[str, Any]:
    """The payload with notes appended to tool results and hidden tools removed (the client's
    own transcript is untouched: only what goes upstream changes)."""
    notes = tool_notes
    amended: dict[str, Any] = dict(payload)
    if drop_tools:
        dropped = set(drop_tools)
        kept = [t for t in payload.get("tools", []) if (t.get("function") or {}).get("name") not in dropped]
        if kept:
            amended["tools"] = kept
        else:
            amended.pop("tools", None)
            amended.pop("tool_choice", None)
            amended.pop("parallel_tool_calls", None)
        choice = payload.get("tool_choice")
        if isinstance(choice, dict) and (choice.get("function") or {}).get("name") in dropped:
            amended.pop("tool_choice", None)
    if not notes:
        return amended
    messages = []
    for message in payload.get("messages", []):
        note = notes.get(str(message.get("tool_call_id"))) if message.get("role") == "tool" else None
        if note is None:
            messages.append(message)
            continue
        content = message.get("content")
        addition = f"\n\n[LoopWarden] {note}"
        if isinstance(content, list):
            content = [*content, {"type": "text", "text": addition.strip()}]
        else:
            content = f"{content or ''}{addition}"
        messages.append({**message, "content": content})
    amended["messages"] = messages
    return amended


def render_request(payload: Mapping[str, Any], turns: Sequence[Turn], **overrides: Any) -> bytes:
    """The request with ``turns`` appended and top-level ``overrides`` applied."""
    rendered = dict(payload)
    if turns:
        rendered["messages"] = [*payload.get("messages", []), *rendered_turns(turns)]
    for name, value in overrides.items():
        if value is None:
            rendered.pop(name, None)
        else:
            rendered[name] = value
    return _encode(rendered)


_WITH_USAGE = b',"stream_options":{"include_usage":true}}'


def with_usage_requested(body: bytes) -> bytes:
    """The client's own request body, asking for the usage chunk too: spliced in before the
    closing brace, so the body is not decoded and encoded again. Only for a body that is a
    non-empty JSON object without ``stream_options`` (the caller checked)."""
    end = body.rstrip()
    return end[:-1] + _WITH_USAGE


def completion(content: str, *, model: str | None, usage: Usage | None = None) -> dict[str, Any]:
    """A complete, ordinary chat.completion carrying ``content`` (used for endings)."""
    used = usage or Usage()
    return {
        "id": "chatcmpl-lw-" + secrets.token_hex(12),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model or "loopwarden",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": used.prompt_tokens,
            "completion_tokens": used.completion_tokens,
            "total_tokens": used.prompt_tokens + used.completion_tokens,
        },
    }


def as_refusal(body: Mapping[str, Any]) -> dict[str, Any]:
    """An ending for a client that asked for a JSON answer: the text moves to ``refusal`` and
    ``content`` becomes null. OpenAI's structured outputs promise a valid object or a refusal,
    and the clients built on them surface a refusal as such (openai's ``message.refusal``,
    the Agents SDK's and LangChain's ``ModelRefusalError``) instead of failing to parse a
    summary as JSON."""
    choices = body.get("choices")
    if not isinstance(choices, list):
        return dict(body)
    return {**body, "choices": [_refused(choice) for choice in choices]}


def _refused(choice: Any) -> Any:
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict) or not isinstance(message.get("content"), str):
        return choice
    return {**choice, "message": {**message, "content": None, "refusal": message["content"]}}


def completion_as_sse(body: Mapping[str, Any], *, include_usage: bool = False) -> bytes:
    """Replay a chat.completion as a well-formed SSE stream, for clients that asked to stream."""
    base = {
        "id": body["id"],
        "object": "chat.completion.chunk",
        "created": body["created"],
        "model": body["model"],
    }
    message = body["choices"][0]["message"]

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}

    refusal = message.get("refusal")
    first = {"role": "assistant", "content": None, "refusal": None} if refusal else {"role": "assistant", "content": ""}
    events = [chunk(first)]
    for field in ("reasoning_content", "reasoning"):
        if isinstance(message.get(field), str) and message[field]:
            events.append(chunk({field: message[field]}))
    if message.get("content"):
        events.append(chunk({"content": message["content"]}))
    if refusal:
        events.append(chunk({"refusal": refusal}))
    for index, call in enumerate(message.get("tool_calls") or []):
        if call.get("type") == "custom":
            delta_call = {"index": index, "id": call.get("id"), "type": "custom", "custom": call.get("custom")}
        else:
            function = call.get("function") or {}
            delta_call = {
                "index": index,
                "id": call.get("id"),
                "type": call.get("type", "function"),
                "function": {"name": function.get("name"), "arguments": function.get("arguments", "")},
            }
        events.append(chunk({"tool_calls": [delta_call]}))
    for field in ("function_call", "audio"):
        if message.get(field):
            events.append(chunk({field: message[field]}))
    events.append(chunk({}, body["choices"][0].get("finish_reason") or "stop"))
    if include_usage:
        events.append({**base, "choices": [], "usage": body.get("usage")})
    return b"".join(b"data: " + _encode(event) + b"\n\n" for event in events) + DONE


DONE = b"data: [DONE]\n\n"
JUDGE_PATH = "/chat/completions"
"""The judge is a chat-completions client: its own endpoint (``judge.base_url``) plus this path."""
_ANSWER_CONSTRAINTS = ("response_format", "guided_json", "guided_regex", "guided_choice", "guided_grammar")
"""Removed from the summary call: a summary is prose (OpenAI's and vLLM's output constraints)."""


def _capped_output(payload: Mapping[str, Any], cap: int | None, *, force: bool = False) -> dict[str, Any]:
    """Cap the summary's length with whichever output-limit field the client already uses.

    Adding ``max_tokens`` where the client sent none could break models that accept only
    ``max_completion_tokens``, so a request with neither is left uncapped unless ``force``.
    """
    if cap is None:
        return {}
    for name in ("max_completion_tokens", "max_tokens"):
        current = payload.get(name)
        if isinstance(current, int):
            return {name: min(current, cap)}
    return {"max_tokens": cap} if force else {}


def without_calls(body: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A chat.completion with the calls of tool ``name`` taken out (goal mode's own tool)."""
    choice = body["choices"][0]
    message = dict(choice["message"])
    kept = [c for c in message.get("tool_calls") or [] if (c.get("function") or {}).get("name") != name]
    if kept:
        message["tool_calls"] = kept
    else:
        message.pop("tool_calls", None)
    finish = choice.get("finish_reason")
    if not kept and finish == "tool_calls":
        finish = "stop"
    return {**body, "choices": [{**choice, "message": message, "finish_reason": finish}, *body["choices"][1:]]}


def _appended(body: Mapping[str, Any]) -> dict[str, Any]:
    """The ending's text, set apart from text the client already received."""
    choice = body["choices"][0]
    message = dict(choice["message"])
    if isinstance(message.get("content"), str) and message["content"]:
        message["content"] = "\n\n" + message["content"]
    return {**body, "choices": [{**choice, "message": message}]}


class ChatCompletions:
    """OpenAI chat completions (``POST /v1/chat/completions``) as a :class:`~proxy.wire.base.WireAdapter`."""

    name = "chat.completions"
    stream_trailer = DONE

    def parse_request(self, payload: Mapping[str, Any]) -> Conversation:
        return parse_conversation(payload)

    def declared_schemas(self, payload: Mapping[str, Any]) -> list[tuple[str, str, Mapping[str, Any]]]:
        return declared_schemas(payload)

    def parse_reply(self, body: bytes) -> Reply | None:
        return parse_reply(body)

    def assembler(self) -> ReplyAssembler:
        return ReplyAssembler()

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
    ) -> bytes:
        return render_request(
            payload,
            [*turns, Note(instruction)],
            tool_choice="none" if payload.get("tools") else None,
            **dict.fromkeys(_ANSWER_CONSTRAINTS),
            stream=None,
            stream_options=None,
            parallel_tool_calls=None,
            **_capped_output(payload, max_tokens, force=force_cap),
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

    def shaped(self, payload: Mapping[str, Any], body: dict[str, Any], *, text_started: bool) -> dict[str, Any]:
        if not wants_structured_output(payload) or text_started:
            return body
        return as_refusal(body)

    def stored_ending(self, raw: str) -> dict[str, Any]:
        ending: dict[str, Any] = _decode(raw)
        return ending

    def reply_body(self, raw: bytes) -> dict[str, Any]:
        body: dict[str, Any] = _decode(raw)
        return body

    def without_calls(self, body: Mapping[str, Any], name: str) -> dict[str, Any]:
        return without_calls(body, name)

    def encode(self, body: Mapping[str, Any]) -> bytes:
        return _encode(body)

    def streamed(self, body: Mapping[str, Any], *, include_usage: bool) -> bytes:
        return completion_as_sse(body, include_usage=include_usage)

    def appended(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return _appended(body)

    def error_body(self, error: ProxyError) -> bytes:
        return error.body()

    def error_event(self, error: ProxyError) -> bytes:
        return frame(self.error_body(error))

    def judge_url(self, base_url: str) -> str:
        return base_url.rstrip("/") + JUDGE_PATH


CHAT_COMPLETIONS = ChatCompletions()

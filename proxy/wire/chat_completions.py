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

from proxy.exchange import Conversation, Reply, ToolCall, Usage, content_text

__all__ = [
    "amended",
    "as_refusal",
    "calls_returned",
    "completion",
    "completion_as_sse",
    "declared_schemas",
    "parse_conversation",
    "parse_reply",
    "parse_usage",
    "render_request",
    "requested_schema",
    "wants_structured_output",
    "with_usage_requested",
]

_decode = msgspec.json.decode
_encode = msgspec.json.Encoder().encode


def parse_conversation(payload: Mapping[str, Any]) -> Conversation:
    messages = payload.get("messages")
    if not isinstance(messages, list):
        messages = []
    model = payload.get("model")
    tools = payload.get("tools")
    offered = [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []
    functions = payload.get("functions")  # the legacy form; some layers answer it with tool_calls
    if isinstance(functions, list):
        offered += [{"type": "function", "function": f} for f in functions if isinstance(f, dict)]
    return Conversation(
        messages=[m for m in messages if isinstance(m, dict)],
        model=model if isinstance(model, str) else None,
        tools=offered,
        output_schema=requested_schema(payload),
    )


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
    return tuple(call for call in map(ToolCall.from_wire, raw) if call is not None)


def parse_usage(raw: Any) -> Usage:
    """A ``usage`` object (from a completion or the last chunk of a stream)."""
    if not isinstance(raw, dict):
        return Usage()
    prompt = raw.get("prompt_tokens")
    completion_tokens = raw.get("completion_tokens")
    details = raw.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(
        prompt_tokens=prompt if isinstance(prompt, int) else 0,
        completion_tokens=completion_tokens if isinstance(completion_tokens, int) else 0,
        cached_tokens=cached if isinstance(cached, int) else 0,
    )


def calls_returned(reply: Reply, results: Mapping[str, str]) -> tuple[dict[str, Any], ...]:
    """The reply as an assistant turn, then one tool result per call (by call id, in order).

    How a guard hands the model its own tool calls back, unexecuted, with the reason: the
    transcript stays protocol-valid (every call answered by its id).
    """
    calls = [c.wire() for c in reply.tool_calls]
    assistant = {"role": "assistant", "content": reply.content, "tool_calls": calls}
    return (assistant, *({"role": "tool", "tool_call_id": c.id, "content": results[c.id]} for c in reply.tool_calls))


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


def render_request(payload: Mapping[str, Any], extra_messages: Sequence[Mapping[str, Any]], **overrides: Any) -> bytes:
    """The request with ``extra_messages`` appended and top-level ``overrides`` applied."""
    rendered = dict(payload)
    if extra_messages:
        rendered["messages"] = [*payload.get("messages", []), *extra_messages]
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
    return b"".join(b"data: " + _encode(event) + b"\n\n" for event in events) + b"data: [DONE]\n\n"

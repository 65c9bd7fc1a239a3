"""OpenAI chat completions, read: a request into the neutral conversation, a reply into a ``Reply``.

Decoding is msgspec into plain dicts (no validation pass on the hot path).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from proxy.exchange import Conversation, Message, Reply, Tool, ToolCall
from proxy.wire.chat.stream import parse_usage
from proxy.wire.common import declare_schema

__all__ = [
    "content_text",
    "declared_schemas",
    "forced_tool",
    "function_tool",
    "offered_tools",
    "output_cap",
    "parse_conversation",
    "parse_reply",
    "requested_schema",
    "session_hint",
    "tool_call",
    "wants_structured_output",
]

_decode = msgspec.json.decode


def parse_conversation(payload: Mapping[str, Any]) -> Conversation:
    """The request's conversation in the neutral vocabulary (one pass over its messages)."""
    messages = payload.get("messages")
    model = payload.get("model")
    asks_format = "response_format" in payload  # most requests do not: two readers spared
    return Conversation(
        [_message(m) for m in messages if isinstance(m, dict)] if isinstance(messages, list) else [],
        model if isinstance(model, str) else None,
        offered_tools(payload),
        requested_schema(payload) if asks_format else None,
        payload.get("stream") is True,
        output_cap(payload),
        forced_tool=forced_tool(payload),
        json_answer=wants_structured_output(payload) if asks_format else False,
    )


def forced_tool(payload: Mapping[str, Any]) -> str | None:
    """The function ``tool_choice`` forces (``{"type": "function", "function": {"name": …}}``),
    or the legacy ``function_call: {"name": …}``; None when the model may choose."""
    choice = payload.get("tool_choice")
    if isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        return name if isinstance(name, str) and name else None
    legacy = payload.get("function_call")
    name = legacy.get("name") if isinstance(legacy, dict) else None
    return name if isinstance(name, str) and name else None


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
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            offered.append(_function(function))
            continue
        custom = tool.get("custom")
        if tool.get("type") == "custom" and isinstance(custom, dict) and isinstance(custom.get("name"), str):
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
            declare_schema(
                declared, f"tools[{index}].function.parameters", function["name"], function.get("parameters")
            )
    functions = payload.get("functions")
    for index, function in enumerate(functions if isinstance(functions, list) else ()):
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            declare_schema(declared, f"functions[{index}].parameters", function["name"], function.get("parameters"))
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


def session_hint(payload: Mapping[str, Any], header: Callable[[bytes], str | None]) -> None:
    """None: no chat client sends a session id of its own (``X-Session-Id``, or the derived hash)."""
    return None


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
    model = payload.get("model")
    return Reply(  # content, reasoning, tool calls, finish reason, usage, model, refusal, other output
        _text_or_none(message.get("content")),
        _text_or_none(message.get("reasoning_content")) or _text_or_none(message.get("reasoning")),
        _tool_calls(message.get("tool_calls")),
        choices[0].get("finish_reason"),
        parse_usage(payload.get("usage")),
        model if isinstance(model, str) else None,
        _text_or_none(message.get("refusal")) or None,
        bool(message.get("audio") or message.get("function_call")),
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

"""The Gemini API, read: a ``generateContent`` request into the neutral conversation, a reply
(or the chunks of its stream, joined) into a ``Reply``.

Gemini names the model and whether it streams in the path, not the body: the edge reads them
there (:mod:`proxy.wire.gemini.address`). Function calls may come without ids; the proxy then
gives each a positional one (``lw:``…), which it never sends upstream.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import msgspec

from proxy.exchange import Conversation, Message, Reply, Tool, ToolCall, Usage
from proxy.wire.common import declare_schema, encode

__all__ = [
    "SYNTHETIC",
    "call_of",
    "candidate_parts",
    "declared_schemas",
    "field",
    "finish_reason",
    "forced_tool",
    "function_responses",
    "json_schema",
    "key_of",
    "offered_tools",
    "parse_conversation",
    "parse_reply",
    "parse_usage",
    "part_channel",
    "reply_of",
    "requested_schema",
    "session_hint",
    "snake",
    "wants_structured_output",
]

_decode = msgspec.json.decode
_UPPER = re.compile(r"[A-Z]")
SYNTHETIC = "lw:"
"""The prefix of a call id the proxy made up (the call had none): never sent upstream."""
_FINISH = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
}


@functools.cache
def snake(name: str) -> str:
    """A field's snake_case spelling (``functionCall``: ``function_call``)."""
    return _UPPER.sub(lambda match: "_" + match[0].lower(), name)


_CAMEL = {
    snake(name): name
    for name in ("anyOf", "maxItems", "minItems", "maxLength", "minLength", "propertyOrdering", "maxProperties")
}
"""Google's schema keywords in snake_case, as JSON Schema spells them."""


def key_of(mapping: Mapping[str, Any], name: str) -> str:
    """The spelling of field ``name`` (camelCase) that ``mapping`` uses: the API takes both,
    and the google-genai SDK writes some fields in snake_case (``parameters_json_schema``)."""
    return name if name in mapping or snake(name) not in mapping else snake(name)


def field(mapping: Mapping[str, Any], name: str) -> Any:
    """Field ``name`` (camelCase) of ``mapping``, in whichever spelling it comes."""
    value = mapping.get(name)
    return value if value is not None else mapping.get(snake(name))


def parse_conversation(payload: Mapping[str, Any]) -> Conversation:
    """The request's conversation in the neutral vocabulary. Its model and ``stream`` are in
    the path: the edge sets them (:func:`proxy.wire.gemini.address.addressed`)."""
    messages: list[Message] = []
    system = _system(payload)
    if system:
        messages.append(Message("system", system))
    ids = dict(function_responses(payload))
    contents = payload.get("contents")
    for index, content in enumerate(contents if isinstance(contents, list) else ()):
        if isinstance(content, dict):
            messages.extend(_messages(index, content, ids))
    config = _generation_config(payload)
    cap = field(config, "maxOutputTokens")
    return Conversation(
        messages=messages,
        tools=offered_tools(payload),
        output_schema=requested_schema(payload),
        json_answer=wants_structured_output(payload),
        output_cap=("maxOutputTokens", cap) if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 else None,
        forced_tool=forced_tool(payload),
    )


def _system(payload: Mapping[str, Any]) -> str:
    system = field(payload, "systemInstruction")
    if isinstance(system, str):
        return system
    return _text(system.get("parts")) if isinstance(system, dict) else ""


def _text(parts: Any, *, thought: bool = False) -> str:
    if not isinstance(parts, list):
        return ""
    return "".join(
        p["text"]
        for p in parts
        if isinstance(p, dict) and isinstance(p.get("text"), str) and bool(p.get("thought")) is thought
    )


def _generation_config(payload: Mapping[str, Any]) -> Mapping[str, Any]:
    config = field(payload, "generationConfig")
    return config if isinstance(config, dict) else {}


def call_of(raw: Mapping[str, Any], synthetic: str) -> ToolCall:
    """A ``functionCall`` part's call; ``synthetic``: its id when it has none."""
    call = field(raw, "functionCall")
    call = call if isinstance(call, dict) else {}
    ident = call.get("id")
    args = call.get("args")
    return ToolCall(
        ident if isinstance(ident, str) and ident else synthetic,
        str(call.get("name", "")),
        encode(args).decode() if args is not None else "{}",
    )


def _synthetic(index: int, position: int) -> str:
    return f"{SYNTHETIC}{index}.{position}"


def function_responses(payload: Mapping[str, Any]) -> Iterator[tuple[tuple[int, int], str]]:
    """((content index, part index), call id) of every ``functionResponse`` part: its own id,
    else the id of the call of that name it answers (the calls of the model turn before it,
    in order)."""
    contents = payload.get("contents")
    pending: dict[str, list[str]] = {}
    for index, content in enumerate(contents if isinstance(contents, list) else ()):
        parts = content.get("parts") if isinstance(content, dict) else None
        if not isinstance(parts, list):
            continue
        if content.get("role") == "model":
            pending = {}
            for position, part in enumerate(parts):
                if isinstance(part, dict) and isinstance(field(part, "functionCall"), dict):
                    call = call_of(part, _synthetic(index, position))
                    pending.setdefault(call.name, []).append(call.id)
            continue
        for position, part in enumerate(parts):
            answer = field(part, "functionResponse") if isinstance(part, dict) else None
            if not isinstance(answer, dict):
                continue
            ident = answer.get("id")
            waiting = pending.get(str(answer.get("name", "")))
            if isinstance(ident, str) and ident:
                if waiting and ident in waiting:
                    waiting.remove(ident)
            elif waiting:
                ident = waiting.pop(0)
            else:
                ident = _synthetic(index, position)
            yield (index, position), ident


def _messages(index: int, content: Mapping[str, Any], ids: Mapping[tuple[int, int], str]) -> list[Message]:
    parts = content.get("parts")
    parts = parts if isinstance(parts, list) else []
    if content.get("role") == "model":
        calls = tuple(
            call_of(p, _synthetic(index, position))
            for position, p in enumerate(parts)
            if isinstance(p, dict) and isinstance(field(p, "functionCall"), dict)
        )
        return [Message("assistant", _text(parts), calls, None, _text(parts, thought=True))]
    out: list[Message] = []
    for position, part in enumerate(parts):
        answer = field(part, "functionResponse") if isinstance(part, dict) else None
        if isinstance(answer, dict):
            out.append(Message("tool", _response_text(answer.get("response")), call_id=ids.get((index, position))))
    text = _text(parts)
    if text or not out:
        out.append(Message("user", text))
    return out


def _response_text(response: Any) -> str:
    """A ``functionResponse``'s ``response`` as the guards read it: its ``output`` or
    ``result`` text when it has one (Gemini CLI's ``{"output": …}``), else its JSON."""
    if isinstance(response, dict):
        for name in ("output", "result", "content"):
            if isinstance(response.get(name), str):
                return str(response[name])
    return encode(response).decode() if response is not None else ""


def _declarations(payload: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(param path, declaration) of every ``tools[].functionDeclarations[]`` entry."""
    tools = payload.get("tools")
    for index, tool in enumerate(tools if isinstance(tools, list) else ()):
        declarations = field(tool, "functionDeclarations") if isinstance(tool, dict) else None
        for position, declaration in enumerate(declarations if isinstance(declarations, list) else ()):
            if isinstance(declaration, dict) and isinstance(declaration.get("name"), str):
                yield f"tools[{index}].functionDeclarations[{position}]", declaration


def _parameters(declaration: Mapping[str, Any]) -> tuple[str, Any]:
    """(field, JSON Schema) of a declaration's arguments: ``parametersJsonSchema`` as it is,
    ``parameters`` (Google's OpenAPI subset) as JSON Schema."""
    if isinstance(field(declaration, "parametersJsonSchema"), dict):
        return "parametersJsonSchema", field(declaration, "parametersJsonSchema")
    return "parameters", json_schema(declaration.get("parameters"))


def offered_tools(payload: Mapping[str, Any]) -> list[Tool]:
    """The request's function declarations."""
    offered = []
    for _, declaration in _declarations(payload):
        parameters = _parameters(declaration)[1]
        description = declaration.get("description")
        offered.append(
            Tool(
                declaration["name"],
                parameters if isinstance(parameters, dict) else {},
                "function",
                description if isinstance(description, str) else "",
            )
        )
    return offered


def declared_schemas(payload: Mapping[str, Any]) -> list[tuple[str, str, Mapping[str, Any]]]:
    """Every declaration's arguments schema, named as an error names it
    (``tools[0].functionDeclarations[1].parameters``)."""
    declared: list[tuple[str, str, Mapping[str, Any]]] = []
    for param, declaration in _declarations(payload):
        name, schema = _parameters(declaration)
        declare_schema(declared, f"{param}.{name}", declaration["name"], schema)
    return declared


def json_schema(schema: Any) -> Any:
    """Google's OpenAPI schema subset (``type: "OBJECT"``, ``nullable``) as JSON Schema; other
    values as they are."""
    if isinstance(schema, list):
        return [json_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for raw, value in schema.items():
        key: str = _CAMEL.get(str(raw), str(raw))
        if key == "type" and isinstance(value, str):
            out[key] = value.lower()
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: json_schema(item) for name, item in value.items()}
        elif key in ("items", "anyOf"):
            out[key] = json_schema(value)
        elif key not in ("nullable", "propertyOrdering"):
            out[key] = value
    if schema.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


def requested_schema(payload: Mapping[str, Any]) -> dict[str, Any] | None:
    """``generationConfig.responseJsonSchema``, or ``responseSchema`` as JSON Schema."""
    config = _generation_config(payload)
    schema = field(config, "responseJsonSchema")
    if not isinstance(schema, dict):
        schema = json_schema(field(config, "responseSchema"))
    return schema if isinstance(schema, dict) else None


def wants_structured_output(payload: Mapping[str, Any]) -> bool:
    """A JSON answer: ``responseMimeType: application/json`` or an output schema."""
    config = _generation_config(payload)
    return field(config, "responseMimeType") == "application/json" or any(
        isinstance(config.get(name), dict) for name in ("responseSchema", "responseJsonSchema")
    )


def forced_tool(payload: Mapping[str, Any]) -> str | None:
    """The one function ``toolConfig.functionCallingConfig`` forces (mode ``ANY`` with one
    allowed name)."""
    tool_config = field(payload, "toolConfig")
    config = field(tool_config, "functionCallingConfig") if isinstance(tool_config, dict) else None
    if not isinstance(config, dict) or config.get("mode") != "ANY":
        return None
    names = field(config, "allowedFunctionNames")
    if isinstance(names, list) and len(names) == 1 and isinstance(names[0], str):
        return names[0]
    return None


def session_hint(payload: Mapping[str, Any], header: Callable[[bytes], str | None]) -> None:
    """None: Gemini clients send no session id of their own (``X-Session-Id``, or the derived hash)."""
    return None


def parse_usage(raw: Any) -> Usage:
    """``usageMetadata``: the prompt (tool-use prompt tokens included), the output (thought
    tokens included: they are billed as output) and the cached part of the prompt."""
    if not isinstance(raw, dict):
        return Usage()
    return Usage(
        prompt_tokens=_count(raw, "promptTokenCount") + _count(raw, "toolUsePromptTokenCount"),
        completion_tokens=_count(raw, "candidatesTokenCount") + _count(raw, "thoughtsTokenCount"),
        cached_tokens=_count(raw, "cachedContentTokenCount"),
    )


def _count(usage: Mapping[str, Any], name: str) -> int:
    value = usage.get(name)
    return value if type(value) is int else 0  # not a bool, not a float


def finish_reason(raw: Any, calls: bool) -> str | None:
    """A ``finishReason`` in the neutral vocabulary (``MAX_TOKENS`` cuts a reply short, as
    ``length`` does); ``tool_calls`` when a stopped reply calls tools."""
    if not isinstance(raw, str) or not raw or raw == "FINISH_REASON_UNSPECIFIED":
        return None
    reason = _FINISH.get(raw, raw.lower())
    return "tool_calls" if reason == "stop" and calls else reason


def candidate_parts(body: Mapping[str, Any]) -> list[Any]:
    """The parts of the first candidate's content (empty when it has none)."""
    candidates = body.get("candidates")
    first = candidates[0] if isinstance(candidates, list) and candidates else None
    content = first.get("content") if isinstance(first, dict) else None
    parts = content.get("parts") if isinstance(content, dict) else None
    return parts if isinstance(parts, list) else []


def part_channel(part: Any) -> str | None:
    """``text``, ``thought`` or ``call``: what a part carries (None: something else)."""
    if not isinstance(part, dict):
        return None
    if isinstance(field(part, "functionCall"), dict):
        return "call"
    if isinstance(part.get("text"), str):
        return "thought" if part.get("thought") else "text"
    return None


def parse_reply(body: bytes) -> Reply | None:
    """A ``GenerateContentResponse``; None when it is not one."""
    try:
        payload = _decode(body)
    except (msgspec.DecodeError, RecursionError):
        return None
    if not isinstance(payload, dict) or not ("candidates" in payload or "promptFeedback" in payload):
        return None
    return reply_of(payload)


def reply_of(payload: Mapping[str, Any]) -> Reply:
    """A decoded ``GenerateContentResponse`` as a reply (a blocked prompt: cut short). The
    parts are read in one pass, each by :func:`part_channel`'s rule."""
    parts = candidate_parts(payload)
    calls: list[ToolCall] = []
    text: list[str] = []
    thoughts: list[str] = []
    other = False
    for position, part in enumerate(parts):
        if not isinstance(part, dict):
            continue
        said = part.get("text")
        if isinstance(said, str) and part.get("thought"):
            thoughts.append(said)  # a thought is reasoning, whatever else the part holds
        call = part.get("functionCall")
        if call is None:
            call = part.get("function_call")
        if isinstance(call, dict):
            calls.append(call_of(part, f"{SYNTHETIC}{position}"))
        elif isinstance(said, str):
            if not part.get("thought"):
                text.append(said)
        elif part:
            other = True
    candidates = payload.get("candidates")
    first = candidates[0] if isinstance(candidates, list) and candidates and isinstance(candidates[0], dict) else {}
    reason = finish_reason(field(first, "finishReason"), bool(calls))
    feedback = field(payload, "promptFeedback")
    if not first and isinstance(feedback, dict) and field(feedback, "blockReason"):
        reason = "content_filter"
    message = field(first, "finishMessage")  # the proxy's refusal (see render.as_refusal)
    content = "".join(text) if text else None
    refused = (
        message if isinstance(message, str) and message and reason == "other" and content in (None, message) else None
    )
    model = field(payload, "modelVersion")
    return Reply(
        content=content if refused is None else None,
        reasoning="".join(thoughts) or None,
        tool_calls=tuple(calls),
        finish_reason=reason,
        usage=parse_usage(field(payload, "usageMetadata")),
        model=model if isinstance(model, str) else None,
        refusal=refused,
        other_output=other,
        source=payload,
    )

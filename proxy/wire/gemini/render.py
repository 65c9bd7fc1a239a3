"""The Gemini API, written: requests with the proxy's turns appended, amended function
responses, endings and their streams.

Rendering changes only what it must: the client's ``contents`` go upstream as they came
(every ``thoughtSignature`` with them), and the model's own turns the proxy sends back are the
parts it returned, signatures included (:attr:`~proxy.exchange.Reply.source`).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.exchange import Echo, Note, Reply, ToolCall, Turn, Usage
from proxy.wire.common import encode, encode_overridden
from proxy.wire.gemini.parse import (
    SYNTHETIC,
    candidate_parts,
    field,
    function_responses,
    key_of,
    part_channel,
    snake,
)
from proxy.wire.sse import frame

__all__ = [
    "amended",
    "as_refusal",
    "as_sse",
    "capped_config",
    "completion",
    "forced_config",
    "render_request",
    "rendered_turns",
    "reply_body",
    "set_apart",
    "summary_overrides",
    "without_calls",
]

_REASONS = {"length": "MAX_TOKENS", "content_filter": "SAFETY"}
_ANSWER_CONSTRAINTS = ("responseSchema", "responseJsonSchema", "responseMimeType")


def _call_part(call: ToolCall) -> dict[str, Any]:
    parsed, _ = call.parsed_arguments()
    function: dict[str, Any] = {"name": call.name, "args": parsed if isinstance(parsed, dict) else {}}
    if not call.id.startswith(SYNTHETIC):
        function["id"] = call.id
    return {"functionCall": function}


def _model_turn(reply: Reply) -> dict[str, Any]:
    """The model's turn as it returned it (its own parts, signatures and all), or rebuilt."""
    source = reply.source
    if isinstance(source, Mapping) and (parts := candidate_parts(source)):
        return {"role": "model", "parts": [p for p in parts if isinstance(p, dict)]}
    built: list[dict[str, Any]] = []
    if reply.content:
        built.append({"text": reply.content})
    built.extend(_call_part(call) for call in reply.tool_calls)
    return {"role": "model", "parts": built or [{"text": ""}]}


def rendered_turns(turns: Sequence[Turn]) -> list[dict[str, Any]]:
    """The proxy's neutral turns as ``contents`` entries."""
    contents: list[dict[str, Any]] = []
    for turn in turns:
        if isinstance(turn, Note):
            contents.append({"role": "user", "parts": [{"text": turn.text}]})
        elif isinstance(turn, Echo):
            contents.append(_model_turn(turn.reply))
        else:
            contents.append(_model_turn(turn.reply))
            answers = []
            for call in turn.reply.tool_calls:
                answer: dict[str, Any] = {"name": call.name, "response": {"output": turn.results[call.id]}}
                if not call.id.startswith(SYNTHETIC):
                    answer["id"] = call.id
                answers.append({"functionResponse": answer})
            contents.append({"role": "user", "parts": answers})
    return contents


def render_request(payload: Mapping[str, Any], turns: Sequence[Turn], **overrides: Any) -> bytes:
    """The request with ``turns`` appended and top-level ``overrides`` applied (None: removed)."""
    rendered = dict(payload)
    if turns:
        contents = payload.get("contents")
        rendered["contents"] = [*(contents if isinstance(contents, list) else []), *rendered_turns(turns)]
    return encode_overridden(rendered, overrides)


def amended(
    payload: Mapping[str, Any], tool_notes: Mapping[str, str], drop_tools: Sequence[str] = ()
) -> dict[str, Any]:
    """The payload with notes added to function responses (by call id, under ``loopwarden``
    in the response object) and hidden functions no longer declared."""
    result: dict[str, Any] = dict(payload)
    if drop_tools:
        _drop(result, set(drop_tools))
    if not tool_notes:
        return result
    targets = {place: tool_notes[ident] for place, ident in function_responses(payload) if ident in tool_notes}
    if not targets:
        return result
    contents = list(payload["contents"])
    for (index, position), note in targets.items():
        content = contents[index]
        parts = list(content["parts"])
        name = key_of(parts[position], "functionResponse")
        answer = parts[position][name]
        parts[position] = {**parts[position], name: {**answer, "response": _noted(answer, note)}}
        contents[index] = {**content, "parts": parts}
    result["contents"] = contents
    return result


def _noted(answer: Mapping[str, Any], note: str) -> dict[str, Any]:
    """A function response with ``note`` added to its text (``output``, ``result``), or under
    ``loopwarden`` when it has none."""
    response = answer.get("response")
    response = dict(response) if isinstance(response, dict) else {"output": response}
    field = next((name for name in ("output", "result", "content") if isinstance(response.get(name), str)), None)
    if field is None:
        response["loopwarden"] = f"[LoopWarden] {note}"
    else:
        response[field] = f"{response[field]}\n\n[LoopWarden] {note}"
    return response


def _drop(result: dict[str, Any], dropped: set[str]) -> None:
    tools = []
    for tool in result.get("tools") or []:
        declarations = field(tool, "functionDeclarations") if isinstance(tool, dict) else None
        if not isinstance(declarations, list):
            tools.append(tool)
            continue
        kept = [d for d in declarations if not (isinstance(d, dict) and d.get("name") in dropped)]
        name = key_of(tool, "functionDeclarations")
        if kept or len(tool) > 1:
            tools.append({**tool, name: kept} if kept else _without(tool, name))
    if tools:
        result["tools"] = tools
    else:
        result.pop("tools", None)
        result.pop("toolConfig", None)
        result.pop("tool_config", None)
        return
    tool_config = field(result, "toolConfig") or {}
    config = field(tool_config, "functionCallingConfig")
    if isinstance(config, dict) and isinstance(field(config, "allowedFunctionNames"), list):
        names = [n for n in field(config, "allowedFunctionNames") if n not in dropped]
        allowed = key_of(config, "allowedFunctionNames")
        calling = {**config, allowed: names} if names else _without(config, allowed)
        if not names and calling.get("mode") == "ANY":
            calling = {"mode": "AUTO"}
        result[key_of(result, "toolConfig")] = {**tool_config, key_of(tool_config, "functionCallingConfig"): calling}


def _without(mapping: Mapping[str, Any], name: str) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if k != name}


def _usage(usage: Usage) -> dict[str, int]:
    metadata = {
        "promptTokenCount": usage.prompt_tokens,
        "candidatesTokenCount": usage.completion_tokens,
        "totalTokenCount": usage.total,
    }
    if usage.cached_tokens:
        metadata["cachedContentTokenCount"] = usage.cached_tokens
    return metadata


def _body(parts: list[dict[str, Any]], reason: str, model: str | None, usage: Usage) -> dict[str, Any]:
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": reason, "index": 0}],
        "usageMetadata": _usage(usage),
        "modelVersion": model or "loopwarden",
        "responseId": "lw-" + secrets.token_hex(12),
    }


def completion(text: str, *, model: str | None, usage: Usage | None = None) -> dict[str, Any]:
    """A complete ``GenerateContentResponse`` carrying ``text`` (an ending)."""
    return _body([{"text": text}], "STOP", model, usage or Usage())


def reply_body(reply: Reply) -> dict[str, Any]:
    """A neutral reply as the ``GenerateContentResponse`` an upstream would have sent."""
    parts: list[dict[str, Any]] = []
    if reply.reasoning:
        parts.append({"text": reply.reasoning, "thought": True})
    if reply.content is not None or reply.refusal:
        parts.append({"text": reply.content or reply.refusal or ""})
    parts.extend(_call_part(call) for call in reply.tool_calls)
    reason = _REASONS.get(reply.finish_reason or "", "STOP")
    return _body(parts, reason, reply.model, reply.usage)


def as_refusal(body: Mapping[str, Any]) -> dict[str, Any]:
    """An ending for a request that asked for a JSON answer: Gemini has no refusal, so the
    candidate ends with ``finishReason: OTHER`` (not ``STOP``: no answer) and its words in
    ``finishMessage``, and they stay its text too: google-genai drops ``finishMessage``, and its
    ``response.parsed`` is None for text that is no JSON, so the application reads the
    ending's words from ``response.text``."""
    candidates = body.get("candidates")
    if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
        return dict(body)
    text = "".join(p["text"] for p in candidate_parts(body) if part_channel(p) == "text")
    first = candidates[0]
    return {**body, "candidates": [{**first, "finishReason": "OTHER", "finishMessage": text}, *candidates[1:]]}


def capped_config(payload: Mapping[str, Any], cap: int | None, *, force: bool) -> dict[str, Any]:
    """``generationConfig`` with ``maxOutputTokens`` at most ``cap`` (set when the request
    has none only if ``force``)."""
    config = field(payload, "generationConfig")
    config = dict(config) if isinstance(config, dict) else {}
    current = field(config, "maxOutputTokens")
    config.pop("max_output_tokens", None)
    if cap is not None and isinstance(current, int):
        config["maxOutputTokens"] = min(current, cap)
    elif isinstance(current, int):
        config["maxOutputTokens"] = current
    elif cap is not None and force:
        config["maxOutputTokens"] = cap
    return config


def summary_overrides(payload: Mapping[str, Any], cap: int | None, force: bool) -> dict[str, Any]:
    """The last call of an ending: functions declared but not to be called, prose (no output
    schema), its length capped. (Not streamed is the path's business: the same URL is used,
    and a streamed answer is read whole.)"""
    constraints = {*_ANSWER_CONSTRAINTS, *map(snake, _ANSWER_CONSTRAINTS)}
    config = {k: v for k, v in capped_config(payload, cap, force=force).items() if k not in constraints}
    return {
        "toolConfig": {"functionCallingConfig": {"mode": "NONE"}} if payload.get("tools") else None,
        "tool_config": None,
        "generationConfig": config or None,
        "generation_config": None,
    }


def forced_config(name: str) -> dict[str, Any]:
    """``toolConfig`` forcing a call of function ``name``."""
    return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [name]}}


def without_calls(body: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The response with the ``functionCall`` parts of ``name`` taken out (goal mode's own tool)."""
    parts = candidate_parts(body)
    kept = [p for p in parts if not (part_channel(p) == "call" and field(p, "functionCall").get("name") == name)]
    return _replaced(body, kept or [{"text": ""}])


def _replaced(body: Mapping[str, Any], parts: list[Any]) -> dict[str, Any]:
    candidates = body.get("candidates")
    if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
        return dict(body)
    first = candidates[0]
    content = first["content"] if isinstance(first.get("content"), dict) else {"role": "model"}
    return {**body, "candidates": [{**first, "content": {**content, "parts": parts}}, *candidates[1:]]}


def set_apart(body: Mapping[str, Any]) -> dict[str, Any]:
    """The ending's text, set apart from text the client already received."""
    parts = []
    first = True
    for part in candidate_parts(body):
        if first and part_channel(part) == "text" and part["text"]:
            part = {**part, "text": "\n\n" + part["text"]}
            first = False
        parts.append(part)
    return _replaced(body, parts)


def as_sse(body: Mapping[str, Any], *, include_usage: bool = True) -> bytes:
    """A complete response as an ``alt=sse`` stream: one chunk carrying all of it."""
    return frame(encode(body))

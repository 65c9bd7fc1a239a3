"""The efficacy benchmark's scripted model, speaking the Gemini API (``generateContent``).

The scenarios are written against chat completions; a Gemini request is read through
:func:`chat_view` (the same conversation in chat's shape: ``functionCall`` parts as tool calls,
``functionResponse`` parts as ``tool`` turns, a response schema as ``response_format``), and the
scenario's reply is written back as a ``GenerateContentResponse`` (a thought, text and signed
``functionCall`` parts), streamed as ``alt=sse`` chunks when the path streams. A bench model
name (``bench/<scenario>/<variant>/<run>``) travels in the path with ``~`` for ``/``
(:func:`path_model`, :func:`bench_model`). Arguments that are not JSON become empty ``args``
(a ``functionCall`` carries an object): still an invalid call.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from tests.bench.efficacy import scenarios

__all__ = ["bench_model", "chat_view", "gemini_tools", "path_model", "response", "streamed"]

SIGNATURE = base64.b64encode(b"bench-signature").decode()


def path_model(model: str) -> str:
    """A bench model as a Gemini path segment."""
    return model.replace("/", "~")


def bench_model(path: str) -> str:
    """The bench model a Gemini path names (``…/models/bench~a~b~c:generateContent``)."""
    return path.rpartition("/models/")[2].partition(":")[0].replace("~", "/")


def _text(parts: Any) -> str:
    if not isinstance(parts, list):
        return ""
    return "".join(
        p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str) and not p.get("thought")
    )


def _get(mapping: dict[str, Any], camel: str, snake: str) -> Any:
    return mapping.get(camel, mapping.get(snake))


def chat_view(payload: dict[str, Any], model: str) -> dict[str, Any]:
    """A Gemini request as the chat-shaped request the scenarios read."""
    messages: list[dict[str, Any]] = []
    system = _get(payload, "systemInstruction", "system_instruction")
    if isinstance(system, dict):
        messages.append({"role": "system", "content": _text(system.get("parts"))})
    waiting: list[str] = []
    for content in payload.get("contents") or []:
        parts = content.get("parts") or []
        if content.get("role") == "model":
            calls = []
            for p in parts:
                call = _get(p, "functionCall", "function_call")
                if isinstance(call, dict):
                    ident = call.get("id") or f"{call['name']}_{len(calls)}"
                    calls.append(
                        {
                            "id": ident,
                            "type": "function",
                            "function": {"name": call["name"], "arguments": json.dumps(call.get("args") or {})},
                        }
                    )
            waiting = [c["id"] for c in calls]
            messages.append(
                {"role": "assistant", "content": _text(parts) or None, **({"tool_calls": calls} if calls else {})}
            )
            continue
        answered = False
        for p in parts:
            answer = _get(p, "functionResponse", "function_response")
            if isinstance(answer, dict):
                answered = True
                ident = answer.get("id") or (waiting.pop(0) if waiting else answer.get("name", ""))
                result = answer.get("response")
                output = (
                    result.get("output")
                    if isinstance(result, dict) and isinstance(result.get("output"), str)
                    else json.dumps(result)
                )
                messages.append({"role": "tool", "tool_call_id": ident, "content": output})
        text = _text(parts)
        if text or not answered:
            messages.append({"role": "user", "content": text})
    config = _get(payload, "generationConfig", "generation_config") or {}
    schema = _get(config, "responseJsonSchema", "response_json_schema") or _get(
        config, "responseSchema", "response_schema"
    )
    tool_config = _get(payload, "toolConfig", "tool_config") or {}
    calling = _get(tool_config, "functionCallingConfig", "function_calling_config") or {}
    tools = [
        {
            "type": "function",
            "function": {
                "name": d["name"],
                "parameters": _get(d, "parametersJsonSchema", "parameters_json_schema") or d.get("parameters") or {},
            },
        }
        for tool in payload.get("tools") or []
        for d in _get(tool, "functionDeclarations", "function_declarations") or []
    ]
    allowed = _get(calling, "allowedFunctionNames", "allowed_function_names") or []
    choice: Any = None
    if calling.get("mode") == "NONE":
        choice = "none"
    elif calling.get("mode") == "ANY" and len(allowed) == 1:
        choice = {"type": "function", "function": {"name": allowed[0]}}
    return {
        "model": model,
        "messages": messages,
        **({"tools": tools} if tools else {}),
        **({"tool_choice": choice} if choice is not None else {}),
        **({"response_format": {"type": "json_schema", "json_schema": {"schema": schema}}} if schema else {}),
    }


def response(model: str, reply: scenarios.Reply, *, prompt_tokens: int) -> dict[str, Any]:
    """The scenario's reply as a ``GenerateContentResponse``, billed like the chat one."""
    parts: list[dict[str, Any]] = []
    if reply.reasoning:
        parts.append({"text": reply.reasoning, "thought": True})
    if reply.content:
        parts.append({"text": reply.content})
    for index, call in enumerate(reply.tool_calls):
        try:
            args = json.loads(call["function"]["arguments"])
        except ValueError:
            args = {}
        part: dict[str, Any] = {"functionCall": {"name": call["function"]["name"], "args": args, "id": call["id"]}}
        if index == 0:
            part["thoughtSignature"] = SIGNATURE
        parts.append(part)
    output_tokens = len(json.dumps(parts)) // 4 + reply.extra_completion_tokens
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {
            "promptTokenCount": prompt_tokens,
            "candidatesTokenCount": output_tokens,
            "totalTokenCount": prompt_tokens + output_tokens,
        },
        "modelVersion": path_model(model),
        "responseId": f"gemini-bench{time.monotonic_ns()}",
    }


def streamed(body: dict[str, Any]) -> bytes:
    """The response as ``alt=sse`` chunks: one per part, the last with the finish and usage."""
    candidate = body["candidates"][0]
    parts = candidate["content"]["parts"] or [{"text": ""}]
    head = {k: v for k, v in body.items() if k not in ("candidates", "usageMetadata")}
    chunks = [{**head, "candidates": [{"content": {"role": "model", "parts": [p]}, "index": 0}]} for p in parts]
    chunks[-1]["candidates"][0]["finishReason"] = candidate["finishReason"]
    chunks[-1]["usageMetadata"] = body["usageMetadata"]
    return b"".join(b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n" for chunk in chunks)


def gemini_tools(profile: scenarios.AgentProfile) -> list[dict[str, Any]]:
    """The profile's tools as one Gemini ``Tool`` of function declarations."""
    declarations = [
        {
            "name": t["function"]["name"],
            "description": t["function"].get("description", ""),
            "parametersJsonSchema": t["function"]["parameters"],
        }
        for t in profile.tools
    ]
    return [{"functionDeclarations": declarations}]

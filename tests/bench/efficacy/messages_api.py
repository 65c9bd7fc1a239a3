"""The efficacy benchmark's scripted model, speaking Anthropic Messages.

The scenarios are written against chat completions; a Messages request is read through
:func:`chat_view` (the same conversation in chat's shape: tool results as ``tool`` turns, a
note that follows them as a later user turn), and the scenario's reply is written back as a
Messages ``message`` (thinking, text and ``tool_use`` blocks), streamed as named events when
asked. Arguments a misbehaving model writes that are not JSON become an empty ``input``
(``tool_use.input`` is always an object): still an invalid call.
"""

from __future__ import annotations

import json
import time
from typing import Any

from tests.bench.efficacy import scenarios
from tests.support.fake_messages import sse_bytes, stream_events

__all__ = ["anthropic_tools", "chat_view", "message", "streamed"]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


def chat_view(payload: dict[str, Any]) -> dict[str, Any]:
    """A Messages request as the chat-shaped request the scenarios read."""
    messages: list[dict[str, Any]] = []
    if payload.get("system"):
        messages.append({"role": "system", "content": _text(payload["system"])})
    for raw in payload.get("messages") or []:
        content = raw.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": _text(content)}]
        if raw.get("role") == "assistant":
            calls = [
                {
                    "id": b["id"],
                    "type": "function",
                    "function": {"name": b["name"], "arguments": json.dumps(b["input"])},
                }
                for b in blocks
                if b.get("type") == "tool_use"
            ]
            text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
            messages.append({"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})})
            continue
        for block in blocks:
            if block.get("type") == "tool_result":
                messages.append(
                    {"role": "tool", "tool_call_id": block["tool_use_id"], "content": _text(block["content"])}
                )
        text = "\n".join(b["text"] for b in blocks if b.get("type") == "text")
        if text or not any(b.get("type") == "tool_result" for b in blocks):
            messages.append({"role": raw.get("role", "user"), "content": text})
    config = payload.get("output_config")
    structured = isinstance(config, dict) and isinstance(config.get("format"), dict)
    return {
        "model": payload.get("model"),
        "messages": messages,
        **({"tools": payload["tools"]} if payload.get("tools") else {}),
        **({"response_format": config["format"]} if structured else {}),
    }


def message(model: str, reply: scenarios.Reply, *, prompt_tokens: int) -> dict[str, Any]:
    """The scenario's reply as a Messages ``message``, billed like the chat one."""
    content: list[dict[str, Any]] = []
    if reply.reasoning:
        content.append({"type": "thinking", "thinking": reply.reasoning, "signature": "sig-bench"})
    if reply.content:
        content.append({"type": "text", "text": reply.content})
    for call in reply.tool_calls:
        try:
            arguments = json.loads(call["function"]["arguments"])
        except ValueError:
            arguments = {}
        content.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"], "input": arguments})
    output_tokens = len(json.dumps(content)) // 4 + reply.extra_completion_tokens
    return {
        "id": f"msg_bench{time.monotonic_ns()}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": prompt_tokens, "output_tokens": output_tokens},
    }


def streamed(body: dict[str, Any]) -> bytes:
    """The message as the API streams it."""
    return sse_bytes(stream_events(body))


def anthropic_tools(profile: scenarios.AgentProfile) -> list[dict[str, Any]]:
    """The profile's tools in Anthropic's shape."""
    return [
        {
            "name": t["function"]["name"],
            "description": t["function"].get("description", ""),
            "input_schema": t["function"]["parameters"],
        }
        for t in profile.tools
    ]

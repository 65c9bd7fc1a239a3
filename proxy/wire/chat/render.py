"""OpenAI chat completions, written: nudged requests, amended tool results, endings and their streams.

Rendering changes only what it must, so every field the proxy does not understand survives.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.exchange import Echo, Note, Reply, Turn, Usage
from proxy.wire.chat.stream import wire_call
from proxy.wire.common import encode, encode_overridden

__all__ = [
    "ANSWER_CONSTRAINTS",
    "DONE",
    "amended",
    "as_refusal",
    "calls_returned",
    "capped_output",
    "completion",
    "completion_as_sse",
    "forced_choice",
    "render_request",
    "rendered_turns",
    "reply_completion",
    "set_apart",
    "summary_overrides",
    "with_usage_requested",
    "without_calls",
]


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
    return encode_overridden(rendered, overrides)


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


def reply_completion(reply: Reply) -> dict[str, Any]:
    """A neutral reply as the chat.completion an upstream would have sent, under an id of the
    proxy's own (a guard's rewrite; replay serves recorded replies with it)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.refusal:
        message["refusal"] = reply.refusal
    if reply.tool_calls:
        message["tool_calls"] = [wire_call(call) for call in reply.tool_calls]
    usage = reply.usage
    return {
        "id": "chatcmpl-lw-" + secrets.token_hex(12),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": reply.model or "loopwarden",
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason or "stop"}],
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total,
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
    return b"".join(b"data: " + encode(event) + b"\n\n" for event in events) + DONE


DONE = b"data: [DONE]\n\n"
ANSWER_CONSTRAINTS = ("response_format", "guided_json", "guided_regex", "guided_choice", "guided_grammar")
"""Removed from the summary call: a summary is prose (OpenAI's and vLLM's output constraints)."""


def summary_overrides(payload: Mapping[str, Any], cap: int | None, force: bool) -> dict[str, Any]:
    """The last call of an ending: tools kept but forbidden, prose (no output constraint), whole
    (not streamed), its length capped (:func:`capped_output`)."""
    return {
        "tool_choice": "none" if payload.get("tools") else None,
        "function_call": None,
        **dict.fromkeys(ANSWER_CONSTRAINTS),
        "stream": None,
        "stream_options": None,
        "parallel_tool_calls": None,
        **capped_output(payload, cap, force=force),
    }


def forced_choice(name: str) -> dict[str, Any]:
    """``tool_choice`` forcing a call of tool ``name``."""
    return {"type": "function", "function": {"name": name}}


def capped_output(payload: Mapping[str, Any], cap: int | None, *, force: bool = False) -> dict[str, Any]:
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


def set_apart(body: Mapping[str, Any]) -> dict[str, Any]:
    """The ending's text, set apart from text the client already received."""
    choice = body["choices"][0]
    message = dict(choice["message"])
    if isinstance(message.get("content"), str) and message["content"]:
        message["content"] = "\n\n" + message["content"]
    return {**body, "choices": [{**choice, "message": message}]}

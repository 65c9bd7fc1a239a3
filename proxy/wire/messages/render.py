"""Anthropic Messages, written: nudged requests, amended tool results, endings, errors.

Rendering changes only what it must. An assistant turn the proxy sends back (an echo, calls
returned unexecuted) is the upstream's own content list, unchanged: thinking blocks are
signed, and the API rejects one that comes back altered or without its neighbours.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from proxy.errors import ProxyError
from proxy.exchange import Note, Reply, ReturnCalls, Turn, Usage
from proxy.wire.common import encode, encode_overridden

__all__ = [
    "ERROR_TYPES",
    "amended",
    "as_refusal",
    "assistant_content",
    "ending",
    "error_body",
    "error_event",
    "forced_choice",
    "render_request",
    "rendered_turns",
    "reply_message",
    "set_apart",
    "summary_overrides",
    "without_calls",
]


ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}
"""Anthropic's error ``type`` for a status (its SDKs pick the exception class by status)."""
NOTE_PREFIX = "[LoopWarden] "


def error_body(error: ProxyError) -> bytes:
    """``{"type": "error", "error": {"type", "message"}}``, the type matching the status."""
    status = error.status
    kind = ERROR_TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")
    return encode({"type": "error", "error": {"type": kind, "message": error.message}})


def error_event(error: ProxyError) -> bytes:
    """Anthropic's in-stream ``error`` event (an SDK raises it)."""
    return b"event: error\ndata: " + error_body(error) + b"\n\n"


def assistant_content(reply: Reply) -> list[Any]:
    """The reply's content list as the upstream sent it (a reply built elsewhere: its text
    and calls as blocks)."""
    if isinstance(reply.source, list):
        return reply.source
    blocks: list[Any] = []
    if reply.content:
        blocks.append({"type": "text", "text": reply.content})
    for call in reply.tool_calls:
        try:
            arguments = msgspec.json.decode(call.arguments) if call.arguments.strip() else {}
        except msgspec.DecodeError:
            arguments = {}
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": arguments})
    return blocks


def rendered_turns(turns: Sequence[Turn]) -> list[dict[str, Any]]:
    """The proxy's turns as messages. Calls returned unexecuted are answered at the start of
    the next user turn, every ``tool_result`` first (the API requires it), and a note that
    follows them goes into that same turn, after the results. A result is not marked
    ``is_error``: it may be a refusal or the proxy's own answer (goal mode's tool), and its
    text says which."""
    messages: list[dict[str, Any]] = []
    results_open = False
    for turn in turns:
        if isinstance(turn, Note):
            if results_open:
                messages[-1]["content"].append({"type": "text", "text": turn.text})
            else:
                messages.append({"role": "user", "content": [{"type": "text", "text": turn.text}]})
            continue
        content = assistant_content(turn.reply)
        if content:  # an empty turn is no turn: the API refuses a message without content
            messages.append({"role": "assistant", "content": content})
        results_open = isinstance(turn, ReturnCalls)
        if isinstance(turn, ReturnCalls):
            results = turn.results
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": call.id, "content": results[call.id]}
                        for call in turn.reply.tool_calls
                    ],
                }
            )
    return messages


def render_request(payload: Mapping[str, Any], turns: Sequence[Turn], **overrides: Any) -> bytes:
    """The request with ``turns`` appended and top-level ``overrides`` applied (None removes)."""
    rendered = dict(payload)
    if turns:
        messages = payload.get("messages")
        rendered["messages"] = [*(messages if isinstance(messages, list) else ()), *rendered_turns(turns)]
    return encode_overridden(rendered, overrides)


def summary_overrides(payload: Mapping[str, Any], cap: int | None, force: bool) -> dict[str, Any]:
    """The last call of an ending: tools forbidden (kept, so the history's ``tool_use`` blocks
    stay valid), no JSON format, not streamed, its length within ``cap``. ``max_tokens`` is
    required by the API, so it is always there; a thinking budget stays below it."""
    overrides: dict[str, Any] = {"stream": None, "output_format": None}
    if payload.get("tools"):
        overrides["tool_choice"] = {"type": "none"}
    config = payload.get("output_config")
    if isinstance(config, dict) and "format" in config:
        kept = {k: v for k, v in config.items() if k != "format"}
        overrides["output_config"] = kept or None
    current = payload.get("max_tokens")
    limit = current if isinstance(current, int) and not isinstance(current, bool) and current > 0 else None
    if cap is not None and (limit is not None or force):
        limit = min(limit, cap) if limit is not None else cap
    if limit is None:
        limit = cap or 1024
    thinking = payload.get("thinking")
    budget = thinking.get("budget_tokens") if isinstance(thinking, dict) and thinking.get("type") == "enabled" else None
    if isinstance(budget, int) and budget >= limit:
        limit = budget + (cap or 1024)
    overrides["max_tokens"] = limit
    return overrides


def forced_choice(name: str) -> dict[str, Any]:
    """``tool_choice`` forcing a call of tool ``name`` (the API refuses one while thinking is on:
    the ending then falls back to the local summary)."""
    return {"type": "tool", "name": name}


def amended(
    payload: Mapping[str, Any], tool_notes: Mapping[str, str], drop_tools: Sequence[str] = ()
) -> dict[str, Any]:
    """Notes appended to tool results (by ``tool_use_id``), hidden tools removed; the client's
    own payload is untouched."""
    result: dict[str, Any] = dict(payload)
    if drop_tools:
        dropped = set(drop_tools)
        tools = payload.get("tools")
        offered = tools if isinstance(tools, list) else []
        kept = [t for t in offered if not (isinstance(t, dict) and t.get("name") in dropped)]
        choice = payload.get("tool_choice")
        if kept:
            result["tools"] = kept
            if isinstance(choice, dict) and choice.get("name") in dropped:
                result.pop("tool_choice", None)
        else:
            result.pop("tools", None)
            result.pop("tool_choice", None)
    if not tool_notes:
        return result
    messages = payload.get("messages")
    result["messages"] = [_noted(m, tool_notes) for m in messages] if isinstance(messages, list) else messages
    return result


def _noted(message: Any, notes: Mapping[str, str]) -> Any:
    if not isinstance(message, dict) or message.get("role") != "user" or not isinstance(message.get("content"), list):
        return message
    changed = False
    blocks = []
    for block in message["content"]:
        is_result = isinstance(block, dict) and block.get("type") == "tool_result"
        note = notes.get(str(block.get("tool_use_id"))) if is_result else None
        if note is None:
            blocks.append(block)
            continue
        changed = True
        content = block.get("content")
        if isinstance(content, list):
            content = [*content, {"type": "text", "text": NOTE_PREFIX + note}]
        else:
            content = f"{content or ''}\n\n{NOTE_PREFIX}{note}"
        blocks.append({**block, "content": content})
    return {**message, "content": blocks} if changed else message


def ending(text: str, *, model: str | None, usage: Usage | None = None) -> dict[str, Any]:
    """A complete message carrying ``text``, with an id of the proxy's own (``msg_lw…``)."""
    used = usage or Usage()
    return {
        "id": "msg_lw" + secrets.token_hex(12),
        "type": "message",
        "role": "assistant",
        "model": model or "loopwarden",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": used.prompt_tokens, "output_tokens": used.completion_tokens},
    }


_STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "content_filter": "refusal"}
"""A finish reason in chat's words (a recorded chat reply replayed here) in Messages' words."""


def reply_message(reply: Reply) -> dict[str, Any]:
    """A neutral reply as the message an upstream would have sent, under an id of the proxy's
    own (a guard's rewrite; ``loopwarden replay`` serves recorded replies with it). Its own
    content list when it still says what the reply says (signed thinking kept), else blocks
    built from it."""
    content = _unchanged_source(reply)
    if content is None:
        content = [{"type": "thinking", "thinking": reply.reasoning, "signature": ""}] if reply.reasoning else []
        text = reply.content if reply.content is not None else reply.refusal
        content += assistant_content(Reply(text, None, reply.tool_calls, reply.finish_reason, reply.usage))
    finish = reply.finish_reason
    stop = _STOP_REASONS.get(finish, finish) if finish else None
    if reply.refusal and not reply.content:
        stop = "refusal"
    return {
        "id": "msg_lw" + secrets.token_hex(12),
        "type": "message",
        "role": "assistant",
        "model": reply.model or "loopwarden",
        "content": content,
        "stop_reason": stop or ("tool_use" if reply.tool_calls else "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": reply.usage.prompt_tokens, "output_tokens": reply.usage.completion_tokens},
    }


def _unchanged_source(reply: Reply) -> list[Any] | None:
    source = reply.source
    if not isinstance(source, list):
        return None
    texts = "".join(b.get("text", "") for b in source if isinstance(b, dict) and b.get("type") == "text")
    calls = [(b.get("id"), b.get("name")) for b in source if isinstance(b, dict) and b.get("type") == "tool_use"]
    same_text = texts == (reply.content or reply.refusal or "")
    return source if same_text and calls == [(c.id, c.name) for c in reply.tool_calls] else None


def as_refusal(body: Mapping[str, Any]) -> dict[str, Any]:
    """An ending for a request that asked for a JSON answer: ``stop_reason: refusal``, which
    Anthropic's structured outputs use for an answer that does not follow the schema, with the
    text moved to ``stop_details.explanation`` (the refusal's own words): the anthropic SDK's
    ``messages.parse`` validates every text block against the schema, so a text block would
    raise instead of giving ``parsed_output`` None."""
    content = body.get("content")
    blocks = content if isinstance(content, list) else []
    text = "".join(b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text")
    kept = [b for b in blocks if not (isinstance(b, dict) and b.get("type") == "text")]
    details = {"type": "refusal", "category": None, "explanation": text or None}
    return {**body, "content": kept, "stop_reason": "refusal", "stop_details": details}


def without_calls(body: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The message with the ``tool_use`` blocks of tool ``name`` taken out (goal mode's)."""
    content = body.get("content")
    blocks = content if isinstance(content, list) else []
    kept = [b for b in blocks if not (isinstance(b, dict) and b.get("type") == "tool_use" and b.get("name") == name)]
    result = {**body, "content": kept}
    calls_left = any(isinstance(b, dict) and b.get("type") == "tool_use" for b in kept)
    if body.get("stop_reason") == "tool_use" and not calls_left:
        result["stop_reason"] = "end_turn"
    return result


def set_apart(body: Mapping[str, Any]) -> dict[str, Any]:
    """The ending's text, set apart from text the client already received."""
    content = body.get("content")
    if not isinstance(content, list):
        return dict(body)
    blocks = []
    first = True
    for block in content:
        if first and isinstance(block, dict) and block.get("type") == "text" and block.get("text"):
            block = {**block, "text": "\n\n" + block["text"]}
            first = False
        blocks.append(block)
    return {**body, "content": blocks}

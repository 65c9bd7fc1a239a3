"""The OpenAI Responses API, written: nudged requests, amended tool outputs, endings.

A nudge keeps the pairing rules strict clients and the API enforce: the model's own output
items go back exactly as it sent them (a ``reasoning`` item with its ``encrypted_content``
next to the item that follows it, ``phase`` on every message), and every call handed back
is answered by its output item. On a chained request (``previous_response_id`` or
``conversation``) the server already holds the history and the rejected reply, so the
next call chains to the rejected response and sends only what is new. Items and responses
the proxy makes itself carry ids of its own (``resp_lw…``, ``msg_lw…``).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.exchange import Echo, Note, Reply, ReturnCalls, Tool, Turn, Usage
from proxy.wire.common import encode_overridden
from proxy.wire.responses.parse import CALL_ITEMS, ENCRYPTED_REASONING, call_name

__all__ = [
    "PROXY_ID_PREFIXES",
    "amended",
    "as_refusal",
    "forced_choice",
    "function_tool",
    "input_items",
    "is_proxy_id",
    "proxy_id",
    "render_request",
    "rendered_turns",
    "reply_response",
    "response",
    "set_apart",
    "summary_overrides",
    "without_calls",
]


PROXY_ID_PREFIXES = ("resp_lw", "msg_lw", "rs_lw", "fc_lw", "ctc_lw")
_OUTPUT_OF = {"function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output"}


def proxy_id(prefix: str, token: str | None = None) -> str:
    """An id the proxy made (``resp_lw…``, ``msg_lw…``): recognizably not the upstream's. A
    response and its message share one token, so a message id names its response."""
    return f"{prefix}_lw{token or secrets.token_hex(16)}"


def is_proxy_id(value: object) -> bool:
    return isinstance(value, str) and value.startswith(PROXY_ID_PREFIXES)


def input_items(payload: Mapping[str, Any]) -> list[Any]:
    """The request's ``input`` as a list of items (a string is one user message)."""
    raw = payload.get("input")
    if isinstance(raw, list):
        return raw
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    return []


def _note(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def _output_items(reply: Reply) -> list[Any]:
    """The reply's output items as the model sent them (from the response it came in)."""
    source = reply.source
    output = source.get("output") if isinstance(source, Mapping) else None
    if isinstance(output, list):
        return output
    items: list[Any] = []  # a reply that did not come from this format: rebuilt
    if reply.content:
        items.append(_message(reply.content, proxy_id("msg")))
    for call in reply.tool_calls:
        if call.kind == "custom":
            items.append({"type": "custom_tool_call", "call_id": call.id, "name": call.name, "input": call.arguments})
        else:
            items.append({"type": "function_call", "call_id": call.id, "name": call.name, "arguments": call.arguments})
    return items


def _followed(items: list[Any]) -> list[Any]:
    """The items without trailing ``reasoning`` (a reasoning-only reply's): a reasoning item
    goes back only with the item that followed it, and those had none."""
    end = len(items)
    while end and isinstance(items[end - 1], dict) and items[end - 1].get("type") == "reasoning":
        end -= 1
    return items if end == len(items) else items[:end]


def _answers(reply: Reply, results: Mapping[str, str]) -> list[dict[str, Any]]:
    """One output item per call item of the reply, in order (every call answered)."""
    answers = []
    for item in _output_items(reply):
        if isinstance(item, dict) and item.get("type") in _OUTPUT_OF:
            call_id = str(item.get("call_id", ""))
            answers.append({"type": _OUTPUT_OF[item["type"]], "call_id": call_id, "output": results.get(call_id, "")})
    return answers


def rendered_turns(turns: Sequence[Turn]) -> list[Any]:
    """The proxy's neutral turns as input items."""
    items: list[Any] = []
    for turn in turns:
        if isinstance(turn, Note):
            items.append(_note(turn.text))
        elif isinstance(turn, Echo):
            items.extend(_followed(_output_items(turn.reply)))
        else:
            items.extend(_output_items(turn.reply))
            items.extend(_answers(turn.reply, turn.results))
    return items


def _response_id(turn: Turn) -> str | None:
    source = turn.reply.source if isinstance(turn, Echo | ReturnCalls) else None
    value = source.get("id") if isinstance(source, Mapping) else None
    return value if isinstance(value, str) and not is_proxy_id(value) else None


def _with_turns(payload: Mapping[str, Any], turns: Sequence[Turn]) -> dict[str, Any]:
    """The fields that carry ``turns`` upstream. Chained: after the last rejected response,
    chained to it; otherwise the whole input again, the turns appended."""
    if isinstance(payload.get("previous_response_id"), str) or payload.get("conversation") is not None:
        for index in range(len(turns) - 1, -1, -1):
            rejected = _response_id(turns[index])
            if rejected is None:
                continue
            turn = turns[index]
            tail = _answers(turn.reply, turn.results) if isinstance(turn, ReturnCalls) else []
            fields: dict[str, Any] = {"input": [*tail, *rendered_turns(turns[index + 1 :])]}
            if payload.get("conversation") is None:
                fields["previous_response_id"] = rejected
            return fields
    return {"input": [*input_items(payload), *rendered_turns(turns)]}


def render_request(payload: Mapping[str, Any], turns: Sequence[Turn], **overrides: Any) -> bytes:
    """The request with ``turns`` sent along and top-level ``overrides`` applied (None removes)."""
    rendered = dict(payload)
    if turns:
        rendered.update(_with_turns(payload, turns))
    return encode_overridden(rendered, overrides)


def summary_overrides(payload: Mapping[str, Any], cap: int | None, force: bool) -> dict[str, Any]:
    """The last call of an ending: tools kept but forbidden, prose (no ``text.format``), whole
    (not streamed, not in the background), its length capped."""
    text = payload.get("text")
    kept_text = {k: v for k, v in text.items() if k != "format"} if isinstance(text, dict) else None
    overrides: dict[str, Any] = {
        "tool_choice": "none" if payload.get("tools") else None,
        "text": kept_text or None,
        "stream": None,
        "stream_options": None,
        "background": None,
        "parallel_tool_calls": None,
        "max_tool_calls": None,
    }
    current = payload.get("max_output_tokens")
    if cap is not None and isinstance(current, int):
        overrides["max_output_tokens"] = min(current, cap)
    elif cap is not None and force:
        overrides["max_output_tokens"] = cap
    return overrides


def forced_choice(name: str) -> dict[str, Any]:
    """``tool_choice`` forcing a call of function ``name``."""
    return {"type": "function", "name": name}


def amended(
    payload: Mapping[str, Any], tool_notes: Mapping[str, str], drop_tools: Sequence[str] = ()
) -> dict[str, Any]:
    """The payload with notes appended to call outputs (by call id) and hidden tools removed."""
    result: dict[str, Any] = dict(payload)
    if drop_tools:
        dropped = set(drop_tools)
        tools = payload.get("tools")
        kept = [t for t in tools if not _names_dropped(t, dropped)] if isinstance(tools, list) else []
        if kept:
            result["tools"] = kept
        else:
            for name in ("tools", "tool_choice", "parallel_tool_calls"):
                result.pop(name, None)
        choice = payload.get("tool_choice")
        if isinstance(choice, dict) and call_name(choice) in dropped:
            result.pop("tool_choice", None)
    if tool_notes and isinstance(payload.get("input"), list):
        result["input"] = [_noted(item, tool_notes) for item in payload["input"]]
    return result


def _names_dropped(tool: Any, dropped: set[str]) -> bool:
    return isinstance(tool, dict) and tool.get("type") in ("function", "custom") and tool.get("name") in dropped


def _noted(item: Any, notes: Mapping[str, str]) -> Any:
    if not isinstance(item, dict) or item.get("type") not in ("function_call_output", "custom_tool_call_output"):
        return item
    note = notes.get(str(item.get("call_id")))
    if note is None:
        return item
    output = item.get("output")
    addition = f"\n\n[LoopWarden] {note}"
    if isinstance(output, list):
        return {**item, "output": [*output, {"type": "input_text", "text": addition.strip()}]}
    return {**item, "output": f"{output if isinstance(output, str) else ''}{addition}"}


def function_tool(tool: Tool) -> dict[str, Any]:
    """An offered tool as a (flat) ``tools`` item."""
    return {"type": "function", "name": tool.name, "description": tool.description, "parameters": dict(tool.parameters)}


def _message(text: str, item_id: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def response(text: str, *, model: str | None, usage: Usage | None = None) -> dict[str, Any]:
    """A complete response carrying ``text`` in one message (an ending), ids the proxy's own."""
    used = usage or Usage()
    token = secrets.token_hex(16)
    return {
        "id": proxy_id("resp", token),
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "model": model or "loopwarden",
        "output": [_message(text, proxy_id("msg", token))],
        "parallel_tool_calls": True,
        "temperature": None,
        "tool_choice": "auto",
        "tools": [],
        "top_p": None,
        "usage": {
            "input_tokens": used.prompt_tokens,
            "input_tokens_details": {"cached_tokens": used.cached_tokens},
            "output_tokens": used.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": used.prompt_tokens + used.completion_tokens,
        },
    }


def reply_response(reply: Reply) -> dict[str, Any]:
    """A neutral reply as the response an upstream would have sent, under ids of the proxy's
    own (a guard's rewrite; replay serves recorded replies with it)."""
    token = secrets.token_hex(16)
    output: list[dict[str, Any]] = []
    if reply.reasoning and reply.reasoning != ENCRYPTED_REASONING:
        summary = [{"type": "summary_text", "text": reply.reasoning}]
        output.append({"type": "reasoning", "id": proxy_id("rs", token), "summary": summary})
    parts: list[dict[str, Any]] = []
    if reply.content is not None:
        parts.append({"type": "output_text", "text": reply.content, "annotations": []})
    if reply.refusal:
        parts.append({"type": "refusal", "refusal": reply.refusal})
    if parts:
        output.append({**_message("", proxy_id("msg", token)), "content": parts})
    for position, call in enumerate(reply.tool_calls):
        if call.kind == "custom":
            item = {"type": "custom_tool_call", "name": call.name, "input": call.arguments}
            prefix = "ctc"
        else:
            item = {"type": "function_call", "name": call.name, "arguments": call.arguments, "status": "completed"}
            prefix = "fc"
        output.append({**item, "id": proxy_id(prefix, f"{token}_{position}"), "call_id": call.id})
    body = response("", model=reply.model, usage=reply.usage)
    body.update(id=proxy_id("resp", token), output=output)
    if reply.cut_short:
        reason = "max_output_tokens" if reply.finish_reason == "length" else "content_filter"
        body.update(status="incomplete", incomplete_details={"reason": reason})
    return body


def as_refusal(body: Mapping[str, Any]) -> dict[str, Any]:
    """An ending for a request that asked for a JSON answer: its text parts become refusal
    parts, which the SDKs surface as a refusal instead of failing to parse prose as JSON."""
    return {**body, "output": [_refused(item) for item in body.get("output") or ()]}


def _refused(item: Any) -> Any:
    if not isinstance(item, dict) or item.get("type") != "message":
        return item
    parts = [
        {"type": "refusal", "refusal": p["text"]} if isinstance(p, dict) and p.get("type") == "output_text" else p
        for p in item.get("content") or ()
    ]
    return {**item, "content": parts}


def without_calls(body: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A response with the calls of tool ``name`` taken out (goal mode's own tool)."""
    output = [
        item
        for item in body.get("output") or ()
        if not (isinstance(item, dict) and item.get("type") in CALL_ITEMS and call_name(item) == name)
    ]
    return {**body, "output": output}


def set_apart(body: Mapping[str, Any]) -> dict[str, Any]:
    """The ending's text set apart from text the client already received (the SDKs join the
    text of every message item into one ``output_text``)."""
    output = list(body.get("output") or ())
    for index, item in enumerate(output):
        if isinstance(item, dict) and item.get("type") == "message":
            parts = list(item.get("content") or ())
            for position, part in enumerate(parts):
                if isinstance(part, dict) and part.get("type") in ("output_text", "refusal"):
                    key = "text" if part["type"] == "output_text" else "refusal"
                    parts[position] = {**part, key: "\n\n" + str(part.get(key, ""))}
                    output[index] = {**item, "content": parts}
                    return {**body, "output": output}
    return dict(body)

"""The OpenAI Responses API, read: a request's items into the neutral conversation, a
response's output items into a ``Reply``.

Responses has no ``finish_reason``; the reply is classified by its output items and its
``status``: a client-executed call item makes a tool turn, only ``reasoning`` items a
reasoning-only reply, ``status: incomplete`` a reply cut short. Items the proxy does not
know (hosted tool calls, compaction, programs) are kept out of the guards' view and never
break a read. Namespaced tools and their calls are named ``namespace.name``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import msgspec

from proxy.exchange import Conversation, Message, Reply, Tool, ToolCall, Usage
from proxy.wire.common import declare_schema, openai_usage

__all__ = [
    "CALL_ITEMS",
    "ENCRYPTED_REASONING",
    "call_name",
    "declared_schemas",
    "item_text",
    "offered_tools",
    "parse_conversation",
    "parse_reply",
    "parse_usage",
    "reasoning_text",
    "reply_from_response",
    "requested_schema",
    "session_hint",
    "wants_structured_output",
]

_decode = msgspec.json.decode

CALL_ITEMS = {"function_call": "function", "custom_tool_call": "custom"}
"""Client-executed call items the guards read, by the kind of their arguments."""
OTHER_CALL_ITEMS = frozenset(
    {"local_shell_call", "shell_call", "apply_patch_call", "computer_call", "mcp_approval_request"}
)
"""Client-executed calls the proxy does not read: a tool turn all the same, never silence."""
_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})
ENCRYPTED_REASONING = "[encrypted reasoning]"
"""The reasoning of a ``reasoning`` item that carries no readable summary (only its
``encrypted_content``): still reasoning, so a reply of such items is reasoning-only."""


# -- the request --------------------------------------------------------------------------


def parse_conversation(payload: Mapping[str, Any]) -> Conversation:
    """The request's ``instructions`` and ``input`` items as the guards see them."""
    messages: list[Message] = []
    instructions = payload.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append(Message("system", instructions))
    raw_input = payload.get("input")
    if isinstance(raw_input, str):
        messages.append(Message("user", raw_input))
    elif isinstance(raw_input, list):
        messages.extend(_messages(raw_input))
    model = payload.get("model")
    return Conversation(
        messages=messages,
        model=model if isinstance(model, str) else None,
        tools=offered_tools(payload),
        output_schema=requested_schema(payload),
        json_answer=wants_structured_output(payload),
        stream=payload.get("stream") is True,
        output_cap=_output_cap(payload),
        forced_tool=_forced_tool(payload),
        held_upstream=_held_upstream(payload, raw_input),
    )


def _held_upstream(payload: Mapping[str, Any], raw_input: Any) -> bool:
    """The request builds on items the server stores: a response it continues, a conversation
    it adds to, or items it refers to by id."""
    if payload.get("previous_response_id") or payload.get("conversation"):
        return True
    return isinstance(raw_input, list) and any(
        isinstance(item, dict) and item.get("type") == "item_reference" for item in raw_input
    )


def _forced_tool(payload: Mapping[str, Any]) -> str | None:
    """The function ``tool_choice`` forces (``{"type": "function", "name": …}``), if any."""
    choice = payload.get("tool_choice")
    name = choice.get("name") if isinstance(choice, dict) and choice.get("type") == "function" else None
    return name if isinstance(name, str) and name else None


def _output_cap(payload: Mapping[str, Any]) -> tuple[str, int] | None:
    value = payload.get("max_output_tokens")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return "max_output_tokens", value
    return None


def _messages(items: list[Any]) -> Iterator[Message]:
    """Items into turns: the assistant's consecutive items (reasoning, messages, calls) make
    one assistant turn, as a chat assistant message carries text and tool calls together."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    reasoning: list[str] = []
    open_turn = False
    for item in items:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        role = item.get("role")
        if kind in CALL_ITEMS:
            calls.append(_call(item))
            open_turn = True
        elif kind == "reasoning":
            reasoning.append(reasoning_text(item))
            open_turn = True
        elif (kind == "message" or kind is None) and role == "assistant":
            texts.append(_output_text(item.get("content")))
            open_turn = True
        elif kind in _OUTPUTS or ((kind == "message" or kind is None) and isinstance(role, str)):
            if open_turn:
                yield Message("assistant", "".join(texts), tuple(calls), None, "\n".join(reasoning))
                texts, calls, reasoning, open_turn = [], [], [], False
            if kind in _OUTPUTS:
                call_id = item.get("call_id")
                yield Message("tool", item_text(item.get("output")), (), None if call_id is None else str(call_id))
            else:
                yield Message(str(role), item_text(item.get("content")))
        # item_reference, hosted tool calls, compaction and unknown items: nothing a guard reads
    if open_turn:
        yield Message("assistant", "".join(texts), tuple(calls), None, "\n".join(reasoning))


def call_name(item: Mapping[str, Any]) -> str:
    """A call item's tool name, ``namespace.name`` for a namespaced tool."""
    name = str(item.get("name", ""))
    namespace = item.get("namespace")
    return f"{namespace}.{name}" if isinstance(namespace, str) and namespace else name


def _call(item: Mapping[str, Any]) -> ToolCall:
    kind = CALL_ITEMS[item["type"]]
    text = item.get("arguments") if kind == "function" else item.get("input")
    return ToolCall(str(item.get("call_id", "")), call_name(item), text if isinstance(text, str) else "", kind)


def item_text(content: Any) -> str:
    """Text of a message's content or a call output: a string, or parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def _output_text(content: Any) -> str:
    """An assistant message's text as its reply's ``content`` reads it: every text part, joined
    as they stream (so a turn sent back names the same run as the reply it was)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


def reasoning_text(item: Mapping[str, Any]) -> str:
    """A reasoning item's readable text (its summary, or its content), or the mark of an
    encrypted one."""
    parts = [*_texts(item.get("summary")), *_texts(item.get("content"))]
    text = "\n".join(p for p in parts if p)
    return text or ENCRYPTED_REASONING


def _texts(parts: Any) -> list[str]:
    if not isinstance(parts, list):
        return []
    return [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]


def offered_tools(payload: Mapping[str, Any]) -> list[Tool]:
    """Function and custom tools, those of a ``namespace`` named ``namespace.name``."""
    tools = payload.get("tools")
    return list(_tools(tools, "")) if isinstance(tools, list) else []


def _tools(tools: list[Any], prefix: str) -> Iterator[Tool]:
    for tool in tools:
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            continue
        kind = tool.get("type")
        description = tool.get("description")
        described = description if isinstance(description, str) else ""
        if kind == "function":
            parameters = tool.get("parameters")
            yield Tool(prefix + tool["name"], parameters if isinstance(parameters, dict) else {}, "function", described)
        elif kind == "custom":
            yield Tool(prefix + tool["name"], {}, "custom", described)
        elif kind == "namespace" and isinstance(tool.get("tools"), list):
            yield from _tools(tool["tools"], f"{tool['name']}.")


def declared_schemas(payload: Mapping[str, Any]) -> list[tuple[str, str, Mapping[str, Any]]]:
    """Every function tool's ``parameters`` as (param naming it in an error, tool name, schema)."""
    declared: list[tuple[str, str, Mapping[str, Any]]] = []
    tools = payload.get("tools")
    for index, tool in enumerate(tools if isinstance(tools, list) else ()):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            continue
        if tool.get("type") == "function":
            declare_schema(declared, f"tools[{index}].parameters", tool["name"], tool.get("parameters"))
        elif tool.get("type") == "namespace" and isinstance(tool.get("tools"), list):
            for inner_index, inner in enumerate(tool["tools"]):
                if isinstance(inner, dict) and inner.get("type") == "function" and isinstance(inner.get("name"), str):
                    param, name = f"tools[{index}].tools[{inner_index}].parameters", f"{tool['name']}.{inner['name']}"
                    declare_schema(declared, param, name, inner.get("parameters"))
    return declared


def requested_schema(payload: Mapping[str, Any]) -> dict[str, Any] | None:
    """The schema of ``text.format: {"type": "json_schema", "schema": …}`` (flat, unlike chat's)."""
    text = payload.get("text")
    spec = text.get("format") if isinstance(text, dict) else None
    if not isinstance(spec, dict) or spec.get("type") != "json_schema":
        return None
    schema = spec.get("schema")
    return schema if isinstance(schema, dict) else None


def wants_structured_output(payload: Mapping[str, Any]) -> bool:
    """The request asked for a JSON answer (``text.format`` ``json_schema`` or ``json_object``)."""
    text = payload.get("text")
    spec = text.get("format") if isinstance(text, dict) else None
    return isinstance(spec, dict) and spec.get("type") in ("json_schema", "json_object")


_SESSION_HEADERS = (b"session_id", b"conversation_id")
"""The headers Codex sends its conversation's id in."""


def session_hint(payload: Mapping[str, Any], header: Callable[[bytes], str | None]) -> str | None:
    """The conversation the client already names: Codex's ``session_id`` /
    ``conversation_id`` headers or ``client_metadata.session_id``, a ``conversation``.
    Never ``prompt_cache_key``: a cache key is shared by design (one per app or prompt is
    common), and runs sharing a session share its strikes, budgets and stored ending, the
    text of one user's run replayed to another."""
    for name in _SESSION_HEADERS:
        value = header(name)
        if value and value.strip():
            return value
    metadata = payload.get("client_metadata")  # Codex 0.17x sends its session id here
    session = metadata.get("session_id") if isinstance(metadata, dict) else None
    if isinstance(session, str) and session.strip():
        return session
    conversation = payload.get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    return conversation if isinstance(conversation, str) and conversation.strip() else None


# -- the reply ----------------------------------------------------------------------------


def parse_usage(raw: Any) -> Usage:
    """A response's ``usage`` (``input_tokens``, ``output_tokens``, cached input tokens)."""
    return openai_usage(raw, "input_tokens", "output_tokens", "input_tokens_details")


def parse_reply(body: bytes) -> Reply | None:
    """A response object; None when the body is not one."""
    try:
        payload = _decode(body)
    except (msgspec.DecodeError, RecursionError):
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("output"), list):
        return None
    return reply_from_response(payload)


_CUT_SHORT = {"max_output_tokens": "length", "content_filter": "content_filter"}
_NOT_AN_ANSWER = frozenset({"queued", "in_progress", "failed", "cancelled"})
"""A response still running (``background: true`` answers at once) or that did not run to
the end: not the model's silence, so no guard nudges it; the client polls or sees the failure."""


def reply_from_response(response: Mapping[str, Any]) -> Reply:
    """The response's output items as the guards read them (``source`` keeps the response,
    so its items can be sent back exactly)."""
    texts: list[str] = []
    refusals: list[str] = []
    reasoning: list[str] = []
    calls: list[ToolCall] = []
    phases: list[Any] = []
    other = False
    output = response.get("output")
    for item in output if isinstance(output, list) else ():
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message":
            phases.append(item.get("phase"))
            for part in item.get("content") or ():
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
                    refusals.append(part["refusal"])
                elif isinstance(part.get("text"), str):
                    texts.append(part["text"])
        elif kind in CALL_ITEMS:
            calls.append(_call(item))
        elif kind == "reasoning":
            reasoning.append(reasoning_text(item))
        else:
            other = True  # hosted tool calls, client calls the proxy does not read, unknown items
    status = response.get("status")
    details = response.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, dict) else None
    if status == "incomplete":
        finish = _CUT_SHORT.get(str(reason), "incomplete")
    elif status == "failed":
        finish = "error"
    else:
        finish = "tool_calls" if calls else "stop"
    model = response.get("model")
    return Reply(
        content="".join(texts) if phases else None,
        reasoning="\n".join(reasoning) or None,
        tool_calls=tuple(calls),
        finish_reason=finish,
        usage=parse_usage(response.get("usage")),
        model=model if isinstance(model, str) else None,
        refusal="".join(refusals) or None,
        other_output=other or status in _NOT_AN_ANSWER,
        source=response,
        preamble=bool(phases) and all(phase == "commentary" for phase in phases),
    )

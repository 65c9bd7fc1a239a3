"""Anthropic Messages, read: a request into the neutral conversation, a reply into a ``Reply``.

Decoding is msgspec into plain dicts. Content blocks the guards do not read (images,
documents, server-tool blocks, block types added after this was written) are left where
they are: only the format's renderers touch the payload, and they copy it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from proxy.exchange import Conversation, Message, Reply, Tool, ToolCall, Usage
from proxy.wire.common import declare_schema

__all__ = [
    "FAILED_PREFIX",
    "block_text",
    "declared_schemas",
    "offered_tools",
    "parse_conversation",
    "parse_reply",
    "parse_usage",
    "reply_from_message",
    "requested_schema",
    "session_hint",
    "tool_use_call",
    "wants_structured_output",
]

_decode = msgspec.json.decode
_encode = msgspec.json.Encoder().encode

FAILED_PREFIX = "Error: "
"""How a ``tool_result`` marked ``is_error`` reads to the guards: the neutral vocabulary has no
error flag, and the tool-failure patterns recognize a result that starts so."""
REDACTED = "[redacted thinking]"
"""What a ``redacted_thinking`` block contributes to a reply's reasoning (it is reasoning)."""
_ASKING_FOR_JSON = ("output_config", "output_format")


def parse_conversation(payload: Mapping[str, Any]) -> Conversation:
    """The request's conversation in the neutral vocabulary (one pass over its messages)."""
    messages: list[Message] = []
    system = payload.get("system")
    if system is not None:
        messages.append(Message("system", block_text(system)))
    raw = payload.get("messages")
    for message in raw if isinstance(raw, list) else ():
        if isinstance(message, dict):
            _read_message(message, messages)
    model = payload.get("model")
    cap = payload.get("max_tokens")
    spec = _json_format(payload)
    return Conversation(
        messages=messages,
        model=model if isinstance(model, str) else None,
        tools=offered_tools(payload),
        output_schema=_schema_of(spec),
        json_answer=spec is not None,
        stream=payload.get("stream") is True,
        output_cap=("max_tokens", cap) if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 else None,
        forced_tool=_forced_tool(payload),
    )


def _forced_tool(payload: Mapping[str, Any]) -> str | None:
    """The tool ``tool_choice`` forces (``{"type": "tool", "name": …}``), if any."""
    choice = payload.get("tool_choice")
    name = choice.get("name") if isinstance(choice, dict) and choice.get("type") == "tool" else None
    return name if isinstance(name, str) and name else None


def _read_message(raw: Mapping[str, Any], into: list[Message]) -> None:
    """One wire message as neutral turns: a user message's ``tool_result`` blocks become
    ``tool`` turns, in order, and the rest of it one ``user`` turn placed before them: the
    results are what the turn answers (the API puts them first), and what rides along with
    them (Claude Code's ``<system-reminder>`` text) must not hide them from the guards that
    read the latest results (``Conversation.trailing_tool_results``)."""
    role = raw.get("role")
    role = role if isinstance(role, str) else ""
    content = raw.get("content")
    if role == "assistant":
        into.append(_assistant(content))
        return
    if not isinstance(content, list):
        into.append(Message(role, content if isinstance(content, str) else ""))
        return
    texts: list[str] = []
    results: list[Message] = []
    other = False
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "tool_result":
            text = block_text(block.get("content"))
            if block.get("is_error") is True:
                text = FAILED_PREFIX + text
            results.append(Message("tool", text, call_id=str(block.get("tool_use_id", ""))))
        elif kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        else:
            other = True
    if texts or other or not results:
        into.append(Message(role, "\n".join(texts)))
    into.extend(results)


def _assistant(content: Any) -> Message:
    if isinstance(content, str):
        return Message("assistant", content)
    texts: list[str] = []
    calls: list[ToolCall] = []
    thoughts: list[str] = []
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_use":
            calls.append(tool_use_call(block))
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            thoughts.append(block["thinking"])
    return Message("assistant", "".join(texts), tuple(calls), None, "".join(thoughts))


def tool_use_call(block: Mapping[str, Any]) -> ToolCall:
    """A ``tool_use`` block as a call; its ``input`` object is the call's JSON arguments."""
    value = block.get("input")
    arguments = value if isinstance(value, str) else _encode(value if value is not None else {}).decode()
    return ToolCall(str(block.get("id", "")), str(block.get("name", "")), arguments)


def block_text(content: Any) -> str:
    """The text of a string or of a list of blocks (``text`` blocks joined by line breaks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text" and _is_text(b.get("text"))
        )
    return ""


def _is_text(value: Any) -> bool:
    return isinstance(value, str)


def offered_tools(payload: Mapping[str, Any]) -> list[Tool]:
    """Every named tool: client tools with their ``input_schema``, and the Anthropic-defined
    ones (``bash_20250124``, server tools) without a schema to check."""
    offered: list[Tool] = []
    tools = payload.get("tools")
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            continue
        schema = tool.get("input_schema")
        description = tool.get("description")
        offered.append(
            Tool(
                tool["name"],
                schema if isinstance(schema, dict) else {},
                "function",
                description if isinstance(description, str) else "",
            )
        )
    return offered


def declared_schemas(payload: Mapping[str, Any]) -> list[tuple[str, str, Mapping[str, Any]]]:
    """Every tool's ``input_schema`` as (param, tool name, schema), the param naming it as an
    error names it (``tools[3].input_schema``)."""
    declared: list[tuple[str, str, Mapping[str, Any]]] = []
    tools = payload.get("tools")
    for index, tool in enumerate(tools if isinstance(tools, list) else ()):
        if isinstance(tool, dict) and isinstance(tool.get("name"), str):
            declare_schema(declared, f"tools[{index}].input_schema", tool["name"], tool.get("input_schema"))
    return declared


def requested_schema(payload: Mapping[str, Any]) -> dict[str, Any] | None:
    """The schema of ``output_config.format`` (or the beta's ``output_format``) when it is a
    ``json_schema``."""
    return _schema_of(_json_format(payload))


def wants_structured_output(payload: Mapping[str, Any]) -> bool:
    """The request asked for a JSON answer."""
    return _json_format(payload) is not None


def _schema_of(spec: dict[str, Any] | None) -> dict[str, Any] | None:
    schema = spec.get("schema") if spec is not None else None
    return schema if isinstance(schema, dict) else None


def _json_format(payload: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``json_schema`` format the request asks for, if any (the first of the two fields that does)."""
    for name in _ASKING_FOR_JSON:
        config = payload.get(name)
        spec = config.get("format") if name == "output_config" and isinstance(config, dict) else config
        if isinstance(spec, dict) and spec.get("type") == "json_schema":
            return spec
    return None


def _explanation(message: Mapping[str, Any]) -> str | None:
    """A refusal's own words (``stop_details.explanation``)."""
    details = message.get("stop_details")
    explanation = details.get("explanation") if isinstance(details, dict) else None
    return explanation if isinstance(explanation, str) and explanation else None


_LEGACY_SESSION = "_session_"
"""In the ``user_id`` of Claude Code before its JSON form: ``user_<hash>_account_<uuid>_session_<uuid>``."""


def session_hint(payload: Mapping[str, Any], header: Callable[[bytes], str | None]) -> str | None:
    """``metadata.user_id`` where Claude Code sends a per-session value in it (it sends no
    session header, so ``header`` is not read): a JSON object whose ``session_id`` is the
    session, or (older versions) ``user_…_session_<id>``. Any other value is the id of an end
    user (what the API documents the field for), shared by all of that user's runs, or by
    every user where an app sends a constant: never a session, since runs sharing one share
    its strikes, budgets and stored ending."""
    metadata = payload.get("metadata")
    user = metadata.get("user_id") if isinstance(metadata, dict) else None
    if not isinstance(user, str) or not user.strip():
        return None
    if user.startswith("{"):
        try:
            blob = _decode(user)
        except (msgspec.DecodeError, RecursionError):
            return None
        session = blob.get("session_id") if isinstance(blob, dict) else None
        return session if isinstance(session, str) and session.strip() else None
    return user if _LEGACY_SESSION in user else None


def parse_usage(raw: Any) -> Usage:
    """A ``usage`` object. Anthropic's ``input_tokens`` leaves out the cached part: the prompt is
    ``input_tokens`` plus the tokens written to and read from the cache; the read ones are
    cheap (``cached_tokens``), the written ones dear (``cache_write_tokens``)."""
    if not isinstance(raw, dict):
        return Usage()
    fresh = _count(raw.get("input_tokens"))
    written = _count(raw.get("cache_creation_input_tokens"))
    read = _count(raw.get("cache_read_input_tokens"))
    produced = _count(raw.get("output_tokens"))
    return Usage(fresh + written + read, produced, cached_tokens=read, cache_write_tokens=written)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def parse_reply(body: bytes) -> Reply | None:
    """A ``message`` body; None when it is not one."""
    try:
        payload = _decode(body)
    except (msgspec.DecodeError, RecursionError):
        return None
    if not isinstance(payload, dict) or payload.get("type") != "message":
        return None
    if not isinstance(payload.get("content"), list):
        return None
    return reply_from_message(payload)


def reply_from_message(
    message: Mapping[str, Any], *, calls: tuple[ToolCall, ...] | None = None, usage: Usage | None = None
) -> Reply:
    """A complete message (decoded, or assembled from a stream) as the guards read it.

    By ``stop_reason``: ``pause_turn`` (a server tool paused; the client sends it back to
    continue) and server-tool blocks are output the guards do not read, never silence;
    ``refusal`` moves the text to ``refusal``; ``max_tokens`` and the context window cut the
    reply short (``Reply.cut_short``). The content list itself is kept as ``source``: an
    echo of this turn must send it back exactly (signed thinking).

    ``calls`` and ``usage``, when given (a stream's assembler has them already), are taken as
    they are instead of being read from the message."""
    texts: list[str] = []
    thoughts: list[str] = []
    found: list[ToolCall] = []
    other = False
    content = message.get("content")
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            text = block.get("text")
            texts.append(text if isinstance(text, str) else "")
        elif kind == "thinking":
            thought = block.get("thinking")
            thoughts.append(thought if isinstance(thought, str) else "")
        elif kind == "redacted_thinking":
            thoughts.append(REDACTED)
        elif kind == "tool_use":
            if calls is None:
                found.append(tool_use_call(block))
        else:
            other = True
    stop = message.get("stop_reason")
    stop = stop if isinstance(stop, str) else None
    text = "".join(texts) if texts else None
    refusal = None
    if stop == "refusal":
        refusal, text = text or _explanation(message) or "The model declined to answer.", None
    model = message.get("model")
    return Reply(  # content, reasoning, tool_calls, finish_reason, usage, model, refusal, other_output, source
        text,
        "".join(thoughts) or None,
        tuple(found) if calls is None else calls,
        stop,
        parse_usage(message.get("usage")) if usage is None else usage,
        model if isinstance(model, str) else None,
        refusal,
        other or stop == "pause_turn",
        content if isinstance(content, list) else [],
    )

"""What the upstream saw of a Messages session, kept so that signed thinking stays valid.

Newer Claude models bind each thinking block's signature to its exact prefix (``system``,
``tools``, every earlier message), and the API rejects a later request whose prefix differs.
The client never replays what the proxy added upstream (a nudge, calls returned unexecuted,
a note on a tool result), so every such change is recorded in the session's state and spliced
back, byte for byte, at the same place in every later request of the session:

- a request that was nudged records, at the position of its reply in the client's history,
  the turns the upstream saw before the reply and the reply itself (a stream that let part of
  a failed attempt through to the client has the whole transcript put back in its place);
- a reply the client received without some of its calls (goal mode's tool, answered by the
  proxy) records, besides, the proxy's results for those calls, put first in the next user
  turn, where the API wants every call answered;
- a tool result the proxy annotated records its annotated form at its own position;
- tools the proxy offered besides the client's (goal mode's) stay offered once the upstream saw
  them (``tools`` is part of the prefix too; the goal keeper answers its tool's calls for as
  long as the session has a goal).

Each record names the message it replaces by position and checks it by a digest of what the
client holds there (the reply's blocks at the end of the message, or the whole message), so
a history the client rewrote (compacted, edited) is left as it is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from proxy.exchange import Reply, Turn
from proxy.wire.messages.render import assistant_content, rendered_turns

__all__ = ["FIELD_PREFIX", "TOOLS_FIELD", "MessagesTranscript", "recorded", "spliced"]

FIELD_PREFIX = "messages.splice:"
"""Session fields holding the records, one per position in the client's history."""
TOOLS_FIELD = "messages.tools"
"""The session field holding the tools the upstream was offered, when they were not the client's."""

_decode = msgspec.json.decode
_encode = msgspec.json.Encoder().encode


def _plain(value: Any) -> Any:
    """What a comparison sees: no nulls (clients differ in writing them back), no ``cache_control``
    (not part of the prefix either)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None and k != "cache_control"}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _digest(value: Any) -> str | None:
    """None for a value nested too deeply to walk: such a message is neither recorded nor matched."""
    try:
        return hashlib.sha256(msgspec.json.encode(_plain(value), order="sorted")).hexdigest()[:32]
    except RecursionError:
        return None


def recorded(
    client: Mapping[str, Any],
    amended: Mapping[str, Any],
    turns: Sequence[Turn],
    reply: Reply,
    answered: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The session fields to write for a request whose reply reached the client: its annotated
    messages (``amended`` against the ``client``'s own), and the turns the upstream saw before
    ``reply`` when there were any or when the client got ``reply`` without the calls the proxy
    ``answered`` itself (id: result)."""
    fields: dict[str, str] = {}
    offered = amended.get("tools")
    if isinstance(offered, list) and offered != client.get("tools"):
        fields[TOOLS_FIELD] = _encode(offered).decode()
    mine, sent = client.get("messages"), amended.get("messages")
    if isinstance(mine, list) and isinstance(sent, list) and sent is not mine and len(sent) == len(mine):
        for position, (original, changed) in enumerate(zip(mine, sent, strict=True)):
            if changed is not original and (digest := _digest(original)) is not None:
                record = {"at": position, "tail": 0, "digest": digest, "with": [changed]}
                fields[FIELD_PREFIX + str(position)] = _encode(record).decode()
    content, answered = assistant_content(reply), answered or {}
    shown = [
        b for b in content if not (isinstance(b, dict) and b.get("id") in answered and b.get("type") == "tool_use")
    ]
    if (turns or answered) and (digest := _digest(shown)) is not None:
        position = len(mine) if isinstance(mine, list) else 0
        final = {"role": "assistant", "content": content}
        record = {"at": position, "tail": len(shown), "digest": digest, "with": [*rendered_turns(turns), final]}
        if answered:
            record["answers"] = [{"type": "tool_result", "tool_use_id": k, "content": v} for k, v in answered.items()]
        fields[FIELD_PREFIX + str(position)] = _encode(record).decode()
    return fields


def spliced(payload: Mapping[str, Any], values: Mapping[str, str]) -> Mapping[str, Any]:
    """The request with the session's records put back (the payload itself when none applies)."""
    if not values:  # a session that stored nothing yet (every session's first request)
        return payload
    payload = _tools_kept(payload, values.get(TOOLS_FIELD))
    records = []
    for name, value in values.items():
        if name.startswith(FIELD_PREFIX) and (record := _record(value)) is not None:
            records.append(record)
    messages = payload.get("messages")
    if not records or not isinstance(messages, list):
        return payload
    out = list(messages)
    changed = False
    for record in sorted(records, key=lambda r: int(r.get("at", -1)), reverse=True):
        position = record.get("at")
        if isinstance(position, int) and 0 <= position < len(out) and _holds(out[position], record):
            replacement = list(record["with"])
            replacement[-1] = _marked_as(replacement[-1], out[position])
            if position + 1 < len(out):
                out[position + 1] = _answered(out[position + 1], record.get("answers"))
            out[position : position + 1] = replacement
            changed = True
    return {**payload, "messages": out} if changed else payload


def _record(value: str) -> dict[str, Any] | None:
    """A stored record, None when it cannot be read back here (nested too deeply)."""
    try:
        record = _decode(value)
    except RecursionError:
        return None
    return record if isinstance(record, dict) else None


def _tools_kept(payload: Mapping[str, Any], recorded: str | None) -> Mapping[str, Any]:
    """The request offering the tools the upstream was offered before, when what it offers now
    is only their beginning (a tool the proxy added, no longer added)."""
    if not recorded:
        return payload
    offered = _decode(recorded)
    current = payload.get("tools")
    now = current if isinstance(current, list) else []
    if not isinstance(offered, list) or len(offered) <= len(now) or offered[: len(now)] != now:
        return payload
    return {**payload, "tools": offered}


def _answered(message: Any, answers: Any) -> Any:
    """The user turn after a reply with the proxy's results for the calls its client never saw
    put first (the API wants every ``tool_use`` answered at the start of the next turn)."""
    if not isinstance(answers, list) or not answers or not isinstance(message, dict) or message.get("role") != "user":
        return message
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(blocks, list):
        return message
    held = {b.get("tool_use_id") for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"}
    return {**message, "content": [*(a for a in answers if a.get("tool_use_id") not in held), *blocks]}


def _marked_as(recorded: Any, current: Any) -> Any:
    """The recorded message with the cache breakpoints the client puts on its own message now
    (blocks matched from the end): clients move ``cache_control`` from turn to turn, the API
    allows only four, and they are not part of the prefix a signature binds."""
    blocks, marks = recorded.get("content") if isinstance(recorded, dict) else None, None
    if isinstance(current, dict) and isinstance(current.get("content"), list):
        marks = current["content"]
    if not isinstance(blocks, list):
        return recorded
    marked = []
    for back, block in enumerate(reversed(blocks), 1):
        if isinstance(block, dict):
            block = {k: v for k, v in block.items() if k != "cache_control"}
            mark = marks[-back] if marks is not None and back <= len(marks) else None
            if isinstance(mark, dict) and "cache_control" in mark:
                block["cache_control"] = mark["cache_control"]
        marked.append(block)
    return {**recorded, "content": marked[::-1]}


def _holds(message: Any, record: Mapping[str, Any]) -> bool:
    """The client's message at the record's position is the one it was made for."""
    tail = record.get("tail")
    if not tail:
        return (digest := _digest(message)) is not None and digest == record.get("digest")
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return False
    content = message.get("content")
    if isinstance(content, str):  # a client that sends a text-only turn back as a string
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list) or len(content) < tail:
        return False
    digest = _digest(content[-tail:])
    return digest is not None and digest == record.get("digest")


class MessagesTranscript:
    """The :class:`~proxy.wire.base.Transcript` of Anthropic Messages: :func:`recorded` after a
    reply reached the client, :func:`spliced` into every later request of its session."""

    recorded = staticmethod(recorded)
    spliced = staticmethod(spliced)

"""A strict checker of Anthropic Messages streams, as the SDKs and Claude Code need them."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["check_stream", "streamed_message"]

# -- the strict checker --------------------------------------------------------------------

_DELTAS_OF = {
    "text": {"text_delta", "citations_delta"},
    "thinking": {"thinking_delta", "signature_delta"},
    "tool_use": {"input_json_delta"},
    "server_tool_use": {"input_json_delta"},
}


def check_stream(raw: bytes) -> list[dict[str, Any]]:
    """The events of a Messages stream, asserting it is well-formed as the SDKs and Claude Code
    need it: every event named as its ``type``; one ``message_start`` first; blocks opened in
    index order from 0, each closed before the next opens, its deltas of its kind (a tool's
    partial JSON whole at its end); one ``message_delta`` after the last block; one
    ``message_stop`` last. ``ping`` may come anywhere; an ``error`` event ends the stream."""
    events: list[dict[str, Any]] = []
    for part in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        lines = [line for line in part.split(b"\n") if line and not line.startswith(b":")]
        if not lines:
            continue
        fields: dict[bytes, list[bytes]] = {}
        for line in lines:
            name, _, value = line.partition(b":")
            fields.setdefault(name, []).append(value[1:] if value.startswith(b" ") else value)
        assert b"event" in fields, f"an event without an event: line: {part!r}"
        name = fields[b"event"][0].decode()
        data = json.loads(b"\n".join(fields[b"data"]))
        assert data.get("type") == name, f"event {name!r} carries type {data.get('type')!r}"
        events.append(data)
    state = "before"
    open_block: tuple[int, str] | None = None
    next_index = 0
    partial = ""
    for event in events:
        kind = event["type"]
        assert state != "stopped", f"{kind} after message_stop"
        if kind == "ping":
            continue
        if kind == "error":
            state = "stopped"
            continue
        if state == "before":
            assert kind == "message_start", f"the stream starts with {kind}, not message_start"
            state = "blocks"
            continue
        assert kind != "message_start", "a second message_start"
        if kind == "content_block_start":
            assert state == "blocks", "a block after message_delta"
            assert open_block is None, f"block {next_index} opened before block {open_block} closed"
            assert event["index"] == next_index, f"block index {event['index']}, expected {next_index}"
            open_block = (event["index"], event["content_block"]["type"])
            next_index += 1
            partial = ""
        elif kind == "content_block_delta":
            assert open_block is not None, "a delta outside a block"
            assert event["index"] == open_block[0], f"a delta for block {event['index']} inside block {open_block[0]}"
            allowed = _DELTAS_OF.get(open_block[1])
            assert allowed is None or event["delta"]["type"] in allowed, (
                f"{event['delta']['type']} in a {open_block[1]} block"
            )
            partial += event["delta"].get("partial_json", "")
        elif kind == "content_block_stop":
            assert open_block is not None, f"stop of no open block: {event}"
            assert event["index"] == open_block[0], f"stop of a block not open: {event}"
            if open_block[1] in ("tool_use", "server_tool_use") and partial:
                json.loads(partial)
            open_block = None
        elif kind == "message_delta":
            assert state == "blocks", "a second message_delta"
            assert open_block is None, "message_delta with a block open"
            state = "delta"
        elif kind == "message_stop":
            assert state == "delta", "message_stop without message_delta"
            state = "stopped"
    assert state == "stopped", f"the stream ended without message_stop (in state {state})"
    return events


def streamed_message(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The message a checked stream carries (blocks assembled), for comparing with a JSON reply."""
    message: dict[str, Any] = {}
    blocks: list[dict[str, Any]] = []
    partial: dict[int, str] = {}
    for event in events:
        kind = event["type"]
        if kind == "message_start":
            message = dict(event["message"])
        elif kind == "content_block_start":
            blocks.append(dict(event["content_block"]))
        elif kind == "content_block_delta":
            block, delta = blocks[event["index"]], event["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] += delta["signature"]
            elif delta["type"] == "input_json_delta":
                partial[event["index"]] = partial.get(event["index"], "") + delta["partial_json"]
        elif kind == "message_delta":
            message.update(event["delta"])
    for index, text_ in partial.items():
        blocks[index]["input"] = json.loads(text_) if text_ else {}
    message["content"] = blocks
    return message

"""A strict validator of Responses event streams: what Codex, the AI SDK and the openai SDK's
stream accumulator require of every stream the proxy writes.

Checked: named events whose name is their ``type``; one ``response.created`` first;
``sequence_number`` rising by one from the first event; output indexes opened in order,
each item opened before its deltas and closed once, before the end; text and arguments
done equal to their deltas; one terminal event last, under the created response's id, whose
``output`` is exactly the items as they were closed. Nothing after it, no ``[DONE]``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


@dataclass
class ParsedStream:
    events: list[dict[str, Any]]
    final: dict[str, Any] | None
    """The terminal event's response (None: the stream ended with an error event)."""
    error: dict[str, Any] | None = None
    items: list[dict[str, Any]] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(e["delta"] for e in self.events if e["type"] == "response.output_text.delta")


def sse_events(raw: bytes) -> list[tuple[str | None, str]]:
    """(event name or None, data) per SSE event; comments skipped."""
    events: list[tuple[str | None, str]] = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        name: str | None = None
        data: list[str] = []
        for line in block.decode().split("\n"):
            if line.startswith(":") or not line:
                continue
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "event":
                name = value
            elif key == "data":
                data.append(value)
        if data:
            events.append((name, "\n".join(data)))
    return events


class StreamInvalid(AssertionError):
    pass


def validate_stream(raw: bytes, *, allow_error: bool = False) -> ParsedStream:
    """Check ``raw`` (a whole response stream) and return its events; StreamInvalid says what broke."""

    def fail(why: str) -> None:
        raise StreamInvalid(f"{why}\n--- stream ---\n{raw.decode(errors='replace')[:6000]}")

    events: list[dict[str, Any]] = []
    for name, data in sse_events(raw):
        if data == "[DONE]":
            fail("a Responses stream has no [DONE]")
        event = json.loads(data)
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            fail(f"an event without a type: {data[:200]}")
        if name is None or name != event["type"]:
            fail(f"event named {name!r} carries {event['type']!r}")
        events.append(event)
    if not events:
        fail("no events")
    if events[0]["type"] != "response.created":
        fail(f"the first event is {events[0]['type']}, not response.created")
    first = events[0].get("sequence_number")
    if not isinstance(first, int):
        fail("response.created has no sequence_number")
    response_id = events[0]["response"].get("id")
    opened: dict[int, dict[str, Any]] = {}
    closed: dict[int, dict[str, Any]] = {}
    parts: dict[tuple[int, int], str] = {}
    parts_done: set[tuple[int, int]] = set()
    arguments: dict[int, str] = {}
    end: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    for position, event in enumerate(events):
        kind = event["type"]
        if end is not None or error is not None:
            fail(f"{kind} after the end of the stream")
        if event.get("sequence_number") != first + position:
            fail(f"sequence_number {event.get('sequence_number')} at position {position} (expected {first + position})")
        if kind == "response.created" and position:
            fail("a second response.created")
        lifecycle = kind in ("response.created", "response.in_progress", "response.queued", *TERMINAL)
        if lifecycle and event["response"].get("id") != response_id:
            fail(f"{kind} for response {event['response'].get('id')}, the stream opened {response_id}")
        if kind in TERMINAL:
            end = event["response"]
            continue
        if kind == "error":
            if not allow_error:
                fail(f"an error event: {event}")
            error = event
            continue
        index = event.get("output_index")
        if index is None:
            continue
        if kind == "response.output_item.added":
            if index in opened:
                fail(f"item {index} opened twice")
            if index != len(opened):
                fail(f"item {index} opened after {len(opened)} items (indexes must follow in order)")
            opened[index] = event["item"]
            continue
        if index not in opened:
            fail(f"{kind} for item {index} before it was opened")
        if index in closed:
            fail(f"{kind} for item {index} after it was closed")
        content = (index, event.get("content_index", event.get("summary_index", 0)))
        if kind in ("response.content_part.added", "response.reasoning_summary_part.added"):
            parts[content] = ""
        elif kind.endswith(".delta"):
            if "reasoning" not in kind and "arguments" not in kind and "input" not in kind and content not in parts:
                fail(f"{kind} for content {content} before its part was added")
            if "arguments" in kind or "input" in kind:
                arguments[index] = arguments.get(index, "") + event["delta"]
            else:
                parts[content] = parts.get(content, "") + event["delta"]
        elif kind in ("response.output_text.done", "response.reasoning_summary_text.done"):
            if event["text"] != parts.get(content, ""):
                fail(f"{kind} text differs from its deltas for {content}")
        elif kind == "response.refusal.done":
            if event["refusal"] != parts.get(content, ""):
                fail("refusal done differs from its deltas")
        elif kind in ("response.content_part.done", "response.reasoning_summary_part.done"):
            parts_done.add(content)
        elif kind in ("response.function_call_arguments.done", "response.custom_tool_call_input.done"):
            whole = event.get("arguments", event.get("input"))
            if whole != arguments.get(index, ""):
                fail(f"{kind} differs from its deltas for item {index}")
        elif kind == "response.output_item.done":
            item = event["item"]
            if item.get("type") != opened[index].get("type") or item.get("id") != opened[index].get("id"):
                fail(f"item {index} closed as another item than it opened")
            for (at, _), _text in parts.items():
                if at == index and (index, _) not in parts_done:
                    fail(f"item {index} closed with content part {_} still open")
            if item.get("type") == "function_call" and index in arguments and item.get("arguments") != arguments[index]:
                fail(f"item {index} closed with other arguments than streamed")
            if item.get("type") == "message":
                streamed = [parts.get((index, n)) for n in range(len(item.get("content") or []))]
                texts = [p.get("text", p.get("refusal")) for p in item.get("content") or []]
                if any(s is not None for s in streamed) and streamed != texts:
                    fail(f"message {index} closed with other text than streamed")
            closed[index] = item
    if error is not None:
        return ParsedStream(events, None, error, [closed[i] for i in sorted(closed)])
    if end is None:
        fail("the stream ended without response.completed (or incomplete / failed)")
        raise AssertionError  # unreachable: fail raised
    unclosed = sorted(set(opened) - set(closed))
    if unclosed:
        fail(f"items {unclosed} never closed")
    items = [closed[i] for i in sorted(closed)]
    if end.get("output") != items:
        fail(f"the terminal response's output is not what streamed:\n{end.get('output')}\nvs\n{items}")
    return ParsedStream(events, end, None, items)

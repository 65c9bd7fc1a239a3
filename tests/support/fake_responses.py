"""A scriptable fake OpenAI Responses upstream, next to the chat one (``fake_upstream``).

Tests script response bodies (built with :func:`response` and the item helpers); each is
served as JSON or, when the request streams, as the named events a real API sends, under a
fresh ``resp_…`` id. The fake is as strict as the API about what a proxy could break:
``previous_response_id`` must name a response it stored (``store`` is on unless false), an
``item_reference`` must name a stored item, every call in the history must have its output,
and a ``reasoning`` item must be followed by another item. A violation is answered with the
API's 400 and counted in ``rejections``. Serving, recording and the judge are the base fake's
(``fake_upstream.FakeUpstream``); this layer adds the format's routes, bodies, events and chains.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.support.fake_upstream import FakeUpstream, Recorded, judged
from tests.support.turns import Turn

_ids = itertools.count(1)


def _id(prefix: str) -> str:
    return f"{prefix}_fake{next(_ids):06d}"


# -- items and responses ------------------------------------------------------------------


def message(text: str, *, phase: str | None = None, refusal: bool = False) -> dict[str, Any]:
    part = {"type": "refusal", "refusal": text} if refusal else {"type": "output_text", "text": text, "annotations": []}
    item: dict[str, Any] = {"type": "message", "id": _id("msg"), "status": "completed", "role": "assistant"}
    item["content"] = [part]
    if phase is not None:
        item["phase"] = phase
    return item


def function_call(
    name: str, arguments: str, call_id: str = "call_1", *, namespace: str | None = None
) -> dict[str, Any]:
    item = {"type": "function_call", "id": _id("fc"), "call_id": call_id, "name": name, "arguments": arguments}
    if namespace is not None:
        item["namespace"] = namespace
    return {**item, "status": "completed"}


def custom_call(name: str, text: str, call_id: str = "call_1") -> dict[str, Any]:
    return {"type": "custom_tool_call", "id": _id("ctc"), "call_id": call_id, "name": name, "input": text}


def reasoning(summary: str | None = None, *, encrypted: str = "gAAAAB-opaque==") -> dict[str, Any]:
    summaries = [{"type": "summary_text", "text": summary}] if summary else []
    return {"type": "reasoning", "id": _id("rs"), "summary": summaries, "encrypted_content": encrypted}


def response(
    *items: dict[str, Any],
    status: str = "completed",
    incomplete: str | None = None,
    model: str = "fake-model",
    usage: tuple[int, int] = (11, 7),
    cached: int = 0,
) -> dict[str, Any]:
    """A response body as the API returns it (its id is replaced by a fresh one when served)."""
    return {
        "id": _id("resp"),
        "object": "response",
        "created_at": 1_700_000_000,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "instructions": None,
        "model": model,
        "output": list(items),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": usage[0],
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": usage[1],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage[0] + usage[1],
        },
    }


def text_response(text: str = "Hello from the fake model.", **options: Any) -> dict[str, Any]:
    return response(message(text), **options)


def rendered(reply: Turn) -> dict[str, Any]:
    """A neutral reply as a response body: reasoning, message, then function calls."""
    items = [reasoning(reply.reasoning)] if reply.reasoning is not None else []
    if reply.text is not None or not (reply.calls or items):
        items.append(message(reply.text or ""))
    items += [function_call(c.name, c.raw, c.id) for c in reply.calls]
    return response(*items, usage=reply.usage)


# -- a response as its stream ---------------------------------------------------------------


def _split(text: str, pieces: int) -> list[str]:
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def stream_events(body: dict[str, Any], *, pieces: int = 3) -> list[dict[str, Any]]:
    """The events the API streams for ``body``: text and arguments in ``pieces`` deltas."""
    events: list[dict[str, Any]] = []
    opening = {**body, "status": "in_progress", "output": [], "usage": None}
    events.append({"type": "response.created", "response": opening})
    events.append({"type": "response.in_progress", "response": opening})
    for index, item in enumerate(body["output"]):
        kind = item["type"]
        at = {"item_id": item.get("id"), "output_index": index}
        if kind == "message":
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "content": [], "status": "in_progress"},
                }
            )
            for n, part in enumerate(item["content"]):
                where = {**at, "content_index": n}
                field_name = "refusal" if part["type"] == "refusal" else "text"
                empty = {**part, field_name: ""}
                events.append({"type": "response.content_part.added", **where, "part": empty})
                delta_type = "response.refusal.delta" if part["type"] == "refusal" else "response.output_text.delta"
                for piece in _split(part[field_name], pieces):
                    events.append({"type": delta_type, **where, "delta": piece})
                done_type = "response.refusal.done" if part["type"] == "refusal" else "response.output_text.done"
                events.append({"type": done_type, **where, field_name: part[field_name]})
                events.append({"type": "response.content_part.done", **where, "part": part})
        elif kind in ("function_call", "custom_tool_call"):
            key, name = (
                ("arguments", "function_call_arguments")
                if kind == "function_call"
                else ("input", "custom_tool_call_input")
            )
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, key: "", "status": "in_progress"},
                }
            )
            for piece in _split(item[key], pieces):
                events.append({"type": f"response.{name}.delta", **at, "delta": piece})
            events.append({"type": f"response.{name}.done", **at, key: item[key]})
        elif kind == "reasoning":
            events.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {"type": "reasoning", "id": item["id"], "summary": []},
                }
            )
            for n, part in enumerate(item.get("summary") or []):
                where = {**at, "summary_index": n}
                events.append(
                    {
                        "type": "response.reasoning_summary_part.added",
                        **where,
                        "part": {"type": "summary_text", "text": ""},
                    }
                )
                for piece in _split(part["text"], pieces):
                    events.append({"type": "response.reasoning_summary_text.delta", **where, "delta": piece})
                events.append({"type": "response.reasoning_summary_text.done", **where, "text": part["text"]})
                events.append({"type": "response.reasoning_summary_part.done", **where, "part": part})
        else:
            events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    terminal = {"completed": "response.completed", "incomplete": "response.incomplete", "failed": "response.failed"}
    events.append({"type": terminal[body["status"]], "response": body})
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


@dataclass
class Events:
    """A raw event list streamed as is (a broken or unusual stream; a generator: a long one)."""

    events: Iterable[dict[str, Any]]
    cut_after: int | None = None


# -- the judge ------------------------------------------------------------------------------


def verdict(request: dict[str, Any], done: bool, reason: str = "checked") -> Turn:
    """What an honest judge model answers (rendered by the fake in the format it was asked in)."""
    return judged(request, done, reason)


# -- the server -----------------------------------------------------------------------------


@dataclass
class Served:
    """One agent call the fake answered: what it asked, with its history resolved."""

    payload: dict[str, Any]
    history: list[dict[str, Any]]
    """Every item the model saw (the stored chain's, then this request's input)."""
    response: dict[str, Any] | None = None


@dataclass
class _Stored:
    items: list[dict[str, Any]] = field(default_factory=list)


class FakeResponses(FakeUpstream):
    """The scripted Responses server; ``script`` takes response bodies or fake_upstream replies."""

    def __init__(self) -> None:
        super().__init__()
        self.stored: dict[str, _Stored] = {}
        self.items: dict[str, dict[str, Any]] = {}
        self.served: list[Served] = []
        self.rejections: list[str] = []
        self.upgrades: list[Recorded] = []
        """WebSocket handshakes received (this fake refuses them, as an HTTP-only API does)."""

    def reset(self) -> None:
        super().reset()
        self.stored.clear()
        self.items.clear()
        self.served.clear()
        self.rejections.clear()
        self.upgrades.clear()

    def _route(self, request: web.Request, recorded: Recorded, payload: Any) -> web.StreamResponse | None:
        if request.method == "POST" and request.path.endswith("/responses"):
            return None
        if request.headers.get("Upgrade", "").lower() == "websocket":  # an HTTP-only API: no socket here
            self.upgrades.append(recorded)
            error = {"message": "WebSocket is not supported on this route.", "type": "invalid_request_error"}
            return web.json_response({"error": {**error, "param": None, "code": "not_found"}}, status=404)
        self.requests.append(recorded)  # another route (a client's model list, a stored response)
        error = {"message": f"No route {request.method} {request.path}.", "type": "invalid_request_error"}
        return web.json_response({"error": {**error, "param": None, "code": "not_found"}}, status=404)

    def _plain_answer(self) -> Any:
        return text_response()

    def _render(self, reply: Turn, payload: Any) -> Any:
        return rendered(reply)

    async def _serve(self, request: web.Request, payload: Any, reply: Any, *, judging: bool) -> web.StreamResponse:
        if isinstance(reply, Events):
            return await self._events(request, reply.events, reply.cut_after)
        if not isinstance(reply, dict):
            raise TypeError(f"the Responses fake cannot serve {reply!r}")
        payload = payload if isinstance(payload, dict) else {}
        if judging:
            return await self._body(request, payload, {**reply, "id": _id("resp")}, store=False)
        history, problem = self._history(payload)
        served = Served(payload, history)
        self.served.append(served)
        if problem is not None:
            self.rejections.append(problem[1])
            error = {"message": problem[1], "type": "invalid_request_error", "param": problem[0], "code": None}
            return web.json_response({"error": error}, status=400 if "not found" not in problem[1] else 404)
        served.response = reply = {**reply, "id": _id("resp")}
        return await self._body(request, payload, reply, store=payload.get("store") is not False, history=history)

    def _history(
        self, payload: dict[str, Any], known: dict[str, _Stored] | None = None
    ) -> tuple[list[dict[str, Any]], tuple[str, str] | None]:
        """The items the model would see, or (param, message) of the API's refusal; ``known``:
        the responses a ``previous_response_id`` may name (default: those stored)."""
        history: list[dict[str, Any]] = []
        previous = payload.get("previous_response_id")
        known = self.stored if known is None else known
        if previous is not None:
            if previous not in known:
                return [], ("previous_response_id", f"Previous response with id '{previous}' not found.")
            history.extend(known[previous].items)
        raw = payload.get("input")
        items = [{"type": "message", "role": "user", "content": raw}] if isinstance(raw, str) else list(raw or [])
        for item in items:
            if isinstance(item, dict) and item.get("type") == "item_reference":
                found = self.items.get(item.get("id", ""))
                if found is None:
                    return [], ("input", f"Item with id '{item.get('id')}' not found.")
                history.append(found)
            else:
                history.append(item)
        answered = {i.get("call_id") for i in history if str(i.get("type", "")).endswith("_call_output")}
        for item in history:
            if item.get("type") in ("function_call", "custom_tool_call") and item.get("call_id") not in answered:
                return [], ("input", f"No tool output found for function call {item.get('call_id')}.")
        sent = history[len(history) - len(items) :]  # a stored chain's own reasoning is the server's business
        for position, item in enumerate(sent):
            kind = item.get("type")
            after = sent[position + 1] if position + 1 < len(sent) else {}
            follows = after.get("role") == "assistant" or str(after.get("type", "")).endswith("_call")
            if kind == "reasoning" and not follows:
                message_ = (
                    f"Item '{item.get('id')}' of type 'reasoning' was provided without its required following item."
                )
                return [], ("input", message_)
        return history, None

    async def _body(
        self,
        request: web.Request,
        payload: dict[str, Any],
        body: dict[str, Any],
        *,
        store: bool,
        history: list[dict[str, Any]] | None = None,
    ) -> web.StreamResponse:
        if store:
            self.stored[body["id"]] = _Stored([*(history or []), *body["output"]])
            for item in body["output"]:
                if isinstance(item.get("id"), str):
                    self.items[item["id"]] = item
        if payload.get("stream") is True:
            return await self._events(request, stream_events(body))
        return web.json_response(body)

    async def _events(
        self, request: web.Request, events: Iterable[dict[str, Any]], cut_after: int | None = None
    ) -> web.StreamResponse:
        frames = (f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode() for event in events)
        if cut_after is None:  # lazily: a long stream is never held whole
            return await self._stream(request, frames)
        listed = list(frames)
        return await self._stream(request, listed, cut=cut_after if cut_after < len(listed) else None)

    @property
    def agent_payloads(self) -> list[dict[str, Any]]:
        return [served.payload for served in self.served]

"""A scriptable fake Gemini API upstream (``generateContent``, ``streamGenerateContent?alt=sse``).

Tests queue neutral replies (``Turn``) or raw ``GenerateContentResponse`` bodies (``Generated``);
the fake answers each model call as its path asks: a JSON body, or the ``alt=sse`` stream the
API sends (text split over chunks, the last one carrying ``finishReason`` and ``usageMetadata``,
events ending in CRLF CRLF as Google frames them). Like Gemini 3, it signs every function call
it returns (``thoughtSignature``) and answers 400 to a request whose model turn sends one of
its calls back without that signature. ``countTokens`` and the model list are answered too.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web

from tests.support.fake_upstream import FakeUpstream, Recorded, Sse, emptied, running
from tests.support.turns import Turn

__all__ = [
    "MISSING_SIGNATURE",
    "FakeGemini",
    "Generated",
    "gemini_body",
    "gemini_server",
    "gemini_upstream",
    "signature",
]

MISSING_SIGNATURE = "Function call is missing a thought_signature"


@dataclass
class Generated:
    """A raw ``GenerateContentResponse`` to answer with (streamed as one chunk per part)."""

    body: dict[str, Any]


def signature(name: str, args: Any) -> str:
    """The signature the fake gives a call (base64, as the API's ``thoughtSignature`` bytes are)."""
    return base64.b64encode(hashlib.sha256(json.dumps([name, args], sort_keys=True).encode()).digest()).decode()


def gemini_body(reply: Turn, model: str = "gemini-fake") -> dict[str, Any]:
    """A neutral reply as the API's response: a thought, text, then signed function calls."""
    parts: list[dict[str, Any]] = []
    if reply.reasoning is not None:
        parts.append({"text": reply.reasoning, "thought": True})
    if reply.text is not None:
        parts.append({"text": reply.text})
    for call in reply.calls:
        args = call.arguments if isinstance(call.arguments, dict) else json.loads(call.arguments)
        parts.append({"functionCall": {"name": call.name, "args": args, "id": call.id}})
    first_call = next((p for p in parts if "functionCall" in p), None)
    if first_call is not None:
        first_call["thoughtSignature"] = signature(
            first_call["functionCall"]["name"], first_call["functionCall"]["args"]
        )
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {
            "promptTokenCount": reply.usage[0],
            "candidatesTokenCount": reply.usage[1],
            "totalTokenCount": sum(reply.usage),
        },
        "modelVersion": model,
        "responseId": "resp-fake",
    }


def _bytes(value: Any) -> bytes | None:
    """A signature's bytes, whichever base64 alphabet carries it (the SDK writes it URL-safe)."""
    if not isinstance(value, str):
        return None
    return base64.urlsafe_b64decode(value.replace("+", "-").replace("/", "_"))


def unsigned(payload: Any) -> str | None:
    """Where a request sends a signed call of the fake's back without its signature."""
    contents = payload.get("contents") if isinstance(payload, dict) else None
    for index, content in enumerate(contents if isinstance(contents, list) else ()):
        if not isinstance(content, dict) or content.get("role") != "model":
            continue
        parts = [p for p in content.get("parts") or [] if isinstance(p, dict) and "functionCall" in p]
        if parts and _bytes(parts[0].get("thoughtSignature")) != _bytes(
            signature(parts[0]["functionCall"].get("name"), parts[0]["functionCall"].get("args"))
        ):
            return f"contents[{index}].parts: {MISSING_SIGNATURE}."
    return None


def chunks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The response as the API streams it: text split in pieces, one chunk per piece or part,
    the last one with the finish reason and usage."""
    candidate = body["candidates"][0]
    pieces: list[dict[str, Any]] = []
    for part in candidate["content"]["parts"]:
        text = part.get("text")
        if isinstance(text, str) and len(text) > 2:
            size = -(-len(text) // 3)
            pieces += [{**part, "text": text[i : i + size]} for i in range(0, len(text), size)]
        else:
            pieces.append(part)
    head = {k: v for k, v in body.items() if k not in ("candidates", "usageMetadata")}
    events = [
        {**head, "candidates": [{"content": {"role": "model", "parts": [piece]}, "index": 0}]} for piece in pieces
    ] or [{**head, "candidates": [{"content": {"role": "model", "parts": []}, "index": 0}]}]
    last = events[-1]["candidates"][0]
    last.update({k: v for k, v in candidate.items() if k not in ("content", "index")})
    if "usageMetadata" in body:
        events[-1]["usageMetadata"] = body["usageMetadata"]
    return events


class FakeGemini(FakeUpstream):
    """The scripted Gemini server: the base fake's serving, recording and judge, with the
    format's model calls, streams and signatures, token counts and the model list."""

    def __init__(self) -> None:
        super().__init__()
        self.rejected: list[str] = []
        self.summary: Turn | None = None
        """When set, the answer to every ending's summary call (functions forbidden)."""

    def reset(self) -> None:
        super().reset()
        self.rejected.clear()
        self.summary = None

    def _route(self, request: web.Request, recorded: Recorded, payload: Any) -> web.StreamResponse | None:
        path = request.rel_url.path
        if path.endswith(":countTokens"):
            self.requests.append(recorded)
            return web.json_response({"totalTokens": len(recorded.body) // 4})
        if request.method == "GET" and "/models" in path:
            self.requests.append(recorded)
            model = {"name": "models/gemini-fake", "displayName": "Gemini Fake"}
            return web.json_response(model if path.rstrip("/").endswith("gemini-fake") else {"models": [model]})
        if not isinstance(payload, dict):
            self.requests.append(recorded)
            return web.json_response({})
        return None

    def _next(self, payload: Any) -> Any:
        calling = ((payload.get("toolConfig") or {}).get("functionCallingConfig") or {}).get("mode")
        if self.summary is not None and calling == "NONE":
            return self.summary
        return super()._next(payload)

    def _plain_answer(self) -> Any:
        return Turn("Hello from the fake model.")

    def _render(self, reply: Turn, payload: Any) -> Any:
        return Generated(gemini_body(reply))

    def _refused(self, payload: Any) -> web.StreamResponse | None:
        wrong = unsigned(payload)
        if wrong is None:
            return None
        self.rejected.append(wrong)
        error = {"error": {"code": 400, "message": wrong, "status": "INVALID_ARGUMENT"}}
        return web.json_response(error, status=400)

    async def _serve(self, request: web.Request, payload: Any, reply: Any, *, judging: bool) -> web.StreamResponse:
        streaming = request.rel_url.path.endswith(":streamGenerateContent")
        if isinstance(reply, Sse):  # raw chunks, as given (no sentinel: the connection closes)
            frames = [f"data: {json.dumps(event)}\r\n\r\n".encode() for event in reply.events]
            return await self._stream(request, frames, headers=_SSE, cut=reply.cut_after, delay=reply.delay)
        assert isinstance(reply, Generated), f"the Gemini fake cannot serve {reply!r}"
        if streaming:
            frames = [f"data: {json.dumps(event)}\r\n\r\n".encode() for event in chunks(reply.body)]
            return await self._stream(request, frames, headers=_SSE)
        return web.Response(body=json.dumps(reply.body).encode(), headers={"Content-Type": "application/json"})


_SSE = {"Content-Type": "text/event-stream"}


@pytest.fixture(scope="session")
def gemini_server() -> Iterator[FakeGemini]:
    yield from running(FakeGemini)


@pytest.fixture
def gemini_upstream(gemini_server: FakeGemini) -> Iterator[FakeGemini]:
    """The fake Gemini API, with an empty script and no recorded requests."""
    yield from emptied(gemini_server)

"""A scriptable fake OpenAI upstream: the model side of every integration test.

Each test queues the replies it wants (JSON, SSE, failures); the server answers requests
in order and records every request it received. When the queue is empty it answers with a
plain chat completion, so tests only script what matters to them.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Json:
    """A JSON (or raw bytes) reply."""

    body: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Sse:
    """An SSE stream of ``data:`` events; ``cut_after`` closes the connection after N events.
    ``events`` may be a generator: a long stream is then never held whole by the test."""

    events: Iterable[Any]
    status: int = 200
    done: bool = True
    delay: float = 0.0
    cut_after: int | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Hang:
    """Accept the request and answer nothing for ``seconds``."""

    seconds: float = 30.0


@dataclass
class CloseAfterRequest:
    """Read the whole request, then close the connection without a response."""


Reply = Json | Sse | Hang | CloseAfterRequest


@dataclass
class Recorded:
    method: str
    path: str
    query: str
    headers: list[tuple[str, str]]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    def header_values(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]


def chat_completion(
    content: str | None = "Hello from the fake model.",
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    reasoning: str | None = None,
    model: str = "fake-model",
    finish_reason: str | None = None,
    refusal: str | None = None,
) -> dict[str, Any]:
    """A chat.completion body as OpenAI sends it."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if refusal is not None:
        message["refusal"] = refusal
    if tool_calls:
        message["tool_calls"] = tool_calls
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
            }
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


def tool_call(name: str, arguments: str, call_id: str = "call_1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def stream_chunks(text: str, *, model: str = "fake-model", pieces: int = 3) -> list[dict[str, Any]]:
    """The chunks of a streamed text answer, split into ``pieces`` deltas."""
    size = max(1, len(text) // pieces)
    parts = [text[i : i + size] for i in range(0, len(text), size)]
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    chunks += [{**base, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in parts]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return chunks


def streamed(completion: dict[str, Any], *, pieces: int = 3, usage: bool = True) -> Sse:
    """A chat.completion as the SSE stream a real API sends: role chunk, then reasoning,
    content and tool-call arguments each split into ``pieces`` deltas, the finish chunk, and
    (when ``usage``) the usage chunk."""
    base = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    message = completion["choices"][0]["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    def split(text: str) -> list[str]:
        size = max(1, -(-len(text) // pieces))
        return [text[i : i + size] for i in range(0, len(text), size)] or [""]

    chunks = [chunk({"role": "assistant", "content": ""})]
    if message.get("reasoning_content"):
        chunks += [chunk({"reasoning_content": p}) for p in split(message["reasoning_content"])]
    if message.get("content"):
        chunks += [chunk({"content": p}) for p in split(message["content"])]
    if message.get("refusal"):
        chunks += [chunk({"refusal": p}) for p in split(message["refusal"])]
    for index, call in enumerate(message.get("tool_calls") or []):
        # A function call streams its ``arguments``; a custom tool call (GPT-5) its ``input``.
        kind, text = ("custom", "input") if call.get("type") == "custom" else ("function", "arguments")
        body = call[kind]
        head = {"index": index, "id": call["id"], "type": kind, kind: {"name": body["name"], text: ""}}
        chunks.append(chunk({"tool_calls": [head]}))
        chunks += [chunk({"tool_calls": [{"index": index, kind: {text: p}}]}) for p in split(body[text])]
    chunks.append(chunk({}, completion["choices"][0]["finish_reason"]))
    if usage and "usage" in completion:
        chunks.append({**base, "choices": [], "usage": completion["usage"]})
    return Sse(chunks)


JUDGE_PROMPT = "You are a strict completion judge"
PROGRESS_PROMPT = "You are a strict progress judge"
_NONCE = re.compile(r'"nonce": "([0-9a-f]+)"')


def judge_nonce(request: dict[str, Any]) -> str:
    """The verdict nonce a judge request asks to be echoed (from its system prompt)."""
    match = _NONCE.search(request["messages"][0]["content"])
    assert match, "judge request without a verdict nonce"
    return match.group(1)


def verdict(request: dict[str, Any], done: bool, reason: str = "checked") -> Json:
    """What an honest judge model answers (``done`` is ``progress`` for the progress question)."""
    flag = "progress" if is_progress_question(request) else "done"
    content = json.dumps({"nonce": judge_nonce(request), flag: done, "reason": reason})
    return Json(chat_completion(content, model="judge-model"))


def is_progress_question(request: dict[str, Any]) -> bool:
    """The judge is asked whether recent steps make progress (not whether an answer is done)."""
    return str(request["messages"][0]["content"]).startswith(PROGRESS_PROMPT)


def honest_judge(request: dict[str, Any]) -> Reply:
    """The default judge: everything is done (tests about the judge script their own)."""
    return verdict(request, True)


class FakeUpstream:
    """The scripted server, running on its own event loop in a background thread.

    Judge calls (recognized by the judge's system prompt) are answered by ``self.judge``, a
    function of the request JSON, and recorded in ``judge_requests``, so scripts and
    ``requests`` stay about the agent's own calls.
    """

    def __init__(self) -> None:
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self.requests: list[Recorded] = []
        self.judge_requests: list[Recorded] = []
        self.judge: Callable[[dict[str, Any]], Reply] = honest_judge
        self.stream_aborts: list[float] = []
        """``time.monotonic()`` of each stream the proxy hung up on before it was finished."""
        self.hangups: list[float] = []
        """``time.monotonic()`` of each held reply (a delayed ``Json``, a ``Hang``) the proxy
        hung up on before it was sent."""
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.port = 0

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> FakeUpstream:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    async def _start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- scripting --------------------------------------------------------------------

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def reset(self) -> None:
        with self._lock:
            self._replies.clear()
            self.requests.clear()
            self.judge_requests.clear()
            self.stream_aborts.clear()
            self.hangups.clear()
            self.judge = honest_judge

    @property
    def pending(self) -> int:
        return len(self._replies)

    # -- serving ----------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        recorded = Recorded(
            request.method, request.rel_url.raw_path, request.rel_url.raw_query_string, _raw_headers(request), body
        )
        judged = _is_judge_call(body)
        with self._lock:
            if judged is not None:
                self.judge_requests.append(recorded)
                reply = self.judge(judged)
            else:
                self.requests.append(recorded)
                reply = self._replies.popleft() if self._replies else Json(chat_completion())
        if isinstance(reply, Hang):
            await self._hold(request, reply.seconds)
            return web.Response(status=599)
        if isinstance(reply, CloseAfterRequest):
            assert request.transport is not None
            request.transport.close()
            raise asyncio.CancelledError
        if isinstance(reply, Json):
            if reply.delay and await self._hold(request, reply.delay):
                return web.Response(status=599)
            raw = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            headers = {"Content-Type": "application/json", **reply.headers}
            return web.Response(body=raw, status=reply.status, headers=headers)
        return await self._stream(request, reply)

    async def _hold(self, request: web.Request, seconds: float) -> bool:
        """Wait ``seconds`` before answering; True (and noted in ``hangups``) when the proxy
        hung up first."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if request.transport is None or request.transport.is_closing():
                self.hangups.append(time.monotonic())
                return True
            await asyncio.sleep(0.01)
        return False

    async def _stream(self, request: web.Request, reply: Sse) -> web.StreamResponse:
        response = web.StreamResponse(
            status=reply.status, headers={"Content-Type": "text/event-stream", **reply.headers}
        )
        await response.prepare(request)
        try:
            for index, event in enumerate(reply.events):
                if reply.cut_after is not None and index >= reply.cut_after:
                    assert request.transport is not None
                    request.transport.close()
                    return response
                data = event if isinstance(event, str) else json.dumps(event)
                await response.write(f"data: {data}\n\n".encode())
                if reply.delay:
                    await asyncio.sleep(reply.delay)
                if request.transport is None or request.transport.is_closing():
                    raise ConnectionResetError
            if reply.done:
                await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            self.stream_aborts.append(time.monotonic())
        return response


def _is_judge_call(body: bytes) -> dict[str, Any] | None:
    try:
        payload = json.loads(body)
        first = payload["messages"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    content = first.get("content") if isinstance(first, dict) else None
    return payload if isinstance(content, str) and content.startswith((JUDGE_PROMPT, PROGRESS_PROMPT)) else None


def _raw_headers(request: web.Request) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.raw_headers]

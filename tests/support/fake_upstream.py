"""A scriptable fake model API: the model side of every integration test, in every wire format.

Each test queues the replies it wants (JSON, SSE, failures); the server answers requests
in order and records every request it received. When the queue is empty it answers with a
plain chat completion, so tests only script what matters to them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web

from tests.support.turns import Turn


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


Reply = Json | Sse | Hang | CloseAfterRequest | Turn
F = TypeVar("F", bound="FakeUpstream")


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
    usage: tuple[int, int] = (11, 7),
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
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
    }


def tool_call(name: str, arguments: str, call_id: str = "call_1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def chat_reply(reply: Turn, payload: Any) -> Json | Sse:
    """A neutral reply as a chat.completion, streamed when the request streams."""
    completion = chat_completion(
        reply.text,
        tool_calls=[tool_call(c.name, c.raw, c.id) for c in reply.calls],
        reasoning=reply.reasoning,
        usage=reply.usage,
    )
    return streamed(completion) if isinstance(payload, dict) and payload.get("stream") is True else Json(completion)


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


def judge_prompt(request: dict[str, Any]) -> str:
    """The judge's prompt in whichever format it was asked: the Responses ``instructions``, the
    Messages ``system``, Gemini's ``systemInstruction`` or the first chat message ("" for a
    body of none of these shapes)."""
    system = request.get("systemInstruction")  # Gemini's
    for place in (request.get("instructions"), request.get("system"), (system or {}).get("parts")):
        if isinstance(place, str):
            return place
        if isinstance(place, list):
            return "".join(str(b.get("text", "")) for b in place if isinstance(b, dict))
    messages = request.get("messages")
    first = messages[0] if isinstance(messages, list) and messages else None
    content = first.get("content") if isinstance(first, dict) else None
    return content if isinstance(content, str) else ""


def judged(request: dict[str, Any], done: bool, reason: str = "checked") -> Turn:
    """An honest judge's verdict as a neutral reply, for a judge asked in any format
    (``done`` is ``progress`` for the progress question)."""
    prompt = judge_prompt(request)
    match = _NONCE.search(prompt)
    assert match, "judge request without a verdict nonce"
    flag = "progress" if prompt.startswith(PROGRESS_PROMPT) else "done"
    return Turn(json.dumps({"nonce": match.group(1), flag: done, "reason": reason}))


def honest_judge(request: dict[str, Any]) -> Reply:
    """The default judge, in every format: everything is done (tests about the judge script their own)."""
    return judged(request, True)


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
        self.model: Callable[[Any], Reply] | None = None
        """A model that reads each agent call and answers it (for runs whose number of calls
        the proxy decides: warnings asked again, endings); used once the script is empty."""
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

    def start(self: F) -> F:
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
            self.model = None

    @property
    def pending(self) -> int:
        return len(self._replies)

    # -- serving ----------------------------------------------------------------------
    # One way of serving for every format: record, answer the judge or pop the script, render a
    # neutral reply in the request's format, serve the replies every format shares (a hang, a
    # closed connection, a raw JSON body) here, and hand the format's own replies to ``_serve``.
    # The Responses and Messages fakes override only the hooks below.

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        recorded = Recorded(
            request.method, request.rel_url.raw_path, request.rel_url.raw_query_string, _raw_headers(request), body
        )
        payload = _json_or_none(body)
        routed = self._route(request, recorded, payload)
        if routed is not None:
            return routed
        with self._lock:
            judging = is_judge_request(payload)
            if judging:
                self.judge_requests.append(recorded)
                reply = self.judge(payload)
            else:
                self.requests.append(recorded)
                reply = self._next(payload)
        if isinstance(reply, Turn):
            reply = self._render(reply, payload)
        refused = self._refused(payload)
        if refused is not None:
            return refused
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
        return await self._serve(request, payload, reply, judging=judging)

    def _route(self, request: web.Request, recorded: Recorded, payload: Any) -> web.StreamResponse | None:
        """The answer to a request that is no model call (a model list, a probe), or None."""
        return None

    def _next(self, payload: Any) -> Any:
        """The scripted reply to an agent call (called under the lock)."""
        return self._replies.popleft() if self._replies else self._unscripted(payload)

    def _unscripted(self, payload: Any) -> Any:
        """The reply once the script is empty: the ``model``'s, else the format's plain answer."""
        return self.model(payload) if self.model is not None else self._plain_answer()

    def _plain_answer(self) -> Any:
        return Json(chat_completion())

    def _render(self, reply: Turn, payload: Any) -> Any:
        """A neutral reply in this fake's format, as the request asks for it (JSON or stream)."""
        return chat_reply(reply, payload)

    def _refused(self, payload: Any) -> web.StreamResponse | None:
        """The API's refusal of a request it would reject whatever the script says, or None."""
        return None

    async def _serve(self, request: web.Request, payload: Any, reply: Any, *, judging: bool) -> web.StreamResponse:
        """A reply of the format's own kinds (for chat: an ``Sse`` stream)."""
        assert isinstance(reply, Sse), f"the chat fake cannot serve {reply!r}"

        def frames() -> Iterator[bytes]:  # lazily: a long stream is never held whole
            for event in reply.events:
                yield f"data: {event if isinstance(event, str) else json.dumps(event)}\n\n".encode()
            if reply.done:
                yield b"data: [DONE]\n\n"

        cut = None
        if reply.cut_after is not None:  # a cut stream is short: counted whole
            events = list(reply.events)
            if reply.cut_after < len(events):
                cut = reply.cut_after
            reply = dataclasses.replace(reply, events=events, done=reply.done and cut is None)
        headers = {"Content-Type": "text/event-stream", **reply.headers}
        return await self._stream(request, frames(), status=reply.status, headers=headers, delay=reply.delay, cut=cut)

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

    async def _stream(
        self,
        request: web.Request,
        frames: Iterable[bytes],
        *,
        status: int = 200,
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
        cut: int | None = None,
    ) -> web.StreamResponse:
        """Send SSE ``frames`` one by one (``delay`` after each); ``cut`` closes the connection
        after that many frames, without ending the stream. A proxy hanging up is noted in
        ``stream_aborts``."""
        response = web.StreamResponse(status=status, headers=headers or {"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            for index, frame in enumerate(frames):
                if cut is not None and index >= cut:
                    break
                await response.write(frame)
                if delay:
                    await asyncio.sleep(delay)
                if request.transport is None or request.transport.is_closing():
                    raise ConnectionResetError
            if cut is not None:
                assert request.transport is not None
                request.transport.close()
                return response
            await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            self.stream_aborts.append(time.monotonic())
        return response


def running(kind: type[F]) -> Iterator[F]:
    """A fake of ``kind`` serving until the generator closes (the body of a session fixture)."""
    server = kind().start()
    yield server
    server.stop()


def emptied(server: F) -> Iterator[F]:
    """``server`` with an empty script and nothing recorded, before and after a test."""
    server.reset()
    yield server
    server.reset()


def is_judge_request(payload: Any) -> bool:
    """A call of the proxy's judge (its prompt opens the request), in any format."""
    return isinstance(payload, dict) and judge_prompt(payload).startswith((JUDGE_PROMPT, PROGRESS_PROMPT))


def _json_or_none(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def _raw_headers(request: web.Request) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.raw_headers]

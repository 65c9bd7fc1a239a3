"""The scripted model API of the efficacy benchmark: answers as the run's scenario says.

It reuses the test suite's :class:`FakeUpstream` server (aiohttp on its own thread) and
replaces how it answers: every request is routed by its model name
(``bench/<scenario>/<variant>/<run>``) to :func:`scenarios.respond`, judge calls to the
honest judge, and ``stream: true`` requests get the same reply as SSE chunks. Requests to
``/v1/messages`` are read and answered in Anthropic Messages' shape (:mod:`messages_api`). Usage is
billed like a real API (about 4 bytes a token for the prompt), and every call is booked
per run: steps and tokens by purpose (agent, judge, finalize), and the prompt tokens the
guard added to agent calls (its corrections and notes). A Responses request (``POST
/responses``) is read as the chat request it amounts to and answered as the Responses API
does (a response, or its named events).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, defaultdict
from typing import Any

from aiohttp import web

from proxy.wire.chat.render import completion_as_sse
from tests.bench.efficacy import gemini_api, messages_api, scenarios
from tests.support.fake_responses import function_call, message, reasoning, response, stream_events
from tests.support.fake_upstream import FakeUpstream, Json, Sse, chat_completion


def scenario_of(model: str) -> scenarios.Scenario | None:
    parts = model.split("/")
    if len(parts) != 4 or parts[0] != "bench":
        return None
    for scenario in scenarios.scenarios():
        if scenario.name == parts[1] and scenario.variant == parts[2]:
            return scenario
    return None


class Ledger:
    """Per run: calls and tokens by purpose."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.tokens: Counter[str] = Counter()
        self.added_tokens = 0
        """Prompt tokens of agent calls that the guard put there (part of ``tokens["agent"]``)."""
        self.rate_limited = 0

    @property
    def steps(self) -> int:
        return sum(self.calls.values())

    @property
    def total_tokens(self) -> int:
        return sum(self.tokens.values())


class ScriptedUpstream(FakeUpstream):
    def __init__(self) -> None:
        super().__init__()
        self._books_lock = threading.Lock()
        self.books: dict[str, Ledger] = defaultdict(Ledger)
        self._agent_requests: Counter[str] = Counter()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        try:
            payload = json.loads(body)
        except ValueError:
            return web.json_response({"error": {"message": "not JSON"}}, status=400)
        responses = request.path.endswith("/responses")
        if responses:
            payload = _as_chat(payload)
        gemini = ":generateContent" in request.path or ":streamGenerateContent" in request.path
        if gemini:  # the model is in the path; the scenarios read chat's shape
            payload = gemini_api.chat_view(payload, gemini_api.bench_model(request.path))
        model = str(payload.get("model", ""))
        scenario = scenario_of(model)
        if scenario is None:
            return web.json_response({"error": {"message": f"unknown model {model!r}"}}, status=404)
        anthropic = request.rel_url.path.endswith("/messages")
        if anthropic:  # the scenarios read chat's shape
            payload = messages_api.chat_view(payload)
        seen = scenarios.read_request(payload)
        with self._books_lock:
            book = self.books[model]
            if not seen.judge:
                self._agent_requests[model] += 1
            number = self._agent_requests[model]
        if seen.judge:
            reply = scenarios.Reply(scenarios.judge(payload, scenario))
            purpose = "judge"
        else:
            reply = scenarios.respond(scenario, seen, number)
            purpose = "finalize" if seen.finalize else "agent"
            for call in reply.tool_calls:  # call ids are unique per run, as a real API's are
                call["id"] += "_" + model.rpartition("/")[2]
        if reply.status != 200:
            with self._books_lock:
                book.rate_limited += 1
            error = {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}
            if anthropic:
                error = {"type": "error", "error": {"type": "rate_limit_error", "message": "Rate limit reached"}}
            if gemini:
                error = {"error": {"code": 429, "message": "Rate limit reached", "status": "RESOURCE_EXHAUSTED"}}
            return await self._answer(request, Json(error, status=reply.status, headers={"retry-after": "1"}))
        if anthropic:  # Anthropic Messages' shape (``POST /v1/messages``)
            message = messages_api.message(model, reply, prompt_tokens=len(body) // 4)
            tokens = message["usage"]["input_tokens"] + message["usage"]["output_tokens"]
            sse = messages_api.streamed(message) if json.loads(body).get("stream") is True else None
            return await self._booked(request, message, tokens, sse, purpose, payload, book)
        if gemini:  # a GenerateContentResponse, streamed when the path says so
            generated = gemini_api.response(model, reply, prompt_tokens=len(body) // 4)
            streaming = request.path.endswith(":streamGenerateContent")
            sse = gemini_api.streamed(generated) if streaming else None
            tokens = generated["usageMetadata"]["totalTokenCount"]
            return await self._booked(request, generated, tokens, sse, purpose, payload, book)
        completion = _completion(model, reply, prompt_tokens=len(body) // 4)
        usage = completion["usage"]
        added = scenarios.guard_added_bytes(payload) // 4 if purpose == "agent" else 0
        with self._books_lock:
            book.calls[purpose] += 1
            book.tokens[purpose] += usage["total_tokens"]
            book.added_tokens += added
        if responses:
            return await self._respond(request, payload, _response(completion, reply))
        if payload.get("stream") is True:
            options = payload.get("stream_options")
            include_usage = isinstance(options, dict) and options.get("include_usage") is True
            sse = completion_as_sse(completion, include_usage=include_usage)
            events: list[Any] = [json.loads(line[6:]) for line in sse.split(b"\n\n") if line.startswith(b"data: {")]
            return await self._answer(request, Sse(events))
        return await self._answer(request, Json(completion))

    async def _respond(self, request: web.Request, payload: dict[str, Any], body: dict[str, Any]) -> web.StreamResponse:
        """A Responses answer: the response, or its named events."""
        if payload.get("stream") is not True:
            return web.json_response(body)
        stream = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
        await stream.prepare(request)
        for event in stream_events(body):
            await stream.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
        await stream.write_eof()
        return stream

    async def _booked(
        self,
        request: web.Request,
        body: dict[str, Any],
        tokens: int,
        sse: bytes | None,
        purpose: str,
        view: dict[str, Any],
        book: Ledger,
    ) -> web.StreamResponse:
        """A reply in another format's shape (Messages, Gemini), booked like the chat one: the
        body, or ``sse`` (its stream) when the request streams."""
        added = scenarios.guard_added_bytes(view) // 4 if purpose == "agent" else 0
        with self._books_lock:
            book.calls[purpose] += 1
            book.tokens[purpose] += tokens
            book.added_tokens += added
        if sse is not None:
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            await response.write(sse)
            await response.write_eof()
            return response
        return web.json_response(body)

    async def _answer(self, request: web.Request, reply: Json | Sse) -> web.StreamResponse:
        if isinstance(reply, Sse):
            return await self._serve(request, None, reply, judging=False)
        raw = json.dumps(reply.body).encode()
        return web.Response(
            body=raw, status=reply.status, headers={"Content-Type": "application/json", **reply.headers}
        )


def _as_chat(payload: dict[str, Any]) -> dict[str, Any]:
    """A Responses request as the chat request it amounts to (what the scenarios read)."""
    from proxy.wire.responses.parse import parse_conversation  # here: the benchmark also runs older proxies

    messages: list[dict[str, Any]] = []
    for turn in parse_conversation(payload).messages:
        if turn.role == "tool":
            messages.append({"role": "tool", "tool_call_id": turn.call_id, "content": turn.text})
            continue
        entry: dict[str, Any] = {"role": turn.role, "content": turn.text}
        if turn.tool_calls:
            entry["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in turn.tool_calls
            ]
        messages.append(entry)
    text = payload.get("text")
    answer_format = text.get("format") if isinstance(text, dict) else None
    chat = {k: v for k, v in payload.items() if k not in ("input", "instructions", "text")}
    chat["messages"] = messages
    if isinstance(answer_format, dict) and answer_format.get("type") == "json_schema":
        chat["response_format"] = {"type": "json_schema", "json_schema": answer_format}
    return chat


def _response(completion: dict[str, Any], reply: scenarios.Reply) -> dict[str, Any]:
    """The completion's answer as a Responses API response, its usage carried over."""
    items: list[dict[str, Any]] = []
    if reply.reasoning:
        items.append(reasoning(reply.reasoning))
    if reply.content is not None:
        items.append(message(reply.content))
    for call in reply.tool_calls:
        items.append(function_call(call["function"]["name"], call["function"]["arguments"], call["id"]))
    usage = completion["usage"]
    body = response(*items, model=completion["model"], usage=(usage["prompt_tokens"], usage["completion_tokens"]))
    body["id"] = "resp_bench" + completion["id"].rpartition("-")[2]
    return body


def _completion(model: str, reply: scenarios.Reply, *, prompt_tokens: int) -> dict[str, Any]:
    """The reply as a chat.completion, billed like a real API (output: about 4 bytes a token)."""
    body = chat_completion(reply.content, tool_calls=reply.tool_calls or None, reasoning=reply.reasoning, model=model)
    completion_tokens = len(json.dumps(body["choices"][0]["message"])) // 4 + reply.extra_completion_tokens
    body["id"] = f"chatcmpl-bench-{time.monotonic_ns()}"
    body["usage"] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    return body

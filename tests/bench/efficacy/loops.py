"""The benchmark's hand-written tool loops: one loop (:func:`run_loop`), one small class per wire
format that knows how to send the conversation and read the model's turn.

- ``ChatLoop``: the openai SDK on chat completions (``client.chat.completions.create``);
- ``ResponsesLoop``: ``responses.create`` with the whole input every turn, not stored (as Codex
  sends it over HTTP);
- ``SocketLoop``: ``responses.connect()``, each turn only its new items and the
  ``previous_response_id`` of the response it read (Codex's WebSocket transport, ``store:
  false``); where no socket is offered (the scripted upstream, straight), the HTTP loop, as
  Codex falls back;
- ``MessagesLoop``: the anthropic SDK on ``/v1/messages``, every assistant turn sent back as it
  came (thinking included);
- ``GeminiLoop``: google-genai on ``generateContent``, every model turn sent back as it came
  (thought signatures included).

Each loop asks at most the scenario's cap of model calls (15 by default), returns the first
answer without calls (or a :class:`scenarios.Refusal`), and runs every call with the weather
tool; a call whose arguments it cannot read raises, as most loops do.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import openai

from tests.bench.efficacy import scenarios

__all__ = ["LOOPS", "AgentGaveUp", "headers", "openai_client", "run_loop"]

TERMINAL = ("response.completed", "response.incomplete", "response.failed")
"""The socket events that end a response."""


class AgentGaveUp(RuntimeError):
    """The hand-written loop hit its own turn limit."""


def headers(session: str | None, scenario: scenarios.Scenario) -> dict[str, str]:
    """The run's session id (none: the proxy derives the session) and the policy it asks for."""
    sent = {"X-Session-Id": session} if session else {}
    return sent | ({"X-LoopWarden-Policy": scenario.policy} if scenario.policy else {})


def openai_client(base_url: str, session: str | None, scenario: scenarios.Scenario) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="sk-bench", default_headers=headers(session, scenario))


@dataclass
class Turn:
    """What the model's turn gave the loop: its text, the calls to run (id, arguments), a refusal."""

    text: str | None = None
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    refusal: str | None = None


@dataclass(frozen=True)
class Run:
    """One run of a client: where it sends, the model (its scenario and run id), the session id
    it sends (None: none), its scenario, whether it streams, the agent's profile."""

    base_url: str
    model: str
    session: str | None
    scenario: scenarios.Scenario
    stream: bool
    profile: scenarios.AgentProfile


class Loop(Protocol):
    async def ask(self) -> Turn:
        """Send the conversation so far; keep and read the model's turn."""

    def answer(self, results: list[tuple[str, str]]) -> None:
        """Add the tool results (call id, output) for the next turn."""

    async def close(self) -> None: ...


async def run_loop(open_loop: Callable[[Run], Any], run: Run) -> Any:
    """The one tool loop: a client run (``clients.ClientRun``) over the loop ``open_loop`` opens."""
    scenario = run.scenario
    loop: Loop = await open_loop(run)
    try:
        for _ in range(scenario.cap or 15):
            turn = await loop.ask()
            if turn.refusal is not None:
                return scenarios.Refusal(turn.refusal)
            if not turn.calls:
                return turn.text
            loop.answer([(ident, scenarios.weather(arguments["city"])) for ident, arguments in turn.calls])
        raise AgentGaveUp(f"no answer after {scenario.cap or 15} model calls")
    finally:
        await loop.close()


class ChatLoop:
    def __init__(self, run: Run) -> None:
        self.run, self.client = run, openai_client(run.base_url, run.session, run.scenario)
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": run.profile.instructions},
            {"role": "user", "content": scenarios.TASK},
        ]
        self.extra: dict[str, Any] = {"response_format": scenarios.RESPONSE_FORMAT} if run.scenario.schema else {}

    @classmethod
    async def open(cls, run: Run) -> ChatLoop:
        return cls(run)

    async def ask(self) -> Turn:
        request = {"model": self.run.model, "messages": self.messages, "tools": list(self.run.profile.tools)}
        if self.run.stream:
            message = await self._streamed(request)
        else:
            completion = await self.client.chat.completions.create(**request, **self.extra)
            message = completion.choices[0].message.model_dump(exclude_none=True)
        self.messages.append(message)
        if message.get("refusal"):  # structured outputs: check for a refusal first (OpenAI's guide)
            return Turn(refusal=message["refusal"])
        calls = [(c["id"], json.loads(c["function"]["arguments"])) for c in message.get("tool_calls") or []]
        return Turn(message.get("content"), calls)

    def answer(self, results: list[tuple[str, str]]) -> None:
        self.messages += [{"role": "tool", "tool_call_id": ident, "content": output} for ident, output in results]

    async def close(self) -> None:
        await self.client.close()

    async def _streamed(self, request: dict[str, Any]) -> dict[str, Any]:
        """Assemble a streamed reply into an assistant message."""
        content: list[str] = []
        refusal: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        async for chunk in await self.client.chat.completions.create(**request, stream=True, **self.extra):
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            content.append(delta.content or "")
            refusal.append(delta.refusal or "")
            for piece in delta.tool_calls or []:
                call = calls.setdefault(
                    piece.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                call["id"] = piece.id or call["id"]
                if piece.function:
                    call["function"]["name"] += piece.function.name or ""
                    call["function"]["arguments"] += piece.function.arguments or ""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
        if "".join(refusal):
            message["refusal"] = "".join(refusal)
        if calls:
            message["tool_calls"] = [calls[i] for i in sorted(calls)]
        return message


def _response_turn(output: list[dict[str, Any]], text: str) -> Turn:
    refusals = [p["refusal"] for i in output if i["type"] == "message" for p in i["content"] if p["type"] == "refusal"]
    if refusals:
        return Turn(refusal=refusals[0])
    calls = [(i["call_id"], json.loads(i["arguments"])) for i in output if i["type"] == "function_call"]
    return Turn(text, calls)


def _text_format(scenario: scenarios.Scenario) -> dict[str, Any]:
    if not scenario.schema:
        return {}
    return {"text": {"format": {"type": "json_schema", **scenarios.RESPONSE_FORMAT["json_schema"]}}}


class ResponsesLoop:
    def __init__(self, run: Run, client: openai.AsyncOpenAI) -> None:
        self.run, self.client = run, client
        self.items: list[Any] = [{"role": "user", "content": scenarios.TASK}]
        self.request = {
            "model": run.model,
            "instructions": run.profile.instructions,
            "tools": [{"type": "function", **spec["function"]} for spec in run.profile.tools],
            "store": False,
            **_text_format(run.scenario),
        }

    @classmethod
    async def open(cls, run: Run) -> ResponsesLoop:
        return cls(run, openai_client(run.base_url, run.session, run.scenario))

    async def ask(self) -> Turn:
        if self.run.stream:
            async with self.client.responses.stream(**self.request, input=self.items) as events:
                final = await events.get_final_response()
        else:
            final = await self.client.responses.create(**self.request, input=self.items)
        output = [item.model_dump(exclude_none=True) for item in final.output]
        self.items += output
        return _response_turn(output, final.output_text)

    def answer(self, results: list[tuple[str, str]]) -> None:
        self.items += [{"type": "function_call_output", "call_id": i, "output": out} for i, out in results]

    async def close(self) -> None:
        await self.client.close()


class SocketLoop(ResponsesLoop):
    def __init__(self, run: Run, client: openai.AsyncOpenAI, connection: Any) -> None:
        super().__init__(run, client)
        self.connection = connection
        self.previous: str | None = None

    @classmethod
    async def open(cls, run: Run) -> ResponsesLoop:
        client = openai_client(run.base_url, run.session, run.scenario)
        try:
            connection = await client.responses.connect(max_retries=0).enter()
        except Exception:  # no WebSocket there (the run without the proxy): HTTP, as Codex falls back
            return ResponsesLoop(run, client)
        return cls(run, client, connection)

    async def ask(self) -> Turn:
        chained = {"previous_response_id": self.previous} if self.previous else {}
        event = {"type": "response.create", **self.request, "input": self.items, **chained}
        await self.connection.send(event)
        final = None
        while final is None:
            event = json.loads(await self.connection.recv_bytes())
            if event["type"] == "error":
                raise openai.OpenAIError(event.get("message") or "error event")
            if event["type"] in TERMINAL:
                final = event["response"]
        self.previous = final["id"]
        output = final.get("output") or []
        return _response_turn(
            output, "".join(p.get("text", "") for i in output if i["type"] == "message" for p in i["content"])
        )

    def answer(self, results: list[tuple[str, str]]) -> None:
        self.items = []  # only the new items: the socket holds the chain
        super().answer(results)

    async def close(self) -> None:
        await self.connection.close()
        await super().close()


class MessagesLoop:
    def __init__(self, run: Run) -> None:
        import anthropic

        from tests.bench.efficacy.messages_api import anthropic_tools

        self.run = run
        self.client = anthropic.AsyncAnthropic(
            base_url=run.base_url.removesuffix("/v1"),
            api_key="sk-bench",
            default_headers=headers(run.session, run.scenario),
        )
        self.messages: list[dict[str, Any]] = [{"role": "user", "content": scenarios.TASK}]
        self.request: dict[str, Any] = {
            "model": run.model,
            "max_tokens": 2000,
            "system": run.profile.instructions,
            "tools": anthropic_tools(run.profile),
        }
        if run.scenario.schema:
            self.request["output_config"] = {"format": {"type": "json_schema", "schema": scenarios.SCHEMA}}

    @classmethod
    async def open(cls, run: Run) -> MessagesLoop:
        return cls(run)

    async def ask(self) -> Turn:
        if self.run.stream:
            async with self.client.messages.stream(messages=self.messages, **self.request) as streaming:
                reply = await streaming.get_final_message()
        else:
            reply = await self.client.messages.create(messages=self.messages, **self.request)
        blocks = [b.model_dump(exclude_none=True) for b in reply.content]
        self.messages.append({"role": "assistant", "content": blocks})
        text = "".join(b["text"] for b in blocks if b["type"] == "text")
        if reply.stop_reason == "refusal":  # structured outputs: a refusal is not the object
            return Turn(refusal=text or (reply.stop_details and reply.stop_details.explanation) or "")
        return Turn(text or None, [(b["id"], b["input"]) for b in blocks if b["type"] == "tool_use"])

    def answer(self, results: list[tuple[str, str]]) -> None:
        blocks = [{"type": "tool_result", "tool_use_id": ident, "content": output} for ident, output in results]
        self.messages.append({"role": "user", "content": blocks})

    async def close(self) -> None:
        await self.client.close()


class GeminiLoop:
    def __init__(self, run: Run) -> None:
        from google import genai
        from google.genai import types

        from tests.bench.efficacy.gemini_api import gemini_tools, path_model

        self.run, self.types, self.name = run, types, path_model(run.model)
        options = types.HttpOptions(
            base_url=run.base_url.removesuffix("/v1"), headers=headers(run.session, run.scenario)
        )
        self.client = genai.Client(api_key="gk-bench", http_options=options)
        schema = {"response_mime_type": "application/json", "response_json_schema": scenarios.SCHEMA}
        self.config = types.GenerateContentConfig(
            system_instruction=run.profile.instructions,
            tools=gemini_tools(run.profile),  # type: ignore[arg-type]
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
            **(schema if run.scenario.schema else {}),
        )
        self.contents: list[Any] = [{"role": "user", "parts": [{"text": scenarios.TASK}]}]
        self.calls: list[Any] = []

    @classmethod
    async def open(cls, run: Run) -> GeminiLoop:
        return cls(run)

    async def ask(self) -> Turn:
        models, asked = self.client.aio.models, {"model": self.name, "contents": self.contents, "config": self.config}
        pieces = (
            [c async for c in await models.generate_content_stream(**asked)]
            if self.run.stream
            else [await models.generate_content(**asked)]
        )
        parts = [p for c in pieces for cand in c.candidates or [] if cand.content for p in cand.content.parts or []]
        text = "".join(p.text for p in parts if p.text and not p.thought)
        last = pieces[-1].candidates[0] if pieces[-1].candidates else None
        if last is not None and last.finish_reason == self.types.FinishReason.OTHER:  # the proxy's refusal of JSON
            return Turn(refusal=last.finish_message or text)  # the SDK drops finishMessage on the Gemini API
        self.contents.append(self.types.Content(role="model", parts=parts))
        calls = [p.function_call for p in parts if p.function_call is not None]
        self.calls = calls
        return Turn(text or None, [(c.id or "", c.args or {}) for c in calls])

    def answer(self, results: list[tuple[str, str]]) -> None:
        parts = []
        for (ident, output), call in zip(results, self.calls, strict=True):
            part = self.types.Part.from_function_response(name=call.name or "", response={"output": output})
            assert part.function_response is not None
            part.function_response.id = ident or call.id
            parts.append(part)
        self.contents.append(self.types.Content(role="user", parts=parts))

    async def close(self) -> None:
        pass


LOOPS = {
    "openai": ChatLoop.open,
    "openai-responses": ResponsesLoop.open,
    "openai-responses-websocket": SocketLoop.open,
    "anthropic": MessagesLoop.open,
    "gemini": GeminiLoop.open,
}
"""The hand-written loop clients, by the name the benchmark gives them."""

"""The efficacy benchmark's WebSocket client: ``openai-responses-websocket``.

The openai SDK's ``responses.connect()`` with the same hand-written tool loop as
``openai-responses``, sent as Codex's WebSocket transport sends it: ``store: false``, and each
turn only its new items (the task, then the tool results) with the ``previous_response_id`` of
the response it read. Through the proxy that is the proxy's socket (the chain carried by the
proxy); straight to the scripted upstream, which has no WebSocket, the client falls back to
HTTP with the whole input, as Codex does when a socket is refused.
"""

from __future__ import annotations

import json
from typing import Any

import openai

from tests.bench.efficacy import scenarios

__all__ = ["run_openai_responses_socket"]

TERMINAL = ("response.completed", "response.incomplete", "response.failed")


async def run_openai_responses_socket(
    base_url: str,
    model: str,
    session: str | None,
    scenario: scenarios.Scenario,
    stream: bool,
    profile: scenarios.AgentProfile,
) -> Any:
    from tests.bench.efficacy.clients import AgentGaveUp, headers, run_openai_responses

    client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-bench", default_headers=headers(session, scenario))
    try:
        connection = await client.responses.connect(max_retries=0).enter()
    except Exception:  # no WebSocket there (the run without the proxy): HTTP, as Codex falls back
        await client.close()
        return await run_openai_responses(base_url, model, session, scenario, stream, profile)
    tools = [{"type": "function", **spec["function"]} for spec in profile.tools]
    extra: dict[str, Any] = {}
    if scenario.schema:
        extra["text"] = {"format": {"type": "json_schema", **scenarios.RESPONSE_FORMAT["json_schema"]}}
    new: list[Any] = [{"role": "user", "content": scenarios.TASK}]
    previous: str | None = None
    try:
        for _ in range(scenario.cap or 15):
            request = {"model": model, "instructions": profile.instructions, "input": new, "tools": tools}
            request |= {"store": False, **extra, **({"previous_response_id": previous} if previous else {})}
            await connection.send({"type": "response.create", **request})  # type: ignore[arg-type, typeddict-item]
            final = None
            while final is None:
                event = json.loads(await connection.recv_bytes())
                if event["type"] == "error":
                    raise openai.OpenAIError(event.get("message") or "error event")
                if event["type"] in TERMINAL:
                    final = event["response"]
            previous = final["id"]
            output = final.get("output") or []
            refusals = [
                p["refusal"] for i in output if i["type"] == "message" for p in i["content"] if p["type"] == "refusal"
            ]
            if refusals:
                return scenarios.Refusal(refusals[0])
            calls = [item for item in output if item["type"] == "function_call"]
            if not calls:
                return "".join(p.get("text", "") for i in output if i["type"] == "message" for p in i["content"])
            new = [
                {
                    "type": "function_call_output",
                    "call_id": call["call_id"],
                    "output": scenarios.weather(json.loads(call["arguments"])["city"]),
                }
                for call in calls
            ]
        raise AgentGaveUp(f"no answer after {scenario.cap or 15} model calls")
    finally:
        await connection.close()
        await client.close()

"""Real agent clients, each running the same small tool-using agent.

- ``openai``: the openai SDK with a hand-written tool loop (at most 15 model calls);
- ``agents``: the OpenAI Agents SDK, chat-completions model, ``max_turns=10`` (its default);
- ``langgraph``: LangGraph's prebuilt ReAct agent on ``langchain-openai``, ``recursion_limit=25``;
- a scenario with a ``cap`` (``scenarios.CAPS``) sets each client's own limit to that many model
  requests instead (the loops' count, ``max_turns``, ``recursion_limit`` twice it, ``max_steps``,
  pydantic-ai's ``request_limit``);
- ``openai-responses``, ``agents-responses``, ``langgraph-responses``: the same three on the
  Responses API (``responses.create`` with the whole input each turn, as Codex sends it; the
  Agents SDK's default model; ``ChatOpenAI(use_responses_api=True)``);
- ``openai-responses-websocket``: that loop over ``responses.connect()``, each turn only its
  new items and ``previous_response_id`` (:mod:`tests.bench.efficacy.socket_client`);
- ``anthropic``: the anthropic SDK with the same hand-written loop, on ``/v1/messages``;
- ``smolagents``: its ``ToolCallingAgent`` (``max_steps=20``, its default), which answers only
  through its ``final_answer`` tool and sends tool calls and results back as text (no
  structured answers: it skips the schema scenarios). A run that used up its steps (each
  text reply is a parse error to it) counts as given up, though smolagents then answers
  from one last call without tools;
- ``pydantic_ai``: an ``Agent`` on ``OpenAIChatModel``; a structured answer is its
  ``final_result`` tool (``output_type`` a model), else text.

Each returns the agent's final answer (text, or the structured object) or raises, exactly
as the library does; the runner classifies the result. A refusal to a structured request
is handled as each library documents it and returned as a :class:`scenarios.Refusal`. Every client gets the run's
session id in ``X-Session-Id`` (none in the runner's ``--sessions derived``) and keeps its
library's default retries (2).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import openai

from tests.bench.efficacy import scenarios
from tests.bench.efficacy.socket_client import run_openai_responses_socket

ClientRun = Callable[[str, str, str | None, scenarios.Scenario, bool, scenarios.AgentProfile], Awaitable[Any]]


class AgentGaveUp(RuntimeError):
    """The hand-written loop hit its own turn limit."""


def headers(session: str | None, scenario: scenarios.Scenario) -> dict[str, str]:
    """The run's session id (none: the proxy derives the session) and the policy it asks for."""
    sent = {"X-Session-Id": session} if session else {}
    return sent | ({"X-LoopWarden-Policy": scenario.policy} if scenario.policy else {})


async def run_openai(
    base_url: str,
    model: str,
    session: str | None,
    scenario: scenarios.Scenario,
    stream: bool,
    profile: scenarios.AgentProfile,
) -> Any:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-bench", default_headers=headers(session, scenario))
    tools = list(profile.tools)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": profile.instructions},
        {"role": "user", "content": scenarios.TASK},
    ]
    extra: dict[str, Any] = {"response_format": scenarios.RESPONSE_FORMAT} if scenario.schema else {}
    try:
        for _ in range(scenario.cap or 15):
            if stream:
                message = await _streamed(client, model, messages, tools, extra)
            else:
                completion = await client.chat.completions.create(model=model, messages=messages, tools=tools, **extra)
                message = completion.choices[0].message.model_dump(exclude_none=True)
            messages.append(message)
            if message.get("refusal"):  # structured outputs: check for a refusal first (OpenAI's guide)
                return scenarios.Refusal(message["refusal"])
            calls = message.get("tool_calls") or []
            if not calls:
                return message.get("content")
            for call in calls:
                arguments = json.loads(call["function"]["arguments"])  # a bad call raises, as most loops do
                result = scenarios.weather(arguments["city"])
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        raise AgentGaveUp(f"no answer after {scenario.cap or 15} model calls")
    finally:
        await client.close()


async def run_openai_responses(
    base_url: str,
    model: str,
    session: str | None,
    scenario: scenarios.Scenario,
    stream: bool,
    profile: scenarios.AgentProfile,
) -> Any:
    """The hand-written loop on ``responses.create``: the whole input every turn, not stored."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-bench", default_headers=headers(session, scenario))
    tools = [{"type": "function", **spec["function"]} for spec in profile.tools]
    items: list[Any] = [{"role": "user", "content": scenarios.TASK}]
    extra: dict[str, Any] = {}
    if scenario.schema:
        spec = scenarios.RESPONSE_FORMAT["json_schema"]
        extra["text"] = {"format": {"type": "json_schema", **spec}}
    try:
        for _ in range(scenario.cap or 15):
            request = {
                "model": model,
                "instructions": profile.instructions,
                "input": items,
                "tools": tools,
                "store": False,
            }
            if stream:
                final = None
                async with client.responses.stream(**request, **extra) as events:
                    final = await events.get_final_response()
            else:
                final = await client.responses.create(**request, **extra)
            output = [item.model_dump(exclude_none=True) for item in final.output]
            items += output
            refusals = [
                p["refusal"] for i in output if i["type"] == "message" for p in i["content"] if p["type"] == "refusal"
            ]
            if refusals:
                return scenarios.Refusal(refusals[0])
            calls = [item for item in output if item["type"] == "function_call"]
            if not calls:
                return final.output_text
            for call in calls:
                arguments = json.loads(call["arguments"])  # a bad call raises, as most loops do
                items.append(
                    {
                        "type": "function_call_output",
                        "call_id": call["call_id"],
                        "output": scenarios.weather(arguments["city"]),
                    }
                )
        raise AgentGaveUp(f"no answer after {scenario.cap or 15} model calls")
    finally:
        await client.close()


async def _streamed(
    client: openai.AsyncOpenAI,
    model: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    extra: dict[str, Any],
) -> dict[str, Any]:
    """Assemble a streamed reply into an assistant message."""
    content: list[str] = []
    refusal: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    stream = await client.chat.completions.create(model=model, messages=messages, tools=tools, stream=True, **extra)
    async for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        if delta.content:
            content.append(delta.content)
        if delta.refusal:
            refusal.append(delta.refusal)
        for piece in delta.tool_calls or []:
            call = calls.setdefault(
                piece.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
            )
            if piece.id:
                call["id"] = piece.id
            if piece.function and piece.function.name:
                call["function"]["name"] += piece.function.name
            if piece.function and piece.function.arguments:
                call["function"]["arguments"] += piece.function.arguments
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
    if refusal:
        message["refusal"] = "".join(refusal)
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


async def run_agents_sdk(
    base_url: str,
    model: str,
    session: str | None,
    scenario: scenarios.Scenario,
    stream: bool,
    profile: scenarios.AgentProfile,
    *,
    responses: bool = False,
) -> Any:
    from agents import (
        Agent,
        FunctionTool,
        ModelRefusalError,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from pydantic import BaseModel

    set_tracing_disabled(True)

    class Weather(BaseModel):
        paris_c: float
        berlin_c: float

    @function_tool
    def get_weather(city: str) -> str:
        """Current weather for a city: temperature in °C and conditions.

        Args:
            city: The city's English name.
        """
        return scenarios.weather(city)

    client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-bench", default_headers=headers(session, scenario))
    agent: Agent[Any] = Agent(
        name="travel assistant",
        instructions=profile.instructions,
        tools=[
            get_weather,
            *(
                FunctionTool(
                    name=spec["function"]["name"],
                    description=spec["function"]["description"],
                    params_json_schema=spec["function"]["parameters"],
                    on_invoke_tool=_never_called,
                )
                for spec in profile.tools[1:]
            ),
        ],
        model=OpenAIResponsesModel(model=model, openai_client=client)
        if responses
        else OpenAIChatCompletionsModel(model=model, openai_client=client),
        output_type=Weather if scenario.schema else None,
    )
    turns = scenario.cap or 10
    try:
        if stream:
            result = Runner.run_streamed(agent, scenarios.TASK, max_turns=turns)
            async for _ in result.stream_events():
                pass
        else:
            result = await Runner.run(agent, scenarios.TASK, max_turns=turns)  # type: ignore[assignment]
        output = result.final_output
        return output.model_dump() if isinstance(output, BaseModel) else output
    except ModelRefusalError as refused:
        return scenarios.Refusal(refused.refusal)
    finally:
        await client.close()


async def run_langgraph(
    base_url: str,
    model: str,
    session: str | None,
    scenario: scenarios.Scenario,
    stream: bool,
    profile: scenarios.AgentProfile,
    *,
    responses: bool = False,
) -> Any:
    from langchain_core.exceptions import ModelRefusalError
    from langchain_core.tools import StructuredTool, tool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    @tool
    def get_weather(city: str) -> str:
        """Current weather for a city: temperature in °C and conditions.

        Args:
            city: The city's English name.
        """
        return scenarios.weather(city)

    llm = ChatOpenAI(
        model=model,
        base_url=base_url,
        api_key="sk-bench",  # type: ignore[arg-type]
        default_headers=headers(session, scenario),
        streaming=stream,
        stream_usage=True,
        use_responses_api=responses,
    )
    others = [
        StructuredTool.from_function(
            func=_never_called_sync,
            name=spec["function"]["name"],
            description=spec["function"]["description"],
            args_schema=spec["function"]["parameters"],
        )
        for spec in profile.tools[1:]
    ]
    agent = create_react_agent(
        llm,
        [get_weather, *others],
        prompt=profile.instructions,
        response_format=scenarios.SCHEMA | {"title": "weather", "description": "Both temperatures."}
        if scenario.schema
        else None,
    )
    limit = 2 * scenario.cap if scenario.cap else 25  # a model call and a tool run per request
    try:
        state = await agent.ainvoke({"messages": [("user", scenarios.TASK)]}, config={"recursion_limit": limit})
    except ModelRefusalError as refused:
        return scenarios.Refusal(str(refused))
    if scenario.schema:
        return state.get("structured_response")
    last = state["messages"][-1]
    return last.text if responses else last.content  # Responses content comes as blocks


async def run_smolagents(
    base_url: str,
    model: str,
    session: str | None,
    scenario: scenarios.Scenario,
    stream: bool,
    profile: scenarios.AgentProfile,
) -> Any:
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    @tool
    def get_weather(city: str) -> str:
        """Current weather for a city: temperature in °C and conditions.

        Args:
            city: The city's English name.
        """
        return scenarios.weather(city)

    llm = OpenAIServerModel(
        model_id=model,
        api_base=base_url,
        api_key="sk-bench",
        client_kwargs={"default_headers": headers(session, scenario)},
    )
    agent = ToolCallingAgent(
        tools=[get_weather],
        model=llm,
        instructions=profile.instructions,
        stream_outputs=stream,
        verbosity_level=-1,
        max_steps=scenario.cap or 20,
    )
    result = await asyncio.to_thread(agent.run, scenarios.TASK, return_full_result=True)
    if result.state != "success":  # its steps ran out: it answers anyway, from one more call without tools
        raise AgentGaveUp(f"smolagents reached max_steps; its last-resort answer: {str(result.output)[:80]}")
    return result.output


async def run_pydantic_ai(
    base_url: str,
    model: str,
    session: str | None,
    scenario: scenarios.Scenario,
    stream: bool,
    profile: scenarios.AgentProfile,
) -> Any:
    from pydantic import BaseModel
    from pydantic_ai import Agent
    from pydantic_ai.exceptions import ContentFilterError
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.usage import UsageLimits

    class Weather(BaseModel):
        paris_c: float
        berlin_c: float

    client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-bench", default_headers=headers(session, scenario))
    agent: Agent[None, Any] = Agent(
        OpenAIChatModel(model, provider=OpenAIProvider(openai_client=client)),
        output_type=Weather if scenario.schema else str,
        instructions=profile.instructions,
    )

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """Current weather for a city: temperature in °C and conditions.

        Args:
            city: The city's English name.
        """
        return scenarios.weather(city)

    limits = UsageLimits(request_limit=scenario.cap or 50)
    try:
        if stream:
            async with agent.run_stream(scenarios.TASK, usage_limits=limits) as result:
                output = await result.get_output()
        else:
            output = (await agent.run(scenarios.TASK, usage_limits=limits)).output
    except ContentFilterError as refused:
        return scenarios.Refusal(str(refused.body or refused))
    finally:
        await client.close()
    return output.model_dump() if isinstance(output, BaseModel) else output


async def _never_called(context: Any, arguments: str) -> str:
    """The profile's other tools: offered on every call, never called by the scripted models."""
    raise AssertionError("the scripted models only call get_weather")


def _never_called_sync(**arguments: Any) -> str:
    raise AssertionError("the scripted models only call get_weather")


async def run_anthropic(
    base_url: str,
    model: str,
    session: str | None,
    scenario: scenarios.Scenario,
    stream: bool,
    profile: scenarios.AgentProfile,
) -> Any:
    """The anthropic SDK on ``/v1/messages``, with the same hand-written loop as ``openai``: it
    sends every assistant turn back as it came (thinking included), as Messages requires."""
    import anthropic

    from tests.bench.efficacy.messages_api import anthropic_tools

    client = anthropic.AsyncAnthropic(
        base_url=base_url.removesuffix("/v1"), api_key="sk-bench", default_headers=headers(session, scenario)
    )
    extra: dict[str, Any] = {}
    if scenario.schema:
        extra["output_config"] = {"format": {"type": "json_schema", "schema": scenarios.SCHEMA}}
    messages: list[dict[str, Any]] = [{"role": "user", "content": scenarios.TASK}]
    arguments = {"model": model, "max_tokens": 2000, "system": profile.instructions, "tools": anthropic_tools(profile)}
    try:
        for _ in range(scenario.cap or 15):
            if stream:
                async with client.messages.stream(messages=messages, **arguments, **extra) as streaming:
                    reply = await streaming.get_final_message()
            else:
                reply = await client.messages.create(messages=messages, **arguments, **extra)
            blocks = [b.model_dump(exclude_none=True) for b in reply.content]
            messages.append({"role": "assistant", "content": blocks})
            text = "".join(b["text"] for b in blocks if b["type"] == "text")
            if reply.stop_reason == "refusal":  # structured outputs: a refusal is not the object
                return scenarios.Refusal(text or (reply.stop_details and reply.stop_details.explanation) or "")
            calls = [b for b in blocks if b["type"] == "tool_use"]
            if not calls:
                return text or None
            results = [
                {"type": "tool_result", "tool_use_id": c["id"], "content": scenarios.weather(c["input"]["city"])}
                for c in calls  # a call without its city raises, as most loops do
            ]
            messages.append({"role": "user", "content": results})
        raise AgentGaveUp(f"no answer after {scenario.cap or 15} model calls")
    finally:
        await client.close()


async def run_gemini(
    base_url: str,
    model: str,
    session: str | None,
    scenario: scenarios.Scenario,
    stream: bool,
    profile: scenarios.AgentProfile,
) -> Any:
    """The google-genai SDK on ``generateContent``, with the same hand-written loop as ``openai``:
    it sends every model turn back as it came (thought signatures included)."""
    from google import genai
    from google.genai import types

    from tests.bench.efficacy.gemini_api import gemini_tools, path_model

    options = types.HttpOptions(base_url=base_url.removesuffix("/v1"), headers=headers(session, scenario))
    client = genai.Client(api_key="gk-bench", http_options=options)
    config = types.GenerateContentConfig(
        system_instruction=profile.instructions,
        tools=gemini_tools(profile),  # type: ignore[arg-type]
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        **(
            {"response_mime_type": "application/json", "response_json_schema": scenarios.SCHEMA}
            if scenario.schema
            else {}
        ),
    )
    contents: list[Any] = [{"role": "user", "parts": [{"text": scenarios.TASK}]}]
    name = path_model(model)
    for _ in range(scenario.cap or 15):
        if stream:
            pieces = [
                c
                async for c in await client.aio.models.generate_content_stream(
                    model=name, contents=contents, config=config
                )
            ]
        else:
            pieces = [await client.aio.models.generate_content(model=name, contents=contents, config=config)]
        parts = [p for c in pieces for cand in c.candidates or [] if cand.content for p in cand.content.parts or []]
        last = pieces[-1].candidates[0] if pieces[-1].candidates else None
        if last is not None and last.finish_reason == types.FinishReason.OTHER:
            # the proxy's refusal of a JSON answer: its words are the text (the SDK drops finishMessage)
            return scenarios.Refusal("".join(p.text for p in parts if p.text and not p.thought))
        contents.append(types.Content(role="model", parts=parts))
        calls = [p.function_call for p in parts if p.function_call is not None]
        if not calls:
            return "".join(p.text for p in parts if p.text and not p.thought) or None
        results = [
            types.Part.from_function_response(
                name=c.name or "", response={"output": scenarios.weather((c.args or {})["city"])}
            )
            for c in calls  # a call without its city raises, as most loops do
        ]
        for part, call in zip(results, calls, strict=True):
            assert part.function_response is not None
            part.function_response.id = call.id
        contents.append(types.Content(role="user", parts=results))
    raise AgentGaveUp(f"no answer after {scenario.cap or 15} model calls")


CLIENTS: dict[str, ClientRun] = {
    "openai": run_openai,
    "agents": run_agents_sdk,
    "langgraph": run_langgraph,
    "openai-responses": run_openai_responses,
    "agents-responses": partial(run_agents_sdk, responses=True),
    "langgraph-responses": partial(run_langgraph, responses=True),
    "anthropic": run_anthropic,
    "gemini": run_gemini,
    "smolagents": run_smolagents,
    "pydantic_ai": run_pydantic_ai,
    "openai-responses-websocket": run_openai_responses_socket,
}
NO_STRUCTURED_OUTPUT = frozenset({"smolagents"})
"""Clients without a structured answer: the schema scenarios are not theirs to run."""

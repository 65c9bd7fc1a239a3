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
  new items and ``previous_response_id`` (:mod:`tests.bench.efficacy.loops`, where the hand-written loops are);
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
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from tests.bench.efficacy import scenarios
from tests.bench.efficacy.loops import LOOPS, AgentGaveUp, Run, headers, openai_client, run_loop

__all__ = ["CLIENTS", "NO_STRUCTURED_OUTPUT", "AgentGaveUp", "ClientRun", "Run", "headers"]

ClientRun = Callable[[Run], Awaitable[Any]]


def get_weather(city: str) -> str:
    """Current weather for a city: temperature in °C and conditions.

    Args:
        city: The city's English name.
    """
    return scenarios.weather(city)


async def run_agents_sdk(run: Run, *, responses: bool = False) -> Any:
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

    weather_tool = function_tool(get_weather)

    client = openai_client(run.base_url, run.session, run.scenario)
    agent: Agent[Any] = Agent(
        name="travel assistant",
        instructions=run.profile.instructions,
        tools=[
            weather_tool,
            *(
                FunctionTool(
                    name=spec["function"]["name"],
                    description=spec["function"]["description"],
                    params_json_schema=spec["function"]["parameters"],
                    on_invoke_tool=_never_called,
                )
                for spec in run.profile.tools[1:]
            ),
        ],
        model=OpenAIResponsesModel(model=run.model, openai_client=client)
        if responses
        else OpenAIChatCompletionsModel(model=run.model, openai_client=client),
        output_type=Weather if run.scenario.schema else None,
    )
    turns = run.scenario.cap or 10
    try:
        if run.stream:
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


async def run_langgraph(run: Run, *, responses: bool = False) -> Any:
    from langchain_core.exceptions import ModelRefusalError
    from langchain_core.tools import StructuredTool, tool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    weather_tool = tool(get_weather)

    llm = ChatOpenAI(
        model=run.model,
        base_url=run.base_url,
        api_key="sk-bench",  # type: ignore[arg-type]
        default_headers=headers(run.session, run.scenario),
        streaming=run.stream,
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
        for spec in run.profile.tools[1:]
    ]
    agent = create_react_agent(
        llm,
        [weather_tool, *others],
        prompt=run.profile.instructions,
        response_format=scenarios.SCHEMA | {"title": "weather", "description": "Both temperatures."}
        if run.scenario.schema
        else None,
    )
    limit = 2 * run.scenario.cap if run.scenario.cap else 25  # a model call and a tool run per request
    try:
        state = await agent.ainvoke({"messages": [("user", scenarios.TASK)]}, config={"recursion_limit": limit})
    except ModelRefusalError as refused:
        return scenarios.Refusal(str(refused))
    if run.scenario.schema:
        return state.get("structured_response")
    last = state["messages"][-1]
    return last.text if responses else last.content  # Responses content comes as blocks


async def run_smolagents(run: Run) -> Any:
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    weather_tool = tool(get_weather)

    llm = OpenAIServerModel(
        model_id=run.model,
        api_base=run.base_url,
        api_key="sk-bench",
        client_kwargs={"default_headers": headers(run.session, run.scenario)},
    )
    agent = ToolCallingAgent(
        tools=[weather_tool],
        model=llm,
        instructions=run.profile.instructions,
        stream_outputs=run.stream,
        verbosity_level=-1,
        max_steps=run.scenario.cap or 20,
    )
    result = await asyncio.to_thread(agent.run, scenarios.TASK, return_full_result=True)
    if result.state != "success":  # its steps ran out: it answers anyway, from one more call without tools
        raise AgentGaveUp(f"smolagents reached max_steps; its last-resort answer: {str(result.output)[:80]}")
    return result.output


async def run_pydantic_ai(run: Run) -> Any:
    from pydantic import BaseModel
    from pydantic_ai import Agent
    from pydantic_ai.exceptions import ContentFilterError
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.usage import UsageLimits

    class Weather(BaseModel):
        paris_c: float
        berlin_c: float

    client = openai_client(run.base_url, run.session, run.scenario)
    agent: Agent[None, Any] = Agent(
        OpenAIChatModel(run.model, provider=OpenAIProvider(openai_client=client)),
        output_type=Weather if run.scenario.schema else str,
        instructions=run.profile.instructions,
    )

    agent.tool_plain(get_weather)

    limits = UsageLimits(request_limit=run.scenario.cap or 50)
    try:
        if run.stream:
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


CLIENTS: dict[str, ClientRun] = {
    "openai": partial(run_loop, LOOPS["openai"]),
    "agents": run_agents_sdk,
    "langgraph": run_langgraph,
    "openai-responses": partial(run_loop, LOOPS["openai-responses"]),
    "agents-responses": partial(run_agents_sdk, responses=True),
    "langgraph-responses": partial(run_langgraph, responses=True),
    "anthropic": partial(run_loop, LOOPS["anthropic"]),
    "gemini": partial(run_loop, LOOPS["gemini"]),
    "smolagents": run_smolagents,
    "pydantic_ai": run_pydantic_ai,
    "openai-responses-websocket": partial(run_loop, LOOPS["openai-responses-websocket"]),
}
NO_STRUCTURED_OUTPUT = frozenset({"smolagents"})
"""Clients without a structured answer: the schema scenarios are not theirs to run."""

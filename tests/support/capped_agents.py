"""Real agent frameworks at the low end of their own caps, and a model that loops for them.

Each driver runs one agent through the proxy with one framework, streamed or not, and returns
what the framework hands its caller (or raises what it raises: ``MaxTurnsExceeded``,
``GraphRecursionError``, :class:`StepsRanOut`). The tools are plain functions written once
(typed, with a Google-style docstring) and wrapped by each framework's own decorator.

:class:`LoopingModel` is the other side: the fake upstream's ``model``, answering each agent
call from the number of tool results it carries, so the proxy's extra calls (a warned call
asked again, a nudge) get the same misbehaviour and its ending call gets the summary.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import openai

from tests.support.agents_sdk import final_output
from tests.support.turns import Call, Turn

Tool = Callable[..., str]
SUMMARY = "Found: nothing usable. Missing: the answer. Next step: ask a person."
TASK = "How many people live in Lyon?"


class StepsRanOut(RuntimeError):
    """smolagents used up ``max_steps`` (it then answers from one more call without tools)."""


def tool_results(payload: dict[str, Any]) -> int:
    """Tool results in a chat request: ``tool`` turns, or smolagents' ``Observation:`` user turns."""
    count = 0
    for message in payload.get("messages") or []:
        content = message.get("content")
        text = content if isinstance(content, str) else " ".join(p.get("text", "") for p in content or [])
        if message.get("role") == "tool" or (message.get("role") == "user" and text.startswith("Observation:")):
            count += 1
    return count


def is_ending_call(payload: dict[str, Any]) -> bool:
    """The proxy's last call of a run: tools offered but forbidden (``tool_choice: "none"``)."""
    return payload.get("tool_choice") == "none"


@dataclass
class LoopingModel:
    """Calls ``calls(n)`` for a request carrying n tool results; the summary when the proxy ends the run."""

    calls: Callable[[int], Call]
    replies: int = field(default=0, init=False)
    """Calls made so far: each gets its own id, as a real model's."""

    def __call__(self, payload: Any) -> Turn:
        if is_ending_call(payload):
            return Turn(SUMMARY)
        if not payload.get("tools"):
            return Turn("I give up.")  # a framework's own last-resort call after its cap
        call = self.calls(tool_results(payload))
        self.replies += 1
        return Turn(None, (Call(call.name, call.arguments, f"call_{self.replies}"),))


def openai_loop(base_url: str, session: str, tools: list[Tool], *, cap: int, stream: bool) -> str:
    """The openai SDK with a hand-written loop of at most ``cap`` model calls."""
    client = openai.OpenAI(base_url=base_url, api_key="sk-p", max_retries=0)
    by_name = {t.__name__: t for t in tools}
    specs = [_spec(t) for t in tools]
    messages: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    for _ in range(cap):
        message = _streamed(client, messages, specs, session) if stream else _plain(client, messages, specs, session)
        messages.append(message)
        if not message.get("tool_calls"):
            return str(message.get("content") or "")
        for call in message["tool_calls"]:
            result = by_name[call["function"]["name"]](**json.loads(call["function"]["arguments"]))
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    raise StepsRanOut(f"no answer after {cap} model calls")


def _spec(tool: Tool) -> dict[str, Any]:
    names = [n for n in tool.__annotations__ if n != "return"]
    properties = {n: {"type": "string"} for n in names}
    parameters = {"type": "object", "properties": properties, "required": names}
    return {"type": "function", "function": {"name": tool.__name__, "parameters": parameters}}


def _plain(client: openai.OpenAI, messages: list[Any], specs: list[Any], session: str) -> dict[str, Any]:
    completion = client.chat.completions.create(
        model="m", messages=messages, tools=specs, extra_headers={"X-Session-Id": session}
    )
    return completion.choices[0].message.model_dump(exclude_none=True)


def _streamed(client: openai.OpenAI, messages: list[Any], specs: list[Any], session: str) -> dict[str, Any]:
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    chunks = client.chat.completions.create(
        model="m", messages=messages, tools=specs, stream=True, extra_headers={"X-Session-Id": session}
    )
    for chunk in chunks:
        delta = chunk.choices[0].delta if chunk.choices else None
        if delta is None:
            continue
        text.append(delta.content or "")
        for piece in delta.tool_calls or []:
            call = calls.setdefault(
                piece.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
            )
            call["id"] = piece.id or call["id"]
            if piece.function is not None:
                call["function"]["name"] += piece.function.name or ""
                call["function"]["arguments"] += piece.function.arguments or ""
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


def agents_sdk(base_url: str, session: str, tools: list[Tool], *, max_turns: int, stream: bool) -> Any:
    """The OpenAI Agents SDK on Chat Completions, ``Runner.run`` or ``Runner.run_streamed``."""
    from agents import Agent, OpenAIChatCompletionsModel, function_tool, set_tracing_disabled

    set_tracing_disabled(True)

    async def run() -> Any:
        client = openai.AsyncOpenAI(
            base_url=base_url, api_key="sk-p", max_retries=0, default_headers={"X-Session-Id": session}
        )
        agent: Agent[None] = Agent(
            name="research",
            model=OpenAIChatCompletionsModel(model="m", openai_client=client),
            tools=[function_tool(t) for t in tools],
        )
        return await final_output(agent, TASK, stream=stream, client=client, max_turns=max_turns)

    return asyncio.run(run())


def langgraph(base_url: str, session: str, tools: list[Tool], *, model_calls: int, stream: bool) -> str:
    """LangGraph's ``create_react_agent`` whose ``recursion_limit`` allows ``model_calls`` model calls."""
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    llm = ChatOpenAI(
        model="m",
        base_url=base_url,
        api_key="sk-p",  # type: ignore[arg-type]
        max_retries=0,
        default_headers={"X-Session-Id": session},
        streaming=stream,
    )
    agent = create_react_agent(llm, [tool(t) for t in tools])
    limit = 2 * model_calls  # a model call and a tool run per step
    state = agent.invoke({"messages": [("user", TASK)]}, config={"recursion_limit": limit})
    return str(state["messages"][-1].content)


def smolagents(base_url: str, session: str, tools: list[Tool], *, max_steps: int, stream: bool) -> Any:
    """smolagents' ``ToolCallingAgent``; raises :class:`StepsRanOut` when its steps ran out."""
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    model = OpenAIServerModel(
        model_id="m",
        api_base=base_url,
        api_key="sk-p",
        client_kwargs={"max_retries": 0, "default_headers": {"X-Session-Id": session}},
    )
    agent = ToolCallingAgent(
        tools=[tool(t) for t in tools], model=model, max_steps=max_steps, verbosity_level=-1, stream_outputs=stream
    )
    result = agent.run(TASK, return_full_result=True)
    if result.state != "success":
        raise StepsRanOut(f"smolagents reached max_steps={max_steps}")
    return result.output


def run_capped(client: str, cap: int, base_url: str, session: str, tools: list[Tool], *, stream: bool) -> Any:
    """Run ``client`` (``openai``, ``agents``, ``langgraph``, ``smolagents``), its own cap at ``cap`` model calls."""
    if client == "openai":
        return openai_loop(base_url, session, tools, cap=cap, stream=stream)
    if client == "agents":
        return agents_sdk(base_url, session, tools, max_turns=cap, stream=stream)
    if client == "langgraph":
        return langgraph(base_url, session, tools, model_calls=cap, stream=stream)
    if client == "smolagents":
        return smolagents(base_url, session, tools, max_steps=cap, stream=stream)
    raise ValueError(f"no driver for {client}")

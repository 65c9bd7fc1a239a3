"""Running an OpenAI Agents SDK agent the two ways applications do, for the tests that drive it."""

from __future__ import annotations

from typing import Any


async def final_output(agent: Any, task: str, *, stream: bool, client: Any, max_turns: int | None = None) -> Any:
    """The agent's answer to ``task``: ``Runner.run``, or ``Runner.run_streamed`` read to its end;
    ``client`` (the agent's openai client) is closed after, whatever happened."""
    from agents import Runner

    turns = {} if max_turns is None else {"max_turns": max_turns}
    try:
        if not stream:
            return (await Runner.run(agent, task, **turns)).final_output
        result = Runner.run_streamed(agent, task, **turns)
        async for _ in result.stream_events():
            pass
        return result.final_output
    finally:
        await client.close()

"""Tool-argument contract: every tool call must name an offered tool and carry arguments
that parse as JSON, give each key once, and satisfy that tool's ``parameters`` schema.

A bad call never reaches the agent while retries remain: the model gets its own call back
with one tool result per call listing the exact, path-level errors (``$.city: 'city' is a
required property``) and calls again. After ``max_retries`` the reply passes through,
flagged ``tool_args_invalid`` in headers and metrics. (Without this, LangGraph ends
silently with an empty answer and smolagents runs the tool with the raw string.)

A key given twice is invalid, not "the last one wins": the permission check and the agent's
executor could each read another value. Schemas come compiled from the edge; checking
against one with patterns, or long arguments, runs in a worker thread under the bounds of
:mod:`proxy.schemas.compiled`, so a catastrophic pattern costs the model a retry, not the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping

from proxy.exchange import Channel, PartialReply, Reply, ReturnCalls, ToolCall
from proxy.guards.base import GuardContext
from proxy.schemas.compiled import CompiledSchema
from proxy.verdict import PASS, Finalize, Nudge, Pass, ReplyVerdict

__all__ = ["ToolArgsGuard", "argument_errors"]

_NOT_RUN = "Not executed: another call in this reply had invalid arguments. Send all the calls again."


def argument_errors(tool_call: ToolCall, offered: Mapping[str, CompiledSchema | None]) -> list[str]:
    """Everything wrong with one call, one line each; empty when the call is fine. A custom
    tool's input is free text under the provider's own grammar: nothing to check."""
    if tool_call.kind != "function":
        return []
    if tool_call.name not in offered:
        names = ", ".join(sorted(offered)) or "none"
        return [f"tool {tool_call.name!r} does not exist (available: {names})"]
    arguments, problem = tool_call.parsed_arguments()
    if problem is not None:
        return [problem]
    schema = offered[tool_call.name]
    return schema.errors(arguments) if schema is not None else []


def _slow(reply: Reply, offered: Mapping[str, CompiledSchema | None]) -> bool:
    """Checking these calls may take a while (a schema with patterns, long arguments)."""
    for tool_call in reply.tool_calls:
        schema = offered.get(tool_call.name)
        if schema is not None and schema.off_loop(len(tool_call.arguments)):
            return True
    return False


class ToolArgsGuard:
    def holds(self, partial: PartialReply, context: GuardContext) -> int:
        """Arguments are validated once complete: tool calls wait for the whole reply."""
        return Channel.TOOL_CALLS if context.policy.tool_args.enabled else Channel.NONE

    def check_reply(self, reply: Reply, context: GuardContext) -> ReplyVerdict | Awaitable[ReplyVerdict]:
        """Quick checks run here; slow ones (see :meth:`CompiledSchema.off_loop`) in a worker thread."""
        if not context.policy.tool_args.enabled or not reply.tool_calls:
            return PASS
        offered = context.tool_schemas()
        if _slow(reply, offered):
            return asyncio.to_thread(self._decide, reply, context, offered)
        return self._decide(reply, context, offered)

    def _decide(
        self, reply: Reply, context: GuardContext, offered: Mapping[str, CompiledSchema | None]
    ) -> ReplyVerdict:
        settings = context.policy.tool_args
        problems = {tool_call.id: argument_errors(tool_call, offered) for tool_call in reply.tool_calls}
        if not any(problems.values()):
            return PASS
        if context.retries.get("tool_args_retry", 0) >= settings.max_retries:
            if settings.after_max_retries == "pass":
                return Pass(flags=("tool_args_invalid",))
            first = next(tool_call for tool_call in reply.tool_calls if problems[tool_call.id])
            detail = f"the model kept calling {first.name} with invalid arguments: {problems[first.id][0]}"
            evidence = f"the model kept calling {first.name} with arguments its schema rejects"
            return Finalize("invalid_tool_args", detail, evidence=evidence)
        results = {
            call_id: context.policy.nudges.tool_args.format(errors="\n".join(errors)) if errors else _NOT_RUN
            for call_id, errors in problems.items()
        }
        count = sum(len(p) for p in problems.values())
        return Nudge(
            kind="tool_args_retry",
            reason=f"{count} argument error(s) in {sum(1 for p in problems.values() if p)} call(s)",
            turns=(ReturnCalls(reply, results),),
        )

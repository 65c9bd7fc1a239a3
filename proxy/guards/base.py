"""The guard contract: read the exchange and the session, return a verdict, touch nothing.

A guard never calls upstream, never mutates the request or the state, and never raises
to signal a decision. Request guards run before the upstream call; response guards run on
each reply, in order, and the first verdict that is not a Pass wins. While a reply streams,
a response guard also says which channels it may still object to (:meth:`ResponseGuard.holds`,
used by :mod:`proxy.streaming.holdback`).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.exchange import Channel, Conversation, PartialReply, Reply, fast_frozen
from proxy.judge.client import JudgeTarget
from proxy.policy.models import Policy
from proxy.schemas.compiled import CompiledSchema, compiled
from proxy.session.base import SessionState
from proxy.verdict import ReplyVerdict, RequestVerdict

__all__ = ["GuardContext", "RequestGuard", "ResponseGuard", "guard_name"]


@fast_frozen  # built for every guard pass of every request
@dataclass(frozen=True, slots=True)
class GuardContext:
    policy: Policy
    state: SessionState
    """The session as it stands, including this request's own attempts so far."""
    conversation: Conversation
    retries: Mapping[str, int] = field(default_factory=dict)
    """Nudges of each kind already sent upstream for this request (bounds per-request retries)."""
    now: float = 0.0
    """Wall-clock seconds (the pipeline's injectable clock), for time budgets."""
    judge_target: JudgeTarget | None = None
    """Where a judge call for this request goes (None: no judge available)."""
    body_size: int = 0
    """Bytes of the request as the client sent it: what budgets estimate its prompt from."""

    def tool_schemas(self) -> dict[str, CompiledSchema | None]:
        """Offered tool name → its compiled ``parameters`` (None: nothing to check against)."""
        prepared = self.conversation.tool_schemas
        if prepared is not None:  # compiled at the edge (one pass: the last of a name wins, as there)
            tools = self.conversation.tools
            return {
                tool.name: prepared.get(tool.name) if tool.parameters else None
                for tool in tools
                if tool.kind == "function"
            }
        schemas: dict[str, CompiledSchema | None] = {}
        for name, parameters in self.conversation.tool_parameters().items():
            schemas[name] = compiled(parameters) if parameters else None
        return schemas

    def answer_schema(self, reply: Reply) -> CompiledSchema | None:
        """The compiled JSON Schema a final text answer must satisfy (the request's, else the
        policy's; any JSON in JSON mode); None when none applies or ``reply`` is no final text answer."""
        if reply.tool_calls or not reply.has_text or reply.content is None:
            return None
        requested = self.conversation.output_schema
        if requested is not None:
            return self.conversation.answer_schema or compiled(requested)
        schema = self.policy.output_contract.schema_
        if schema is None and self.conversation.json_answer:
            schema = _ANY_JSON
        return compiled(schema) if schema is not None else None


_ANY_JSON: dict[str, Any] = {}
"""The schema of a JSON answer asked for without one (JSON mode): any JSON value."""


class RequestGuard(Protocol):
    def check_request(self, context: GuardContext) -> RequestVerdict: ...


class ResponseGuard(Protocol):
    def check_reply(self, reply: Reply, context: GuardContext) -> ReplyVerdict | Awaitable[ReplyVerdict]:
        """A verdict, or (for guards with an injected client, like the judge) an awaitable one."""
        ...

    def holds(self, partial: PartialReply, context: GuardContext) -> int:
        """The streaming half of the contract: the channels (:class:`~proxy.exchange.Channel`)
        this guard may still object to, given what of the reply has arrived so far; a channel
        no guard holds flows to the client, and never stops again. By default every channel,
        until the reply is complete: a guard that subclasses this protocol and says nothing
        is correct on streams, and fast once it says what it needs."""
        return Channel.ALL


def guard_name(guard: RequestGuard | ResponseGuard) -> str:
    """How metrics, the timeline and the console name a guard: its ``name`` if it has one,
    else its class's name in snake case without ``Guard`` (``ToolLoopGuard`` → ``tool_loop``)."""
    named = getattr(guard, "name", None)
    if isinstance(named, str) and named:
        return named
    words = re.findall(r"[A-Z][a-z0-9]*", type(guard).__name__.removesuffix("Guard"))
    return "_".join(word.lower() for word in words) or type(guard).__name__.lower()

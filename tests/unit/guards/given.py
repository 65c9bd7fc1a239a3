"""What a guard test gives a guard: neutral replies, conversations and sessions (no wire format)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.exchange import Conversation, Message, Reply, Tool, ToolCall, Usage
from proxy.guards.base import GuardContext
from proxy.judge.client import JudgeTarget
from proxy.policy.models import Policy
from proxy.session.base import FIELDS, SessionState

TASK = Message("user", "Do the task.")


def reply(
    content: str | None = None,
    *calls: ToolCall,
    reasoning: str | None = None,
    finish: str | None = None,
    refusal: str | None = None,
) -> Reply:
    """The model's reply: text, tool calls, reasoning (``finish`` defaults as a provider's would)."""
    finish = finish or ("tool_calls" if calls else "stop")
    return Reply(content, reasoning, calls, finish, Usage(), refusal=refusal)


def session(strikes: Mapping[str, int] | None = None, **values: object) -> SessionState:
    """A session's stored state: strikes by kind, and any other field by name."""
    fields = {FIELDS.STRIKE_PREFIX + kind: str(count) for kind, count in (strikes or {}).items()}
    fields.update({name: str(value) for name, value in values.items()})
    return SessionState(fields)


def conversation(*messages: Message, tools: Sequence[Tool] = (), **extra: Any) -> Conversation:
    """The messages (the bare task when none), the offered tools, any other field of a conversation."""
    return Conversation(messages=messages or (TASK,), tools=tools, **extra)


def called(*results: str, name: str = "poll", arguments: str = "{}") -> tuple[Message, ...]:
    """The task, then one assistant call of ``name`` and its tool result per result, in order."""
    messages = [TASK]
    for n, result in enumerate(results):
        messages.append(Message("assistant", tool_calls=(ToolCall(f"c{n}", name, arguments),)))
        messages.append(Message("tool", result, call_id=f"c{n}"))
    return tuple(messages)


def context(
    policy: Policy | None = None,
    state: SessionState | None = None,
    talk: Conversation | None = None,
    *,
    retries: Mapping[str, int] | None = None,
    now: float = 0.0,
    judge: JudgeTarget | None = None,
    body_size: int = 0,
) -> GuardContext:
    """What a guard reads, defaulting to the default policy, a new session and the bare task."""
    return GuardContext(
        policy or Policy(), state or SessionState(), talk or conversation(), retries or {}, now, judge, body_size
    )

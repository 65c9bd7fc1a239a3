"""What a person asked, told apart from what a client wraps around it.

Agents put their own context into user turns: Codex sends its environment (working
directory, shell, date) and AGENTS.md as user turns before the real request, Claude Code
wraps context in ``<system-reminder>`` blocks. Runs (a new instruction starts one) and the
judges (the task they check a reply against) both need the person's words alone.
"""

from __future__ import annotations

import re

from proxy.exchange import Conversation, Message
from proxy.session.base import FIELDS, SessionState

__all__ = ["human_instructions", "human_turns", "instruction_text", "task_of"]

_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)
_WRAPPERS = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions")
_ONLY_CONTINUES = re.compile(
    r"(?:please\s+)?(?:continue|go on|go ahead|keep going|carry on|proceed|resume|try again|retry|do it|"
    r"yes|yep|ok|okay|sure|next)\b(?:\s+please)?[\s.!]*",
    re.IGNORECASE,
)
"""A latest instruction that only says to go on: the task is still the one it continues."""


def instruction_text(message: Message) -> str:
    """A user turn's words as a person's instruction: empty for a client's context wrapper."""
    text = _REMINDER.sub("", message.text or "").strip()
    return "" if text.startswith(_WRAPPERS) else text


def human_turns(conversation: Conversation) -> list[Message]:
    """User turns that are not tool results (``Observation:`` turns are)."""
    results = {id(message) for message in conversation.tool_results()}
    return [message for message in conversation.messages if message.role == "user" and id(message) not in results]


def human_instructions(conversation: Conversation) -> list[str]:
    """The person's instructions, in order: user turns that are neither tool results nor a
    client's context wrapper."""
    return [text for message in human_turns(conversation) if (text := instruction_text(message))]


def task_of(conversation: Conversation, state: SessionState | None = None) -> str:
    """The task a reply is judged against: the latest instruction, after the first one when
    the latest only says to go on; for a request that carries none (a stored chain's new
    items) the task its run began with, or ""."""
    said = human_instructions(conversation)
    if not said:
        return (state.values.get(FIELDS.TASK) if state is not None else None) or ""
    latest = said[-1]
    if len(said) > 1 and _ONLY_CONTINUES.fullmatch(latest):
        return f"{said[0]}\n\n{latest}"
    return latest

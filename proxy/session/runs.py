"""Runs within a session: when one starts, and what starts over with it.

A session holds runs. Loop, cycle, strike, judge and progress evidence belong to the run;
budgets (steps, tokens, cost, active time) to the session. A new run starts after an ending
when the request adds a new human instruction (a user turn that is neither tool results nor a
client's context wrapper: Codex's ``<environment_context>``, Claude Code's
``<system-reminder>`` blocks), and, while a run goes on, with a fresh conversation (a new
opening offering tools) under the session's id. A request that only resends the ended
conversation, or adds tool results to it, is the same run (and gets its ending).
"""

from __future__ import annotations

import hashlib

from proxy.exchange import Conversation
from proxy.session.base import FIELDS, SessionDelta, SessionState
from proxy.session.instructions import human_instructions, human_turns, instruction_text

__all__ = [
    "RUN_FIELDS",
    "RUN_PREFIXES",
    "instruction_mark",
    "run_number",
    "run_reset",
    "starts_new_run",
    "without_run",
]

RUN_PREFIXES = (FIELDS.STRIKE_PREFIX, FIELDS.CALL_COUNT_PREFIX, FIELDS.NEAR_COUNT_PREFIX)
RUN_FIELDS = (
    FIELDS.CALL_SEQUENCE,
    FIELDS.RESULT_SEQUENCE,
    FIELDS.TASK,
    FIELDS.TERMINATION,
    FIELDS.ENDING,
    FIELDS.ENDING_WIRE,
    FIELDS.ENDING_CLAIM,
    FIELDS.RUN_SAID,
)
"""What starts over with a run (the run's evidence and its ending); budgets carry on."""


def instruction_mark(conversation: Conversation) -> str:
    """How many turns and human instructions the conversation holds and a digest of the last
    instruction: what an ending remembers, so that a resend of the ended conversation is told
    apart from one adding an instruction, or from a fresh one asking the same again."""
    said = human_instructions(conversation)
    last = hashlib.sha256(said[-1].encode("utf-8", "surrogatepass")).hexdigest()[:16] if said else ""
    return f"{len(conversation.messages)}:{len(said)}:{last}"


def _ends_with_instruction(conversation: Conversation) -> bool:
    """The request's last turn (system turns aside) is a person's instruction, not tool results."""
    for message in reversed(conversation.messages):
        if message.role in ("system", "developer") or (message.role == "user" and not instruction_text(message)):
            continue
        return message.role == "user" and any(turn is message for turn in human_turns(conversation))
    return False


def starts_new_run(state: SessionState, conversation: Conversation, derived: bool) -> bool:
    """The request starts a new run of the session ``state`` shows (never the first run)."""
    if state.is_new:
        return False
    if state.termination:
        marked = state.values.get(FIELDS.RUN_SAID)
        return _ends_with_instruction(conversation) and instruction_mark(conversation) != marked
    if derived:  # a fresh conversation names a session of its own already
        return False
    fresh = not conversation.continues and bool(conversation.tools)  # a client's side call offers none
    return fresh and state.steps > 0


def without_run(state: SessionState) -> SessionState:
    """The session with its run's evidence gone: what a new run's guards see."""
    kept = {name: value for name, value in state.values.items() if not _run_scoped(name)}
    return SessionState(kept)


def run_reset(state: SessionState, now_ms: int, **why: str | int | bool) -> SessionDelta:
    """The commit that starts a new run: its evidence removed (an empty assignment removes a
    field), its number and start recorded, a ``run_started`` timeline entry."""
    delta = SessionDelta()
    for name in state.values:
        if _run_scoped(name):
            delta.assign(name, "")
    number = run_number(state) + 1
    delta.assign(FIELDS.RUN, number)
    delta.assign(FIELDS.RUN_STARTED_MS, now_ms)
    delta.event("run_started", now_ms, run=number, **why)
    return delta


def run_number(state: SessionState) -> int:
    """The session's current run (1: its first)."""
    return max(state.counter(FIELDS.RUN), 1)


def _run_scoped(name: str) -> bool:
    return name in RUN_FIELDS or name.startswith(RUN_PREFIXES)

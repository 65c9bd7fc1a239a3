"""What a guard decides. Guards return one of these; only the pipeline acts on them.

- :class:`Pass`: the reply may go to the agent, with the bookkeeping to do if it does
  (clear strikes, since strikes count *consecutive* misbehaviour; flag what passed
  despite a problem);
- :class:`Amend`: (request side) append notes to tool results on their way upstream;
- :class:`Nudge`: send the reply back to the model with these turns appended;
- :class:`Rewrite`: (reply side) replace the reply the agent receives;
- :class:`Finalize`: end the session gracefully, for this reason.

Each side has its own union (:data:`RequestVerdict`, :data:`ReplyVerdict`), so a guard that
returns a verdict its side cannot act on (a request-side Rewrite, a reply-side Amend) is a
type error, not a verdict silently ignored or a failure at run time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar

from proxy.exchange import Reply, Turn, Usage

__all__ = [
    "PASS",
    "Amend",
    "Finalize",
    "JudgeCall",
    "Nudge",
    "Observation",
    "Pass",
    "PermissionCheck",
    "ReplyVerdict",
    "RequestVerdict",
    "Rewrite",
    "Verdict",
    "decided_by",
    "verdict_name",
    "verdict_reason",
]


@dataclass(frozen=True, slots=True)
class PermissionCheck:
    """A tool call a permission rule decided (any decision but the default's allow)."""

    rule: str
    action: str


@dataclass(frozen=True, slots=True)
class JudgeCall:
    """What the judge did to reach a verdict: ``done``, ``not_done``, ``remembered``,
    ``skipped`` or ``error``; ``latency`` when it asked its model (not from memory)."""

    verdict: str
    latency: float | None = None
    error: str | None = None


Observation = PermissionCheck | JudgeCall
"""What a guard saw on its way to a verdict, for the step log to count: guards write no metrics."""


@dataclass(frozen=True, slots=True)
class Pass:
    clear_strikes: tuple[str, ...] = ()
    spent: Usage | None = None
    """Tokens the guard itself used to decide (the judge's), charged to the session apart."""
    flags: tuple[str, ...] = ()
    """What passed despite a problem (headers and metrics), e.g. ``tool_args_invalid``."""
    seen: tuple[Observation, ...] = ()


@dataclass(frozen=True, slots=True)
class Amend:
    kind: str
    reason: str
    tool_notes: Mapping[str, str]
    """Tool call id → text appended to that tool result before it goes upstream."""
    drop_tools: tuple[str, ...] = ()
    """Tools removed from the request's ``tools`` before it goes upstream."""
    guard: str = field(default="", compare=False)
    """The guard that decided (``tool_loop``, ``budget``, ``goal``, …): set by the pipeline,
    which knows who returned the verdict, for the metrics, the timeline and the console."""


@dataclass(frozen=True, slots=True)
class Nudge:
    kind: str
    """Intervention kind for headers, metrics and logs (e.g. ``empty_nudge``)."""
    reason: str
    turns: tuple[Turn, ...]
    """What the model is told: neutral turns the request's wire format renders."""
    strike: str | None = None
    """The strike counter this nudge adds one to, if any."""
    spent: Usage | None = None
    exhausted: str = "max_attempts"
    """The session's ending when this nudge is due but the request has no attempt left: the
    strike's own name for a guard whose strikes name the ending (``empty_response``)."""
    seen: tuple[Observation, ...] = ()
    guard: str = field(default="", compare=False)
    """The guard that decided (``tool_loop``, ``budget``, ``goal``, …): set by the pipeline,
    which knows who returned the verdict, for the metrics, the timeline and the console."""


@dataclass(frozen=True, slots=True)
class Rewrite:
    kind: str
    reason: str
    reply: Reply
    """What the agent receives instead: a neutral reply its request's wire format renders."""
    guard: str = field(default="", compare=False)
    """The guard that decided (``tool_loop``, ``budget``, ``goal``, …): set by the pipeline,
    which knows who returned the verdict, for the metrics, the timeline and the console."""


@dataclass(frozen=True, slots=True)
class Finalize:
    reason: str
    """Termination reason (``empty_response``, ``budget_steps``, …): header, metric, log."""
    detail: str
    """One sentence for the summary: why the session is ending."""
    strike: str | None = None
    spent: Usage | None = None
    """Tokens the guard spent deciding (the judge), charged like a Pass's."""
    cause: str | None = None
    """What lies behind the reason, in one word for logs (a judge error's cause: ``missing_nonce``)."""
    seen: tuple[Observation, ...] = ()
    evidence: str = field(default="", compare=False)
    """The evidence in one line for the person reading the ending's notice: tool names and
    counts only, never message contents (arguments, results, a judge's words)."""
    guard: str = field(default="", compare=False)
    """The guard that decided (``tool_loop``, ``budget``, ``goal``, …): set by the pipeline,
    which knows who returned the verdict, for the metrics, the timeline and the console."""


RequestVerdict = Pass | Amend | Nudge | Finalize
"""What a request guard may decide, before the upstream call."""
ReplyVerdict = Pass | Nudge | Rewrite | Finalize
"""What a response guard may decide about a reply."""
Verdict = Pass | Amend | Nudge | Rewrite | Finalize
"""Any decision, as logs and records name it."""
PASS = Pass()


def verdict_name(verdict: Verdict | None) -> str:
    """How logs, records and replays name a decision: ``pass``, a nudge, amend or rewrite kind,
    or ``finalize_<reason>`` (None: no guard objected)."""
    if isinstance(verdict, Finalize):
        return "finalize_" + verdict.reason
    return verdict.kind if isinstance(verdict, Nudge | Rewrite | Amend) else "pass"


def verdict_reason(verdict: Verdict | None) -> str:
    """The decision's reason in words (empty for a pass)."""
    if isinstance(verdict, Finalize):
        return verdict.detail
    return verdict.reason if isinstance(verdict, Nudge | Rewrite | Amend) else ""


_Decided = TypeVar("_Decided", bound=Verdict)


def decided_by(verdict: _Decided, guard: str) -> _Decided:
    """``verdict`` with the guard that returned it named (a Pass names none; a verdict that
    already names its guard keeps it, e.g. a nudge goal mode passed on)."""
    if isinstance(verdict, Pass) or verdict.guard:
        return verdict
    return replace(verdict, guard=guard)

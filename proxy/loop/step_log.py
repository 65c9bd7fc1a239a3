"""What the guard loop tells the outside: a log line per upstream step, and for every decision
a metric sample, a log line and a trace event; steps also go to the recorder (when a policy
records). Never what was said, unless ``--log-contents`` asks for it (keys redacted).

Every step, decision, judge call and upstream retry is also an event of the session's timeline
(:class:`~proxy.session.base.TimelineEvent`, into the request's delta, so the commit stores it):
built here, once, from what the log line already holds. The reply's text goes in only where
the operator asked for contents (``--log-contents``, or a policy that records).
"""

from __future__ import annotations

import functools
import logging
import time

from prometheus_client import Counter

from proxy.books.budgets import remaining
from proxy.exchange import Reply
from proxy.guards.fingerprint import fingerprint
from proxy.loop.recording import Step, StepRecorder
from proxy.observe.logs import logger, redact
from proxy.observe.metrics import Metrics
from proxy.observe.tracing import Tracing
from proxy.request import AgentRequest, RequestNotes
from proxy.session.base import SessionDelta, SessionState
from proxy.verdict import Amend, JudgeCall, Nudge, PermissionCheck, Rewrite, Verdict, verdict_name, verdict_reason

__all__ = ["CONTENT_CHARS", "StepLog", "chat_attributes", "response_headers", "usage_attributes"]

CONTENT_CHARS = 2_000
"""The most of a reply's text a timeline event keeps (where contents are kept at all)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


class StepLog:
    def __init__(
        self, metrics: Metrics, tracing: Tracing, *, log_contents: bool, recorder: StepRecorder | None
    ) -> None:
        self._metrics = metrics
        self._tracing = tracing
        self._log_contents = log_contents
        self._recorder = recorder

    def tool_results(self, request: AgentRequest) -> None:
        """The tools the agent ran since its last turn, as ``execute_tool`` spans."""
        if not self._tracing.enabled:
            return
        calls = request.conversation.calls_by_id()
        for message in request.conversation.trailing_tool_results():
            called = calls.get(str(message.call_id))
            name = called.name if called else "unknown"
            attributes: dict[str, str | int | float | bool] = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": str(message.call_id),
                "loopwarden.result_size": len(message.text),
            }
            with self._tracing.span(f"execute_tool {name}", attributes):
                pass

    def step(self, step: Step, delta: SessionDelta) -> None:
        """One line per upstream step: what was asked and decided, never what was said; and
        the step's timeline event. Built for the common case: no tool call, no contents."""
        request, reply = step.request, step.reply
        if self._recorder is not None and request.session.named:
            self._recorder.record(step)
        elif self._recorder is not None:  # recorded under the name the run's first reply gives
            request.when_named(functools.partial(self._recorder.record, step))
        calls = reply.tool_calls
        if calls:
            tools = [c.name for c in calls]
            digests = [fingerprint(c.name, c.arguments) for c in calls]
            tool_names, argument_digests = ",".join(tools), ",".join(digests)
        else:
            tools, digests, tool_names, argument_digests = [], [], "", ""
        steps, usage = step.context.state.steps, reply.usage
        latency_ms = round(step.latency * 1000, 3)
        verdict = verdict_name(step.verdict)
        event: dict[str, str | int | float | bool | None] = {
            "step": steps,
            "attempt": step.attempt,
            "model": reply.model,
            "latency_ms": latency_ms,
            "tokens_in": usage.prompt_tokens,
            "tokens_out": usage.completion_tokens,
            "tools": tool_names,
            "argument_digests": argument_digests,
            "verdict": verdict,
        }
        if self._log_contents or request.policy.recording.enabled:  # the operator asked for contents
            event["reply"] = redact(reply.content or "")[:CONTENT_CHARS]
        delta.event("step", _now_ms(), **event)
        if not logger.isEnabledFor(logging.INFO):
            return
        trailing = request.conversation.trailing_tool_results()
        fields: dict[str, object] = {
            "step": steps,
            "attempt": step.attempt,
            "model": reply.model,
            "tools": tools,
            "argument_digests": digests,
            "tool_result_sizes": [len(m.text) for m in trailing] if trailing else [],
            "latency_ms": latency_ms,
            "tokens_in": usage.prompt_tokens,
            "tokens_out": usage.completion_tokens,
            "verdict": verdict,
            "shadow": step.notes.shadow[:],
        }
        if self._log_contents:
            fields["reply"] = redact(reply.content or "")
            fields["new_messages"] = [redact(m.text) for m in trailing]
        request.log("step", fields)

    def retried(
        self, request: AgentRequest, attempt: int, upstream_attempts: int, status: int, delta: SessionDelta
    ) -> None:
        """An upstream call that took more than one try (transient faults retried invisibly)."""
        if upstream_attempts > 1:
            delta.event("retry", _now_ms(), attempt=attempt, upstream_attempts=upstream_attempts, status=status)

    def observed(self, request: AgentRequest, guard: str, verdict: Verdict | None, delta: SessionDelta) -> None:
        """Count what ``guard`` saw on the way to its verdict (guards write no metrics); a judge
        call is also a timeline event, naming the guard that asked (its question: the completion
        judge's "did it finish?", the progress judge's "is it getting anywhere?")."""
        for seen in getattr(verdict, "seen", ()):
            policy, metrics = request.policy.name, self._metrics
            if isinstance(seen, PermissionCheck):
                metrics.permission_decisions.labels(policy, seen.rule, seen.action).inc()
            elif isinstance(seen, JudgeCall):
                if seen.latency is not None:
                    metrics.judge_latency.labels(policy).observe(seen.latency)
                    metrics.of(metrics.upstream_calls, request.tenant, policy, "judge").inc()
                metrics.judge_verdicts.labels(policy, seen.verdict).inc()
                if seen.error is not None:
                    metrics.judge_errors.labels(policy, seen.error).inc()
                latency_ms = round(seen.latency * 1000, 3) if seen.latency is not None else None
                then = verdict_name(verdict) if verdict is not None else None
                delta.event(
                    "judge",
                    _now_ms(),
                    guard=guard,
                    verdict=seen.verdict,
                    latency_ms=latency_ms,
                    error=seen.error,
                    then=then,
                )

    def intervention(
        self,
        request: AgentRequest,
        verdict: Amend | Nudge | Rewrite,
        notes: RequestNotes,
        attempt: int,
        delta: SessionDelta,
    ) -> None:
        """A decision the pipeline acted on: the deciding guard and the kind of intervention
        (``action`` in the timeline, whose events have a kind of their own)."""
        guard, kind, reason = verdict.guard, verdict.kind, verdict.reason
        notes.interventions.append(kind)
        delta.event("intervention", _now_ms(), guard=guard, action=kind, reason=reason, attempt=attempt, shadow=False)
        self._decision(self._metrics.interventions, "intervention", request, guard, kind, reason, attempt=attempt)

    def shadow(self, request: AgentRequest, verdict: Verdict, notes: RequestNotes, delta: SessionDelta) -> None:
        """A decision shadow mode counted and left alone."""
        kind, reason, guard = verdict_name(verdict), verdict_reason(verdict), getattr(verdict, "guard", "")
        notes.shadow.append(kind)
        delta.event("intervention", _now_ms(), guard=guard, action=kind, reason=reason, shadow=True)
        self._decision(self._metrics.shadow_decisions, "shadow_decision", request, guard, kind, reason)

    def flag(self, request: AgentRequest, flag: str, notes: RequestNotes) -> None:
        notes.flags.append(flag)
        self._metrics.of(self._metrics.flags, request.tenant, request.policy.name, flag).inc()
        self._logged("flag", request, "", flag, "passed despite a problem")

    def _decision(
        self, counter: Counter, event: str, request: AgentRequest, guard: str, kind: str, reason: str, **extra: object
    ) -> None:
        """One decision: a metric sample (bounded labels: the guard and the kind) and a log line."""
        self._metrics.of(counter, request.tenant, request.policy.name, guard, kind).inc()
        self._logged(event, request, guard, kind, reason, **extra)

    def _logged(self, event: str, request: AgentRequest, guard: str, kind: str, reason: str, **extra: object) -> None:
        """The decision's log line (with the session, once it is named) and trace event."""
        named = {"guard": guard} if guard else {}
        request.log(event, {**named, "kind": kind, "reason": reason, **extra})
        self._tracing.event(f"loopwarden.{event}", {**named, "kind": kind, "reason": reason})


def response_headers(
    request: AgentRequest, after: SessionState, notes: RequestNotes, now: float
) -> list[tuple[bytes, bytes]]:
    """The ``X-LoopWarden-*`` headers: the session after this request, and what happened on it.
    A stream that starts flowing before a derived run's first reply is whole does not know the
    session's name yet (that reply names it): it goes without ``X-LoopWarden-Session`` rather
    than with a name no session has."""
    headers = [(b"x-loopwarden-session", request.session.id.encode())] if request.session.named else []
    headers += [
        (b"x-loopwarden-policy", request.policy.name.encode()),
        (b"x-loopwarden-step", str(after.steps + notes.streaming).encode()),
        (b"x-loopwarden-interventions", (",".join(notes.interventions) or "none").encode()),
        (b"x-loopwarden-budget-remaining", remaining(after, request.policy, now).header().encode()),
    ]
    if notes.terminated:
        headers.append((b"x-loopwarden-terminated", notes.terminated.encode()))
    if notes.shadow:
        headers.append((b"x-loopwarden-shadow", ",".join(notes.shadow).encode()))
    if notes.flags:
        headers.append((b"x-loopwarden-flags", ",".join(notes.flags).encode()))
    if notes.degraded:
        headers.append((b"x-loopwarden-degraded", b"state-store"))
    if notes.goal:
        headers.append((b"x-loopwarden-goal", notes.goal.encode()))
    return headers


def chat_attributes(request: AgentRequest, attempt: int) -> dict[str, str | int]:
    """An upstream attempt's span attributes (GenAI conventions)."""
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": request.conversation.model or "",
        "loopwarden.attempt": attempt,
    }


def usage_attributes(reply: Reply) -> dict[str, str | int | float | bool]:
    """What an attempt's reply used, for its span."""
    return {
        "gen_ai.response.model": reply.model or "",
        "gen_ai.usage.input_tokens": reply.usage.prompt_tokens,
        "gen_ai.usage.output_tokens": reply.usage.completion_tokens,
    }

"""What the guard loop tells the outside: a log line per upstream step, and for every decision
a metric sample, a log line and a trace event; steps also go to the recorder (when a policy
records). Never what was said, unless ``--log-contents`` asks for it (keys redacted).
"""

from __future__ import annotations

import logging

from prometheus_client import Counter

from proxy.books.budgets import remaining
from proxy.exchange import Reply
from proxy.guards.fingerprint import fingerprint
from proxy.loop.recording import Step, StepRecorder
from proxy.observe.logs import log_event, logger, redact
from proxy.observe.metrics import Metrics
from proxy.observe.tracing import Tracing
from proxy.request import AgentRequest, RequestNotes
from proxy.session.base import SessionState
from proxy.verdict import JudgeCall, PermissionCheck, Verdict, verdict_name

__all__ = ["StepLog", "chat_attributes", "response_headers", "usage_attributes"]


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

    def step(self, step: Step) -> None:
        """One line per upstream step: what was asked and decided, never what was said."""
        if self._recorder is not None:
            self._recorder.record(step)
        if not logger.isEnabledFor(logging.INFO):
            return
        request, reply = step.request, step.reply
        trailing = request.conversation.trailing_tool_results()
        fields: dict[str, object] = {
            **request.log_fields(),
            "step": step.context.state.steps,
            "attempt": step.attempt,
            "model": reply.model,
            "tools": [c.name for c in reply.tool_calls],
            "argument_digests": [fingerprint(c.name, c.arguments) for c in reply.tool_calls],
            "tool_result_sizes": [len(m.text) for m in trailing],
            "latency_ms": round(step.latency * 1000, 3),
            "tokens_in": reply.usage.prompt_tokens,
            "tokens_out": reply.usage.completion_tokens,
            "verdict": verdict_name(step.verdict),
            "shadow": list(step.notes.shadow),
        }
        if self._log_contents:
            fields["reply"] = redact(reply.content or "")
            fields["new_messages"] = [redact(m.text) for m in trailing]
        log_event("step", fields)

    def observed(self, request: AgentRequest, verdict: Verdict | None) -> None:
        """Count what a guard saw on the way to its verdict (guards write no metrics)."""
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

    def intervention(self, request: AgentRequest, kind: str, reason: str, notes: RequestNotes, attempt: int) -> None:
        notes.interventions.append(kind)
        self._decision(self._metrics.interventions, "intervention", request, kind, reason, attempt=attempt)

    def shadow(self, request: AgentRequest, kind: str, reason: str, notes: RequestNotes) -> None:
        notes.shadow.append(kind)
        self._decision(self._metrics.shadow_decisions, "shadow_decision", request, kind, reason)

    def flag(self, request: AgentRequest, flag: str, notes: RequestNotes) -> None:
        notes.flags.append(flag)
        self._decision(self._metrics.flags, "flag", request, flag, "passed despite a problem")

    def _decision(
        self, counter: Counter, event: str, request: AgentRequest, kind: str, reason: str, **extra: object
    ) -> None:
        """One decision: a metric sample (bounded labels) and a log line (with the session)."""
        self._metrics.of(counter, request.tenant, request.policy.name, kind).inc()
        log_event(event, {**request.log_fields(), "kind": kind, "reason": reason, **extra})
        self._tracing.event(f"loopwarden.{event}", {"kind": kind, "reason": reason})


def response_headers(
    request: AgentRequest, after: SessionState, notes: RequestNotes, now: float
) -> list[tuple[bytes, bytes]]:
    """The ``X-LoopWarden-*`` headers: the session after this request, and what happened on it."""
    headers = [
        (b"x-loopwarden-session", request.session.id.encode()),
        (b"x-loopwarden-policy", request.policy.name.encode()),
        (b"x-loopwarden-step", str(after.steps).encode()),
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

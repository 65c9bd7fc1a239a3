"""The guard loop: load the session, ask the guards, act on their verdicts, commit once.

Guards decide, the pipeline acts. Per request: one store load (none for a fresh session),
request guards, then at most ``policy.max_attempts`` upstream calls; each reply goes
through the response guards, and the first verdict that is not a Pass wins: a Nudge
appends turns and calls again (the agent only ever sees the final reply), a Rewrite
replaces the reply, a Finalize ends the session with a summary. Goal mode takes part like a
guard. The loop returns one ending value; :meth:`Pipeline.run` commits it once and renders
it once. In shadow mode every decision is counted and logged and the traffic is left alone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from proxy.books.budgets import check_request_cap, session_limits
from proxy.books.ledger import ENDING_WAIT_SECS, Ledger
from proxy.books.pricing import PriceTable
from proxy.errors import ProxyError
from proxy.exchange import Channel, Reply, Turn
from proxy.goal.keeper import GoalKeeper, GoalStrip
from proxy.goal.model import GOAL_TOOL, Goal, goal_tool
from proxy.guards.base import RequestGuard, ResponseGuard
from proxy.guards.fingerprint import remember_calls
from proxy.judge.client import judge_target
from proxy.loop.answer import Answer, Failed, Relayed, Tried, Unusable, Written, delivered_reply, render
from proxy.loop.attempts import Attempts
from proxy.loop.continuity import chain_links, record_turns, remember_links, summary_payload
from proxy.loop.finalize import Endings, replayed_ending
from proxy.loop.inflight import InFlight
from proxy.loop.recording import Step, StepRecorder
from proxy.loop.step_log import StepLog, chat_attributes, response_headers, usage_attributes
from proxy.observe.metrics import Metrics
from proxy.observe.tracing import Tracing
from proxy.request import AgentRequest, Outcome, RequestNotes
from proxy.session.base import FIELDS, SessionDelta, SessionState, SessionStore
from proxy.session.identity import named_run, turn_digest
from proxy.streaming.client import ClientStream
from proxy.upstream.client import UpstreamClient
from proxy.verdict import (
    PASS,
    Amend,
    Finalize,
    Nudge,
    Pass,
    ReplyVerdict,
    Rewrite,
    Verdict,
    verdict_name,
    verdict_reason,
)

__all__ = ["Pipeline"]


_Ending = Answer | Finalize


class Pipeline:
    def __init__(
        self,
        upstream: UpstreamClient,
        store: SessionStore,
        metrics: Metrics,
        request_guards: Sequence[RequestGuard],
        response_guards: Sequence[ResponseGuard],
        clock: Callable[[], float] = time.time,
        prices: PriceTable | None = None,
        log_contents: bool = False,
        tracing: Tracing | None = None,
        recorder: StepRecorder | None = None,
        keepalive_secs: float = 15.0,
        ending_wait_secs: float = ENDING_WAIT_SECS,
    ) -> None:
        self._keepalive = keepalive_secs
        self._tracing = tracing or Tracing()
        self._upstream = upstream
        self._store = store
        self._metrics = metrics
        self._request_guards = tuple(request_guards)
        self._response_guards = tuple(response_guards)
        self._clock = clock
        self._prices = prices or PriceTable({})
        self._ledger = Ledger(store, metrics, self._prices, clock, ending_wait_secs)
        self._endings = Endings(upstream, self._ledger, metrics, self._tracing)
        self._goals = GoalKeeper(metrics)
        self._steps = StepLog(metrics, self._tracing, log_contents=log_contents, recorder=recorder)
        self._attempts = Attempts(upstream, self._ledger, metrics, self._response_guards)

    @property
    def store(self) -> SessionStore:
        """Where session state lives (the routes resolve stored response chains there)."""
        return self._store

    async def run(self, call: AgentRequest) -> Outcome:
        """One agent request. Whatever happens, what it reserved and spent is committed once."""
        notes = RequestNotes(started=self._clock())
        enforce = call.policy.mode == "enforce"
        limits = session_limits(call, self._prices, fresh=call.session.fresh) if enforce else []
        attributes: dict[str, str | int | float | bool] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.conversation.id": call.session.id,
            "loopwarden.tenant": call.tenant,
            "loopwarden.policy": call.policy.name,
        }
        with self._tracing.span("invoke_agent", attributes) as span:
            self._steps.tool_results(call)
            check_request_cap(call, enforce, self._prices)
            state, delta = await self._ledger.open(call, limits, notes)
            client = self._client_stream(call, state, delta, notes)
            request = InFlight(
                call, state, delta, notes, limits, client, enforce, call.payload, None, call.policy.max_attempts
            )
            try:
                ending = await self._run(request)
                if isinstance(ending, Finalize):
                    sent = summary_payload(call, state, request.amended, request.payload)
                    made = await self._endings.make(call, ending, state, delta, notes, request.extra, sent)
                    ending = Written(made, True)
                elif isinstance(ending, Relayed) and request.amended is not None:
                    record_turns(call, request.amended, request.extra, ending.tried.reply, delta, state)
                if call.session.fresh and call.session.derived and (first := delivered_reply(call, ending)):
                    call.session = named_run(call.session, turn_digest(first.content, first.tool_calls))
                answer = ending.body if isinstance(ending, Written) else _relayed(ending)
                links = chain_links(call, request.replies, answer, delta)
                if isinstance(ending, Unusable):  # one the upstream refused (400, 401, ...) reached no model
                    await self._ledger.settle(call, delta, notes)
                else:
                    await self._ledger.commit(call, delta, notes)
                if not notes.degraded:  # after a store failure, this request asks the store nothing more
                    await remember_links(self._store, call, links)  # before the client can continue from one
                outcome = await self._render(request, ending)
            finally:
                if client is not None:
                    client.close()
                if not notes.committed:
                    # Shielded: a streamed request is cancelled when its client leaves, and
                    # what it reserved and spent must still be written.
                    await asyncio.shield(self._ledger.settle(call, delta, notes))
            self._tracing.annotate(span, {"loopwarden.terminated": notes.terminated or ""})
            return outcome

    async def _run(self, request: InFlight) -> _Ending:
        """The loop: request guards, then attempts until a reply passes or the request ends."""
        call, state, delta, notes = request.call, request.state, request.delta, request.notes
        if state.termination and state.ending and request.enforce:
            notes.terminated = state.termination
            return Written(replayed_ending(call.wire, state), shaped=True)
        if notes.refused:
            return _refused(notes.refused)
        await self._ledger.admit_tenant(call, delta, notes)
        ending = self._ask_request_guards(request)
        if ending is not None:
            return ending
        request.goal = self._goals.open(call, state, delta, notes)
        if request.goal is not None and request.goal.active:
            request.payload = call.wire.codec.with_tool(request.payload, goal_tool())
            request.goal_offered = True
        request.amended = request.payload
        if call.wire.transcript is not None:
            request.payload = call.wire.transcript.spliced(request.payload, state.values)
        request.judge = judge_target(call)
        attempt = 0
        while True:
            attempt += 1
            tried = await self._attempt(request, attempt)
            if not isinstance(tried, Tried):
                return tried
            turn = self._goal_turn(request, request.goal, attempt, tried) if request.goal is not None else None
            if turn is not None:
                ending = await self._continue(request, turn.turns)
                if ending is None:
                    continue
                self._strike(ending.strike, delta)
                return ending
            verdict = await self._decide(request, attempt, tried)
            if verdict is None:
                return self._stripped(request, tried) if request.stripped else Relayed(tried)
            if isinstance(verdict, Rewrite):
                self._steps.intervention(call, verdict.kind, verdict.reason, notes, attempt)
                return Written(call.wire.codec.render_reply(verdict.reply))
            self._strike(verdict.strike, delta)
            if isinstance(verdict, Finalize):
                return verdict
            if attempt >= request.allowed:
                return Finalize(verdict.exhausted, f"the model kept failing: {verdict.reason}")
            self._steps.intervention(call, verdict.kind, verdict.reason, notes, attempt)
            request.retries[verdict.kind] += 1
            ending = await self._continue(request, verdict.turns)
            if ending is not None:
                return ending

    # -- the loop's steps -----------------------------------------------------------

    def _ask_request_guards(self, request: InFlight) -> Finalize | None:
        """The request guards, before the first attempt: amend, nudge, or end (None: go on)."""
        call, delta, notes = request.call, request.delta, request.notes
        context = request.context(request.state)
        for asked in (guard.check_request(context) for guard in self._request_guards):
            if isinstance(asked, Pass):
                self._apply(asked, call, delta, notes)
            elif not request.enforce:
                self._shadow(asked, call, delta, notes)
            elif isinstance(asked, Amend):
                self._steps.intervention(call, asked.kind, asked.reason, notes, 0)
                request.payload = call.wire.codec.amended(request.payload, asked.tool_notes, asked.drop_tools)
            elif isinstance(asked, Nudge):
                self._strike(asked.strike, delta)
                self._steps.intervention(call, asked.kind, asked.reason, notes, 0)
                request.extra.extend(asked.turns)
            else:
                self._strike(asked.strike, delta)
                return asked
        return None

    async def _attempt(self, request: InFlight, attempt: int) -> Tried | Unusable | Failed:
        """One upstream call, streamed or not, charged to the session."""
        call, delta, client = request.call, request.delta, request.client
        sent = time.perf_counter()
        with self._tracing.span(
            f"chat {call.conversation.model or ''}".strip(), chat_attributes(call, attempt)
        ) as span:
            if client is None:
                upstream, reply = await self._attempts.whole(call, request.payload, request.extra, delta, attempt)
                assembled = None
            else:
                # What the guards hold back mid-stream, judged on the session as loaded (this
                # request's own strikes only make them hold more, never less, than needed).
                # While the goal tool is offered any reply may be a hidden goal round (a call
                # to the goal tool, a text-only turn to continue) or be stripped of the goal's
                # calls: held whole, its thinking too, so the client gets only what it is meant
                # to see, once.
                hold = Channel.ALL if request.goal_offered else Channel.NONE
                holding = request.context(request.state)
                try:
                    upstream, reply, assembled = await self._attempts.attempt(
                        call, request.payload, request.extra, client, holding, delta, hold
                    )
                except ProxyError as error:
                    if not client.started:
                        raise
                    return Failed(error)  # the client already has part of the stream
            ok = upstream.response.status_code == 200
            if reply is not None:
                self._tracing.annotate(span, usage_attributes(reply))
                request.replies.append(reply)
        latency = time.perf_counter() - sent
        purpose = "agent" if attempt == 1 else "nudge"
        self._metrics.of(self._metrics.upstream_calls, call.tenant, call.policy.name, purpose).inc()
        if ok:
            delta.incr(FIELDS.STEPS)
        if not ok or reply is None:
            return Unusable(upstream)
        self._ledger.charge(call, delta, reply.usage, reply.model, kind=purpose)
        return Tried(upstream, reply, assembled.completion if assembled is not None else None, latency)

    def _goal_turn(self, request: InFlight, goal: Goal, attempt: int, tried: Tried) -> Nudge | None:
        """Goal mode's decision on the reply, applied: the turns to continue with, or None (a
        reply stripped of the goal tool's calls goes on to the guards)."""
        call, state, delta, notes = request.call, request.state, request.delta, request.notes
        rounds_left, request.stripped = request.goal_rounds < call.policy.goal.max_tool_rounds, None
        request.goal, decision = self._goals.decide(
            call, goal, tried.reply, delta, state, notes, tool_rounds_left=rounds_left
        )
        if decision is None:
            return None
        if isinstance(decision, GoalStrip):
            request.stripped = (tried.reply, decision.answered)
            tried.reply = decision.reply
            return None
        nudge = decision.nudge
        if decision.tool_round:
            request.goal_rounds += 1
        else:
            self._steps.intervention(call, nudge.kind, nudge.reason, notes, attempt)
        request.allowed += 1
        context = request.context(delta.applied_to(state))
        self._steps.step(Step(call, context, attempt, tried.reply, nudge, tried.latency, notes))
        return nudge

    async def _decide(self, request: InFlight, attempt: int, tried: Tried) -> Nudge | Rewrite | Finalize | None:
        """The response guards on a reply, in order: enforced, the first that is not a Pass
        wins (returned); in shadow mode every guard decides and nothing is acted on."""
        call, delta, notes, enforce = request.call, request.delta, request.notes, request.enforce
        context = request.context(delta.applied_to(request.state))
        verdicts: list[ReplyVerdict] = []
        for guard in self._response_guards:
            given = guard.check_reply(tried.reply, context)
            # Awaited only when the guard needed I/O to decide (the judge): no coroutine per guard.
            verdict = given if isinstance(given, (Pass, Nudge, Rewrite, Finalize)) else await given
            verdicts.append(verdict)
            if enforce and not isinstance(verdict, Pass):
                break
        for decided in verdicts:
            if decided is not PASS:  # the common verdict: nothing spent, nothing seen
                self._ledger.charge_guard(call, delta, decided)
                self._steps.observed(call, decided)
        last = verdicts[-1] if verdicts else None
        decision = None if not enforce or last is None or isinstance(last, Pass) else last
        if enforce:
            self._steps.step(Step(call, context, attempt, tried.reply, decision, tried.latency, notes))
        if decision is not None:
            return decision
        for decided in verdicts:
            if isinstance(decided, Pass):
                self._apply(decided, call, delta, notes)
            else:
                self._shadow(decided, call, delta, notes)
        remember_calls(delta, tried.reply.tool_calls, call.policy.loop.history)
        if not enforce:
            self._steps.step(Step(call, context, attempt, tried.reply, None, tried.latency, notes))
        return None

    async def _continue(self, request: InFlight, turns: Sequence[Turn]) -> Finalize | None:
        """Append ``turns`` for another upstream call; the ending instead, if a request guard
        would end the session now (e.g. steps) or the call's reservation does not fit."""
        request.extra.extend(turns)
        call, state, delta, notes = request.call, request.state, request.delta, request.notes
        context = request.context(delta.applied_to(state), retries=False)
        for guard in self._request_guards:
            verdict = guard.check_request(context)
            if isinstance(verdict, Finalize):
                return verdict
        refused = await self._ledger.reserve(call, delta, notes, request.limits)
        return _refused(refused) if refused else None

    def _apply(self, verdict: Pass, call: AgentRequest, delta: SessionDelta, notes: RequestNotes) -> None:
        """The bookkeeping of a reply that reaches the agent."""
        for strike in verdict.clear_strikes:
            delta.assign(FIELDS.STRIKE_PREFIX + strike, 0)
        for flag in verdict.flags:
            self._steps.flag(call, flag, notes)

    def _shadow(self, verdict: Verdict, call: AgentRequest, delta: SessionDelta, notes: RequestNotes) -> None:
        """Shadow mode: count and log the decision, keep strikes as enforce would, change nothing."""
        if isinstance(verdict, Nudge | Finalize):
            self._strike(verdict.strike, delta)
        self._steps.shadow(call, verdict_name(verdict), verdict_reason(verdict), notes)

    @staticmethod
    def _strike(strike: str | None, delta: SessionDelta) -> None:
        if strike:
            delta.incr(FIELDS.STRIKE_PREFIX + strike)

    # -- rendering ------------------------------------------------------------------

    @staticmethod
    def _stripped(request: InFlight, tried: Tried) -> Written:
        """The agent sees its own tool calls only, never the goal tool's; the session records
        what the upstream saw (the reply whole, the turns before it) for its later requests."""
        call, streamed = request.call, tried.streamed
        if request.stripped is not None and request.amended is not None:
            whole_reply, answered = request.stripped
            record_turns(call, request.amended, request.extra, whole_reply, request.delta, request.state, answered)
        whole = streamed() if streamed is not None else call.wire.codec.decode(tried.upstream.response.content)
        return Written(call.wire.codec.without_calls(whole, GOAL_TOOL))

    async def _render(self, request: InFlight, ending: Answer) -> Outcome:
        return await render(request.call, request.client, ending, lambda: self._headers(request))

    def _headers(self, request: InFlight) -> list[tuple[bytes, bytes]]:
        after = request.delta.applied_to(request.state)
        return response_headers(request.call, after, request.notes, self._clock())

    def _client_stream(
        self, call: AgentRequest, state: SessionState, delta: SessionDelta, notes: RequestNotes
    ) -> ClientStream | None:
        if not call.stream or call.respond is None:
            return None
        return ClientStream(
            call.respond,
            lambda: response_headers(call, delta.applied_to(state), notes, self._clock()),
            include_usage=call.include_usage(),
            keepalive=self._keepalive,
            stream=call.wire.stream,
        )


def _relayed(ending: Answer) -> Reply | None:
    return ending.tried.reply if isinstance(ending, Relayed) else None


def _refused(limit: str) -> Finalize:
    """The ending of a call whose reservation did not fit: the call that would use the last of
    a budget (room for the ending kept) is the ending."""
    what = limit.removeprefix("budget_")
    return Finalize(limit, f"a further call would use the last of the session's {what} budget")

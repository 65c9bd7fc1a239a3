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
from functools import partial
from typing import Any

from proxy.books.budgets import check_request_cap, session_limits
from proxy.books.ledger import ENDING_WAIT_SECS, Ledger
from proxy.books.pricing import PriceTable
from proxy.errors import ProxyError
from proxy.exchange import Channel, Reply, Turn
from proxy.goal.keeper import GoalKeeper, GoalRun, GoalStrip
from proxy.guards.base import RequestGuard, ResponseGuard, guard_name
from proxy.guards.fingerprint import remember_calls
from proxy.guards.no_progress import remember_results
from proxy.loop.answer import Answer, Failed, Passed, Tried, Unusable, Written, client_stream, render
from proxy.loop.attempts import Attempts
from proxy.loop.continuity import Chaining, ChainPoint, resolve_chain
from proxy.loop.finalize import Endings, FormatLookup
from proxy.loop.inflight import InFlight
from proxy.loop.recording import Step, StepRecorder
from proxy.loop.step_log import StepLog, chat_attributes, response_headers, usage_attributes
from proxy.observe.metrics import Metrics
from proxy.observe.tracing import NO_SPAN, Tracing
from proxy.request import AgentRequest, Outcome, RequestNotes
from proxy.session.base import FIELDS, SessionDelta, SessionState, SessionStore, StoreUnavailable
from proxy.session.runs import run_number, run_reset, starts_new_run, without_run
from proxy.session.timeline import client_name
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
    decided_by,
)

__all__ = ["Pipeline"]


_Ending = Answer | Finalize
_REPLY_VERDICTS = (Pass, Nudge, Rewrite, Finalize)


class Pipeline:
    def __init__(
        self,
        upstream: UpstreamClient,
        store: SessionStore,
        metrics: Metrics,
        request_guards: Sequence[RequestGuard],
        response_guards: Sequence[ResponseGuard],
        formats: FormatLookup,
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
        self._request_guards = tuple((guard_name(guard), guard) for guard in request_guards)
        self._response_guards = tuple((guard_name(guard), guard) for guard in response_guards)
        self._clock = clock
        self._prices = prices or PriceTable({})
        self._ledger = Ledger(store, metrics, self._prices, clock, ending_wait_secs)
        self._endings = Endings(upstream, self._ledger, metrics, self._tracing, formats, clock)
        self._goals = GoalKeeper(metrics)
        self._steps = StepLog(metrics, self._tracing, log_contents=log_contents, recorder=recorder)
        self._attempts = Attempts(upstream, self._ledger, metrics, tuple(guard for _, guard in self._response_guards))

    async def resume(self, chains: Chaining | None, namespace: str, payload: dict[str, Any]) -> ChainPoint:
        """Where a request that continues a stored response goes on, asked by the edge before
        the session is known (the session's identity depends on it)."""
        return await resolve_chain(self._store, chains, namespace, payload)

    async def run(self, request: AgentRequest) -> Outcome:
        """One agent request. Whatever happens, what it reserved and spent is committed once,
        and what waited for its session's name is let out (a request no reply named included)."""
        try:
            notes = RequestNotes(started=self._clock())
            enforce = request.policy.mode == "enforce"
            limits = session_limits(request, self._prices, fresh=request.session.fresh) if enforce else []
            tracing = self._tracing.enabled
            with self._tracing.span("invoke_agent", _agent_attributes(request)) if tracing else NO_SPAN as span:
                self._steps.tool_results(request)
                check_request_cap(request, enforce, self._prices)
                state, delta = await self._ledger.open(request, limits, notes)
                if not notes.degraded and starts_new_run(state, request.conversation, request.session.derived):
                    state = await self._new_run(request, state, notes)
                if state.values.get(FIELDS.POLICY) != request.policy.name:  # a new session: for the sessions list
                    delta.assign(FIELDS.POLICY, request.policy.name)
                    delta.default(FIELDS.CLIENT, client_name(request.headers))
                flight = InFlight(request=request, state=state, delta=delta, notes=notes, limits=limits, client=None)
                headers = partial(self._headers, flight)
                client = flight.client = client_stream(request, headers, self._keepalive)
                try:
                    ran = await self._run(flight)  # a Finalize made into its ending; no coroutine otherwise
                    ending = await self._ended(flight, ran) if isinstance(ran, Finalize) else ran
                    await self._commit(flight, ending)
                    outcome = await render(request, client, ending, headers)
                finally:
                    if client is not None:
                        client.close()
                    if not notes.committed:
                        # Shielded: a streamed request is cancelled when its client leaves, and
                        # what it reserved and spent must still be written.
                        await asyncio.shield(self._ledger.settle(request, delta, notes))
                if tracing:
                    self._tracing.annotate(
                        span,
                        {"loopwarden.terminated": notes.terminated or "", "gen_ai.conversation.id": request.session.id},
                    )
                return outcome
        finally:
            request.release()

    async def _new_run(self, request: AgentRequest, state: SessionState, notes: RequestNotes) -> SessionState:
        """Start a new run of the session: its evidence and ending cleared in one commit of its
        own, before anything else of this request, so a run that ends at once (a spent budget)
        claims and stores its own ending. The session's budgets carry on."""
        ended = state.termination or ""
        reset = run_reset(state, int(notes.started * 1000), after=ended)
        try:
            state = await self._store.commit(request.session.key, reset, request.policy.session_ttl_secs)
        except StoreUnavailable:
            return without_run(state)  # this request guards with what it shows; its commit fails alike
        if notes.claim is False:  # a refused admission found the old ending: this run makes its own
            notes.claim = None
        request.log("run_started", {"run": run_number(state), "after": ended})
        return without_run(state)

    async def _run(self, flight: InFlight) -> _Ending:
        """The loop: request guards, then attempts until a reply passes or the request ends."""
        request, state, delta, notes = flight.request, flight.state, flight.delta, flight.notes
        if state.termination and state.ending and flight.enforce:
            notes.terminated = state.termination
            return Written(self._endings.stored(request.wire, state), shaped=True)
        if notes.refused:
            return _refused(notes.refused)
        await self._ledger.admit_tenant(request, delta, notes)
        ending = self._ask_request_guards(flight)
        if ending is not None:
            return ending
        flight.goal = self._goals.open(request, state, delta, notes)
        flight.payload = self._goals.offered(request, flight.goal, flight.payload)
        flight.begin_attempts()
        attempt = 0
        while True:
            attempt += 1
            tried = await self._attempt(flight, attempt)
            if not isinstance(tried, Tried):
                return tried
            turn = self._goal_turn(flight, flight.goal, attempt, tried) if flight.goal is not None else None
            if turn is not None:
                ending = await self._continue(flight, turn.turns)
                if ending is None:
                    continue
                self._strike(ending.strike, delta)
                return ending
            verdict = await self._decide(flight, attempt, tried)
            if verdict is None:
                stripped = flight.goal.stripped if flight.goal is not None else None
                return Passed(tried) if stripped is None else self._stripped(flight, tried, stripped)
            if isinstance(verdict, Rewrite):
                self._steps.intervention(request, verdict, notes, attempt, delta)
                return Written(request.wire.codec.render_reply(verdict.reply))
            self._strike(verdict.strike, delta)
            if isinstance(verdict, Finalize):
                return verdict
            if attempt >= flight.allowed:
                evidence = f"the model kept failing ({verdict.kind}) for all {attempt} attempts of one request"
                detail = f"the model kept failing: {verdict.reason}"
                return Finalize(verdict.exhausted, detail, evidence=evidence, guard=verdict.guard)
            self._steps.intervention(request, verdict, notes, attempt, delta)
            flight.retries[verdict.kind] += 1
            ending = await self._continue(flight, verdict.turns)
            if ending is not None:
                return ending

    async def _ended(self, flight: InFlight, ending: Finalize) -> Answer:
        """A Finalize made into its ending: a summary call that extends the transcript as the
        upstream knows it, else one built locally."""
        sent = flight.continuity.summary_payload(flight.payload)
        made = await self._endings.make(
            flight.request, ending, flight.state, flight.delta, flight.notes, flight.extra, sent
        )
        return Written(made, True)

    async def _commit(self, flight: InFlight, ending: Answer) -> None:
        """The request's books, once: what continuity records goes into the commit (settled
        only, for a reply the upstream refused: 400, 401, ... reached no model), and what it
        remembers follows it, before the client can continue from one."""
        request, delta, notes = flight.request, flight.delta, flight.notes
        flight.continuity.record(ending, flight.extra, flight.replies)
        remember_results(delta, request.conversation, request.policy.no_progress)
        if isinstance(ending, Unusable):
            await self._ledger.settle(request, delta, notes)
        else:
            await self._ledger.commit(request, delta, notes)
        if not notes.degraded:  # after a store failure, this request asks the store nothing more
            await flight.continuity.remember(self._store)

    # -- the loop's steps -----------------------------------------------------------

    def _ask_request_guards(self, flight: InFlight) -> Finalize | None:
        """The request guards, before the first attempt: amend, nudge, or end (None: go on)."""
        request, delta, notes = flight.request, flight.delta, flight.notes
        context = flight.context(flight.state)
        for name, guard in self._request_guards:
            given = guard.check_request(context)
            if given is PASS:  # the common verdict: nothing to apply
                continue
            asked = decided_by(given, name)
            if isinstance(asked, Pass):
                self._apply(asked, request, delta, notes)
            elif not flight.enforce:
                self._shadow(asked, request, delta, notes)
            elif isinstance(asked, Amend):
                self._steps.intervention(request, asked, notes, 0, delta)
                flight.payload = request.wire.codec.amended(flight.payload, asked.tool_notes, asked.drop_tools)
            elif isinstance(asked, Nudge):
                self._strike(asked.strike, delta)
                self._steps.intervention(request, asked, notes, 0, delta)
                flight.extra.extend(asked.turns)
            else:
                self._strike(asked.strike, delta)
                return asked
        return None

    async def _attempt(self, flight: InFlight, attempt: int) -> Tried | Unusable | Failed:
        """One upstream call, streamed or not, charged to the session."""
        request, delta, client = flight.request, flight.delta, flight.client
        sent = time.perf_counter()
        tracing = self._tracing.enabled
        name = f"chat {request.conversation.model or ''}".strip() if tracing else ""
        with self._tracing.span(name, chat_attributes(request, attempt)) if tracing else NO_SPAN as span:
            if client is None:
                upstream, reply = await self._attempts.whole(request, flight.payload, flight.extra, delta, attempt)
                assembled = None
            else:
                # What the guards hold back mid-stream, judged on the session as loaded (this
                # request's own strikes only make them hold more, never less, than needed).
                # While the goal tool is offered any reply may be a hidden goal round (a call
                # to the goal tool, a text-only turn to continue) or be stripped of the goal's
                # calls: held whole, its thinking too, so the client gets only what it is meant
                # to see, once.
                hold = Channel.ALL if flight.goal is not None and flight.goal.offered else Channel.NONE
                holding = flight.context(flight.state)
                flight.notes.streaming = True
                try:
                    upstream, reply, assembled = await self._attempts.attempt(
                        request, flight.payload, flight.extra, client, holding, delta, hold
                    )
                except ProxyError as error:
                    if not client.started:
                        raise
                    return Failed(error)  # the client already has part of the stream
                finally:
                    flight.notes.streaming = False
            ok = upstream.response.status_code == 200
            if reply is not None:
                if tracing:
                    self._tracing.annotate(span, usage_attributes(reply))
                flight.replies.append(reply)
        latency = time.perf_counter() - sent
        purpose = "agent" if attempt == 1 else "nudge"
        self._metrics.of(self._metrics.upstream_calls, request.tenant, request.policy.name, purpose).inc()
        if ok:
            delta.incr(FIELDS.STEPS)
        self._steps.retried(request, attempt, upstream.attempts, upstream.response.status_code, delta)
        if not ok or reply is None:
            return Unusable(upstream)
        self._ledger.charge(request, delta, reply.usage, reply.model, kind=purpose)
        return Tried(upstream, reply, assembled.completion if assembled is not None else None, latency)

    def _goal_turn(self, flight: InFlight, goal: GoalRun, attempt: int, tried: Tried) -> Nudge | None:
        """Goal mode's decision on the reply, applied: the turns to continue with, or None (a
        reply stripped of the goal tool's calls goes on to the guards)."""
        request, state, delta, notes = flight.request, flight.state, flight.delta, flight.notes
        decision = self._goals.decide(request, goal, tried.reply, delta, state, notes)
        if decision is None:
            return None
        if isinstance(decision, GoalStrip):
            tried.reply = decision.reply
            return None
        nudge = decided_by(decision.nudge, "goal")
        if not decision.tool_round:
            self._steps.intervention(request, nudge, notes, attempt, delta)
        flight.allowed += 1
        context = flight.context(delta.applied_to(state))
        self._steps.step(Step(request, context, attempt, tried.reply, nudge, tried.latency, notes), delta)
        return nudge

    async def _decide(self, flight: InFlight, attempt: int, tried: Tried) -> Nudge | Rewrite | Finalize | None:
        """The response guards on a reply, in order: enforced, the first that is not a Pass
        wins (returned); in shadow mode every guard decides and nothing is acted on."""
        request, delta, notes, enforce = flight.request, flight.delta, flight.notes, flight.enforce
        context = flight.context(delta.applied_to(flight.state))
        verdicts: list[ReplyVerdict] = []
        for name, guard in self._response_guards:
            given = guard.check_reply(tried.reply, context)
            if given is PASS:  # the common verdict: nothing to apply, spend, see or act on
                continue
            # Awaited only when the guard needed I/O to decide (the judge): no coroutine per guard.
            verdict = given if isinstance(given, _REPLY_VERDICTS) else await given
            if verdict is PASS:
                continue
            verdicts.append(decided_by(verdict, name))
            self._ledger.charge_guard(request, delta, verdict)
            self._steps.observed(request, name, verdict, delta)
            if enforce and not isinstance(verdict, Pass):
                break
        last = verdicts[-1] if verdicts else None
        decision = None if not enforce or last is None or isinstance(last, Pass) else last
        if enforce:
            self._steps.step(Step(request, context, attempt, tried.reply, decision, tried.latency, notes), delta)
        if decision is not None:
            return decision
        for decided in verdicts:
            if isinstance(decided, Pass):
                self._apply(decided, request, delta, notes)
            else:
                self._shadow(decided, request, delta, notes)
        remember_calls(delta, tried.reply.tool_calls, request.policy.loop.history)
        if not enforce:
            self._steps.step(Step(request, context, attempt, tried.reply, None, tried.latency, notes), delta)
        return None

    async def _continue(self, flight: InFlight, turns: Sequence[Turn]) -> Finalize | None:
        """Append ``turns`` for another upstream call; the ending instead, if a request guard
        would end the session now (e.g. steps) or the call's reservation does not fit."""
        flight.extra.extend(turns)
        request, state, delta, notes = flight.request, flight.state, flight.delta, flight.notes
        context = flight.context(delta.applied_to(state), retries=False)
        for name, guard in self._request_guards:
            verdict = guard.check_request(context)
            if isinstance(verdict, Finalize):
                return decided_by(verdict, name)
        refused = await self._ledger.reserve(request, delta, notes, flight.limits)
        return _refused(refused) if refused else None

    def _apply(self, verdict: Pass, request: AgentRequest, delta: SessionDelta, notes: RequestNotes) -> None:
        """The bookkeeping of a reply that reaches the agent."""
        for strike in verdict.clear_strikes:
            delta.assign(FIELDS.STRIKE_PREFIX + strike, 0)
        for flag in verdict.flags:
            self._steps.flag(request, flag, notes)

    def _shadow(self, verdict: Verdict, request: AgentRequest, delta: SessionDelta, notes: RequestNotes) -> None:
        """Shadow mode: count and log the decision, keep strikes as enforce would, change nothing."""
        if isinstance(verdict, Nudge | Finalize):
            self._strike(verdict.strike, delta)
        self._steps.shadow(request, verdict, notes, delta)

    @staticmethod
    def _strike(strike: str | None, delta: SessionDelta) -> None:
        if strike:
            delta.incr(FIELDS.STRIKE_PREFIX + strike)

    # -- rendering ------------------------------------------------------------------

    @staticmethod
    def _stripped(flight: InFlight, tried: Tried, whole_reply: tuple[Reply, dict[str, str]]) -> Written:
        """The agent sees its own tool calls only, never the goal tool's; the session records
        what the upstream saw (``whole_reply``: the reply whole, the calls the proxy answered)."""
        request, streamed = flight.request, tried.streamed
        whole = streamed() if streamed is not None else request.wire.codec.decode(tried.upstream.response.content)
        return Written(GoalKeeper.without_goal_calls(request, whole), upstream_saw=whole_reply)

    def _headers(self, flight: InFlight) -> list[tuple[bytes, bytes]]:
        """The reply's own headers, from the books as they stand when it starts."""
        after = flight.delta.applied_to(flight.state)
        return response_headers(flight.request, after, flight.notes, self._clock())


def _agent_attributes(request: AgentRequest) -> dict[str, str | int | float | bool]:
    """The request's span attributes (built only when tracing is on)."""
    return {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.conversation.id": request.session.id,
        "loopwarden.tenant": request.tenant,
        "loopwarden.policy": request.policy.name,
    }


def _refused(limit: str) -> Finalize:
    """The ending of a call whose reservation did not fit: the call that would use the last of
    a budget (room for the ending kept) is the ending."""
    what = limit.removeprefix("budget_")
    detail = f"a further call would use the last of the session's {what} budget"
    return Finalize(limit, detail, evidence=detail, guard="budget")

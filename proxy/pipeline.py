"""The guard loop: load the session, ask the guards, act on their verdicts, commit once.

Guards decide, the pipeline acts. Per request: one store load (none for a fresh session),
request guards, then at most ``policy.max_attempts`` upstream calls; each reply goes
through the response guards, and the first verdict that is not a Pass wins: a Nudge
appends messages and calls again (the agent only ever sees the final reply), a Rewrite
replaces the reply, a Finalize ends the session with a summary. Then one atomic commit.
In shadow mode every decision is counted and logged and the traffic is left alone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from proxy.budgets import check_output_cap, remaining, session_limits
from proxy.call import SSE, ChatCall, Outcome, RequestNotes
from proxy.client_stream import ClientStream
from proxy.errors import ProxyError, UpstreamError
from proxy.exchange import Channel, Echo, Note, Reply, ReturnCalls, Turn, Usage
from proxy.finalize import Finalizer, local_summary
from proxy.fingerprint import remember_calls
from proxy.goal import GOAL_TOOL, goal_calls, goal_tool
from proxy.goal_keeper import GoalKeeper
from proxy.guards.base import GuardContext, RequestGuard, ResponseGuard
from proxy.judge import JudgeTarget
from proxy.ledger import ENDING_WAIT_SECS, Ledger
from proxy.logs import log_event
from proxy.metrics import Metrics
from proxy.pricing import PriceTable
from proxy.recording import Step, StepRecorder
from proxy.session.base import FIELDS, Limit, SessionDelta, SessionState, SessionStore
from proxy.step_log import StepLog
from proxy.stream_attempts import StreamAttempts
from proxy.tracing import Tracing
from proxy.upstream import UpstreamClient, UpstreamReply
from proxy.verdict import Amend, Finalize, Nudge, Pass, ReplyVerdict, Rewrite, Verdict, verdict_name, verdict_reason

__all__ = ["ChatCall", "Outcome", "Pipeline"]


def _shaped_ending(call: ChatCall, body: dict[str, Any], client: ClientStream | None) -> dict[str, Any]:
    """An ending as this request can take it: a refusal when it asked for a JSON answer (a
    later request of an ended session may ask differently from the one that ended it), unless
    text of the answer already streamed to the client: then the ending follows it as text."""
    return call.adapter.shaped(call.payload, body, text_started=client is not None and client.text_started)


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
        self._finalizer = Finalizer(upstream)
        self._clock = clock
        self._prices = prices or PriceTable({})
        self._ledger = Ledger(store, metrics, self._prices, clock, ending_wait_secs)
        self._goals = GoalKeeper(metrics)
        self._steps = StepLog(metrics, self._tracing, log_contents=log_contents, recorder=recorder)
        self._streams = StreamAttempts(upstream, self._ledger, metrics, self._response_guards)

    async def run(self, call: ChatCall) -> Outcome:
        """One agent request. Whatever happens, what it reserved and spent is committed once."""
        notes = RequestNotes(started=self._clock())
        enforce = call.policy.mode == "enforce"
        limits = (
            session_limits(call.conversation, len(call.body), call.policy, self._prices, fresh=call.session.fresh)
            if enforce
            else []
        )
        attributes: dict[str, str | int | float | bool] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.conversation.id": call.session.id,
            "loopwarden.tenant": call.tenant,
            "loopwarden.policy": call.policy.name,
        }
        with self._tracing.span("invoke_agent", attributes) as span:
            self._trace_tool_results(call)
            self._check_output_cap(call, enforce)
            state, delta = await self._ledger.open(call, limits, notes)
            client = self._client_stream(call, state, delta, notes)
            try:
                outcome = await self._run(call, state, delta, notes, limits, client)
            finally:
                if client is not None:
                    client.close()
                if not notes.committed:
                    # Shielded: a streamed request is cancelled when its client leaves, and
                    # what it reserved and spent must still be written.
                    settle = self._ledger.commit if _reached_model(delta) else self._ledger.release
                    await asyncio.shield(settle(call, delta, notes))
            self._tracing.annotate(span, {"loopwarden.terminated": notes.terminated or ""})
            return outcome

    def _check_output_cap(self, call: ChatCall, enforce: bool) -> None:
        """A 400 for a request that no budget could ever admit (its output limit alone is over)."""
        budgets = call.policy.budgets
        session_tokens, session_cost = (budgets.max_tokens, budgets.max_cost_usd) if enforce else (None, None)
        caps = (session_tokens, session_cost, call.daily_tokens, call.daily_cost_usd)
        if caps == (None, None, None, None):
            return  # no cap at all: the common case
        costs = {"API key's daily cost cap": call.daily_cost_usd, "session's cost budget": session_cost}
        check_output_cap(
            call.conversation,
            {"API key's daily token cap": call.daily_tokens, "session's token budget": session_tokens},
            costs,
            self._prices.price(call.conversation.model) if any(v is not None for v in costs.values()) else None,
        )

    def _trace_tool_results(self, call: ChatCall) -> None:
        """The tools the agent ran since its last turn, as ``execute_tool`` spans."""
        if not self._tracing.enabled:
            return
        calls = call.conversation.calls_by_id()
        for message in call.conversation.trailing_tool_results():
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

    async def _run(
        self,
        call: ChatCall,
        state: SessionState,
        delta: SessionDelta,
        notes: RequestNotes,
        limits: Sequence[Limit],
        client: ClientStream | None,
    ) -> Outcome:
        enforce = call.policy.mode == "enforce"
        if state.termination and state.ending and enforce:
            notes.terminated = state.termination
            await self._ledger.commit(call, delta, notes)
            stored = _shaped_ending(call, call.adapter.stored_ending(state.ending), client)
            return await self._rendered(call, stored, state, delta, notes, client)
        if notes.refused:
            return await self._finalize(call, _refused(notes.refused), state, delta, notes, [], client)
        await self._ledger.admit_tenant(call, delta, notes)

        payload: Mapping[str, Any] = call.payload
        extra: list[Turn] = []
        retries: Counter[str] = Counter()
        context = self._context(call, state, notes, retries)
        for asked in (guard.check_request(context) for guard in self._request_guards):
            if isinstance(asked, Pass):
                self._apply(asked, call, delta, notes)
            elif not enforce:
                self._shadow(asked, call, delta, notes)
            elif isinstance(asked, Amend):
                self._steps.intervention(call, asked.kind, asked.reason, notes, 0)
                payload = call.adapter.amended(payload, asked.tool_notes, asked.drop_tools)
            elif isinstance(asked, Nudge):
                self._strike(asked.strike, delta)
                self._steps.intervention(call, asked.kind, asked.reason, notes, 0)
                extra.extend(asked.turns)
            elif isinstance(asked, Finalize):
                self._strike(asked.strike, delta)
                return await self._finalize(call, asked, state, delta, notes, extra, client)

        goal = self._goals.open(call, state, delta, notes)
        if goal is not None and goal.active:
            payload = call.adapter.with_tool(payload, goal_tool())
        allowed = call.policy.max_attempts
        goal_rounds = 0
        stripped = False
        judge_target = self._judge_target(call)
        span_name = f"chat {call.conversation.model or ''}".strip()
        attempt = 0
        while True:
            attempt += 1
            sent = time.perf_counter()
            with self._tracing.span(span_name, self._chat_attributes(call, attempt)) as span:
                if client is None:
                    body = (
                        call.body
                        if payload is call.payload and not extra
                        else call.adapter.render_request(payload, extra)
                    )
                    try:
                        reply = await self._upstream.send("POST", call.url, call.headers, body)
                    except asyncio.CancelledError:  # the client left: the call was made all the same
                        self._charge_cancelled(call, delta, len(body), attempt)
                        raise
                    ok = reply.response.status_code == 200
                    parsed = call.adapter.parse_reply(reply.response.content) if ok else None
                    assembled = None
                else:
                    # What the guards hold back mid-stream, judged on the session as loaded (this
                    # request's own strikes only make them hold more, never less, than needed).
                    holding = self._context(call, state, notes, retries, judge_target)
                    # In goal mode a text-only reply is a turn to continue, not an answer: held whole.
                    hold_text = Channel.TEXT if goal is not None and goal.active else Channel.NONE
                    try:
                        reply, parsed, assembled = await self._streams.attempt(
                            call, payload, extra, client, holding, delta, hold_text
                        )
                    except ProxyError as error:
                        if not client.started:
                            raise
                        await self._ledger.commit(call, delta, notes)
                        await client.fail(error)  # the client already has part of the stream
                        return Outcome(200, [], delivered=True)
                    ok = reply.response.status_code == 200
                if parsed is not None:
                    self._tracing.annotate(span, _usage_attributes(parsed))
            latency = time.perf_counter() - sent
            purpose = "agent" if attempt == 1 else "nudge"
            self._metrics.of(self._metrics.upstream_calls, call.tenant, call.policy.name, purpose).inc()
            if not ok or parsed is None:
                if ok:
                    delta.incr(FIELDS.STEPS)
                if _reached_model(delta):
                    await self._ledger.commit(call, delta, notes)
                else:  # the upstream refused the call (400, 401, ...): nothing happened
                    await self._ledger.release(call, delta, notes)
                return await self._unusable(reply, call, state, delta, notes, client)
            delta.incr(FIELDS.STEPS)
            self._ledger.charge(call, delta, parsed.usage, parsed.model, kind="agent" if attempt == 1 else "nudge")
            if goal is not None:
                own, theirs = goal_calls(parsed.tool_calls)
                if own:
                    goal, results = self._goals.absorb(call, goal, own, delta, notes)
                    if not theirs and goal_rounds < call.policy.goal.max_tool_rounds:
                        # Only the proxy's own tool was called: answer it and let the model go on.
                        goal_rounds += 1
                        allowed += 1
                        answered = Nudge("goal_tool", f"goal {goal.status}", (ReturnCalls(parsed, results),))
                        self._log_goal_step(call, state, delta, retries, attempt, parsed, answered, latency, notes)
                        extra.extend(answered.turns)
                        ending = await self._next_attempt(call, state, delta, notes, limits)
                        if ending is None:
                            continue
                        self._strike(ending.strike, delta)
                        return await self._finalize(call, ending, state, delta, notes, extra, client)
                    parsed = dataclasses.replace(parsed, tool_calls=tuple(theirs))
                    stripped = True
                elif goal.active and parsed.has_text and not parsed.tool_calls:
                    # A continuation is the goal's turn, bounded by the goal's own turn and time
                    # limits (and the session's budgets), not by the request's nudge attempts.
                    goal, prompt = self._goals.next_turn(call, goal, delta, state, notes)
                    if prompt is not None:
                        self._steps.intervention(call, "goal_continue", f"goal turn {goal.turns}", notes, attempt)
                        turn = (Echo(parsed), Note(prompt))
                        continued = Nudge("goal_continue", f"goal turn {goal.turns}", turn)
                        self._log_goal_step(call, state, delta, retries, attempt, parsed, continued, latency, notes)
                        extra.extend(turn)
                        allowed += 1
                        ending = await self._next_attempt(call, state, delta, notes, limits)
                        if ending is None:
                            continue
                        self._strike(ending.strike, delta)
                        return await self._finalize(call, ending, state, delta, notes, extra, client)
            context = self._context(call, delta.applied_to(state), notes, retries, judge_target)
            verdicts = await self._decide(parsed, context, enforce)
            for decided in verdicts:
                self._ledger.charge_guard(call, delta, decided)
                self._steps.observed(call, decided)
            decision = verdicts[-1] if enforce and verdicts and not isinstance(verdicts[-1], Pass) else None
            if enforce:
                self._steps.step(Step(call, context, attempt, parsed, decision, latency, notes))
            if decision is None:
                for decided in verdicts:
                    if isinstance(decided, Pass):
                        self._apply(decided, call, delta, notes)
                    else:
                        self._shadow(decided, call, delta, notes)
                remember_calls(delta, parsed.tool_calls, call.policy.loop.history)
                if not enforce:
                    self._steps.step(Step(call, context, attempt, parsed, None, latency, notes))
                break
            verdict = decision
            if isinstance(verdict, Rewrite):
                self._steps.intervention(call, verdict.kind, verdict.reason, notes, attempt)
                await self._ledger.commit(call, delta, notes)
                return await self._rendered(call, dict(verdict.body), state, delta, notes, client)
            if isinstance(verdict, Nudge):
                self._strike(verdict.strike, delta)
                if attempt >= allowed:
                    verdict = Finalize(verdict.exhausted, f"the model kept failing: {verdict.reason}")
                else:
                    self._steps.intervention(call, verdict.kind, verdict.reason, notes, attempt)
                    retries[verdict.kind] += 1
                    extra.extend(verdict.turns)
                    limit = await self._next_attempt(call, state, delta, notes, limits)
                    if limit is None:
                        continue
                    verdict = limit
            elif isinstance(verdict, Finalize):
                self._strike(verdict.strike, delta)
            if not isinstance(verdict, Finalize):  # every other verdict was handled above
                raise TypeError(f"unhandled verdict {verdict!r}")
            return await self._finalize(call, verdict, state, delta, notes, extra, client)

        await self._ledger.commit(call, delta, notes)
        if stripped:  # the agent sees its own tool calls only, never the goal tool's
            whole = assembled.completion() if assembled is not None else call.adapter.reply_body(reply.response.content)
            return await self._rendered(call, call.adapter.without_calls(whole, GOAL_TOOL), state, delta, notes, client)
        if client is None:
            return self._copy(reply, state, delta, call, notes)
        if assembled is not None:
            await client.finish()
            return Outcome(200, [], delivered=True)
        return await self._rendered(call, call.adapter.reply_body(reply.response.content), state, delta, notes, client)

    # -- streams --------------------------------------------------------------------

    def _client_stream(
        self, call: ChatCall, state: SessionState, delta: SessionDelta, notes: RequestNotes
    ) -> ClientStream | None:
        if not call.stream or call.respond is None:
            return None
        return ClientStream(
            call.respond,
            lambda: self._headers(call, state, delta, notes),
            include_usage=call.adapter.include_usage(call.payload),
            keepalive=self._keepalive,
            adapter=call.adapter,
        )

    # -- steps ----------------------------------------------------------------------

    async def _decide(self, reply: Reply, context: GuardContext, enforce: bool) -> list[ReplyVerdict]:
        """The response guards' verdicts, in order. Enforced, the first that is not a Pass wins
        and ends the list; in shadow mode every guard decides, and nothing is acted on."""
        verdicts: list[ReplyVerdict] = []
        for guard in self._response_guards:
            verdict = await _decided(guard.check_reply(reply, context))
            verdicts.append(verdict)
            if enforce and not isinstance(verdict, Pass):
                break
        return verdicts

    @staticmethod
    def _context(
        call: ChatCall,
        state: SessionState,
        notes: RequestNotes,
        retries: Mapping[str, int] | None = None,
        judge_target: JudgeTarget | None = None,
    ) -> GuardContext:
        """What a guard reads about this request: the session as ``state`` shows it, the nudges
        sent so far, the request's start as its clock, and where a judge call goes."""
        return GuardContext(
            call.policy, state, call.conversation, {} if retries is None else retries, notes.started, judge_target
        )

    async def _next_attempt(
        self, call: ChatCall, state: SessionState, delta: SessionDelta, notes: RequestNotes, limits: Sequence[Limit]
    ) -> Finalize | None:
        """Before another upstream call of this request: the ending, if a request guard would
        end the session now (e.g. steps) or the call's reservation does not fit; else None."""
        ending = self._request_limit(call, delta.applied_to(state), notes)
        if ending is not None:
            return ending
        refused = await self._ledger.reserve(call, delta, notes, limits)
        return _refused(refused) if refused else None

    def _charge_cancelled(self, call: ChatCall, delta: SessionDelta, prompt_bytes: int, attempt: int) -> None:
        """A call cut off before its reply still took a step and its prompt: counted as an
        estimate (4 bytes a token), as an unfinished stream is."""
        delta.incr(FIELDS.STEPS)
        usage = Usage(prompt_bytes // 4, 0)
        self._ledger.charge(call, delta, usage, None, kind="agent" if attempt == 1 else "nudge")
        log_event(
            "call_unfinished",
            {"tenant": call.tenant, "policy": call.policy.name, "session": call.session.id, "usage_estimated": True},
        )

    def _request_limit(self, call: ChatCall, state: SessionState, notes: RequestNotes) -> Finalize | None:
        """Before another attempt: would a request guard end the session now (e.g. steps)?"""
        context = self._context(call, state, notes)
        for guard in self._request_guards:
            verdict = guard.check_request(context)
            if isinstance(verdict, Finalize):
                return verdict
        return None

    def _apply(self, verdict: Pass, call: ChatCall, delta: SessionDelta, notes: RequestNotes) -> None:
        """The bookkeeping of a reply that reaches the agent."""
        for strike in verdict.clear_strikes:
            delta.assign(FIELDS.STRIKE_PREFIX + strike, 0)
        for flag in verdict.flags:
            self._steps.flag(call, flag, notes)

    def _shadow(self, verdict: Verdict, call: ChatCall, delta: SessionDelta, notes: RequestNotes) -> None:
        """Shadow mode: count and log the decision, keep strikes as enforce would, change nothing."""
        if isinstance(verdict, Nudge | Finalize):
            self._strike(verdict.strike, delta)
        self._steps.shadow(call, verdict_name(verdict), verdict_reason(verdict), notes)

    @staticmethod
    def _strike(strike: str | None, delta: SessionDelta) -> None:
        if strike:
            delta.incr(FIELDS.STRIKE_PREFIX + strike)

    def _judge_target(self, call: ChatCall) -> JudgeTarget | None:
        """The judge's endpoint: the policy's own, or the agent's upstream with the agent's key."""
        settings = call.policy.judge
        if not settings.use_llm_judge:
            return None
        url = call.adapter.judge_url(settings.base_url) if settings.base_url else call.url
        headers: Sequence[tuple[str, str]] = call.headers
        if settings.api_key_env:
            key = os.environ.get(settings.api_key_env)
            if not key:
                return None
            headers = [("content-type", "application/json"), ("authorization", f"Bearer {key}")]
        return JudgeTarget(url, headers, settings.model or call.conversation.model, scope=call.tenant)

    async def _finalize(
        self,
        call: ChatCall,
        verdict: Finalize,
        state: SessionState,
        delta: SessionDelta,
        notes: RequestNotes,
        extra: list[Turn],
        client: ClientStream | None,
    ) -> Outcome:
        seen = await self._ledger.claim_ending(call, notes)
        if not notes.claim:  # another request of this session makes (or made) the ending
            seen = await self._ledger.await_ending(call, notes, seen or state)
            if not notes.claim:
                return await self._shared_ending(call, verdict, seen, state, delta, notes, client)
        local_only = verdict.reason == "budget_cost" and call.policy.budgets.hard_cost_cap
        ending = await self._finalizer.end(
            verdict,
            call.policy,
            call.adapter,
            call.payload,
            extra,
            call.conversation,
            call.url,
            call.headers,
            local_only=local_only,
            cap_output=verdict.reason.startswith("budget_"),
        )
        if ending.upstream_called:
            delta.incr(FIELDS.STEPS)
            self._ledger.charge(call, delta, ending.usage, ending.body.get("model"), kind="finalize")
            self._metrics.upstream_calls.labels(call.tenant, call.policy.name, "finalize").inc()
        delta.assign(FIELDS.TERMINATION, verdict.reason)
        delta.assign(FIELDS.ENDING, call.adapter.encode(ending.body).decode())
        notes.terminated = verdict.reason
        self._metrics.terminations.labels(call.tenant, call.policy.name, verdict.reason).inc()
        self._tracing.event("loopwarden.termination", {"reason": verdict.reason, "summary_via": ending.via})
        log_event(
            "termination",
            {
                "tenant": call.tenant,
                "policy": call.policy.name,
                "session": call.session.id,
                "reason": verdict.reason,
                "summary_via": ending.via,
                **({"cause": verdict.cause} if verdict.cause else {}),
            },
        )
        await self._ledger.commit(call, delta, notes)
        return await self._rendered(call, _shaped_ending(call, ending.body, client), state, delta, notes, client)

    async def _shared_ending(
        self,
        call: ChatCall,
        verdict: Finalize,
        seen: SessionState,
        state: SessionState,
        delta: SessionDelta,
        notes: RequestNotes,
        client: ClientStream | None,
    ) -> Outcome:
        """The session is ending and another request claimed the ending: answer without an
        upstream call, with the stored ending when there is one, else (it was not made in
        time) a summary of this request's own transcript, built here. This request stores
        no ending: the claimer does, and later calls replay that one."""
        if seen.termination and seen.ending:
            notes.terminated = seen.termination
            body = call.adapter.stored_ending(seen.ending)
            answer = "stored"
        else:
            notes.terminated = verdict.reason
            body = call.adapter.ending(local_summary(call.conversation, verdict.detail), model=call.conversation.model)
            answer = "local"
        self._metrics.of(self._metrics.endings_shared, call.tenant, call.policy.name, answer).inc()
        log_event(
            "ending_shared",
            {
                "tenant": call.tenant,
                "policy": call.policy.name,
                "session": call.session.id,
                "reason": notes.terminated,
                "answer": answer,
            },
        )
        await self._ledger.commit(call, delta, notes)
        return await self._rendered(call, _shaped_ending(call, body, client), state, delta, notes, client)

    # -- outcomes -------------------------------------------------------------------

    def _copy(
        self, reply: UpstreamReply, state: SessionState, delta: SessionDelta, call: ChatCall, notes: RequestNotes
    ) -> Outcome:
        return Outcome(reply.response.status_code, self._headers(call, state, delta, notes), upstream=reply)

    async def _unusable(
        self,
        reply: UpstreamReply,
        call: ChatCall,
        state: SessionState,
        delta: SessionDelta,
        notes: RequestNotes,
        client: ClientStream | None,
    ) -> Outcome:
        """An upstream error status or a body that is no completion: passed on as it came,
        unless part of a stream already reached the client (then an error event ends it)."""
        if client is None or not client.started:
            return self._copy(reply, state, delta, call, notes)
        await client.fail(UpstreamError(f"The upstream model API answered {reply.response.status_code}."))
        return Outcome(200, [], delivered=True)

    async def _rendered(
        self,
        call: ChatCall,
        body: dict[str, Any],
        state: SessionState,
        delta: SessionDelta,
        notes: RequestNotes,
        client: ClientStream | None,
    ) -> Outcome:
        """A reply the proxy wrote (an ending, a replay): JSON, or SSE for a stream."""
        if client is not None:
            await client.replace(body)
            return Outcome(200, [], delivered=True)
        headers = self._headers(call, state, delta, notes)
        adapter = call.adapter
        if call.stream:  # no client stream to write to (a caller outside the server)
            return Outcome(200, headers, adapter.streamed(body, include_usage=adapter.include_usage(call.payload)), SSE)
        return Outcome(200, headers, adapter.encode(body))

    def _headers(
        self, call: ChatCall, state: SessionState, delta: SessionDelta, notes: RequestNotes
    ) -> list[tuple[bytes, bytes]]:
        after = delta.applied_to(state)
        headers = [
            (b"x-loopwarden-session", call.session.id.encode()),
            (b"x-loopwarden-policy", call.policy.name.encode()),
            (b"x-loopwarden-step", str(after.steps).encode()),
            (b"x-loopwarden-interventions", (",".join(notes.interventions) or "none").encode()),
            (b"x-loopwarden-budget-remaining", remaining(after, call.policy, self._clock()).header().encode()),
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

    @staticmethod
    def _chat_attributes(call: ChatCall, attempt: int) -> dict[str, str | int]:
        return {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": call.conversation.model or "",
            "loopwarden.attempt": attempt,
        }

    def _log_goal_step(
        self,
        call: ChatCall,
        state: SessionState,
        delta: SessionDelta,
        retries: Mapping[str, int],
        attempt: int,
        reply: Reply,
        decision: Nudge,
        latency: float,
        notes: RequestNotes,
    ) -> None:
        """A step goal mode answered itself: logged (and recorded) like any other step."""
        context = self._context(call, delta.applied_to(state), notes, retries)
        self._steps.step(Step(call, context, attempt, reply, decision, latency, notes))


async def _decided(verdict: ReplyVerdict | Awaitable[ReplyVerdict]) -> ReplyVerdict:
    """A guard's verdict, awaited when the guard needed I/O to decide (the judge)."""
    return await verdict if inspect.isawaitable(verdict) else verdict


def _refused(limit: str) -> Finalize:
    """The ending of a call whose reservation did not fit."""
    return Finalize(limit, f"the next call would not fit in the session's {limit.removeprefix('budget_')} budget")


def _reached_model(delta: SessionDelta) -> bool:
    """The request made an upstream call (or ended the session): its delta is worth committing.
    One that reached no model (refused upstream, or failed before) gives back its reservations only."""
    return delta.increments.get(FIELDS.STEPS, 0) > 0 or FIELDS.TERMINATION in delta.assignments


def _usage_attributes(reply: Reply) -> dict[str, str | int | float | bool]:
    return {
        "gen_ai.response.model": reply.model or "",
        "gen_ai.usage.input_tokens": reply.usage.prompt_tokens,
        "gen_ai.usage.output_tokens": reply.usage.completion_tokens,
    }

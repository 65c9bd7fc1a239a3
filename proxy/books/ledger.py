"""The session's books: load (and reserve) before a request, charge what it used, commit once.

Every store round trip of a request happens here: one load or admission at the start (with
the tenant's rolling-day admission when the tenant has caps; a ping for a derived run's first
request under ``closed``, which reads nothing else), one commit at the end (and the tenant's
settlement). What to do when the store fails is the policy's call:
``state_fail_mode: open`` serves with what the request shows, ``closed`` answers 503.

The admission reserves the call's step with its tokens and cost, so parallel calls cannot
overshoot, and a refused admission claims the session's ending in the same round trip: of
parallel requests that find the session over, one makes the summary call (any other ending
claims it with one round trip of its own). A request that reached no model (the upstream
refused it, or it never got there) commits nothing but the return of its reservations.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Sequence

from proxy.books.budgets import (
    TENANT_DAY_TTL_SECS,
    active_pause_ms,
    tenant_day_key,
    tenant_day_limits,
    tenant_day_settlement,
)
from proxy.books.pricing import MICROS, PriceTable
from proxy.books.tenant_day import day_refusal
from proxy.errors import ServiceUnavailable
from proxy.exchange import Usage
from proxy.observe.metrics import Metrics
from proxy.observe.timing import timed
from proxy.request import AgentRequest, RequestNotes
from proxy.session.base import FIELDS, Claim, Limit, SessionDelta, SessionState, SessionStore, StoreUnavailable
from proxy.session.limits import admit_in_place
from proxy.verdict import Verdict

__all__ = ["ENDING_LEASE_MS", "ENDING_WAIT_SECS", "Ledger", "reached_model"]


ENDING_LEASE_MS = 120_000
"""How long a claim on a session's ending holds if its request dies without giving it back:
about the longest a summary call takes, so a second one runs only after a crash."""
ENDING_WAIT_SECS = 15.0
"""How long a request waits for the ending a parallel request of its session is making,
before it answers with a summary built locally."""


class Ledger:
    def __init__(
        self,
        store: SessionStore,
        metrics: Metrics,
        prices: PriceTable,
        clock: Callable[[], float],
        ending_wait_secs: float = ENDING_WAIT_SECS,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._prices = prices
        self._clock = clock
        self._losses = 0
        self._ending_wait = ending_wait_secs

    async def open(
        self, request: AgentRequest, limits: Sequence[Limit], notes: RequestNotes
    ) -> tuple[SessionState, SessionDelta]:
        """Load the session (reserving this call's budget share in the same round trip)."""
        fresh = request.session.fresh
        try:
            if request.store_failure is not None:  # its chain's lookup failed: one timeout per request
                raise StoreUnavailable(request.store_failure)
            if fresh and request.session.derived:
                # A derived run's first request: its session is named by the reply it will
                # deliver (see proxy.session.identity), so nothing is read or reserved in the
                # store yet; its one call is admitted against an empty session. Failing closed,
                # the store must answer first: a call it could not book never goes upstream.
                if request.policy.state_fail_mode == "closed":
                    with self._timed("ping"):
                        await self._store.ping()
                state, reserved = SessionState(), []
                notes.refused = admit_in_place({}, limits) if limits else None
                notes.claim = True  # should it end, no other request can be making this run's ending
            elif limits:
                with self._timed("admit"):
                    admission = await self._store.admit(
                        request.session.key,
                        limits,
                        request.policy.session_ttl_secs,
                        replace=fresh,
                        claim=self._claim(notes),
                    )
                state, notes.refused = admission.state, admission.refused
                if admission.refused:
                    notes.claim = admission.claimed
                reserved = [] if admission.refused else list(limits)
                fresh = False  # the admission already started a fresh session afresh
            else:
                if fresh:
                    state = SessionState()
                else:
                    with self._timed("load"):
                        state = await self._store.load(request.session.key)
                reserved = []
        except StoreUnavailable as exc:
            self._store_failed(request, "load", exc)
            if request.policy.state_fail_mode == "closed":
                raise _unavailable() from None
            notes.degraded = True
            state, reserved = SessionState(), []
        else:
            self._book_losses()
            if (
                request.policy.state_fail_mode == "closed"  # (the common case decided without a coroutine)
                and request.conversation.continues
                and await self._lost_unseen(request, state, notes.started)
            ):
                await self._refuse_lost(request, reserved, notes)
        # The request's opening changes, written straight into the delta's maps (as incr,
        # default and assign would: every request makes them).
        increments: dict[str, int] = {}
        for limit in reserved:  # settled with the real usage at commit
            increments[limit.reserved] = increments.get(limit.reserved, 0) - limit.amount
        increments[FIELDS.TURNS] = increments.get(FIELDS.TURNS, 0) + 1
        started = notes.started
        pause = active_pause_ms(state, started, request.policy.budgets.idle_gap_secs)
        increments[FIELDS.ACTIVE_MS] = increments.get(FIELDS.ACTIVE_MS, 0) + pause
        second = str(int(started))
        assignments = {FIELDS.LAST_SEEN: second, FIELDS.LAST_SEEN_MS: str(int(started * 1000))}
        return state, SessionDelta(increments, assignments, {FIELDS.FIRST_SEEN: second}, replace=fresh)

    @staticmethod
    def _claim(notes: RequestNotes) -> Claim:
        return Claim(int(notes.started * 1000), ENDING_LEASE_MS)

    async def claim_ending(self, request: AgentRequest, notes: RequestNotes) -> SessionState | None:
        """Ask for the right to produce the session's ending (once per request: a refused
        admission has already asked). Returns the state the claim saw, None if not asked here.

        Without a store (it failed) the request produces its own ending, as before claims.
        """
        if notes.claim is not None:
            return None
        if notes.degraded:
            notes.claim = True
            return None
        try:
            with self._timed("claim"):
                seen = await self._store.claim_ending(
                    request.session.key, self._claim(notes), request.policy.session_ttl_secs
                )
        except StoreUnavailable as exc:
            self._store_failed(request, "claim", exc)
            notes.claim = True
            return None
        notes.claim = seen.claimed
        return seen.state

    async def await_ending(self, request: AgentRequest, notes: RequestNotes, seen: SessionState) -> SessionState:
        """Another request holds the ending's claim: wait (a little, polling) for the ending it
        stores, so parallel requests end alike. When the claim is given back or lapses with no
        ending stored, this request tries to take it (``notes.claim`` then says it did). After
        ``ending_wait_secs``, or when the store fails, the state as last seen."""
        deadline = time.monotonic() + self._ending_wait
        pause = 0.05
        while not seen.ending and time.monotonic() < deadline:
            await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 0.5)
            try:
                with self._timed("load"):
                    seen = await self._store.load(request.session.key)
                if seen.ending or seen.counter(FIELDS.ENDING_CLAIM) > int(self._clock() * 1000):
                    continue
                with self._timed("claim"):
                    taken = await self._store.claim_ending(
                        request.session.key, self._claim(notes), request.policy.session_ttl_secs
                    )
            except StoreUnavailable as exc:
                self._store_failed(request, "claim", exc)
                break
            seen = taken.state
            if taken.claimed:
                notes.claim = True
                break
        return seen

    async def reserve(
        self, request: AgentRequest, delta: SessionDelta, notes: RequestNotes, limits: Sequence[Limit]
    ) -> str | None:
        """Before another upstream call of this request (a nudge, a goal turn): reserve its
        step (and tokens, cost) as the admission did, so parallel requests cannot overshoot
        with their retries either. Returns the limit that refused (the ending is claimed with
        it), or None. One round trip, only on the intervention path; none without budgets to
        reserve against (shadow mode, a fresh session, a store that already failed)."""
        if not limits or delta.replace or notes.degraded:
            return None
        try:
            with self._timed("admit"):
                admission = await self._store.admit(
                    request.session.key,
                    limits,
                    request.policy.session_ttl_secs,
                    replace=False,
                    claim=self._claim(notes),
                )
        except StoreUnavailable as exc:
            self._store_failed(request, "admit", exc)
            notes.degraded = True
            return None
        if admission.refused:
            notes.claim = admission.claimed
            return admission.refused
        for limit in limits:
            delta.incr(limit.reserved, -limit.amount)  # settled with the real usage at commit
        return None

    async def settle(self, request: AgentRequest, delta: SessionDelta, notes: RequestNotes) -> None:
        """Commit a request that reached a model (or ended the session); release one that did not."""
        await (self.commit if reached_model(delta) else self.release)(request, delta, notes)

    def charge_cancelled(self, request: AgentRequest, delta: SessionDelta, prompt_bytes: int, attempt: int) -> None:
        """A call cut off before its reply still took a step and its prompt: counted as an
        estimate (4 bytes a token), as an unfinished stream is."""
        delta.incr(FIELDS.STEPS)
        self.charge(request, delta, Usage(prompt_bytes // 4, 0), None, kind="agent" if attempt == 1 else "nudge")
        request.log("call_unfinished", {"usage_estimated": True})

    async def release(self, request: AgentRequest, delta: SessionDelta, notes: RequestNotes) -> None:
        """Settle a request that reached no model: give back what it reserved, record nothing
        else (no turn, no session created for a call the upstream refused)."""
        released = SessionDelta()
        for name, by in delta.increments.items():
            if name.startswith(FIELDS.RESERVED_PREFIX) and by < 0:
                released.incr(name, by)
        await self.commit(request, released, notes, touch=False)

    def _book_losses(self) -> None:
        """Count the data losses the store found since the last look (the store logs each)."""
        losses = self._store.losses
        if losses > self._losses:
            self._metrics.state_resets.inc(losses - self._losses)
            self._losses = losses

    async def _lost_unseen(self, request: AgentRequest, state: SessionState, now: float) -> bool:
        """A fail-closed session that the store has forgotten, and no client was told yet.

        After the store lost its data (see :meth:`SessionStore.lost_at`), a request that
        continues a conversation (:attr:`~proxy.exchange.Conversation.continues`) but finds no
        record of its session cannot be told apart from one whose budgets were wiped; one that
        continues nothing is provably new. The window is the session TTL: any session older
        than the loss would have expired anyway. A run's opening (not loaded) is read here.
        Asked only of a request that fails closed and continues a conversation."""
        if request.session.fresh and request.session.derived:  # read for its mark, and to notice a loss
            try:
                with self._timed("load"):
                    state = await self._store.load(request.session.key)
            except StoreUnavailable as exc:
                self._store_failed(request, "load", exc)
                raise _unavailable() from None
            self._book_losses()
        lost = self._store.lost_at(request.session.key)
        if lost is None or now - lost > request.policy.session_ttl_secs:
            return False
        return FIELDS.TURNS not in state.values and FIELDS.STATE_LOST not in state.values

    async def _refuse_lost(self, request: AgentRequest, reserved: Sequence[Limit], notes: RequestNotes) -> None:
        """Tell the client once, and record that it was told: its next call starts the
        session's books afresh, knowingly. Reservations made by this call are given back."""
        mark = SessionDelta()
        mark.assign(FIELDS.STATE_LOST, int(notes.started))
        for limit in reserved:
            mark.incr(limit.reserved, -limit.amount)
        if notes.claim:
            mark.assign(FIELDS.ENDING_CLAIM, 0)
        with contextlib.suppress(StoreUnavailable):
            await self._store.commit(request.session.key, mark, request.policy.session_ttl_secs)
        request.log("state_lost_refused", {}, logging.WARNING)
        raise ServiceUnavailable(
            "This session's state was lost (the state store restarted empty), and this policy fails "
            "closed: the session is not restarted with fresh budgets behind your back. The loss is "
            "now recorded; send the request again to continue this session with fresh budgets, "
            "or start a new session.",
            headers={"x-should-retry": "false"},
        )

    async def admit_tenant(self, request: AgentRequest, delta: SessionDelta, notes: RequestNotes) -> None:
        """The tenant's rolling-day caps: a call that does not fit gets a 429 with Retry-After.

        Not when the session's load already failed (fail-open): a frozen store costs one
        timeout per request, and serving without state means without the tenant's day too.
        """
        if notes.degraded:
            return
        limits = tenant_day_limits(request, self._prices)
        if not limits:
            return
        try:
            admission = await self._store.admit_window(tenant_day_key(request.tenant), limits, notes.started)
        except StoreUnavailable as exc:
            self._store_failed(request, "admit_tenant", exc)
            if request.policy.state_fail_mode == "closed":
                raise ServiceUnavailable("Tenant budget state is unavailable; try again shortly.") from None
            notes.degraded = True
            return
        if admission.refused is not None:
            raise day_refusal(self._metrics, request.tenant, request.policy.name, admission)
        notes.daily = limits

    def charge_guard(self, request: AgentRequest, delta: SessionDelta, verdict: Verdict | None) -> None:
        """Tokens a guard spent deciding (the judge) count in the session, metered apart."""
        spent = getattr(verdict, "spent", None)
        if spent is not None and spent.total:
            self.charge(request, delta, spent, request.policy.judge.model or request.conversation.model, kind="judge")

    def charge(
        self, request: AgentRequest, delta: SessionDelta, usage: Usage, model: str | None, kind: str = "agent"
    ) -> None:
        """Count a call's tokens and cost (an unpriced model is counted, not guessed)."""
        tenant, policy, tokens = request.tenant, request.policy.name, self._metrics.tokens
        if usage.prompt_tokens:
            self._metrics.of(tokens, tenant, policy, kind, "prompt").inc(usage.prompt_tokens)
            delta.incr(FIELDS.TOKENS_IN, usage.prompt_tokens)
        if usage.completion_tokens:
            self._metrics.of(tokens, tenant, policy, kind, "completion").inc(usage.completion_tokens)
            delta.incr(FIELDS.TOKENS_OUT, usage.completion_tokens)
        if not usage.total:
            return
        cost = self._prices.cost_micros(model or request.conversation.model, usage)
        if cost is None:
            delta.incr(FIELDS.UNPRICED)
            self._metrics.of(self._metrics.unpriced_calls, tenant, policy).inc()
        elif cost:
            delta.incr(FIELDS.COST_MICROS, cost)
            self._metrics.of(self._metrics.cost, tenant, policy).inc(cost / MICROS)

    async def commit(
        self, request: AgentRequest, delta: SessionDelta, notes: RequestNotes, *, touch: bool = True
    ) -> None:
        """Write what the request did, once. ``touch``: it counts as activity (not a release)."""
        notes.committed = True
        if notes.claim:
            delta.assign(FIELDS.ENDING_CLAIM, 0)  # stored with the ending, or given back for another to take
        if notes.degraded and not _holds_reservations(delta):
            # A store call of this request already failed (fail-open got it this far): a
            # frozen store costs one timeout per request, not one per round trip. This
            # request's usage goes unbooked, as serving without state implies. A request
            # that did reserve budget (its load worked, a later call failed) still commits,
            # or the reservation would stay held until the session expires.
            return
        if not delta and not notes.daily:
            return
        if touch:
            ended = self._clock()
            delta.incr(FIELDS.ACTIVE_MS, max(0, int((ended - notes.started) * 1000)))
            delta.assign(FIELDS.LAST_SEEN_MS, int(ended * 1000))
        writes = []
        if delta:
            writes.append((request.session.key, delta, request.policy.session_ttl_secs, True))
        if notes.daily:
            # Unordered: no admission of the tenant waits for it. Like every command it runs
            # in the connection's order; only while it is being resent (a NOSCRIPT, a broken
            # connection) can an admission miss it, and then miss no more than this request
            # used beyond what it reserved: the tenant's day is a rolling cap, not a ledger.
            settlement = tenant_day_settlement(delta, notes.started, notes.daily)
            writes.append((tenant_day_key(request.tenant), settlement, TENANT_DAY_TTL_SECS, False))
        if self._store.in_process:
            await self._write(request, writes, notes)
            return
        if request.policy.state_fail_mode == "open":
            # Sent now, confirmed after the reply has gone: the reply does not wait for the
            # store's answer. A commit that then fails is counted and logged like any other;
            # the client can no longer be told (``closed`` waits, and tells it).
            writes = [write for write in writes if not self._sent(request, *write)]
            if not writes:
                return
        # A request is cancelled when its client leaves (streamed or not), and a write already
        # under way must still land whole, the session's and the tenant's day: shielded, unless
        # the store writes without suspending (then no cancellation can land in between).
        await asyncio.shield(self._write(request, writes, notes))

    async def _write(self, request: AgentRequest, writes: Sequence[_Write], notes: RequestNotes) -> None:
        try:
            for key, delta, ttl_seconds, _ in writes:
                with self._timed("commit"):
                    await self._store.commit(key, delta, ttl_seconds)
            self._book_losses()
        except StoreUnavailable as exc:
            self._store_failed(request, "commit", exc)
            notes.degraded = True

    def _sent(self, request: AgentRequest, key: str, delta: SessionDelta, ttl_seconds: int, ordered: bool) -> bool:
        """Send one commit without waiting for its answer (see :meth:`SessionStore.start_commit`);
        False when the store cannot."""
        started = self._store.start_commit(key, delta, ttl_seconds, ordered=ordered)
        if started is None:
            return False
        started.add_done_callback(functools.partial(self._confirmed, request, time.perf_counter()))
        return True

    def _confirmed(self, request: AgentRequest, began: float, outcome: asyncio.Future[None]) -> None:
        """A sent commit's answer: booked as an awaited commit's would be."""
        self._metrics.of(self._metrics.state_latency, "commit").observe(time.perf_counter() - began)
        error = outcome.exception() if not outcome.cancelled() else StoreUnavailable("commit abandoned")
        if isinstance(error, StoreUnavailable):
            self._store_failed(request, "commit", error)
        elif error is None:
            self._book_losses()

    def _store_failed(self, request: AgentRequest, operation: str, exc: StoreUnavailable) -> None:
        """Every store failure is counted and logged alike; what follows is the caller's (the policy's fail mode)."""
        self._metrics.state_errors.labels(operation, request.policy.state_fail_mode).inc()
        request.log("state_store_error", {"operation": operation, "error": str(exc)}, logging.WARNING)

    def _timed(self, operation: str) -> timed:
        """A store call's latency, observed into its operation's series."""
        return timed(self._metrics.of(self._metrics.state_latency, operation))


_Write = tuple[str, SessionDelta, int, bool]
"""A commit to make: the key, what to apply, the TTL, whether later calls on the key wait for it."""


def _unavailable() -> ServiceUnavailable:  # the fail-closed answer when the session's state cannot be read
    return ServiceUnavailable("Session state is unavailable and this policy fails closed; try again shortly.")


def _holds_reservations(delta: SessionDelta) -> bool:
    """The delta gives back a budget reservation the session's admission took."""
    return any(
        delta.increments.get(name, 0) < 0
        for name in (FIELDS.RESERVED_STEPS, FIELDS.RESERVED_TOKENS, FIELDS.RESERVED_COST)
    )


def reached_model(delta: SessionDelta) -> bool:
    """The request made an upstream call (or ended the session): its delta is worth committing.
    One that reached no model (refused upstream, or failed before) gives back its reservations only."""
    return delta.increments.get(FIELDS.STEPS, 0) > 0 or FIELDS.TERMINATION in delta.assignments

"""What a session remembers between calls, and the protocol every store implements.

A session's state is a flat map of counters and values, so a store can keep it as one
Redis hash and apply a step's changes (a :class:`SessionDelta`) in one atomic script:
counters are incremented, never read-modified-written, so concurrent requests of one
session lose no update. Field names are the schema; :class:`SessionState` gives them types.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "FIELDS",
    "Admission",
    "Claim",
    "Grant",
    "GrantOutcome",
    "Limit",
    "Listed",
    "SessionDelta",
    "SessionState",
    "SessionStore",
    "StoreUnavailable",
    "TimelineEvent",
    "TimelinePage",
    "WindowLimit",
    "only_released",
]


class FIELDS:
    """Names of the fields of a session hash."""

    STEPS = "steps"
    TURNS = "turns"
    TOKENS_IN = "tokens_in"
    TOKENS_OUT = "tokens_out"
    FIRST_SEEN = "first_seen"
    LAST_SEEN = "last_seen"
    TERMINATION = "termination"
    ENDING = "ending"
    ENDING_WIRE = "ending_wire"
    """The wire format the stored ending is written in (absent: the format of every request)."""
    STRIKE_PREFIX = "strike:"
    COST_MICROS = "cost_micros"
    LAST_SEEN_MS = "last_seen_ms"
    ACTIVE_MS = "active_ms"
    RESERVED_TOKENS = "reserved_tokens"
    RESERVED_COST = "reserved_cost_micros"
    RESERVED_STEPS = "reserved_steps"
    RESERVED_PREFIX = "reserved_"
    """Every reservation field starts so; a session holding only zero reservations is no session."""
    ENDING_CLAIM = "ending_claim"
    """Until when (epoch ms) one request holds the right to produce the session's ending."""
    UNPRICED = "unpriced_calls"
    TASK = "task"
    """The run's task (its first user turn), kept for a request that continues a stored
    response and so carries only its new items: what the completion judge checks against."""
    CALL_COUNT_PREFIX = "fp:"
    """How often the run received each tool call (by fingerprint)."""
    NEAR_COUNT_PREFIX = "fpn:"
    """How often the run received each call but for case and spacing (by near fingerprint)."""
    CALL_SEQUENCE = "fp_seq"
    """The run's last tool calls in order (fingerprints), for cycles."""
    RESULT_SEQUENCE = "result_seq"
    """The run's last tool results in order (digest:call-id digest), for no-progress on chains."""
    RUN = "run"
    """The run's number within the session (absent: the first, which began at ``first_seen``;
    not written on every request, which would cost every commit two fields)."""
    RUN_STARTED_MS = "run_started_ms"
    RUN_SAID = "run_said"
    """The ended request's human instructions (:func:`proxy.session.runs.instruction_mark`)."""
    STATE_LOST = "state_lost_at"
    """When the proxy told this session's client its state had been lost (fail-closed only)."""
    GRANTED_STEPS = "granted_steps"
    GRANTED_TOKENS = "granted_tokens"
    GRANTED_COST = "granted_cost_micros"
    GRANTED_ACTIVE_MS = "granted_active_ms"
    """What the sessions API granted the session on top of its policy's budgets, in total."""
    POLICY = "policy"
    """The policy the session's requests run under (what the sessions list filters by)."""
    CLIENT = "client"
    """The agent client, from its User-Agent's first product (``codex_exec``, ``claude-cli``...)."""
    TIMELINE_TOTAL = "timeline_total"
    """Events ever appended to the session's timeline: the first kept one is ``total - kept``."""
    TIMELINE_DROPPED = "timeline_dropped"
    """Events the timeline's cap pushed out (the oldest go first)."""


class StoreUnavailable(Exception):
    """The state store did not answer in time or at all."""

    @classmethod
    def at(cls, target: str, operation: str, error: BaseException) -> StoreUnavailable:
        """A failed call, naming where the store is (``target``, never credentials: redis-py's
        messages name the host and port, never the URL) and what went wrong."""
        detail = str(error).strip()[:200]
        return cls(f"{operation} failed at {target}: {type(error).__name__}" + (f" ({detail})" if detail else ""))


@dataclass(frozen=True, slots=True)
class Limit:
    """Admit ``amount`` only if the sum of ``used`` fields, plus ``reserved``, plus it, fits ``limit``.

    Admission adds ``amount`` to ``reserved`` in the same atomic step; the commit that
    follows takes it back and adds what was really used. Parallel calls therefore cannot
    overshoot: each sees the others' reservations.
    """

    name: str
    used: tuple[str, ...]
    reserved: str
    amount: int
    limit: int
    granted: str = ""
    """A field whose value is added to ``limit`` in the same atomic step ("": none): what the
    sessions API granted the session, read next to the usage, so a grant and an admission
    never race."""


@dataclass(frozen=True, slots=True)
class Grant:
    """Add ``amount`` to the field ``granted`` only if its total stays within ``ceiling``."""

    budget: str
    """The budget as the sessions API names it (``steps``, ``tokens``, ``cost_usd``, ``active_secs``)."""
    granted: str
    amount: int
    ceiling: int


@dataclass(frozen=True, slots=True)
class GrantOutcome:
    state: SessionState
    """The session after the grant (as found, when refused); empty when there is no session."""
    refused: str | None = None
    """The budget of the first grant over its ceiling (nothing was granted), or None."""


@dataclass(frozen=True, slots=True)
class WindowLimit:
    """A rolling-window limit over hourly buckets ``{prefix}{hour}`` (e.g. a tenant's day)."""

    name: str
    prefix: str
    reserved: str
    amount: int
    limit: int
    window_secs: int = 86_400
    bucket_secs: int = 3_600


@dataclass(frozen=True, slots=True)
class Claim:
    """Ask for the right to produce the session's ending, held until ``now_ms + lease_ms``.

    Granted when no ending is stored and no other claim is live: of parallel requests that
    all find the session over, one makes the summary call and stores the ending. A claimer
    that fails gives the claim back when it commits; one that dies loses it when the lease
    runs out, so no session waits forever for its ending.
    """

    now_ms: int
    lease_ms: int


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    """One entry of a session's timeline (a step, an intervention, a judge call, an ending...).

    ``fields`` hold only scalars: what happened, never a key, and message text only where the
    operator turned content logging or recording on."""

    kind: str
    at_ms: int
    fields: Mapping[str, str | int | float | bool | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TimelinePage:
    """Events from ``first`` on (their numbers from the session's start), oldest first."""

    events: list[tuple[int, TimelineEvent]] = field(default_factory=list)
    total: int = 0
    """Events ever appended (the next one gets this number)."""
    dropped: int = 0
    """Events the cap pushed out (numbers below ``total - kept``)."""


@dataclass(frozen=True, slots=True)
class Listed:
    """One session of an index: its id, when last seen (epoch ms) and its summary."""

    session_id: str
    last_seen_ms: int
    summary: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Admission:
    state: SessionState
    refused: str | None = None
    """The name of the limit that did not fit, or None when admitted."""
    retry_after: float | None = None
    """For window limits: seconds until enough of the window has passed."""
    claimed: bool = False
    """A refused admission (or :meth:`SessionStore.claim_ending`) got the ending's claim."""


@dataclass(frozen=True, slots=True)
class SessionState:
    """A read-only snapshot of one session, as loaded at the start of a request."""

    values: Mapping[str, str] = field(default_factory=dict)

    def counter(self, name: str) -> int:
        raw = self.values.get(name)  # _as_int inlined: read ~20 times a request
        if raw is None:
            return 0
        try:
            return int(raw)
        except ValueError:
            return 0

    @property
    def steps(self) -> int:
        """Upstream model calls made for this session, nudges and endings included."""
        return self.counter(FIELDS.STEPS)

    @property
    def turns(self) -> int:
        """Requests the agent sent in this session."""
        return self.counter(FIELDS.TURNS)

    def items(self, name: str) -> list[str]:
        """A bounded list field (see :meth:`SessionDelta.append`)."""
        raw = self.values.get(name)
        return raw.split(",") if raw else []

    def strikes(self, kind: str) -> int:
        return self.counter(FIELDS.STRIKE_PREFIX + kind)

    @property
    def termination(self) -> str | None:
        """Why the session ended, or None while it runs."""
        return self.values.get(FIELDS.TERMINATION) or None

    @property
    def ending(self) -> str | None:
        """The ending reply (JSON) replayed to every later call of an ended session."""
        return self.values.get(FIELDS.ENDING) or None

    @property
    def is_new(self) -> bool:
        return not self.values


@dataclass(slots=True)
class SessionDelta:
    """The changes one request makes: increments, assignments, first-time values."""

    increments: dict[str, int] = field(default_factory=dict)
    assignments: dict[str, str] = field(default_factory=dict)
    defaults: dict[str, str] = field(default_factory=dict)
    """Set only where the field is absent (e.g. ``first_seen``)."""
    replace: bool = False
    """Drop the stored state first: the request starts the session afresh."""
    appends: dict[str, tuple[list[str], int]] = field(default_factory=dict)
    """Bounded lists kept as comma-separated fields: name → (items to add, items to keep)."""
    events: list[TimelineEvent] = field(default_factory=list)
    """Appended to the session's timeline by the same atomic commit."""

    def event(self, kind: str, at_ms: int, **fields: str | int | float | bool | None) -> None:
        """Add one event to the session's timeline (committed with the rest of the delta)."""
        self.events.append(TimelineEvent(kind, at_ms, fields))

    def incr(self, name: str, by: int = 1) -> None:
        increments = self.increments
        increments[name] = increments.get(name, 0) + by

    def assign(self, name: str, value: str | int | float) -> None:
        """Set ``name``; an empty value removes it (a counter then counts from 0 again)."""
        self.assignments[name] = value if type(value) is str else str(value)
        if name in self.increments:
            del self.increments[name]

    def default(self, name: str, value: str | int | float) -> None:
        self.defaults[name] = str(value)

    def append(self, name: str, item: str, keep: int) -> None:
        """Add ``item`` (no commas) to the list ``name``, keeping its last ``keep`` items."""
        listed = self.appends.get(name)
        if listed is None:
            self.appends[name] = ([item], keep)
        else:
            listed[0].append(item)
            self.appends[name] = (listed[0], keep)

    def applied_to(self, state: SessionState) -> SessionState:
        """The state as it will be after commit, if no one else writes meanwhile."""
        values = {} if self.replace else dict(state.values)
        self.apply(values)
        return SessionState(values)

    def apply(self, values: dict[str, str]) -> None:
        """Apply the delta to ``values`` in place (the stored state is dropped first when
        ``replace``, by the caller: :meth:`applied_to` starts from an empty map then)."""
        for name, value in self.defaults.items():
            if name not in values:
                values[name] = value
        for name, value in self.assignments.items():
            if value:
                values[name] = value
            elif name in values:
                del values[name]
        for name, by in self.increments.items():
            raw = values.get(name)
            if raw is None:
                values[name] = str(by)
                continue
            try:
                values[name] = str(int(raw) + by)
            except ValueError:
                values[name] = str(by)
        for name, (items, keep) in self.appends.items():
            current = values.get(name)
            values[name] = ",".join([*current.split(","), *items][-keep:] if current else items[-keep:])

    def __bool__(self) -> bool:
        return bool(self.increments or self.assignments or self.defaults or self.replace or self.appends or self.events)


class SessionStore(Protocol):
    """Where session state lives. Keys are already namespaced by tenant."""

    losses: int
    """Data losses detected so far (the server restarted empty, or was flushed)."""
    in_process: bool
    """Every operation completes without suspending (no I/O): a request cancelled while it
    writes cannot be interrupted half-way, so the ledger needs no shield (a task per request)."""

    def lost_at(self, key: str) -> float | None:
        """When the store found the data of ``key`` lost (None: never), so fail-closed
        sessions are not silently restarted with fresh budgets."""
        ...

    async def load(self, key: str) -> SessionState:
        """The session's state in one round trip; an empty state for an unknown key."""
        ...

    async def commit(self, key: str, delta: SessionDelta, ttl_seconds: int) -> SessionState:
        """Apply ``delta`` atomically, refresh the TTL, and return the resulting state.

        A session left with nothing but zero reservations (a call that reserved, then was
        refused upstream, and gave its reservations back) is dropped: it never existed.
        """
        ...

    async def record(self, key: str, values: Mapping[str, str], ttl_seconds: int) -> None:
        """Set ``values`` on ``key`` and its TTL: a record that is no session (a Responses chain
        pointer), without a commit's books (no timeline, no listing, no loss watch)."""
        ...

    def start_commit(
        self, key: str, delta: SessionDelta, ttl_seconds: int, *, ordered: bool = True
    ) -> asyncio.Future[None] | None:
        """Send a commit at once, without suspending, and return the future of its outcome
        (failed with :class:`StoreUnavailable`), so the reply need not wait for the store's
        answer; None when this store cannot (then :meth:`commit`). With ``ordered``, every
        later call of this store on ``key`` sees the commit, even one that had to be resent;
        without, only the order of one connection holds: a call made while the commit is
        being resent may miss it."""
        ...

    async def reset(self, key: str) -> bool:
        """Forget the session (its timeline and its listing too); True when there was something to forget."""
        ...

    async def timeline(self, key: str, first: int, count: int) -> TimelinePage:
        """Up to ``count`` of the session's kept events numbered ``first`` or later, oldest first."""
        ...

    async def sessions(self, namespace: str, before: tuple[int, str] | None, count: int) -> list[Listed]:
        """Up to ``count`` of the namespace's listed sessions, newest first: those seen before
        ``before`` (last seen ms, id; ties broken by id, descending), or the newest."""
        ...

    async def namespaces(self, count: int) -> list[str]:
        """Up to ``count`` namespaces with listed sessions, their most recently seen session's
        first: what an operator who reads every tenant walks when there is no tenants file to
        name them (each caller of the open tenant has a namespace of its own). Off the request
        path: a store may find them slowly (Redis scans its keyspace) and reuse what it found
        for a few seconds."""
        ...

    async def admit(
        self, key: str, limits: Sequence[Limit], ttl_seconds: int, *, replace: bool, claim: Claim | None = None
    ) -> Admission:
        """Atomically check every limit and reserve all amounts, or none; returns the state too.

        ``replace`` first drops the stored state (a fresh session), as a commit would. When a
        limit refuses and ``claim`` is given, the ending is claimed in the same step (the
        refused call is about to end the session).
        """
        ...

    async def claim_ending(self, key: str, claim: Claim, ttl_seconds: int) -> Admission:
        """Claim the right to produce the session's ending (see :class:`Claim`), atomically."""
        ...

    async def admit_window(self, key: str, limits: Sequence[WindowLimit], now: float) -> Admission:
        """Like :meth:`admit` over rolling windows of hourly buckets; drops expired buckets."""
        ...

    async def grant(
        self, key: str, grants: Sequence[Grant], lift: Sequence[str], delta: SessionDelta, ttl_seconds: int
    ) -> GrantOutcome:
        """Atomically: refuse unless the session exists and every grant stays within its ceiling;
        else clear a stored ending whose reason is in ``lift`` and commit ``delta`` (the grants'
        increments, its timeline event) as :meth:`commit` does."""
        ...

    async def ping(self) -> None:
        """Raise :class:`StoreUnavailable` when the store cannot serve."""
        ...

    async def settled(self) -> None:
        """Every commit sent without waiting (see :meth:`start_commit`) has landed or failed:
        what a reader that must see them (a drain, a test of the books) waits for. Unordered
        ones, such as a tenant's settlement, are otherwise only eventually visible."""
        ...

    async def aclose(self) -> None: ...


def only_released(values: Mapping[str, str]) -> bool:
    """Nothing but reservations given back: what a refused call leaves of a session it opened."""
    return all(name.startswith(FIELDS.RESERVED_PREFIX) and _as_int(value) == 0 for name, value in values.items())


def _as_int(raw: str | None) -> int:
    """A stored counter; 0 when absent or not a number."""
    try:
        return int(raw) if raw is not None else 0
    except ValueError:
        return 0

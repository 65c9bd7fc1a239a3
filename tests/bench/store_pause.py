"""Event-loop pauses from the in-memory store's own housekeeping, with many sessions live.

Fills a :class:`~proxy.session.memory.MemoryStore` with ``--sessions`` sessions (the fields
a plain request commits), then keeps committing new sessions at
``--rate`` per second once they have expired (the store's clock jumps an hour), and reports
the longest single commit and the longest busy stretch a 1 ms ticker saw, in CPU time (wall
time on a shared machine also counts other processes' turns). Expiry that walked the sessions would show up
here as a commit of many milliseconds; the timing wheel keeps every commit to a few
microseconds of housekeeping.

    .venv/bin/python tests/bench/store_pause.py --sessions 200000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time

from proxy.session.base import FIELDS, SessionDelta
from proxy.session.identity import session_key
from proxy.session.memory import MemoryStore


def plain_request(now: float) -> SessionDelta:
    """What one plain request of a new session commits (see proxy.books.ledger)."""
    delta = SessionDelta(replace=True)
    delta.incr(FIELDS.RESERVED_STEPS, 0)
    delta.incr(FIELDS.TURNS)
    delta.incr(FIELDS.STEPS)
    delta.incr(FIELDS.TOKENS_IN, 9)
    delta.incr(FIELDS.TOKENS_OUT, 12)
    delta.incr(FIELDS.UNPRICED)
    delta.default(FIELDS.FIRST_SEEN, int(now))
    delta.assign(FIELDS.LAST_SEEN, int(now))
    delta.incr(FIELDS.ACTIVE_MS, 3)
    delta.assign(FIELDS.LAST_SEEN_MS, int(now * 1000))
    delta.assign(FIELDS.ENDING_CLAIM, 0)
    return delta


async def measure(sessions: int, rate: int, seconds: float) -> None:
    offset = [0.0]
    store = MemoryStore(clock=lambda: offset[0] + time.monotonic(), max_sessions_per_tenant=10 * sessions)
    started = time.perf_counter()
    for n in range(sessions):
        await store.commit(session_key("bench", f"old-{n}"), plain_request(time.time()), 60)
    print(f"filled {sessions:,} sessions in {time.perf_counter() - started:.1f} s")
    gc.collect()
    offset[0] = 3_600.0  # an hour later: every one of them has expired at once

    collections: list[float] = []
    collecting = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collecting[0] = time.thread_time()
        else:
            collections.append(time.thread_time() - collecting[0])

    gc.callbacks.append(on_gc)
    stalls: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        """CPU spent between two turns of this 1 ms ticker: the longest stretch the loop was busy
        (CPU, not wall time: on a shared machine wall time also counts other processes' turns)."""
        while not stop.is_set():
            before = time.thread_time()
            await asyncio.sleep(0.001)
            stalls.append(time.thread_time() - before)

    async def writer() -> list[float]:
        commits: list[float] = []
        n = 0
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            for _ in range(max(1, rate // 100)):
                key = session_key("bench", f"new-{n}")
                n += 1
                before = time.thread_time()
                await store.commit(key, plain_request(time.time()), 60)
                commits.append(time.thread_time() - before)
            await asyncio.sleep(0.01)
        stop.set()
        return commits

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.002)  # the ticker is waiting before the first write
    commits = await writer()
    await tick
    gc.callbacks.remove(on_gc)
    commits.sort()
    stalls.sort()
    print(
        f"{len(commits):,} commits while {sessions:,} expired sessions were dropped: longest "
        f"{commits[-1] * 1e3:.3f} ms CPU, p99.9 {commits[int(len(commits) * 0.999)] * 1e6:.1f} µs "
        f"(garbage collections among them: {len(collections)}, longest {max(collections, default=0) * 1e3:.2f} ms)"
    )
    print(
        f"longest busy stretch between two turns of a 1 ms ticker: {stalls[-1] * 1e3:.2f} ms CPU "
        f"(p99 {stalls[int(len(stalls) * 0.99)] * 1e3:.2f} ms, {len(stalls):,} turns)"
    )
    print(f"sessions held at the end: {len(store):,} ({len(commits):,} written after the fill)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200_000)
    parser.add_argument("--rate", type=int, default=2_000, help="Commits per second after the fill.")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    asyncio.run(measure(args.sessions, args.rate, args.seconds))


if __name__ == "__main__":
    main()

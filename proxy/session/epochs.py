"""Noticing that Redis lost its data: a sentinel key per scope, holding an epoch.

Every script reads the sentinel of its data's scope in the same round trip and creates it
when missing (see ``scripts.EPOCH``). A store that saw one epoch and then finds another
knows the data behind it was lost (a restart without persistence, a flush). On a single
server one sentinel covers every key; on a Cluster a script may only touch its own hash
slot, so there is one per slot, named by a hash tag that lands in it.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import secrets
from binascii import crc_hqx
from collections.abc import Callable

from proxy.observe.logs import log_event

__all__ = ["EpochWatch", "Tokens"]

_SLOTS = 16384
_SERVER_SENTINEL = "lw:{loopwarden}:epoch"


@functools.cache
def _slot_tags() -> tuple[str, ...]:
    """For each Cluster hash slot, a short hash tag that lands in it (built once, ~0.2 s)."""
    tags: dict[int, str] = {}
    n = 0
    while len(tags) < _SLOTS:
        tag = format(n, "x")
        tags.setdefault(crc_hqx(tag.encode(), 0) % _SLOTS, tag)
        n += 1
    return tuple(tags[slot] for slot in range(_SLOTS))


def _slot(key: str) -> int:
    """The Cluster hash slot of a key (its hash tag's, when it has one), as Redis computes it."""
    raw = key.encode()
    start = raw.find(b"{")
    if start > -1:
        end = raw.find(b"}", start + 1)
        if end > start + 1:
            raw = raw[start + 1 : end]
    return crc_hqx(raw, 0) % _SLOTS


class EpochWatch:
    """The epoch last seen per scope (0: the whole server; on a Cluster, a hash slot), and
    when each scope was found lost."""

    def __init__(self, clock: Callable[[], float], *, cluster: bool) -> None:
        self._clock = clock
        self._tags = _slot_tags() if cluster else None
        self._epochs: dict[int, str] = {}
        self._lost: dict[int, float] = {}

    def _scope(self, key: str) -> int:
        return 0 if self._tags is None else _slot(key)

    def sentinel(self, key: str) -> str:
        """The sentinel key of ``key``'s scope (on a Cluster, in the same slot)."""
        return _SERVER_SENTINEL if self._tags is None else f"lw:{{{self._tags[_slot(key)]}}}:epoch"

    def changed(self, key: str, epoch: str) -> bool:
        """The epoch a script found for ``key``: True (counted by the caller, logged here) when
        it differs from the last one seen in that scope, which means the data was lost."""
        scope = self._scope(key)
        seen = self._epochs.get(scope)
        if seen == epoch:
            return False
        self._epochs[scope] = epoch
        if seen is None:
            return False  # the first look at this scope: nothing to compare with
        self._lost[scope] = self._clock()
        where = "server" if self._tags is None else f"cluster slot {scope}"
        log_event(
            "state_store_reset",
            {"scope": where, "detail": "the state store lost its data (restarted empty or flushed)"},
            logging.WARNING,
        )
        return True

    def lost_at(self, key: str) -> float | None:
        """When the data of ``key``'s scope was found lost; None if it never was."""
        return self._lost.get(self._scope(key)) if self._lost else None


class Tokens:
    """Tokens unique across calls, processes and restarts: a random prefix drawn once per
    process (and again in a forked child), then a count. Every store call needs one or two;
    drawing each from the OS costs a system call, a count costs nothing."""

    def __init__(self) -> None:
        self._redraw()
        os.register_at_fork(after_in_child=self._redraw)

    def _redraw(self) -> None:
        self._prefix = secrets.token_hex(8)
        self._count = itertools.count()

    def __call__(self) -> str:
        return f"{self._prefix}{next(self._count):x}"

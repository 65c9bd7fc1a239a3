"""A least-recently-used cache bounded by the total weight of its entries, not their count.

Compiled schemas and patterns differ in size by orders of magnitude: 512 entries of a few
hundred bytes are nothing, 512 of a few megabytes are gigabytes. Each entry is weighed
when it is put (about the memory it holds) and the oldest go first once the total passes
the bound. Thread-safe: schemas compile in worker threads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["WeightedCache"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class WeightedCache(Generic[K, V]):
    def __init__(self, max_weight: int) -> None:
        self.max_weight = max_weight
        self.weight = 0
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: K, value: V, weight: int) -> None:
        """Keep ``value`` (an entry heavier than the whole bound is not kept)."""
        if weight > self.max_weight:
            return
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:
                self.weight -= previous[1]
            self._entries[key] = (value, weight)
            self.weight += weight
            while self.weight > self.max_weight:
                _, (_, dropped) = self._entries.popitem(last=False)
                self.weight -= dropped

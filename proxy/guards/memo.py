"""Pure functions of a tool result, remembered per text.

An agent resends every earlier tool result on each turn, and several guards read the same
result (masked, digested, its failure shape), while one scan of a few hundred characters by
a pattern of many alternatives costs tens of microseconds. :func:`per_text` keeps the last
:data:`_CACHED` answers for texts up to :data:`_CACHED_CHARS` long (so the cache holds at most
a few megabytes); a longer text is computed each time.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache, wraps
from typing import TypeVar

__all__ = ["per_text"]

_CACHED_CHARS = 16_384
_CACHED = 512

T = TypeVar("T")


def per_text(function: Callable[[str], T]) -> Callable[[str], T]:
    """``function`` (pure: its answer depends on the text alone), remembered per text."""
    cached = lru_cache(maxsize=_CACHED)(function)

    @wraps(function)
    def remembered(text: str) -> T:
        return cached(text) if len(text) <= _CACHED_CHARS else function(text)

    return remembered

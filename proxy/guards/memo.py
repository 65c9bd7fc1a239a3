"""Pure functions of a tool result, remembered per text.

An agent resends every earlier tool result on each turn, and several guards read the same
result (masked, digested, its failure shape), while one scan of a few hundred characters by
a pattern of many alternatives costs tens of microseconds. :func:`per_text` keeps the last
:data:`_CACHED` answers for texts up to :data:`_CACHED_CHARS` long together (at most 2 M
characters of keys per function, 8 MB in the widest strings, and as much again where the answer
is a text); a longer text is computed each time. A function of several texts (a
result and the arguments of the call it answers) is remembered per combination.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache, wraps
from typing import Any, TypeVar, cast

__all__ = ["per_text"]

_CACHED_CHARS = 8_192
_CACHED = 256

F = TypeVar("F", bound=Callable[..., Any])


def per_text(function: F) -> F:
    """``function`` (pure: its answer depends on its texts alone), remembered per texts."""
    cached = lru_cache(maxsize=_CACHED)(function)

    @wraps(function)
    def remembered(*texts: str) -> Any:
        return cached(*texts) if sum(map(len, texts)) <= _CACHED_CHARS else function(*texts)

    return cast(F, remembered)

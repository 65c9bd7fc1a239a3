"""Regexes a client wrote (a schema's ``pattern``, ``patternProperties``), run on a bounded engine.

Python's ``re`` backtracks without limit and holds the interpreter while it does:
``^(a+)+$`` against 26 model-written characters took 10 s. Client patterns therefore run on
the ``regex`` engine with a per-match time bound (as the policy's own regexes do) and, within
one validation, a total budget (:func:`budget`). A match that runs out of either raises
:class:`PatternUnchecked`, which the schema layer turns into a validation error: it fails
closed, like a deny rule whose regex times out.

``regex`` has its own cost Python's ``re`` lacks: it unrolls counted repeats when it
compiles, so ``(((a{100}){100}){100}){100}`` would take minutes to compile. A pattern is
parsed first (cheaply, without unrolling) and refused when its unrolled size is too large.

jsonschema calls ``re.search`` / ``re.compile`` directly in five places (``pattern``,
``patternProperties``, ``additionalProperties``, ``unevaluatedProperties`` and the ``regex``
format that checks a schema's own patterns). Rather than copy those keywords, the modules
that do are given :data:`BOUNDED_RE`, a stand-in for ``re`` that runs this engine
(:func:`install`); a test keeps the list complete.
"""

from __future__ import annotations

import contextlib
import importlib
import re
import time
from collections.abc import Iterator
from contextvars import ContextVar
from types import ModuleType
from typing import Any

import regex

from proxy.schemas.weighted_cache import WeightedCache

__all__ = [
    "BOUNDED_RE",
    "MATCH_TIMEOUT_SECS",
    "PatternUnchecked",
    "budget",
    "compile_pattern",
    "install",
    "search",
]

MATCH_TIMEOUT_SECS = 0.02
"""One match of a client pattern runs at most this long."""
MAX_UNROLLED = 50_000
"""A pattern whose counted repeats unroll to more atoms than this is refused (~25 ms to compile)."""
_CACHE_CHARS = 1_000_000
"""Compiled patterns kept, weighed by their unrolled size (what their memory grows with)."""
_COUNTED = re.compile(r"\{\s*(\d+)")

sre_parse: Any = importlib.import_module("re._parser")
"""The stdlib's own pattern parser: reads a pattern without compiling (or unrolling) it."""
_deadline: ContextVar[float | None] = ContextVar("loopwarden_pattern_deadline", default=None)
_compiled: WeightedCache[str, regex.Pattern[str]] = WeightedCache(_CACHE_CHARS)


class PatternUnchecked(Exception):
    """A client pattern could not be run within its bounds: the value counts as invalid."""

    def __init__(self, pattern: str, why: str) -> None:
        shown = pattern if len(pattern) <= 60 else pattern[:59] + "…"
        super().__init__(f"could not be checked against the pattern {shown!r}: {why}")


@contextlib.contextmanager
def budget(seconds: float) -> Iterator[None]:
    """All client-pattern matches inside share ``seconds`` (each still at most MATCH_TIMEOUT_SECS)."""
    token = _deadline.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _deadline.reset(token)


def compile_pattern(pattern: str) -> regex.Pattern[str]:
    """The pattern compiled on the bounded engine; ``re.error`` when it is invalid or too large."""
    compiled = _compiled.get(pattern)
    if compiled is not None:
        return compiled
    size = _unrolled_size(pattern)
    if size > MAX_UNROLLED:
        raise re.error(f"its counted repeats unroll to more than {MAX_UNROLLED} elements")
    try:
        compiled = regex.compile(pattern)
    except (regex.error, RecursionError, OverflowError) as exc:
        raise re.error(str(exc)) from None
    _compiled.put(pattern, compiled, size + len(pattern))
    return compiled


def search(pattern: str, string: str, flags: int = 0) -> regex.Match[str] | None:
    """``re.search`` on the bounded engine; :class:`PatternUnchecked` past the bounds."""
    _no_flags(flags)
    try:
        compiled = compile_pattern(pattern)
    except re.error as exc:
        raise PatternUnchecked(pattern, f"it does not compile ({exc})") from None
    timeout = MATCH_TIMEOUT_SECS
    deadline = _deadline.get()
    if deadline is not None:
        timeout = min(timeout, deadline - time.monotonic())
        if timeout <= 0:
            raise PatternUnchecked(pattern, "the time for checking patterns ran out")
    try:
        return compiled.search(string, timeout=timeout, concurrent=False)
    except TimeoutError:
        raise PatternUnchecked(pattern, f"matching took longer than {timeout * 1000:.0f} ms") from None


def _compile(pattern: str, flags: int = 0) -> regex.Pattern[str]:
    _no_flags(flags)
    return compile_pattern(pattern)


def _no_flags(flags: int) -> None:
    """jsonschema passes none; a version that did is refused loudly rather than misread."""
    if flags:
        raise NotImplementedError("the bounded engine takes no re flags: review proxy.schemas.patterns")


class _BoundedRe(ModuleType):
    """What jsonschema's keyword code sees as ``re``."""

    error = re.error
    search = staticmethod(search)
    compile = staticmethod(_compile)

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)


BOUNDED_RE = _BoundedRe("loopwarden_bounded_re")
PATCHED_MODULES = ("jsonschema._keywords", "jsonschema._legacy_keywords", "jsonschema._utils", "jsonschema._format")
"""The jsonschema modules that call ``re`` on schema-supplied patterns."""


def install() -> None:
    """Give jsonschema's pattern-running modules the bounded engine (idempotent)."""
    for name in PATCHED_MODULES:
        module = importlib.import_module(name)
        if getattr(module, "re", None) is not re and getattr(module, "re", None) is not BOUNDED_RE:
            raise RuntimeError(f"{name} no longer imports re as expected: review proxy.schemas.patterns")
        module.re = BOUNDED_RE  # type: ignore[attr-defined]


def _unrolled_size(pattern: str) -> int:
    """About how many atoms ``regex`` builds when it compiles ``pattern``: counted repeats
    (``{m}``, ``{m,n}``: the ``m`` part) multiply what they repeat."""
    try:
        return _size(sre_parse.parse(pattern))
    except (re.error, RecursionError, OverflowError):
        # Syntax only ``regex`` knows (\p{L}, …): bound it by every count multiplied together.
        size = len(pattern)
        for count in _COUNTED.findall(pattern):
            size *= max(int(count[:12]), 1)
            if size > MAX_UNROLLED:
                break
        return size


def _size(parsed: Any) -> int:
    total = 0
    for op, argument in parsed:
        if op in (sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT, sre_parse.POSSESSIVE_REPEAT):
            low, _, item = argument
            total += max(low, 1) * _size(item)
        elif op is sre_parse.SUBPATTERN:
            total += _size(argument[3])
        elif op is sre_parse.BRANCH:
            total += sum(_size(branch) for branch in argument[1])
        elif op in (sre_parse.ASSERT, sre_parse.ASSERT_NOT):
            total += _size(argument[1])
        elif op is sre_parse.ATOMIC_GROUP:
            total += _size(argument)
        elif op is sre_parse.GROUPREF_EXISTS:
            total += _size(argument[1]) + (_size(argument[2]) if argument[2] else 0)
        else:
            total += 1
        if total > MAX_UNROLLED:
            return total
    return total

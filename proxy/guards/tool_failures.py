"""Failing tools: N consecutive tool results that the policy's patterns mark as errors, or
whose shape is a failure's (:mod:`proxy.guards.failure_shapes`, unless ``shapes`` is off),
end the session with reason ``tool_failures`` (a circuit breaker, not a retry)."""

from __future__ import annotations

from functools import lru_cache

import regex

from proxy.guards.base import GuardContext
from proxy.guards.failure_shapes import failure_shape
from proxy.policy.permissions import MATCH_TIMEOUT_SECS
from proxy.verdict import PASS, Finalize, RequestVerdict

__all__ = ["ToolFailuresGuard", "compiled"]

_SCANNED = 2000


@lru_cache(maxsize=64)
def compiled(patterns: tuple[str, ...]) -> tuple[regex.Pattern[str], ...]:
    """Patterns are validated at policy load; compile each distinct set once."""
    return tuple(regex.compile(p, regex.MULTILINE) for p in patterns)


@lru_cache(maxsize=512)  # at most 512 texts of _SCANNED characters
def _fails(text: str, patterns: tuple[str, ...]) -> bool:
    """Tool results are untrusted text: each search is time-bounded (a timeout is no match,
    remembered as one). Remembered per text: an agent resends every earlier result each turn."""
    for pattern in compiled(patterns):
        try:
            if pattern.search(text, timeout=MATCH_TIMEOUT_SECS, concurrent=False):
                return True
        except TimeoutError:
            continue
    return False


class ToolFailuresGuard:
    def check_request(self, context: GuardContext) -> RequestVerdict:
        settings = context.policy.tool_failures
        if not settings.enabled or not context.conversation.trailing_tool_results():
            return PASS
        patterns = settings.patterns
        run = 0
        for message in reversed(context.conversation.tool_results()):
            text = message.text[:_SCANNED]
            if not _fails(text, patterns) and not (settings.shapes and failure_shape(text)):
                break
            run += 1
        if run >= settings.max_consecutive:
            what = f"the last {run} tool calls all failed"
            return Finalize(reason="tool_failures", detail=what, evidence=what)
        return PASS

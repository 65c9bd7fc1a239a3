"""Volatile fields masked out of tool results before they are compared.

A failing tool that stamps each answer with the time and a fresh request id never returns
"the same result" byte for byte. :func:`without_volatile` replaces what changes from call
to call without meaning anything, so results that say the same thing compare equal:
timestamps (ISO 8601 and HTTP dates, bare clock times), UUIDs, request/trace ids
(``request_id=…``, ``req_…``), long hexadecimal ids (12 or more hex digits, one at least a
digit), and durations (``123 ms``, ``1.5s``). Each becomes one placeholder character.
"""

from __future__ import annotations

import re

from proxy.guards.memo import per_text

__all__ = ["without_volatile"]

_MARK = "\u2400"
_WORD_START = r"(?<!\w.)"
"""``\b`` before a word character, written after that character: each alternative below opens
with the class of its first character, which ``re`` tests before it enters the alternative
(one that opens with ``\b`` or a lookahead is entered at every position), so a scan costs
about half as much. Each matches exactly what its plain form in the comment matches."""
_VOLATILE = re.compile(
    "|".join(
        (
            # \d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?
            r"\d\d{3}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?",
            # \b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{1,2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2}(?: GMT| [+-]\d{4})?
            r"[MTWFS]" + _WORD_START + r"(?:on|ue|ed|hu|ri|at|un)(?<=Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
            r", \d{1,2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2}(?: GMT| [+-]\d{4})?",
            # \b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b
            r"\d" + _WORD_START + r"\d?:\d{2}:\d{2}(?:[.,]\d+)?\b",
            # \b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b
            r"[0-9a-fA-F]"
            + _WORD_START
            + r"[0-9a-fA-F]{7}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",
            # (?i:\b(?:x-)?(?:request|req|trace|correlation|span)[_-]?id\b["']?\s*[:=]\s*["']?)[\w.:-]+
            r"(?i:[xrtcs]" + _WORD_START + r"(?:(?<=x)-(?:request|req|trace|correlation|span)|(?<=r)(?:equest|eq)"
            r"|(?<=t)race|(?<=c)orrelation|(?<=s)pan)[_-]?id\b[\"']?\s*[:=]\s*[\"']?)[\w.:-]+",
            # \b(?:req|request|trace)_[A-Za-z0-9]{6,}\b
            r"[rt]" + _WORD_START + r"(?:(?<=r)(?:eq|equest)|(?<=t)race)_[A-Za-z0-9]{6,}\b",
            # \b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{12,}\b
            r"[0-9a-fA-F]" + _WORD_START + r"(?:(?<=\d)|(?=[0-9a-fA-F]*\d))(?:(?<=[a-fA-F])|(?=[0-9a-fA-F]*[a-fA-F]))"
            r"[0-9a-fA-F]{11,}\b",
            # \b\d+(?:\.\d+)?\s?(?:ms|µs|us|ns|s|sec|secs|seconds|milliseconds)\b
            r"\d" + _WORD_START + r"\d*(?:\.\d+)?\s?(?:ms|µs|us|ns|s|sec|secs|seconds|milliseconds)\b",
        )
    )
)


@per_text
def without_volatile(text: str) -> str:
    """The text with its volatile fields (see the module) each replaced by one mark."""
    return _VOLATILE.sub(_MARK, text)

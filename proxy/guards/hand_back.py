"""Hand-back detection: a long reply that gives the turn back instead of an answer.

Seed 000 skips the judge for a long reply because a long, substantive answer should not be
second-guessed. A reply that only asks the user what to do next ("I found the weather. Would
you like me to look up the local time as well, or …?") or only announces work ("Next I will
check …") is not one, whatever its length. This module tells them apart locally, with no
model call: the reply is cut into sentences (list items and table rows are sentences of
their own, a fenced block is substance whole), and what is left once the questions to the
user, the announcements of the agent's next steps and bare status lines ("I found the
weather.") are taken out is its substance. A reply hands back when it asks or announces
something and its substance is under ``min_substance`` characters; an answer that ends
with an offer of more help *after* giving the answer keeps its substance and passes.
"""

from __future__ import annotations

import re

__all__ = ["hands_back", "substance"]

_FENCE = re.compile(r"```.*?(?:```|$)", re.S)
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|\n+")
_LIST_MARK = re.compile(r"^\s*(?:[-*+•]|\d+[.)]|#+)\s+")
_QUESTION = re.compile(
    r"^(?:would|shall|should|do|does|can|could|may|want|is there|are there|which|how would)\b.*\b(?:you|i|me|we)\b"
    r"|\b(?:would you like|do you want|shall i|should i|want me to|would you prefer|let me know (?:if|whether|which)"
    r"|if you(?:'d| would) like(?: me)? to|or would you)\b",
    re.I,
)
_ANNOUNCE = re.compile(
    r"^(?:next|then|now|first|after that|afterwards|once [^,]+,)?,?\s*"
    r"(?:i(?:'ll| will| am going to|'m going to| plan to| intend to| need to| still need to)|let me|i can now)\b"
    r"|^(?:next steps?|my plan|the plan|plan|here(?:'s| is) (?:my|the) plan|to do)\b[^.]*:?$",
    re.I,
)
_STATUS = re.compile(
    r"^(?:ok(?:ay)?,?\s*|great,?\s*|sure,?\s*|alright,?\s*)?(?:i(?:'ve| have)?\s+)"
    r"(?:found|checked|looked(?: up)?|retrieved|fetched|got|gathered|searched|run|ran|read|called|queried|done)\b",
    re.I,
)
_CLAIM = re.compile(r"\d|\b(?:is|are|was|were|has|had)\b|=|:\s*\S")
_STATUS_CHARS = 80


def _sentences(text: str) -> list[str]:
    out: list[str] = []
    for line in _SENTENCE_END.split(text):
        sentence = _LIST_MARK.sub("", line).strip(" \t|*_>")
        if sentence:
            out.append(sentence)
    return out


def _kind(sentence: str) -> str:
    """``ask`` (a question or offer to the user), ``announce`` (the agent's next step),
    ``status`` (a bare "I found the weather.") or ``substance``."""
    if _ANNOUNCE.search(sentence) and not sentence.rstrip().endswith("?"):
        return "announce"
    if sentence.rstrip().endswith("?") or _QUESTION.search(sentence):
        return "ask" if _QUESTION.search(sentence) or sentence.rstrip().endswith("?") else "substance"
    if _STATUS.match(sentence) and len(sentence) <= _STATUS_CHARS and not _CLAIM.search(sentence):
        return "status"
    return "substance"


def substance(text: str) -> tuple[int, bool]:
    """(characters of substance, whether the reply asks the user or announces a next step).

    Sentences after a plan's heading ("I will:", "Next steps:") are announcements too, until
    a blank line ends the list."""
    fenced = sum(len(block) for block in _FENCE.findall(text))
    chars, handed = fenced, False
    for paragraph in re.split(r"\n\s*\n", _FENCE.sub(" ", text)):
        planning = False
        for sentence in _sentences(paragraph):
            kind = "announce" if planning else _kind(sentence)
            if kind == "announce" and sentence.endswith(":"):
                planning = True
            if kind in ("ask", "announce"):
                handed = True
            elif kind == "substance":
                chars += len(sentence)
    return chars, handed


def hands_back(text: str, min_substance: int) -> bool:
    """The reply asks the user or announces work, with less than ``min_substance``
    characters of anything else: it hands the turn back instead of answering."""
    chars, handed = substance(text)
    return handed and chars < min_substance

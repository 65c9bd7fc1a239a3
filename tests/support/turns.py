"""Neutral model replies: a scenario scripts what the model says once (text, tool calls,
reasoning, usage), and each fake upstream renders it in the format the request speaks."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["Call", "Turn", "calling", "turn"]


@dataclass(frozen=True)
class Call:
    """A tool call in a neutral reply; ``arguments`` as a dict, or raw text (cut or invalid JSON)."""

    name: str
    arguments: dict[str, Any] | str
    id: str = "call_1"

    @property
    def raw(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass(frozen=True)
class Turn:
    """One model reply written once, whatever the format: each fake renders it in the format the
    request speaks (JSON or its stream, as the request asks), so a scenario is scripted once."""

    text: str | None = None
    calls: tuple[Call, ...] = ()
    reasoning: str | None = None
    usage: tuple[int, int] = (11, 7)


def turn(text: str | None = None, *calls: Call, reasoning: str | None = None) -> Turn:
    """A neutral reply: ``text``, then ``calls``, after ``reasoning`` when given."""
    return Turn(text, calls, reasoning)


def calling(name: str, arguments: dict[str, Any] | str, call_id: str = "call_1", *, text: str | None = None) -> Turn:
    """A neutral reply that calls one tool."""
    return Turn(text, (Call(name, arguments, call_id),))

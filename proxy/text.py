"""Text in the normal form the proxy compares and hashes it in."""

from __future__ import annotations

__all__ = ["one_spaced", "unspaced"]


def one_spaced(text: str) -> str:
    """``text`` with every run of whitespace one space, none at its ends.

    ``str.split`` reads whitespace exactly as the regular expression ``\\s`` does (the form
    session ids and digests were first made with), without a match object per run: a third of
    the time on an agent's instructions, which every request of a run resends."""
    return " ".join(text.split())


def unspaced(text: str) -> str:
    """``text`` without any whitespace."""
    return "".join(text.split())

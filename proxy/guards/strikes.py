"""The strike pattern shared by guards that tolerate a few misses in a row, then end.

A miss is nudged and counted; the miss that reaches ``max_strikes`` ends the session;
a good reply clears the count (strikes are consecutive).
"""

from __future__ import annotations

from proxy.exchange import Note
from proxy.guards.base import GuardContext
from proxy.verdict import PASS, Finalize, Nudge, Pass

__all__ = ["cleared", "strike_verdict"]


def cleared(context: GuardContext, strike: str) -> Pass:
    """A good reply (no miss): it passes, and clears the strikes the session had."""
    return Pass(clear_strikes=(strike,)) if context.state.strikes(strike) else PASS


def strike_verdict(
    missed: bool,
    context: GuardContext,
    *,
    strike: str,
    max_strikes: int,
    nudge_kind: str,
    nudge_text: str,
    miss: str,
    reason: str | None = None,
    exhausted: str = "max_attempts",
) -> Pass | Nudge | Finalize:
    """Pass (clearing old strikes), Nudge, or Finalize once ``max_strikes`` misses in a row.

    ``reason`` names the ending when it differs from the strike counter's name; ``exhausted``
    names it when a nudge is due but the request has no attempt left.
    """
    if not missed:
        return cleared(context, strike)
    strikes = context.state.strikes(strike)
    if strikes + 1 >= max_strikes:
        return Finalize(
            reason=reason or strike,
            detail=f"the model returned {strikes + 1} {miss} in a row",
            strike=strike,
            evidence=f"the model returned {strikes + 1} {miss} in a row",
        )
    return Nudge(
        kind=nudge_kind,
        reason=f"{miss} (strike {strikes + 1} of {max_strikes})",
        turns=(Note(nudge_text),),
        strike=strike,
        exhausted=exhausted,
    )

"""The admission arithmetic, shared by the in-memory store (the Redis store runs the same
rules in Lua, next to the data)."""

from __future__ import annotations

import math
from collections.abc import MutableMapping, Sequence

from proxy.session.base import FIELDS, Claim, Grant, Limit, WindowLimit

__all__ = [
    "ENDING_FIELDS",
    "admit_in_place",
    "admit_window_in_place",
    "bucket_of",
    "claim_in_place",
    "grant_in_place",
]

ENDING_FIELDS = (FIELDS.TERMINATION, FIELDS.ENDING, FIELDS.ENDING_WIRE, FIELDS.ENDING_CLAIM)
"""What a lifted ending clears: the next request is served anew instead of getting the ending."""


def _int(values: MutableMapping[str, str], name: str) -> int:
    try:
        return int(values.get(name, "0"))
    except ValueError:
        return 0


def admit_in_place(values: MutableMapping[str, str], limits: Sequence[Limit]) -> str | None:
    """Reserve every amount, or return the name of the first limit that does not fit."""
    for limit in limits:
        used = _int(values, limit.reserved)
        for name in limit.used:
            used += _int(values, name)
        if used + limit.amount > (limit.limit + _int(values, limit.granted) if limit.granted else limit.limit):
            return limit.name
    for limit in limits:
        values[limit.reserved] = str(_int(values, limit.reserved) + limit.amount)
    return None


def claim_in_place(values: MutableMapping[str, str], claim: Claim) -> bool:
    """Take the ending's claim unless an ending is stored or another claim is still live."""
    if values.get(FIELDS.ENDING) or _int(values, FIELDS.ENDING_CLAIM) > claim.now_ms:
        return False
    values[FIELDS.ENDING_CLAIM] = str(claim.now_ms + claim.lease_ms)
    return True


def grant_in_place(values: MutableMapping[str, str], grants: Sequence[Grant], lift: Sequence[str]) -> str | None:
    """Check every grant against its ceiling (the budget of the first over it, nothing
    changed), then clear an ending whose reason is in ``lift``; the grants' increments are
    the caller's delta, committed next in the same step."""
    for grant in grants:
        if _int(values, grant.granted) + grant.amount > grant.ceiling:
            return grant.budget
    if values.get(FIELDS.TERMINATION) in lift:
        for name in ENDING_FIELDS:
            values.pop(name, None)
    return None


def bucket_of(now: float, bucket_secs: int) -> int:
    return int(now // bucket_secs)


def admit_window_in_place(
    values: MutableMapping[str, str], limits: Sequence[WindowLimit], now: float
) -> tuple[str | None, float | None]:
    """Drop expired buckets, then reserve or refuse; a refusal says when enough will have expired."""
    for limit in limits:
        current = bucket_of(now, limit.bucket_secs)
        oldest = current - limit.window_secs // limit.bucket_secs + 1
        buckets: list[tuple[int, int]] = []
        for name in [n for n in values if n.startswith(limit.prefix)]:
            try:
                bucket = int(name[len(limit.prefix) :])
            except ValueError:
                continue
            if bucket < oldest:
                del values[name]
            else:
                buckets.append((bucket, _int(values, name)))
        used = _int(values, limit.reserved) + sum(amount for _, amount in buckets)
        if used + limit.amount > limit.limit:
            freed = 0
            for bucket, amount in sorted(buckets):
                freed += amount
                if used - freed + limit.amount <= limit.limit:
                    expires = (bucket + limit.window_secs // limit.bucket_secs) * limit.bucket_secs
                    return limit.name, max(1.0, math.ceil(expires - now))
            return limit.name, float(limit.window_secs)
    for limit in limits:
        values[limit.reserved] = str(_int(values, limit.reserved) + limit.amount)
    return None, None

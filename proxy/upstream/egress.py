"""The egress check at connect time: a host name never leads to an address the proxy must not call.

The load-time check (:func:`proxy.upstream.addresses.blocked_reason`) reads a base URL's host
as written; a DNS name that resolves to a metadata endpoint (``169.254.169.254.nip.io``), or
one whose answer changes after it was checked (DNS rebinding), passes it. Every name the
transport connects to is therefore resolved through :class:`EgressResolver`, which drops the
addresses the same rule blocks (link-local, multicast, unspecified, cloud metadata; loopback
and private ranges stay allowed, as at load time) and refuses the name when none is left.
The connector caches only what this resolver returned, so a cached answer was checked too.
"""

from __future__ import annotations

import socket

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from proxy.upstream.addresses import blocked_reason

__all__ = ["EgressBlocked", "EgressResolver"]


class EgressBlocked(OSError):
    """A host name resolved only to addresses the proxy must not connect to."""


class EgressResolver(AbstractResolver):
    """Resolves through ``inner`` (aiohttp's default resolver unless injected) and keeps only
    the addresses the proxy may connect to."""

    def __init__(self, inner: AbstractResolver | None = None) -> None:
        self._inner = inner or aiohttp.DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        try:
            reason = blocked_reason(host)
        except ValueError as exc:  # ends in a number but names no address: resolvers disagree on it
            raise EgressBlocked(str(exc)) from None
        if reason is not None:
            raise EgressBlocked(reason)
        answers = await self._inner.resolve(host, port, family)
        allowed = [answer for answer in answers if _allowed(answer["host"])]
        if not allowed:
            raise EgressBlocked(f"upstream host {host!r} resolves only to addresses the proxy must not call")
        return allowed

    async def close(self) -> None:
        await self._inner.close()


def _allowed(address: str) -> bool:
    try:
        return blocked_reason(address) is None
    except ValueError:  # not an address at all: nothing to connect to
        return False

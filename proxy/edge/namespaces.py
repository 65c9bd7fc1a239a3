"""Session namespaces: whose sessions a key may reach.

With a tenants file a tenant's sessions live in its name; without one every caller is the
open tenant, and each caller's sessions live in a namespace of its own, derived from its key.
"""

from __future__ import annotations

import functools
import hashlib

__all__ = ["NAMESPACE_SEPARATOR", "bearer", "caller_namespace", "is_caller_namespace"]

NAMESPACE_SEPARATOR = "~"
"""Between a tenant's name and a caller digest in a session namespace."""
_NAMESPACE_SALT = b"loopwarden/session-namespace/v1\x00"


_CACHED_KEY_CHARS = 512
"""Longest ``Authorization`` whose namespace is kept computed (a real key is far shorter)."""


def caller_namespace(tenant: str, authorization: str | None) -> str:
    """See :func:`_caller_namespace`; a value longer than any real key is not cached: 4096
    distinct 60 kB headers, which anyone may send without a tenants file, would pin 250 MB."""
    if authorization is not None and len(authorization) > _CACHED_KEY_CHARS:
        return _caller_namespace.__wrapped__(tenant, authorization)
    return _caller_namespace(tenant, authorization)


@functools.lru_cache(maxsize=4096)
def _caller_namespace(tenant: str, authorization: str | None) -> str:
    """The session namespace of a caller of the implicit tenant: ``<tenant>~<digest>``
    (``~`` is in no tenant name, so the tenant stays readable from the key: its caps and
    metrics are the tenant's, not one per caller).

    Without a tenants file every caller is the tenant ``default``; namespacing sessions by
    a digest of the caller's ``Authorization`` keeps two callers with different keys from
    ever sharing (reading, continuing, deleting) a session. The digest is a salted SHA-256
    truncated to 128 bits: stable across restarts and replicas, and not reversible to the
    key, which is never stored or logged. Callers without ``Authorization`` share the bare
    tenant namespace (they can use no sessions API)."""
    value = bearer(authorization) or (authorization or "").strip()  # "bearer K" and "Bearer K" are one caller
    if not value:
        return tenant
    return f"{tenant}{NAMESPACE_SEPARATOR}{hashlib.sha256(_NAMESPACE_SALT + value.encode()).hexdigest()[:32]}"


def is_caller_namespace(tenant: str, namespace: str) -> bool:
    """``namespace`` is one :func:`caller_namespace` makes for ``tenant`` (or its bare namespace)."""
    name, separator, digest = namespace.partition(NAMESPACE_SEPARATOR)
    if name != tenant:
        return False
    return not separator or (len(digest) == 32 and all(c in "0123456789abcdef" for c in digest))


def bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer …`` header (any case of the scheme), or None."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None

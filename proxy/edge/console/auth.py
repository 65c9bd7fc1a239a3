"""Who may read the console, and how a browser stays signed in without ever holding a key.

A key is presented once: in the sign-in form (a browser) or as ``Authorization: Bearer``
(an API client, on every request, as on the sessions API). The console's admin key is
compared by its SHA-256 digest in constant time, as tenant keys are; any other key is
resolved by the tenant directory exactly as the sessions API resolves it, so it sees the
sessions the sessions API would show it.

A signed-in browser holds an opaque random token in an HttpOnly, SameSite=Strict cookie; the
token maps to a :class:`Viewer` held here in memory until it expires (a restart signs everyone
out). Forms carry a per-form token (an HMAC of the form's purpose and expiry under a secret
made at start), so a cross-site POST cannot sign anyone in or out even where a browser would
send the cookie.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from proxy.edge.tenants import TenantDirectory, hash_key
from proxy.errors import AuthenticationFailed

__all__ = ["COOKIE", "ConsoleAuth", "Viewer"]

COOKIE = "lw_console"
SIGNIN_SECS = 8 * 3600
"""How long a browser stays signed in."""
FORM_SECS = 3600
"""How long a sign-in form may be left open before it is refused."""
MAX_SIGNINS = 10_000
"""Signed-in browsers kept; past it the oldest is signed out (memory stays bounded)."""


@dataclass(frozen=True, slots=True)
class Viewer:
    """What a caller may see: the session namespaces (None: every tenant's) and, for the
    fleet page, the tenants whose metrics it may read (None: all; empty: none)."""

    label: str
    namespaces: tuple[str, ...] | None
    tenants: tuple[str, ...] | None

    @property
    def admin(self) -> bool:
        return self.namespaces is None


class ConsoleAuth:
    """Resolves keys to viewers, issues and checks the cookie and the per-form tokens."""

    def __init__(
        self,
        directory: TenantDirectory,
        admin_key_sha256: str | None,
        *,
        ttl: float = SIGNIN_SECS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._directory = directory
        self._admin_digest = admin_key_sha256.lower() if admin_key_sha256 else None
        self._ttl = ttl
        self._clock = clock
        self._secret = secrets.token_bytes(32)
        self._signed_in: OrderedDict[str, tuple[Viewer, float]] = OrderedDict()
        self._lock = threading.Lock()
        """The listener serves each request on a thread of its own."""

    def viewer_for_key(self, key: str) -> Viewer | None:
        """The viewer a key stands for, or None (refused; every refusal looks the same)."""
        key = key.strip()
        if not key:
            return None
        if self._admin_digest is not None and hmac.compare_digest(hash_key(key), self._admin_digest):
            return Viewer("admin", None, None)
        return self.viewer_for_headers(f"Bearer {key}", key)

    def viewer_for_headers(self, authorization: str | None, proxy_key: str | None = None) -> Viewer | None:
        """An API client's viewer, from the headers the sessions API reads (``Authorization``,
        else ``X-LoopWarden-Key``); the console's admin key is also accepted as a bearer."""
        bearer = _bearer(authorization)
        if bearer is not None and proxy_key is None:
            admin = self._admin_digest
            if admin is not None and hmac.compare_digest(hash_key(bearer), admin):
                return Viewer("admin", None, None)
        try:
            credentials = self._directory.authenticate(authorization, proxy_key or bearer, identified=True)
        except AuthenticationFailed:
            return None
        tenant = credentials.tenant.name
        if credentials.namespace != tenant:
            # A caller of the open tenant sees its own sessions; the fleet's counts are every caller's.
            return Viewer("your key", (credentials.namespace,), ())
        return Viewer(f"tenant {tenant}", (credentials.namespace,), (tenant,))

    def sign_in(self, viewer: Viewer) -> str:
        """A new opaque cookie value for ``viewer``, valid for the sign-in lifetime."""
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._signed_in[token] = (viewer, self._clock() + self._ttl)
            while len(self._signed_in) > MAX_SIGNINS:
                self._signed_in.popitem(last=False)
        return token

    def signed_in(self, token: str | None) -> Viewer | None:
        """The viewer of a cookie, or None (unknown, expired: expired tokens are forgotten)."""
        if not token:
            return None
        with self._lock:
            entry = self._signed_in.get(token)
            if entry is not None and self._clock() >= entry[1]:
                del self._signed_in[token]
                entry = None
        return entry[0] if entry is not None else None

    def sign_out(self, token: str | None) -> None:
        if token:
            with self._lock:
                self._signed_in.pop(token, None)

    def cookie(self, token: str) -> str:
        """The ``Set-Cookie`` value: opaque, HttpOnly, SameSite=Strict, scoped to the console."""
        return f"{COOKIE}={token}; Path=/console; Max-Age={int(self._ttl)}; HttpOnly; SameSite=Strict"

    @staticmethod
    def cleared_cookie() -> str:
        return f"{COOKIE}=; Path=/console; Max-Age=0; HttpOnly; SameSite=Strict"

    def form_token(self, purpose: str) -> str:
        """A per-form token for ``purpose`` (``signin``, or ``signout:<cookie>``), valid an hour."""
        expires = int(self._clock() + FORM_SECS)
        return f"{expires}.{self._mac(purpose, expires)}"

    def form_token_ok(self, purpose: str, token: str | None) -> bool:
        """The token was made here for ``purpose`` and has not expired (constant-time check)."""
        expires, _, mac = (token or "").partition(".")
        if not expires.isdigit() or int(expires) <= self._clock():
            return False
        return hmac.compare_digest(mac, self._mac(purpose, int(expires)))

    def _mac(self, purpose: str, expires: int) -> str:
        return hmac.new(self._secret, f"{purpose}\x00{expires}".encode(), hashlib.sha256).hexdigest()


def _bearer(authorization: str | None) -> str | None:
    scheme, _, token = (authorization or "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None

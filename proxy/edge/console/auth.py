"""Who may read the console, and how a browser stays signed in without ever holding a key.

A key is presented once: in the sign-in form (a browser) or as ``Authorization: Bearer``
(an API client, on every request, as on the sessions API). The console's admin key is
compared by its SHA-256 digest in constant time, as tenant keys are; any other key is
resolved by the tenant directory exactly as the sessions API resolves it, so it sees the
sessions the sessions API would show it.

A signed-in browser holds a token in an HttpOnly, SameSite=Strict cookie (``Secure`` where the
console is reached over HTTPS): the :class:`Viewer` and an expiry, signed with an HMAC under the
console's secret, never the key. Every process that shares the secret (``--console-secret``:
``--reuse-port`` workers, a chart's replicas behind one Service) accepts it; without one, each
process makes its own at start, and a restart signs everyone out. Signing out clears the
browser's cookie and refuses the token on this process until it expires. Forms carry a per-form
token (an HMAC of the form's purpose and expiry under the same secret), so a cross-site POST
cannot sign anyone in or out even where a browser would send the cookie.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from proxy.edge.namespaces import bearer
from proxy.edge.tenants import TenantDirectory, hash_key
from proxy.errors import AuthenticationFailed

__all__ = ["COOKIE", "ConsoleAuth", "Viewer"]

COOKIE = "lw_console"
SIGNIN_SECS = 8 * 3600
"""How long a browser stays signed in."""
FORM_SECS = 3600
"""How long a sign-in form may be left open before it is refused."""
MAX_SIGNOUTS = 10_000
"""Signed-out tokens remembered until they expire; past it the oldest is forgotten (memory stays
bounded; its browser's cookie was cleared when it signed out)."""
_SIGNED_IN = "v1"
"""The signed-in token's format version (its first part)."""


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
        secret: bytes | None = None,
        secure_cookie: bool = False,
        ttl: float = SIGNIN_SECS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``secret``: shared by the processes that must accept each other's sign-ins (None: one
        of this process's own); ``secure_cookie``: send the cookie ``Secure`` whatever the scheme."""
        self._directory = directory
        self._admin_digest = admin_key_sha256.lower() if admin_key_sha256 else None
        self._ttl = ttl
        self._clock = clock
        self._secret = (
            hashlib.sha256(b"loopwarden/console/v1\x00" + secret).digest() if secret else secrets.token_bytes(32)
        )
        self._secure = secure_cookie
        self._signed_out: OrderedDict[str, float] = OrderedDict()
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
        token = bearer(authorization)
        if token is not None and proxy_key is None:
            admin = self._admin_digest
            if admin is not None and hmac.compare_digest(hash_key(token), admin):
                return Viewer("admin", None, None)
        try:
            credentials = self._directory.authenticate(authorization, proxy_key or token, identified=True)
        except AuthenticationFailed:
            return None
        tenant = credentials.tenant.name
        if credentials.namespace != tenant:
            # A caller of the open tenant sees its own sessions; the fleet's counts are every caller's.
            return Viewer("your key", (credentials.namespace,), ())
        return Viewer(f"tenant {tenant}", (credentials.namespace,), (tenant,))

    def sign_in(self, viewer: Viewer) -> str:
        """A cookie value for ``viewer``, valid for the sign-in lifetime: the viewer and its
        expiry, signed (``v1.<expiry>.<viewer>.<mac>``)."""
        expires = int(self._clock() + self._ttl)
        fields = [viewer.label, viewer.namespaces, viewer.tenants, secrets.token_hex(8)]
        payload = base64.urlsafe_b64encode(msgspec.json.encode(fields)).decode().rstrip("=")
        return f"{_SIGNED_IN}.{expires}.{payload}.{self._mac(f'signed-in:{payload}', expires)}"

    def signed_in(self, token: str | None) -> Viewer | None:
        """The viewer of a cookie, or None (forged, expired, signed out, another secret's)."""
        parts = (token or "").split(".")
        if len(parts) != 4:
            return None
        version, expires, payload, mac = parts
        if version != _SIGNED_IN or not expires.isdigit() or int(expires) <= self._clock():
            return None
        if not hmac.compare_digest(mac.encode(), self._mac(f"signed-in:{payload}", int(expires)).encode()):
            return None
        with self._lock:
            if token in self._signed_out:
                return None
        try:
            label, namespaces, tenants, _ = msgspec.json.decode(
                base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
            )
        except (ValueError, TypeError, msgspec.DecodeError):
            return None
        return Viewer(str(label), _names(namespaces), _names(tenants))

    def sign_out(self, token: str | None) -> None:
        """Refuse ``token`` here until it expires (its browser's cookie is cleared too)."""
        if not token or self.signed_in(token) is None:
            return
        now = self._clock()
        with self._lock:
            self._signed_out[token] = float(token.split(".")[1])
            for old, expires in list(self._signed_out.items()):
                if expires > now and len(self._signed_out) <= MAX_SIGNOUTS:
                    break
                del self._signed_out[old]

    def cookie(self, token: str, *, secure: bool = False) -> str:
        """The ``Set-Cookie`` value: HttpOnly, SameSite=Strict, scoped to the console, and
        ``Secure`` where the sign-in came over HTTPS (``secure``) or the console says so."""
        flags = "; Secure" if secure or self._secure else ""
        return f"{COOKIE}={token}; Path=/console; Max-Age={int(self._ttl)}; HttpOnly; SameSite=Strict{flags}"

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
        return hmac.compare_digest(mac.encode(), self._mac(purpose, int(expires)).encode())  # any text: bytes

    def _mac(self, purpose: str, expires: int) -> str:
        return hmac.new(self._secret, f"{purpose}\x00{expires}".encode(), hashlib.sha256).hexdigest()


def _names(value: object) -> tuple[str, ...] | None:
    return tuple(str(item) for item in value) if isinstance(value, list) else None

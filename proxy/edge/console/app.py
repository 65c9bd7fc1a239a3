"""The console's WSGI app, served by the metrics listener's threading server beside ``/metrics``.

Why a bridge rather than an ASGI listener on the event loop: ``/metrics`` renders its text
synchronously, so on the loop it would hold up model calls; on the listener's threads it never
does. The console's pages are rendered on those threads too; only their store reads (a few
awaited calls each) are handed to the proxy's event loop with
:func:`asyncio.run_coroutine_threadsafe`, where the store's Redis connections live.

Read-only: the only POSTs sign in and out, each with a per-form token. Every page is
server-rendered by jinja2 with autoescaping on, under a strict Content-Security-Policy (no
script at all; the one inline stylesheet carries the response's nonce).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from http.cookies import CookieError, SimpleCookie
from typing import Any, TypeVar
from urllib.parse import parse_qs

from jinja2 import Environment, PackageLoader, select_autoescape

from proxy.edge.console.auth import COOKIE, ConsoleAuth, Viewer
from proxy.edge.console.views import FILTERS, ConsoleSources, fleet, list_sessions, session_view
from proxy.edge.tenants import KEY_HEADER
from proxy.observe.logs import log_event
from proxy.session.base import StoreUnavailable

__all__ = ["Console"]

T = TypeVar("T")
StartResponse = Callable[[str, list[tuple[str, str]]], Any]
_STORE_WAIT_SECS = 10.0
_MAX_FORM = 8192
REFRESH_SECS = 10
"""The sessions list reloads itself this often (a meta refresh: no script)."""
_STATUS = {
    200: "200 OK",
    303: "303 See Other",
    400: "400 Bad Request",
    401: "401 Unauthorized",
    403: "403 Forbidden",
    404: "404 Not Found",
    405: "405 Method Not Allowed",
    500: "500 Internal Server Error",
    503: "503 Service Unavailable",
}


class Console:
    """The console under ``/console``; ``bind`` gives it the proxy's event loop before serving."""

    def __init__(
        self,
        sources: ConsoleSources,
        admin_key_sha256: str | None,
        *,
        secret: bytes | None = None,
        secure_cookie: bool = False,
    ) -> None:
        """``secret``: shared by every process that serves the console behind one address, so
        a browser signed in on one is signed in on all (see :mod:`proxy.edge.console.auth`)."""
        self.sources = sources
        self.auth = ConsoleAuth(sources.directory, admin_key_sha256, secret=secret, secure_cookie=secure_cookie)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._templates = Environment(
            loader=PackageLoader("proxy.edge.console", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self._templates.filters.update(utc=_utc, utc_ms=lambda ms: _utc(ms / 1000), amount=_amount)
        self._templates.globals["inf"] = float("inf")

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def _await(self, work: Coroutine[Any, Any, T]) -> T:
        """Run a store read on the proxy's loop and wait for it on this listener thread."""
        if self._loop is None or self._loop.is_closed():
            work.close()
            raise StoreUnavailable("the proxy's event loop is not running")
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(_STORE_WAIT_SECS)

    def __call__(self, environ: Mapping[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        nonce = secrets.token_urlsafe(16)
        try:
            status, body, headers = self._route(environ, nonce)
        except (StoreUnavailable, TimeoutError):
            message = "Session state is unavailable; try again shortly."
            status, body, headers = 503, self._page("error.html", nonce, None, message=message), []
        except Exception as exc:  # a page that fails says so, in the console's shape; the log has why
            log_event("console_error", {"path": str(environ.get("PATH_INFO") or ""), "error": repr(exc)}, logging.ERROR)
            message = "The console could not show this page."
            status, body, headers = 500, self._page("error.html", nonce, None, message=message), []
        start_response(_STATUS[status], [*_security_headers(nonce), *headers])
        return [body]

    def _route(self, environ: Mapping[str, Any], nonce: str) -> tuple[int, bytes, list[tuple[str, str]]]:
        path = str(environ.get("PATH_INFO") or "")
        method = str(environ.get("REQUEST_METHOD") or "GET")
        query = {name: values[0] for name, values in parse_qs(str(environ.get("QUERY_STRING") or "")).items()}
        token = _cookie(environ)
        if path == "/console/signin":
            return self._signin(environ, method, nonce)
        if path == "/console/signout":
            if method != "POST":
                return 405, self._page("error.html", nonce, None, message="Sign out with the form."), []
            form = _form(environ)
            if not self.auth.form_token_ok(f"signout:{token}", form.get("csrf")):
                return 403, self._page("error.html", nonce, None, message="This form has expired."), []
            self.auth.sign_out(token)
            return 303, b"", [("Location", "/console/signin"), ("Set-Cookie", self.auth.cleared_cookie())]
        if method not in ("GET", "HEAD"):
            return 405, self._page("error.html", nonce, None, message="The console is read-only."), []
        authorization = environ.get("HTTP_AUTHORIZATION")
        if authorization or environ.get("HTTP_X_LOOPWARDEN_KEY"):
            viewer = self.auth.viewer_for_headers(authorization, environ.get("HTTP_X_LOOPWARDEN_KEY"))
            if viewer is None:
                return 401, self._page("error.html", nonce, None, message="This key is not accepted."), []
        else:
            viewer = self.auth.signed_in(token)
            if viewer is None:
                return 303, b"", [("Location", "/console/signin")]
        signout = self.auth.form_token(f"signout:{token}") if token else None
        page = self._pages(path, query, viewer, nonce, signout)
        return page if page is not None else (404, self._page("error.html", nonce, viewer, message="Not found."), [])

    def _pages(
        self, path: str, query: Mapping[str, str], viewer: Viewer, nonce: str, signout: str | None
    ) -> tuple[int, bytes, list[tuple[str, str]]] | None:
        shared = {"signout": signout}
        if path in ("/console", "/console/"):
            filters = {name: query.get(name) or None for name in FILTERS}
            rows = self._await(list_sessions(self.sources, viewer, filters))
            body = self._page(
                "sessions.html", nonce, viewer, rows=rows, filters=filters, refresh=REFRESH_SECS, **shared
            )
            return 200, body, []
        if path == "/console/session":
            view = self._await(session_view(self.sources, viewer, query.get("ns"), query.get("id", "")))
            if view is None:
                return 404, self._page("error.html", nonce, viewer, message="No such session for this key."), []
            return 200, self._page("session.html", nonce, viewer, view=view, **shared), []
        if path == "/console/fleet":
            counts = fleet(self.sources.registry(), viewer.tenants)
            return 200, self._page("fleet.html", nonce, viewer, fleet=counts, **shared), []
        return None

    def _signin(self, environ: Mapping[str, Any], method: str, nonce: str) -> tuple[int, bytes, list[tuple[str, str]]]:
        if method == "POST":
            form = _form(environ)
            if not self.auth.form_token_ok("signin", form.get("csrf")):
                status, message = 403, "This form has expired; sign in again."
            else:
                viewer = self.auth.viewer_for_key(form.get("key", ""))
                if viewer is not None:
                    cookie = self.auth.cookie(self.auth.sign_in(viewer), secure=_over_https(environ))
                    return 303, b"", [("Location", "/console"), ("Set-Cookie", cookie)]
                status, message = 401, "This key is not accepted."
        elif method in ("GET", "HEAD"):
            status, message = 200, ""
        else:
            return 405, self._page("error.html", nonce, None, message="Sign in with the form."), []
        body = self._page("signin.html", nonce, None, csrf=self.auth.form_token("signin"), message=message)
        return status, body, []

    def _page(self, name: str, nonce: str, viewer: Viewer | None, **values: Any) -> bytes:
        template = self._templates.get_template(name)
        return template.render(nonce=nonce, viewer=viewer, key_header=KEY_HEADER, **values).encode()


def _over_https(environ: Mapping[str, Any]) -> bool:
    """The browser reached the console over HTTPS: served so, or through a proxy that says so
    (trusting the header can only make the cookie stricter)."""
    forwarded = str(environ.get("HTTP_X_FORWARDED_PROTO") or "").split(",")[0].strip().lower()
    return environ.get("wsgi.url_scheme") == "https" or forwarded == "https"


def _utc(seconds: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds)) if seconds else ""


def _amount(value: float) -> str:
    """A used amount or a limit, as short as it reads: 12, 0.5, 0.0042."""
    return f"{value:.4g}" if isinstance(value, float) and not value.is_integer() else f"{int(value)}"


def _security_headers(nonce: str) -> list[tuple[str, str]]:
    policy = (
        f"default-src 'none'; style-src 'nonce-{nonce}'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    )
    return [
        ("Content-Type", "text/html; charset=utf-8"),
        ("Content-Security-Policy", policy),
        ("X-Content-Type-Options", "nosniff"),
        ("X-Frame-Options", "DENY"),
        ("Referrer-Policy", "no-referrer"),
        ("Cache-Control", "no-store"),
    ]


def _cookie(environ: Mapping[str, Any]) -> str | None:
    try:
        jar = SimpleCookie(str(environ.get("HTTP_COOKIE") or ""))
    except CookieError:
        return None
    morsel = jar.get(COOKIE)
    return morsel.value if morsel is not None else None


def _form(environ: Mapping[str, Any]) -> dict[str, str]:
    """A small urlencoded form (bounded: the console's forms hold a key and a token)."""
    try:
        length = min(int(environ.get("CONTENT_LENGTH") or 0), _MAX_FORM)
    except ValueError:
        length = 0
    raw = environ["wsgi.input"].read(length) if length > 0 else b""
    fields = parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True)
    return {name: values[0] for name, values in fields.items()}

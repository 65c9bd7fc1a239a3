"""The guarded model routes reached before litestar: every model call passes here.

The model routes are raw ASGI handlers already (see :mod:`proxy.edge.routes`); going through
litestar only to find them (its exception middleware, router, route lookup and a wrapped
``send``) cost every model call more than its guards' bookkeeping. :class:`GuardedFirst` hands
an HTTP request whose path is exactly one of those routes straight to its handler, and one
below a mount (a route ending in ``/``: Gemini's ``/v1beta/``, whose paths name the call) to
the mount's; everything else (other paths, other spellings of these, WebSockets, lifespan) goes
to litestar, which serves the same handlers at the same paths, so both ways answer alike.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Receive, Scope, Send

__all__ = ["GuardedFirst"]


class GuardedFirst:
    """An ASGI app: ``routes`` (exact path → raw handler; a path ending in ``/``: every path
    below it) first, then ``app``."""

    def __init__(self, app: ASGIApp, routes: Mapping[str, ASGIApp]) -> None:
        self.app = app
        self._routes = {path: handler for path, handler in routes.items() if not path.endswith("/")}
        self._mounts = tuple((path, handler) for path, handler in routes.items() if path.endswith("/"))

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        """The work to await (the server awaits it: ``interface="asgi3"``): a plain function, no
        coroutine of its own between the server and the handler."""
        if scope["type"] == ScopeType.HTTP:
            path = scope["path"]
            handler = self._routes.get(path)
            if handler is None:
                handler = next((mount for prefix, mount in self._mounts if path.startswith(prefix)), None)
            if handler is not None:
                return handler(scope, receive, send)
        return self.app(scope, receive, send)

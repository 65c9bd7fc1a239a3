"""The guarded routes before litestar: an HTTP request on exactly a model route goes straight to
its handler; every other request (another path or spelling, a WebSocket, lifespan) to litestar."""

from __future__ import annotations

import pytest

from proxy.edge.dispatch import GuardedFirst


def _recorder(name: str, seen: list[str]):
    async def app(scope, receive, send) -> None:
        seen.append(name)

    return app


async def _receive():
    return {"type": "http.request", "body": b"", "more_body": False}


async def _send(message) -> None:
    return None


@pytest.mark.parametrize(
    ("scope", "served_by"),
    [
        ({"type": "http", "path": "/v1/chat/completions"}, "chat"),
        ({"type": "http", "path": "/v1/messages"}, "messages"),
        ({"type": "http", "path": "/v1/chat/completions/"}, "litestar"),
        ({"type": "http", "path": "/V1/chat/completions"}, "litestar"),
        ({"type": "http", "path": "/v1/models"}, "litestar"),
        ({"type": "http", "path": "/healthz"}, "litestar"),
        ({"type": "websocket", "path": "/v1/chat/completions"}, "litestar"),
        ({"type": "lifespan"}, "litestar"),
    ],
)
async def test_only_an_http_request_on_exactly_a_guarded_route_skips_litestar(scope, served_by):
    seen: list[str] = []
    routes = {"/v1/chat/completions": _recorder("chat", seen), "/v1/messages": _recorder("messages", seen)}
    app = GuardedFirst(_recorder("litestar", seen), routes)

    await app(scope, _receive, _send)

    assert seen == [served_by]


@pytest.mark.parametrize(
    ("path", "served_by"),
    [
        ("/v1beta/models/m:generateContent", "gemini"),
        ("/v1beta/models", "gemini"),
        ("/v1beta", "litestar"),
        ("/v1betax/models", "litestar"),
        ("/v1/chat/completions", "chat"),
    ],
)
async def test_a_request_below_a_mount_goes_to_the_mount_s_handler(path, served_by):
    seen: list[str] = []
    routes = {"/v1/chat/completions": _recorder("chat", seen), "/v1beta/": _recorder("gemini", seen)}
    app = GuardedFirst(_recorder("litestar", seen), routes)

    await app({"type": "http", "path": path}, _receive, _send)

    assert seen == [served_by]

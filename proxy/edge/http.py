"""ASGI-level plumbing for the hot routes: bounded body reads, header filtering, replies.

The proxy's hot routes are raw ASGI handlers (litestar routes to them but does not parse
or render), so these helpers are the only place that touches the wire directly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from litestar.types import HTTPScope, Receive, Send

from proxy.errors import PayloadTooLarge, ProxyError
from proxy.upstream.headers import HOP_BY_HOP

__all__ = [
    "client_headers",
    "forwarded_headers",
    "header",
    "header_text",
    "headers_by_name",
    "read_body",
    "send_error",
    "send_reply",
    "upstream_request_headers",
]

# Never copied client → upstream: hop-by-hop, framing the server recomputes, credentials
# the proxy decides itself, and the proxy's own control headers.
_NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length", "authorization", "expect"}
_NOT_FORWARDED_IDENTITY = _NOT_FORWARDED | {"accept-encoding"}
"""With ``identity_encoding``: the client's own ``Accept-Encoding`` is replaced too."""
_OWN_PREFIX = "x-loopwarden-"
_DROPPED = frozenset(name.encode() for name in _NOT_FORWARDED)
_DROPPED_IDENTITY = frozenset(name.encode() for name in _NOT_FORWARDED_IDENTITY)
_OWN = _OWN_PREFIX.encode()
_JSON = [(b"content-type", b"application/json")]


def header_text(value: bytes) -> str:
    """A header value as text: UTF-8, as clients send non-ASCII values (an id, a title);
    bytes that are not UTF-8 are read as latin-1, so every value has a text that encodes back."""
    try:
        return value.decode()
    except UnicodeDecodeError:
        return value.decode("latin-1")


def header(scope: HTTPScope, name: bytes) -> str | None:
    """First value of a request header (names in ASGI scopes are lower-case bytes)."""
    for key, value in scope["headers"]:
        if key == name:
            return header_text(value)
    return None


def headers_by_name(scope: HTTPScope) -> Callable[[bytes], str | None]:
    """:func:`header` for a handler that reads many of one request's headers: indexed once (the
    first value of each name, as :func:`header` finds it), then one lookup each, not a scan."""
    pairs = scope["headers"]
    listed = pairs if isinstance(pairs, list | tuple) else list(pairs)
    found: dict[bytes, bytes] = dict(reversed(listed))  # reversed: the first of a repeated name wins

    def read(name: bytes) -> str | None:
        value = found.get(name)
        if value is None:
            return None
        try:  # header_text inlined: read several times a request
            return value.decode()
        except UnicodeDecodeError:
            return value.decode("latin-1")

    return read


def client_headers(scope: HTTPScope) -> list[tuple[str, str]]:
    """All request headers as text pairs, duplicates and order kept (values as :func:`header_text`
    reads them: one pass of plain UTF-8 decoding, the rare value that is not UTF-8 read again)."""
    try:
        return [(k.decode("latin-1"), v.decode()) for k, v in scope["headers"]]
    except UnicodeDecodeError:
        return [(k.decode("latin-1"), header_text(v)) for k, v in scope["headers"]]


def _connection_tokens(headers: Iterable[tuple[str, str]]) -> set[str]:
    tokens: set[str] = set()
    for name, value in headers:
        if name.lower() == "connection":
            tokens.update(t.strip().lower() for t in value.split(",") if t.strip())
    return tokens


def upstream_request_headers(
    headers: Sequence[tuple[str, str]],
    authorization: str | None,
    *,
    identity_encoding: bool = False,
    key_header: str = "authorization",
    dropped: Iterable[str] = (),
) -> list[tuple[str, str]]:
    """The client's headers as the upstream should see them.

    Hop-by-hop headers (and any the client's ``Connection`` names) are dropped, the
    proxy's own ``X-LoopWarden-*`` headers and the caller's credentials are replaced by
    ``authorization`` (the provider key). ``identity_encoding`` asks for an uncompressed
    body the proxy can read. ``key_header``: where ``authorization`` goes when the provider
    wants its key elsewhere (Anthropic's ``x-api-key``: the token alone, and the caller's
    value of that header, the proxy key, is dropped). ``dropped``: more of the caller's headers
    to keep back (those a proxy key may have come in, when the proxy sends the tenant's key).
    """
    drop = _NOT_FORWARDED_IDENTITY if identity_encoding else _NOT_FORWARDED
    tokens = _connection_tokens(headers)
    if tokens or dropped:  # rare: the common request copies no set
        drop = drop | tokens | {name.lower() for name in dropped}
    out = [(k, v) for k, v in headers if (low := k.lower()) not in drop and not low.startswith(_OWN_PREFIX)]
    return _credited(out, authorization, identity_encoding, key_header)


def forwarded_headers(
    scope: HTTPScope,
    authorization: str | None,
    *,
    identity_encoding: bool = False,
    key_header: str = "authorization",
    dropped: Iterable[str] = (),
) -> list[tuple[str, str]]:
    """``upstream_request_headers(client_headers(scope), ...)`` in one pass over the raw headers,
    for the common request: no ``Connection`` header naming more to drop, every value UTF-8
    (else those two steps, as ever). Names compare lower-cased as bytes: the names that
    matter are ASCII, and a latin-1 letter never lower-cases to one."""
    raw = scope["headers"]
    if type(raw) is not list:  # (not the proxy's own server: read twice below, so a list only)
        return upstream_request_headers(
            client_headers(scope),
            authorization,
            identity_encoding=identity_encoding,
            key_header=key_header,
            dropped=dropped,
        )
    drop = _DROPPED_IDENTITY if identity_encoding else _DROPPED
    if dropped:
        drop = drop | {name.lower().encode("latin-1") for name in dropped}
    connection: list[bytes] = []  # Connection headers' values, noted (never kept themselves)
    try:
        out = [
            (name.decode("latin-1"), value.decode())
            for name, value in raw
            if ((low := name.lower()) != b"connection" or _noted(connection, value))
            and low not in drop
            and not low.startswith(_OWN)
        ]
    except UnicodeDecodeError:
        connection.append(b"")  # a value that is not UTF-8: the two steps read it
    if connection:
        return upstream_request_headers(
            client_headers(scope),
            authorization,
            identity_encoding=identity_encoding,
            key_header=key_header,
            dropped=dropped,
        )
    return _credited(out, authorization, identity_encoding, key_header)


def _noted(seen: list[bytes], value: bytes) -> bool:
    """Note a ``Connection`` header's value (it may name more to drop): False, not kept."""
    seen.append(value)
    return False


def _credited(
    out: list[tuple[str, str]], authorization: str | None, identity_encoding: bool, key_header: str
) -> list[tuple[str, str]]:
    """The kept headers with the provider key where it goes, and ``Accept-Encoding: identity``."""
    if authorization and key_header != "authorization":
        out = [(k, v) for k, v in out if k.lower() != key_header]
        scheme, _, token = authorization.partition(" ")
        out.append((key_header, token.strip() if scheme.lower() == "bearer" else authorization))
    elif authorization:
        out.append(("authorization", authorization))
    if identity_encoding:
        out.append(("accept-encoding", "identity"))
    return out


async def read_body(receive: Receive, limit: int, declared_length: str | None) -> bytes:
    """Read the whole request body, refusing it as soon as it exceeds ``limit`` bytes.

    A declared ``Content-Length`` over the limit is refused before reading; a chunked
    body is counted as it arrives, so no oversized body is ever held in memory.
    """
    if declared_length is not None:
        try:
            declared = int(declared_length)
        except ValueError:
            declared = -1
        if declared > limit:
            raise PayloadTooLarge(f"Request body is larger than the limit of {limit} bytes.")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected
        chunk: bytes = message.get("body", b"")  # type: ignore[assignment]
        if chunk:
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"Request body is larger than the limit of {limit} bytes.")
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class ClientDisconnected(Exception):
    """The client went away; there is nobody to answer."""


async def send_reply(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    """Send a complete response in two ASGI messages."""
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def send_error(
    send: Send, error: ProxyError, extra: Sequence[tuple[bytes, bytes]] = (), body: bytes | None = None
) -> None:
    """Answer with an error and its own status: ``body`` (a wire format's error shape, from its
    codec), else OpenAI's shape."""
    headers = list(_JSON)
    headers.extend((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in error.headers.items())
    headers.extend(extra)
    await send_reply(send, error.status, headers, error.body() if body is None else body)

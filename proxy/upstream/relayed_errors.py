"""What of an upstream error reaches the client: readable, without keys, in OpenAI's shape.

An upstream 401 may quote the key it was sent (some providers and gateways do, verbatim),
and that key is the tenant's provider key, which the client must never see. Every provider
key the proxy knows is masked in a relayed error (body and headers). httpx has already undone the content
codings it knows (gzip, deflate, and zstd or br when their modules are installed) when it
read the body, so the error goes out uncompressed; a body in any other coding is not
relayed at all, since what it could hide cannot be checked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from urllib.parse import quote

import msgspec

from proxy.errors import UpstreamError

try:
    from httpx._decoders import SUPPORTED_DECODERS  # what httpx decodes when it reads a body

    _HTTPX_DECODES = frozenset(SUPPORTED_DECODERS)
except ImportError:  # pragma: no cover - a future httpx: assume only what every version decodes
    _HTTPX_DECODES = frozenset({"identity", "gzip", "deflate"})

__all__ = ["MASK", "credential_values", "masked_bytes", "masked_text", "relayed_error", "secret_forms"]

MASK = b"[REDACTED]"
_MIN_SECRET = 8
"""Shorter values are no real key, and masking them would mangle ordinary text."""
_CREDENTIAL_HEADERS = frozenset({"authorization", "api-key", "x-api-key", "x-goog-api-key"})
_DECODED = frozenset(coding.encode() for coding in _HTTPX_DECODES)
_decode = msgspec.json.decode


def credential_values(headers: Iterable[tuple[str, str]]) -> list[str]:
    """The keys in request headers as sent upstream (``Bearer`` and other schemes stripped)."""
    values = []
    for name, value in headers:
        if name.lower() in _CREDENTIAL_HEADERS:
            scheme, _, token = value.strip().partition(" ")
            values.append(token.strip() if token else scheme)
    return values


def secret_forms(secrets: Iterable[str | None]) -> list[bytes]:
    """Each secret as it may appear in a body: raw, with JSON-escaped slashes, percent-encoded;
    longest first, so a key that contains another is masked whole."""
    forms: set[bytes] = set()
    for secret in secrets:
        if not secret or len(secret) < _MIN_SECRET:
            continue
        raw = secret.encode()
        forms.update((raw, raw.replace(b"/", b"\\/"), quote(secret, safe="").encode()))
    return sorted(forms, key=len, reverse=True)


def _masked(body: bytes, forms: Sequence[bytes]) -> bytes:
    for form in forms:
        if form in body:
            body = body.replace(form, MASK)
    return body


def masked_bytes(body: bytes, secrets: Sequence[bytes]) -> bytes:
    """``body`` with every form of every secret masked (an event relayed as it came)."""
    return _masked(body, secrets)


def masked_text(text: str, secrets: Sequence[bytes]) -> str:
    """``text`` with every form of every secret masked (a relayed error message)."""
    if not secrets:
        return text
    return _masked(text.encode(), secrets).decode()


def _readable(headers: Sequence[tuple[bytes, bytes]]) -> bool:
    """Whether httpx undid every content coding of the body (so it can be checked)."""
    codings = [c.strip().lower() for k, v in headers if k.lower() == b"content-encoding" for c in v.split(b",")]
    return all(coding in _DECODED for coding in codings if coding)


Shape = Callable[[UpstreamError], bytes]
"""A wire format's error body (its codec's ``error_body``): Anthropic's on its routes."""


class _Relayed(UpstreamError):
    """An upstream error the proxy rewraps, under the upstream's own status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status  # type: ignore[misc]
        self.code = f"upstream_{status}"  # type: ignore[misc]


def _wrapped(
    status: int, detail: str, headers: Sequence[tuple[bytes, bytes]], shape: Shape | None = None
) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    message = f"The upstream model API answered {status}" + (f": {detail}" if detail else ".")
    kept = [(k, v) for k, v in headers if k.lower() not in (b"content-type", b"content-encoding")]
    kept.append((b"content-type", b"application/json"))
    error = _Relayed(status, message)
    return (error.body() if shape is None else shape(error)), kept


def relayed_error(
    status: int,
    body: bytes,
    headers: Sequence[tuple[bytes, bytes]],
    secrets: Sequence[bytes],
    shape: Shape | None = None,
) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """An upstream error as the client gets it, from the body httpx read (decoded): ``secrets``
    masked, no content coding; kept as sent when it carries an ``error`` object (OpenAI's and
    Anthropic's shapes both do), wrapped otherwise (an HTML 502): in ``shape``, the route's
    API's error shape, else OpenAI's."""
    headers = [(k, _masked(v, secrets)) for k, v in headers]  # a WWW-Authenticate may quote it too
    if not _readable(headers):
        return _wrapped(status, "(in a content coding the proxy cannot read; not relayed)", headers, shape)
    body = _masked(body, secrets)
    headers = [(k, v) for k, v in headers if k.lower() != b"content-encoding"]
    try:
        parsed = _decode(body) if body else None
    except (msgspec.DecodeError, RecursionError):
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        return body, headers
    return _wrapped(status, body[:200].decode("utf-8", "replace").strip(), headers, shape)

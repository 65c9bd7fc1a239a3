"""What of an upstream error reaches the client: readable, without keys, in OpenAI's shape.

An upstream 401 may quote the key it was sent (some providers and gateways do, verbatim),
and that key is the tenant's provider key, which the client must never see. Every provider
key the proxy knows is masked in a relayed error (body and headers), in every form a client
could read it back from: as sent, upper-cased, JSON- or percent-escaped, base64-encoded, or
spelled with ``\\u`` escapes inside a JSON string. httpx has already undone the content
codings it knows (gzip, deflate, and zstd or br when their modules are installed) when it
read the body, so the error goes out uncompressed; a body in any other coding is not
relayed at all, since what it could hide cannot be checked.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import quote

import msgspec

from proxy.errors import UpstreamError

try:
    from httpx._decoders import SUPPORTED_DECODERS  # what httpx decodes when it reads a body

    _HTTPX_DECODES = frozenset(SUPPORTED_DECODERS)
except ImportError:  # pragma: no cover - a future httpx: assume only what every version decodes
    _HTTPX_DECODES = frozenset({"identity", "gzip", "deflate"})

__all__ = ["MASK", "credential_values", "masked_json", "masked_text", "relayed_error", "secret_forms"]

MASK = b"[REDACTED]"
_MIN_SECRET = 8
"""Shorter values are no real key, and masking them would mangle ordinary text."""
_SEARCH_COST = 12
"""About what one search of the body costs, in bytes the one pass over it would read instead."""
_CREDENTIAL_HEADERS = frozenset({"authorization", "api-key", "x-api-key", "x-goog-api-key"})
_DECODED = frozenset(coding.encode() for coding in _HTTPX_DECODES)
_decode = msgspec.json.decode
_encode = msgspec.json.encode
_URL_SAFE = bytes.maketrans(b"+/", b"-_")


def credential_values(headers: Iterable[tuple[str, str]]) -> list[str]:
    """The keys in request headers as sent upstream (``Bearer`` and other schemes stripped)."""
    values = []
    for name, value in headers:
        if name.lower() in _CREDENTIAL_HEADERS:
            scheme, _, token = value.strip().partition(" ")
            values.append(token.strip() if token else scheme)
    return values


def secret_forms(secrets: Iterable[str | None]) -> list[bytes]:
    """Each secret as it may appear in a body: raw, with JSON-escaped slashes, percent-encoded,
    base64-encoded; lower-cased, since they are matched without regard to case (an upper-cased
    key is still the key); longest first, so a key that contains another is masked whole."""
    forms: set[bytes] = set()
    for secret in secrets:
        if secret and len(secret) >= _MIN_SECRET:
            forms.update(_forms_of(secret))
    return sorted(forms, key=len, reverse=True)


@functools.lru_cache(maxsize=4096)
def _forms_of(secret: str) -> frozenset[bytes]:
    """One secret's forms, once per key (every tenant's are asked for on every relayed error)."""
    raw = secret.encode()
    forms = (raw, raw.replace(b"/", b"\\/"), quote(secret, safe="").encode(), *_base64_forms(raw))
    return frozenset(form.lower() for form in forms)


def _base64_forms(raw: bytes) -> list[bytes]:
    """The key in base64 (standard and URL-safe alphabets): whole, and as it reads inside a longer
    encoded value (``Basic`` credentials, a token): at each of the three alignments, the characters
    only the key's own bytes decide, so at most two of its bytes stay readable beside the mask."""
    forms = [base64.b64encode(raw)]
    for shift in range(3):
        encoded = base64.b64encode(bytes(shift) + raw)
        forms.append(encoded[4 if shift else 0 : (shift + len(raw)) // 3 * 4])
    return [variant for form in forms for variant in (form, form.translate(_URL_SAFE))]


def _spans(folded: bytes, forms: Sequence[bytes]) -> list[tuple[int, int]]:
    """Where the forms occur in ``folded`` (lower-cased). A few forms: one search each. Many (a
    key per tenant), when one search each would cost more: one pass over the body, looking up
    the bytes at each position among the forms' first bytes."""
    spans: list[tuple[int, int]] = []
    if len(forms) * _SEARCH_COST <= len(folded):
        for form in forms:
            start = folded.find(form)
            while start != -1:
                spans.append((start, start + len(form)))
                start = folded.find(form, start + len(form))
        return spans
    heads = _heads(tuple(forms)).get
    for start in range(len(folded) - _MIN_SECRET + 1):
        for form in heads(folded[start : start + _MIN_SECRET], ()):
            if folded.startswith(form, start):
                spans.append((start, start + len(form)))
    return spans


@functools.lru_cache(maxsize=8)
def _heads(forms: tuple[bytes, ...]) -> dict[bytes, list[bytes]]:
    """The forms by their first bytes (every form is at least as long as the shortest secret)."""
    heads: dict[bytes, list[bytes]] = {}
    for form in forms:
        heads.setdefault(form[:_MIN_SECRET], []).append(form)
    return heads


def _masked(body: bytes, forms: Sequence[bytes]) -> bytes:
    """``body`` with every place a form matches (in any case) replaced by one mask; overlapping
    matches are masked as one."""
    if not forms:
        return body
    spans = _spans(body.lower(), forms)  # ASCII only: every offset stays where it was
    if not spans:
        return body
    spans.sort()
    out: list[bytes] = []
    kept_from, masked_to = 0, -1
    for start, end in spans:
        if start > masked_to:
            if masked_to >= 0:
                out.append(MASK)
            out.append(body[kept_from:start])
        masked_to = max(masked_to, end)
        kept_from = masked_to
    out += [MASK, body[kept_from:]]
    return b"".join(out)


def masked_text(text: str, secrets: Sequence[bytes]) -> str:
    """``text`` with every form of every secret masked (a relayed error message)."""
    if not secrets:
        return text
    return _masked(text.encode(), secrets).decode()


def masked_json(body: bytes, secrets: Sequence[bytes]) -> bytes:
    """A JSON ``body`` (an error, a failed event) with every secret masked, also where its strings
    spell a key with escapes (``\\u0073k-…`` reads as the key to any parser): masked as bytes, then,
    when an escape could hide one, inside the decoded strings, re-encoded only if one changed."""
    body = _masked(body, secrets)
    if not secrets or b"\\" not in body:
        return body
    try:
        parsed = _decode(body)
    except (msgspec.DecodeError, RecursionError):
        return body
    return _encode(parsed) if _masked_strings(parsed, secrets) else body


def _masked_strings(value: object, secrets: Sequence[bytes]) -> bool:
    """Mask every string (object keys too) inside decoded JSON, in place; whether one changed.
    Iterative: a deeply nested body cannot exhaust the stack."""
    changed = False
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            items = [(masked_text(k, secrets), v) for k, v in node.items()]
            if any(new != old for (new, _), old in zip(items, node, strict=True)):
                changed = True
                node.clear()
                node.update(items)
            entries: Iterable[tuple[Any, Any]] = node.items()
        elif isinstance(node, list):
            entries = enumerate(node)
        else:
            continue
        for slot, item in list(entries):
            if isinstance(item, str):
                masked = masked_text(item, secrets)
                if masked != item:
                    node[slot] = masked
                    changed = True
            elif isinstance(item, (dict, list)):
                stack.append(item)
    return changed


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
    body = masked_json(body, secrets)
    headers = [(k, v) for k, v in headers if k.lower() != b"content-encoding"]
    try:
        parsed = _decode(body) if body else None
    except (msgspec.DecodeError, RecursionError):
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        return body, headers
    return _wrapped(status, body[:200].decode("utf-8", "replace").strip(), headers, shape)

"""What a Gemini path says: the model and the method live there, not in the body.

``POST /v1beta/models/{model}:generateContent`` and ``:streamGenerateContent`` (``?alt=sse``)
are the guarded calls; the SDK's ``/v1/models/…`` form (and ``v1alpha``, ``tunedModels/…``) too,
in any case of the method and percent-encoded, so no spelling reaches the model unguarded.
Everything else under ``/v1beta`` (``countTokens``, ``models``) is passed through, the version
segment being the tenant's base URL's (``https://generativelanguage.googleapis.com/v1beta``).

A key in the query string (``?key=``) is moved into the ``x-goog-api-key`` header before
anything else reads the request: no URL the proxy logs, records or sends carries it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlencode

__all__ = ["ADDRESSING", "KEY_HEADER", "ROUTE", "Address", "GeminiAddressing", "keyed"]

ROUTE = "/v1beta"
"""The mount Gemini's clients call (the SDK's default API version)."""
KEY_HEADER = "x-goog-api-key"
_CALL = re.compile(
    r"^/(v1beta|v1alpha|v1)/((?:models|tunedmodels)/[^/:]+):(generatecontent|streamgeneratecontent)$", re.IGNORECASE
)
_VERSION = re.compile(rb"^/(v1beta|v1alpha|v1)(?=/|$)")
_SHAPED = re.compile(r"^/v1/(models|tunedmodels)/[^/]+:", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Address:
    """A guarded call: the resource the path names and whether it streams."""

    resource: str
    """``models/gemini-2.5-flash`` (``tunedModels/…``), as the client spelled it."""
    stream: bool

    @property
    def model(self) -> str:
        return self.resource.partition("/")[2]

    def upstream_path(self) -> str:
        """What follows the tenant's base URL (a stream always asks for server-sent events)."""
        return f"/{self.resource}:{'streamGenerateContent' if self.stream else 'generateContent'}"


class GeminiAddressing:
    """Gemini's paths, for the edge: which calls are guarded, which passed through."""

    route = ROUTE

    @staticmethod
    def guarded(raw_path: bytes) -> Address | None:
        """The guarded call a path makes (None: a call to pass through); a client's calls
        name a handful of paths, so each is read once (up to ``_KNOWN_PATHS`` of them)."""
        known = _addresses.get(raw_path, _UNKNOWN)
        if known is not _UNKNOWN:
            return known  # type: ignore[return-value]
        address = _address(raw_path)
        if len(raw_path) <= _CACHED_PATH_BYTES:
            if len(_addresses) >= _KNOWN_PATHS:
                _addresses.clear()
            _addresses[raw_path] = address
        return address

    @staticmethod
    def claims(path: str, header: Callable[[bytes], str | None]) -> bool:
        """A call below the OpenAI mount (``/v1/…``) that is Gemini's: a model's method
        (``/v1/models/x:countTokens``), or one carrying a Google key (``GET /v1/models`` with
        ``x-goog-api-key``; a ``?key=`` is moved there first). OpenAI's ``/v1/models`` stays OpenAI's."""
        if _SHAPED.match(unquote(path.partition("?")[0])):
            return True
        return header(KEY_HEADER.encode()) is not None

    @staticmethod
    def passthrough_path(raw_path: bytes) -> bytes:
        """The path as the ``/v1`` pass-through takes it (the version is the tenant base's)."""
        return _VERSION.sub(b"/v1", raw_path, count=1)

    @staticmethod
    def upstream_query(query: bytes, stream: bool) -> bytes:
        """The client's query for the upstream: ``alt=sse`` on a stream (the proxy reads events)."""
        if not query or query == b"alt=sse":  # what the SDKs send: nothing to take apart
            return b"alt=sse" if stream else query
        pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
        if stream:
            pairs = [(k, v) for k, v in pairs if k != "alt"] + [("alt", "sse")]
        return urlencode(pairs).encode("latin-1")


_UNKNOWN = object()
_KNOWN_PATHS = 256
_CACHED_PATH_BYTES = 512
_addresses: dict[bytes, Address | None] = {}
"""Paths read before, and what they call (None: passed through)."""


def _address(raw_path: bytes) -> Address | None:
    path = unquote(raw_path.partition(b"?")[0].decode("latin-1"))
    match = _CALL.match(path)
    if match is None:
        return None
    resource = match[2]
    collection, _, name = resource.partition("/")
    collection = "tunedModels" if collection.lower() == "tunedmodels" else "models"
    return Address(f"{collection}/{name}", match[3].lower().startswith("stream"))


def _query_key(query: bytes) -> str | None:
    for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
        if name == "key":
            return value
    return None


def keyed(query: bytes, headers: Sequence[tuple[bytes, bytes]]) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """(query, headers) with a ``key`` query parameter moved into ``x-goog-api-key`` (a key
    already in the header wins); unchanged without one."""
    key = _query_key(query)
    if key is None:
        return query, list(headers)
    pairs = [(k, v) for k, v in parse_qsl(query.decode("latin-1"), keep_blank_values=True) if k != "key"]
    moved = list(headers)
    if not any(name == KEY_HEADER.encode() for name, _ in moved):
        moved.append((KEY_HEADER.encode(), key.encode("latin-1")))
    return urlencode(pairs).encode("latin-1"), moved


ADDRESSING = GeminiAddressing()

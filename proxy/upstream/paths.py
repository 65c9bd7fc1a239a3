"""Which upstream URL a ``/v1/*`` pass-through request may reach: only one below the tenant's base.

The pass-through appends the client's raw path to the tenant's base URL and sends it with
the tenant's provider key. A path with ``..``, ``.`` or empty segments would be normalized
on the way (by httpx, by the upstream's own proxies, by servers that decode ``%2f`` or treat
``\\`` as a separator) into another path of the upstream host: ``/v1/../_control/state``
reads what the tenant's key may reach but the proxy never meant to offer, and
``/v1/x/../chat/completions`` would reach the model without the guards. Such paths are
refused before anything is sent (as sent, once and twice percent-decoded), and the joined
URL is checked to lie under the base. A segment counts as ``..`` also in the forms some
servers read that way: overlong UTF-8 (``%c0%ae``), IIS's ``%u002e``, full-width dots
(Unicode-normalized), cut at a NUL (C code), or padded with whitespace (trimmed).
"""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import unquote_to_bytes

import httpx

from proxy.errors import InvalidRequest

__all__ = ["CLAUDE_TELEMETRY", "passthrough_route", "passthrough_url", "telemetry_url"]

_MOUNT = b"/v1"
_SEPARATORS = re.compile(rb"[/\\]")
_UNSAFE_SEGMENTS = frozenset({b"", b".", b".."})
_UNSAFE_TEXT = frozenset({"", ".", ".."})
_TRIMMED = b" \t\r\n\x0b\x0c"
_IIS_ESCAPE = re.compile(rb"%u([0-9a-fA-F]{4})")
_DECODINGS = 2
"""Percent-decodings checked: the upstream's own, and one more by a gateway in front of it."""
_REFUSED = (
    "The request path has an empty, '.' or '..' segment (raw or percent-encoded); "
    "the proxy forwards only plain paths below /v1."
)


def _has_unsafe_segment(path: bytes) -> bool:
    """``path`` is what follows the mount, starting with '/'. Backslashes count as separators,
    and a segment's ``;parameters`` are ignored (servers that strip them read ``..;x`` as ``..``)."""
    return any(_unsafe(segment) for segment in _SEPARATORS.split(path[1:]))


def _unsafe(segment: bytes) -> bool:
    segment = segment.partition(b";")[0].partition(b"\x00")[0].strip(_TRIMMED)
    if segment in _UNSAFE_SEGMENTS:
        return True
    if segment.isascii():
        return False
    try:
        text = segment.decode("utf-8")
    except UnicodeDecodeError:  # overlong forms of '.' and '/' among them: no plain path has these
        return True
    return unicodedata.normalize("NFKC", text).strip() in _UNSAFE_TEXT


def _subpath(raw_path: bytes) -> bytes:
    """The raw path below ``/v1``, refused when it could climb out of it once normalized."""
    if raw_path == _MOUNT:
        return b""
    if not raw_path.startswith(_MOUNT + b"/"):  # e.g. ``/v1%2f..``: routed by its decoded form only
        raise InvalidRequest(_REFUSED)
    rest = form = raw_path[len(_MOUNT) :]
    for _ in range(_DECODINGS + 1):  # as sent, then as each decoding on the way would read it
        if _has_unsafe_segment(form):
            raise InvalidRequest(_REFUSED)
        if b"%" not in form:
            break
        form = unquote_to_bytes(_IIS_ESCAPE.sub(_iis_decoded, form))
    return rest


def _iis_decoded(match: re.Match[bytes]) -> bytes:
    return chr(int(match[1], 16)).encode("utf-8", "surrogatepass")


def passthrough_url(base_url: str, raw_path: bytes, query: bytes) -> httpx.URL:
    """The upstream URL for a pass-through request: the tenant's base plus the path below ``/v1``.

    ``base_url`` has no trailing slash (tenants are loaded that way). Raises ``InvalidRequest``
    (400) for a path that could leave the base, checked on the path as sent and decoded, and
    again on the joined URL as httpx will send it."""
    url = base_url + _subpath(raw_path.split(b"?", 1)[0]).decode("latin-1")
    if query:
        url += "?" + query.decode("latin-1")
    joined = httpx.URL(url)
    base = httpx.URL(base_url)
    base_path = base.raw_path.rstrip(b"/")
    path = joined.raw_path.split(b"?", 1)[0]
    if (
        joined.scheme != base.scheme
        or joined.netloc != base.netloc
        or not (path == base_path or path.startswith(base_path + b"/") or (not base_path and path == b"/"))
    ):
        raise InvalidRequest(_REFUSED)
    return joined


_PASSTHROUGH_FAMILIES = frozenset(
    {
        "assistants", "audio", "batches", "chat", "completions", "conversations", "embeddings", "files",
        "fine_tuning", "images", "messages", "models", "moderations", "responses", "threads", "uploads",
        "vector_stores",
    }
)  # fmt: skip
"""The API families a pass-through request is counted under (anything else is ``passthrough``):
a fixed set, so no path a client sends can grow the metrics' label space."""


def passthrough_route(raw_path: bytes) -> str:
    """``passthrough:<family>`` for ``/v1/<family>/…`` (``passthrough:responses`` for a stored
    response's ``GET``), by the path's first segment after ``/v1``."""
    path = raw_path.decode("latin-1")
    if path.partition("?")[0] == CLAUDE_TELEMETRY:
        return "passthrough:telemetry"
    family = path[4:].partition("/")[0].partition("?")[0] if path.startswith("/v1/") else ""
    return f"passthrough:{family}" if family in _PASSTHROUGH_FAMILIES else "passthrough"


CLAUDE_TELEMETRY = "/api/event_logging/batch"
"""Where Claude Code posts its telemetry, at the root of ``ANTHROPIC_BASE_URL``."""


def telemetry_url(base_url: str, query: bytes) -> httpx.URL:
    """Where Claude Code's telemetry goes: where it would go without the proxy, the upstream's
    own host at that one fixed path (outside the tenant's base path, which names the model
    API), the query as sent. Nothing the client sends chooses the path."""
    raw = CLAUDE_TELEMETRY.encode() + (b"?" + query if query else b"")
    return httpx.URL(base_url).copy_with(raw_path=raw)

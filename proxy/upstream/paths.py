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

The guarded model routes (``/v1/chat/completions``, ``/v1/responses``, ``/v1/messages``) are
refused in every other spelling an upstream could still serve as a model call, outside every
guard and cap: with ``;parameters`` (dropped by servlet-style servers), cut at a NUL, in
another case or Unicode form, with a format suffix (``.json``), percent-encoded, or as the
tail of a longer path (gateways that route ``…/deployments/x/chat/completions``). A path
that repeats ``/v1`` (a client whose base URL already ends in it) is refused whatever follows,
saying which base URL to set.
"""

from __future__ import annotations

import functools
import logging
import re
import unicodedata
from urllib.parse import unquote_to_bytes

import httpx

from proxy.errors import InvalidRequest, RepeatedBasePath
from proxy.observe.logs import log_event

__all__ = [
    "CLAUDE_TELEMETRY",
    "PASSTHROUGH_FAMILIES",
    "is_api_root",
    "is_telemetry",
    "passthrough_family",
    "passthrough_route",
    "passthrough_url",
    "spends",
    "telemetry_url",
]

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


_GUARDED = (("chat", "completions"), ("responses",), ("messages",))
"""The guarded model routes below ``/v1``, as segments."""
_GUARDED_SENT = tuple(tuple(name.encode() for name in route) for route in _GUARDED)
_SUB_RESOURCE_TAILS = (("threads", "*", "messages"), ("chat", "completions", "*", "messages"))
"""Paths that end like a guarded route but name another resource (a thread's, a stored completion's messages)."""
_FORMAT_SUFFIX = re.compile(r"\.[a-z0-9]{1,8}$")
_MAX_SHOWN = 200


def _alias(form: bytes, sent: list[bytes]) -> str | None:
    """The guarded route ``form`` (the path below the mount, as sent or decoded) could reach in
    another spelling than its own, else None. ``sent``: the segments as sent, compared exactly.
    A format suffix counts on the route's own segments only (``/v1/files/messages.json`` is a file)."""
    plain = tuple(_route_name(segment) for segment in _SEPARATORS.split(form[1:]))
    names = tuple(_FORMAT_SUFFIX.sub("", name) if "." in name else name for name in plain[:2])
    for route, canonical in zip(_GUARDED, _GUARDED_SENT, strict=True):
        size = len(route)
        if names[:size] == route and tuple(sent[:size]) != canonical:
            return "/v1/" + "/".join(route)
        if len(plain) > size and plain[-size:] == route and not _sub_resource(plain):
            return "/v1/" + "/".join(route)
    return None


def _route_name(segment: bytes) -> str:
    """A segment as a lenient server routes it: parameters and what follows a NUL cut off,
    trimmed, Unicode-normalized, lower-cased."""
    cut = segment.partition(b";")[0].partition(b"\x00")[0].strip(_TRIMMED)
    if cut.isascii():  # NFKC leaves ASCII as it is: the common case skips it
        return cut.decode("ascii").lower()
    return unicodedata.normalize("NFKC", cut.decode("utf-8", "replace")).strip().lower()


def _sub_resource(names: tuple[str, ...]) -> bool:
    return any(
        len(names) == len(tail) and all(want in ("*", name) for want, name in zip(tail, names, strict=True))
        for tail in _SUB_RESOURCE_TAILS
    )


def _refuse_alias(raw_path: bytes, route: str) -> InvalidRequest:
    shown = raw_path[:_MAX_SHOWN].decode("latin-1").encode("unicode_escape").decode("ascii")
    return InvalidRequest(
        f"The request path '{shown}' is another spelling of the guarded route {route} (a ';' parameter, a NUL, "
        f"another case, a suffix or a longer path); send model calls to {route} itself."
    )


def _repeated_v1(raw_path: bytes) -> RepeatedBasePath:
    """``/v1/v1/…``: a base URL ending in ``/v1`` to which the client adds its own ``/v1``
    (Anthropic's SDKs and Claude Code always do). No API has such a path; forwarding it would
    pass a model call by the guards, so it is refused saying which base URL to set, and logged."""
    shown = raw_path[:_MAX_SHOWN].decode("latin-1").encode("unicode_escape").decode("ascii")
    log_event("base_url_repeats_v1", {"path": shown}, logging.WARNING)
    return RepeatedBasePath(
        f"The request path '{shown}' repeats /v1: the client's base URL already ends in /v1 and the client "
        "adds /v1 again. Remove one: OpenAI clients take the proxy's address with /v1 "
        "(base_url='http://HOST:PORT/v1', OPENAI_BASE_URL), Anthropic clients and Claude Code without it "
        "(ANTHROPIC_BASE_URL=http://HOST:PORT)."
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
    """The raw path below ``/v1``, refused when it could climb out of it once normalized, or
    when it spells a guarded route another way. A short path's answer is kept: model calls
    (Claude Code's ``/v1/messages?beta=true``) and pass-through paths repeat; a refusal is
    not kept (it is raised again, as it should be)."""
    if len(raw_path) <= _CACHED_PATH_BYTES:
        return _checked_cached(raw_path)
    return _checked(raw_path)


_CACHED_PATH_BYTES = 256


@functools.lru_cache(maxsize=1024)
def _checked_cached(raw_path: bytes) -> bytes:
    return _checked(raw_path)


def _checked(raw_path: bytes) -> bytes:
    if raw_path == _MOUNT:
        return b""
    if not raw_path.startswith(_MOUNT + b"/"):  # e.g. ``/v1%2f..``: routed by its decoded form only
        raise InvalidRequest(_REFUSED)
    rest = form = raw_path[len(_MOUNT) :]
    sent = _SEPARATORS.split(rest[1:])
    for _ in range(_DECODINGS + 1):  # as sent, then as each decoding on the way would read it
        if _has_unsafe_segment(form):
            raise InvalidRequest(_REFUSED)
        if _route_name(_SEPARATORS.split(form[1:], 1)[0]) == "v1":
            raise _repeated_v1(raw_path)
        route = _alias(form, sent)
        if route is not None:
            raise _refuse_alias(raw_path, route)
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


KEPT_URL_BYTES = 512
"""Only URLs this short are kept checked: the client writes path and query, so long ones kept
1,024 times over could hold a lot of memory."""


def checked_url_text(base_url: str, raw_path: bytes, query: bytes) -> str:
    """:func:`passthrough_url` as text, kept when short: a model call's URL is one of a few per
    tenant and model, and checking one costs two URL parses (a refused one raises, and is not kept)."""
    if len(raw_path) + len(query) > KEPT_URL_BYTES:
        return str(passthrough_url(base_url, raw_path, query))
    return _kept_url_text(base_url, raw_path, query)


@functools.lru_cache(maxsize=1024)
def _kept_url_text(base_url: str, raw_path: bytes, query: bytes) -> str:
    return str(passthrough_url(base_url, raw_path, query))


PASSTHROUGH_FAMILIES = frozenset(
    {
        "assistants", "audio", "batches", "chat", "completions", "conversations", "embeddings", "files",
        "fine_tuning", "images", "messages", "models", "moderations", "responses", "threads", "uploads",
        "vector_stores",
    }
)  # fmt: skip
"""The API families a pass-through request is counted under (anything else is ``passthrough``):
a fixed set, so no path a client sends can grow the metrics' label space."""


OTHER_FAMILY = "other"
"""The family of a pass-through path outside :data:`PASSTHROUGH_FAMILIES` (in a tenant's allow-list too)."""
_FREE_FAMILIES = frozenset(
    {"assistants", "chat", "conversations", "files", "models", "moderations", "uploads", "vector_stores"}
)
"""Families whose calls spend no model tokens: stored objects, metadata, free moderation. (The
chat family here is stored completions' sub-resources: the model call itself is guarded.)"""
_FREE_ACTIONS = frozenset({"cancel", "count_tokens", "input_tokens"})
"""Last segments of calls that spend nothing in a spending family (counting, cancelling)."""


def passthrough_family(raw_path: bytes) -> str:
    """The API family of ``/v1/<family>/…``, by the path's first segment after ``/v1``
    (:data:`OTHER_FAMILY` for one outside the fixed set)."""
    path = raw_path.decode("latin-1").partition("?")[0]
    family = path[4:].partition("/")[0] if path.startswith("/v1/") else ""
    return family if family in PASSTHROUGH_FAMILIES else OTHER_FAMILY


def passthrough_route(raw_path: bytes) -> str:
    """``passthrough:<family>`` for ``/v1/<family>/…`` (``passthrough:responses`` for a stored
    response's ``GET``); ``passthrough`` for a family outside the fixed set."""
    if is_telemetry(raw_path):
        return "passthrough:telemetry"
    family = passthrough_family(raw_path)
    return "passthrough" if family == OTHER_FAMILY else f"passthrough:{family}"


def spends(method: str, raw_path: bytes) -> bool:
    """Whether a pass-through call may spend model tokens, and so must fit the tenant's day: a
    ``POST`` outside the free families and actions (completions, embeddings, images, audio,
    batches, ``responses/compact``, thread runs, and any family not known to be free)."""
    if method != "POST":
        return False
    path = raw_path.partition(b"?")[0].decode("latin-1")
    return passthrough_family(raw_path) not in _FREE_FAMILIES and path.rpartition("/")[2] not in _FREE_ACTIONS


CLAUDE_TELEMETRY = ("/api/event_logging/batch", "/api/event_logging/v2/batch")
"""Where Claude Code posts its telemetry, at the root of ``ANTHROPIC_BASE_URL`` (2.1.197 and
later post to the second)."""
_TELEMETRY_PATHS = frozenset(path.encode() for path in CLAUDE_TELEMETRY)


def is_telemetry(raw_path: bytes) -> bool:
    """The request is Claude Code's telemetry: exactly one of :data:`CLAUDE_TELEMETRY`."""
    return raw_path.partition(b"?")[0] in _TELEMETRY_PATHS


def is_api_root(base_url: str) -> bool:
    """The base URL is an API host's own ``/v1`` (``https://api.anthropic.com/v1``), whose host
    root is that API's too: where telemetry may go by default. A deeper base (a shared gateway's
    ``/tenants/delta/v1``, Azure's ``/openai/...``) leaves the root to someone else."""
    return httpx.URL(base_url).raw_path.partition(b"?")[0].rstrip(b"/") == _MOUNT


def telemetry_url(base_url: str, raw_path: bytes, query: bytes) -> httpx.URL:
    """Where Claude Code's telemetry goes: where it would go without the proxy, the upstream's
    own host at the fixed path it was sent to (one of :data:`CLAUDE_TELEMETRY`, outside the
    tenant's base path, which names the model API), the query as sent. Nothing else the client
    sends chooses the path; whether it goes at all is the tenant's (see :func:`is_api_root`)."""
    path = raw_path.partition(b"?")[0]
    if path not in _TELEMETRY_PATHS:
        raise ValueError(f"not a telemetry path: {path!r}")
    raw = path + (b"?" + query if query else b"")
    return httpx.URL(base_url).copy_with(raw_path=raw)

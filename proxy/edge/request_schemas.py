"""The request's JSON Schemas, measured and compiled at the edge, before any guard needs them.

A client's schema is refused with a 400 naming it (``tools[3].function.parameters``) when it
passes the limits (``--max-schema-bytes``, ``--max-schema-properties``); otherwise it is
compiled in a worker thread (or found in the cache) and carried on the conversation, so no
guard ever compiles a client's schema on the event loop. A tool schema that does not compile
is not the proxy's to police (the upstream accepted or will judge it): its calls go
unchecked. A ``response_format`` schema that does not compile is a 400, as upstream.

An agent resends the same tools every turn: a request whose schemas, all together, are JSON
the cache has seen (``SchemaCache.requests``, keyed by that JSON as sent, bounded by its bytes)
finds them compiled with one encoding and one lookup, not one of each per schema.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from proxy.errors import InvalidRequest
from proxy.exchange import Conversation
from proxy.schemas.compiled import ENCODE_FIRST, CompiledSchema, SchemaCache, SchemaInvalid, SchemaTooLarge

__all__ = ["compile_request_schemas"]

_RESPONSE_FORMAT = "response_format.json_schema.schema"
_encode = msgspec.json.Encoder().encode

_Compiled = tuple[dict[str, CompiledSchema | None], CompiledSchema | None]
"""A request's tool schemas compiled by tool name (None: one that does not compile), and its answer's."""


async def compile_request_schemas(
    declared: Sequence[tuple[str, str, Mapping[str, Any]]],
    conversation: Conversation,
    cache: SchemaCache,
    body_bytes: int | None = None,
) -> Conversation:
    """``conversation`` with its schemas compiled; :class:`InvalidRequest` for one refused.
    ``declared``: the offered tools' schemas as the format's codec found them (param, tool name,
    schema). ``body_bytes``, the request body's size, bounds every schema's (it saves
    walking them)."""
    if not declared and conversation.output_schema is None:
        return conversation  # nothing to compile
    key = _request_key(declared, conversation.output_schema, cache, body_bytes)
    known: _Compiled | None = cache.requests.get(key) if key is not None else None
    if known is not None:  # the same schemas as an earlier request: compiled, none refused
        return conversation.with_schemas(dict(known[0]), known[1])  # a mapping of the request's own
    tools: dict[str, CompiledSchema | None] = {}
    for param, name, schema in declared:
        try:
            tools[name] = await cache.compiled(schema, body_bytes)
        except SchemaTooLarge as exc:
            raise InvalidRequest(f"{param}: {exc}.", param=param) from None
        except SchemaInvalid:
            tools[name] = None
    answer = None
    if conversation.output_schema is not None:
        try:
            answer = await cache.compiled(conversation.output_schema, body_bytes)
        except SchemaInvalid as exc:
            raise InvalidRequest(str(exc), param=_RESPONSE_FORMAT) from None
    if key is not None:
        cache.requests.put(key, (dict(tools), answer), len(key))
    return conversation.with_schemas(tools, answer)


def _request_key(
    declared: Sequence[tuple[str, str, Mapping[str, Any]]],
    answer: Mapping[str, Any] | None,
    cache: SchemaCache,
    body_bytes: int | None,
) -> bytes | None:
    """The request's schemas together as JSON, when the body is small enough for them to be
    encoded at once (as :meth:`SchemaCache.compiled` would each); None: look each one up."""
    if body_bytes is None or body_bytes > ENCODE_FIRST * cache.limits.max_bytes:
        return None
    try:
        return _encode((declared, answer))
    except (msgspec.EncodeError, RecursionError, OverflowError):
        return None

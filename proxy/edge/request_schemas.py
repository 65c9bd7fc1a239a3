"""The request's JSON Schemas, measured and compiled at the edge, before any guard needs them.

A client's schema is refused with a 400 naming it (``tools[3].function.parameters``) when it
passes the limits (``--max-schema-bytes``, ``--max-schema-properties``); otherwise it is
compiled in a worker thread (or found in the cache) and carried on the conversation, so no
guard ever compiles a client's schema on the event loop. A tool schema that does not compile
is not the proxy's to police (the upstream accepted or will judge it): its calls go
unchecked. A ``response_format`` schema that does not compile is a 400, as upstream.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.errors import InvalidRequest
from proxy.exchange import Conversation
from proxy.schemas.compiled import CompiledSchema, SchemaCache, SchemaInvalid, SchemaTooLarge

__all__ = ["compile_request_schemas"]

_RESPONSE_FORMAT = "response_format.json_schema.schema"


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
    key = cache.request_key((declared, conversation.output_schema), body_bytes)
    known = cache.known(key) if key is not None else None
    if known is not None:  # the same schemas as an earlier request: compiled, none refused
        return conversation.with_schemas(*known)
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
        cache.keep(key, (tools, answer))
    return conversation.with_schemas(tools, answer)

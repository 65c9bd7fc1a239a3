"""JSON Schema, one way: measure, compile once, validate with path-level errors, extract JSON leniently.

Shared by the tool-argument contract and the output contract, so "$.city: 'city' is a
required property" reads the same everywhere.

A schema a client sends is untrusted work: an 8.7 MB tool schema held the event loop for
23 s, and a ``pattern`` can backtrack for minutes. So:

- a schema is measured before anything else (:func:`measure`: size, properties, nesting,
  stopping as soon as a limit is passed) and refused above :class:`SchemaLimits`;
- it is compiled (meta-checked, patterns included) in a worker thread, once: a
  :class:`SchemaCache` keeps compiled schemas by a digest of their canonical JSON, bounded
  by the bytes they weigh, not by their count;
- its patterns run on the bounded engine of :mod:`proxy.schemas.patterns`; all the pattern work of one
  validation shares :data:`VALIDATION_BUDGET_SECS`, and a value that cannot be checked in
  time is invalid (fails closed);
- a ``$ref`` is only ever resolved within the schema (and the JSON Schema meta-schemas):
  jsonschema's default downloads any other URI, which would let a client make the proxy
  request any address it reaches. A reference that resolves nowhere makes the schema not
  compile;
- references unfold (``a`` refers twice to ``b``, ``b`` twice to ``c``…: 1.3 KB held the loop
  6 s), and arrays multiply schemas: every keyword jsonschema applies first checks the
  validation's time (:data:`VALIDATION_WORK_SECS`), past which the value is invalid; and
  ``uniqueItems`` compares in linear time (jsonschema compares objects pairwise: 2,000 of
  them, 25 KB of answer, took 10 s);
- validating against a schema with patterns or references, or a large value, runs in a worker
  thread (:meth:`CompiledSchema.off_loop`), so the event loop only ever does the quick checks.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import msgspec
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema import exceptions as schema_errors
from jsonschema import validators

from proxy.schemas import patterns
from proxy.schemas.plain import Proof, plain_proof
from proxy.schemas.weighted_cache import WeightedCache

__all__ = [
    "VALIDATION_BUDGET_SECS",
    "VALIDATION_WORK_SECS",
    "CompiledSchema",
    "SchemaCache",
    "SchemaInvalid",
    "SchemaLimits",
    "SchemaTooLarge",
    "answer_errors",
    "check_schema",
    "compile_schema",
    "compiled",
    "extract_json",
    "measure",
]

patterns.install()

VALIDATION_BUDGET_SECS = 0.1
"""All pattern matching of one validation; past it the value counts as invalid."""
VALIDATION_WORK_SECS = 1.0
"""All the work of one validation; past it the value counts as invalid."""
MAX_DEPTH = 64
"""Nesting a schema may have: jsonschema recurses a few frames per level."""
OFF_LOOP_CHARS = 32_768
"""A value this long (its JSON text) is validated in a worker thread."""
OFF_LOOP_WORK = 1 << 16
"""Schema bytes times value characters past which a validation goes to a worker thread: each
part of a value may meet each part of a schema (``items`` of an ``anyOf`` of 100 ``const``,
1.3 KB, against 300 numbers took a second)."""
_FALLBACK_CACHE_BYTES = 8 * 1024 * 1024
ENCODE_FIRST = 4
"""A schema known to be at most this many times the size limit is encoded before it is walked."""
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)
_MESSAGE_CHARS = 300
"""An error message quotes the offending value, which may be the whole answer: clipped."""
_SLOW_KEYS = (b'"pattern"', b'"patternProperties"', b'"$ref"', b'"$dynamicRef"', b'"$recursiveRef"')
"""A schema with one of these may take long on any value: validated off the event loop."""
_REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")
_NO_FETCH: referencing.jsonschema.SchemaRegistry = referencing.Registry()
"""Resolves only what it holds (jsonschema adds the meta-schemas): an unknown URI is unresolvable."""
_work_deadline: ContextVar[float] = ContextVar("loopwarden_validation_deadline", default=math.inf)
_encode = msgspec.json.Encoder(order="sorted").encode
_END = object()


class SchemaInvalid(ValueError):
    """A schema that does not compile."""


class SchemaTooLarge(SchemaInvalid):
    """A schema past the limits: refused before any work is spent on it."""


class _OutOfTime(Exception):
    """The validation's time ran out (:data:`VALIDATION_WORK_SECS`)."""


def _timed(keyword: Callable[..., Any]) -> Callable[..., Any]:
    def check(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        if time.monotonic() > _work_deadline.get():
            raise _OutOfTime
        return keyword(validator, value, instance, schema)

    check.__wrapped__ = keyword  # type: ignore[attr-defined]
    return check


def _hashable(value: Any) -> Any:
    """``value`` as a hashable, equal exactly when JSON Schema says two values are equal:
    ``1 == 1.0``, but ``true`` is not ``1``; objects regardless of key order."""
    if isinstance(value, bool) or value is None:
        return (bool, value)
    if isinstance(value, int | float):
        return (float, value)
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return (list, tuple(_hashable(item) for item in value))
    if isinstance(value, dict):
        return (dict, frozenset((key, _hashable(item)) for key, item in value.items()))
    return (object, id(value))  # not JSON: only ever equal to itself


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if unique and validator.is_type(instance, "array") and len({_hashable(item) for item in instance}) < len(instance):
        yield schema_errors.ValidationError(f"{instance!r} has non-unique elements")


def _bound_keywords() -> None:
    """Every keyword of every validator class jsonschema may pick checks the time first. In
    place, on jsonschema's own classes: a subschema's ``$schema`` switches to its draft's class
    mid-validation, so a wrapper class of ours would be left there (idempotent)."""
    known = getattr(validators, "_META_SCHEMAS", None)
    if known is None:
        raise RuntimeError(
            "jsonschema no longer lists its validator classes as expected: review proxy.schemas.compiled"
        )
    for cls in set(known.values()):
        for name, keyword in cls.VALIDATORS.items():
            if not hasattr(keyword, "__wrapped__"):
                cls.VALIDATORS[name] = _timed(_unique_items if name == "uniqueItems" else keyword)


_bound_keywords()


@dataclass(frozen=True, slots=True)
class SchemaLimits:
    max_bytes: int = 256 * 1024
    """Size of the schema's JSON."""
    max_properties: int = 5000
    """Properties declared across the whole schema (OpenAI's own limit for structured outputs)."""


def measure(schema: Any, limits: SchemaLimits) -> None:
    """Raise :class:`SchemaTooLarge` when ``schema`` passes a limit (or nests deeper than
    :data:`MAX_DEPTH`). One step per key or item, stopping as soon as a limit is passed, so
    an 8 MB schema costs what 256 KB do."""
    size = properties = 0
    stack: list[tuple[Iterator[Any], bool]] = [(iter((schema,)), False)]
    while stack:
        iterator, entries = stack[-1]
        item: Any = next(iterator, _END)
        if item is _END:
            stack.pop()
            continue
        if len(stack) > MAX_DEPTH:
            raise SchemaTooLarge(f"the schema nests more than {MAX_DEPTH} levels deep")
        if entries:
            key, node = item
            size += len(key) + 4
        else:
            node = item
            size += 1
        if isinstance(node, dict):
            declared = node.get("properties")
            if isinstance(declared, dict):
                properties += len(declared)
                if properties > limits.max_properties:
                    raise SchemaTooLarge(f"the schema declares more than {limits.max_properties} properties")
            stack.append((iter(node.items()), True))
            size += 2
        elif isinstance(node, list):
            stack.append((iter(node), False))
            size += 2
        else:
            size += len(node) + 2 if isinstance(node, str) else 4
        if size > limits.max_bytes:
            raise SchemaTooLarge(f"the schema is larger than {limits.max_bytes} bytes of JSON")


class CompiledSchema:
    """A schema checked once, ready to validate values against, within bounds."""

    __slots__ = ("_proof", "_validator", "size", "slow")

    def __init__(self, validator: Any, size: int, slow: bool, proof: Proof | None = None) -> None:
        self._validator = validator
        self._proof = proof
        """Proves a value valid without jsonschema, for a plain schema (see :mod:`proxy.schemas.plain`)."""
        self.size = size
        """Bytes of the schema's JSON."""
        self.slow = slow
        """It has patterns or references: any value may take long."""

    def off_loop(self, chars: int) -> bool:
        """Validating a value of ``chars`` characters may take a while: do it in a worker thread."""
        return self.slow or chars > OFF_LOOP_CHARS or self.size * chars > OFF_LOOP_WORK

    def errors(self, instance: Any, limit: int = 20) -> list[str]:
        """Path-level errors of ``instance``, one line each; empty when it is valid."""
        if self._proof is not None and self._proof(instance):
            return []
        deadline = _work_deadline.set(time.monotonic() + VALIDATION_WORK_SECS)
        try:
            with patterns.budget(VALIDATION_BUDGET_SECS):
                errors = sorted(self._validator.iter_errors(instance), key=lambda e: (_path(e), e.message))
        except RecursionError:
            return ["$: the value is nested too deeply to check"]
        except patterns.PatternUnchecked as exc:
            return [f"$: the value {exc}"]
        except _OutOfTime:
            return [f"$: the value could not be checked within {VALIDATION_WORK_SECS:g} s"]
        except referencing.exceptions.Unresolvable as exc:
            return [f"$: the value could not be checked: the schema's reference {_reference(exc)!r} cannot be resolved"]
        finally:
            _work_deadline.reset(deadline)
        return [f"{_path(e)}: {_clipped(e.message)}" for e in errors[:limit]]


def compile_schema(schema: Any) -> CompiledSchema:
    """Meta-check and compile ``schema`` (slow for large ones: keep it off the event loop).

    Raises :class:`SchemaInvalid` with the reason. Patterns must compile on the bounded engine.
    """
    if not isinstance(schema, dict):
        raise SchemaInvalid("a JSON Schema must be an object")
    try:
        encoded = _encode(schema)
        schema = msgspec.json.decode(encoded)  # a private copy: the request's may change later
    except (msgspec.EncodeError, msgspec.DecodeError, RecursionError, OverflowError) as exc:
        raise SchemaInvalid(f"the schema is not plain JSON: {exc}") from None
    try:
        cls = validators.validator_for(schema)
        cls.check_schema(schema)
    except schema_errors.SchemaError as exc:
        raise SchemaInvalid(f"invalid JSON Schema at {exc.json_path}: {exc.message}") from None
    except RecursionError:
        raise SchemaInvalid("the schema nests too deeply") from None
    except patterns.PatternUnchecked as exc:
        raise SchemaInvalid(f"the schema {exc}") from None
    validator = cls(schema, registry=_NO_FETCH)
    unresolvable = _unresolvable(validator, schema)
    if unresolvable is not None:
        raise SchemaInvalid(
            f"the schema's reference {unresolvable!r} cannot be resolved "
            "(only references within the schema are followed; nothing is fetched)"
        )
    return CompiledSchema(validator, len(encoded), any(key in encoded for key in _SLOW_KEYS), plain_proof(schema))


def _unresolvable(validator: Any, schema: dict[str, Any]) -> str | None:
    """The first reference of ``schema`` that resolves nowhere, found once at compile time
    rather than as a failure of some later validation. Walks the schema's subschemas only
    (a ``{"$ref": …}`` inside an ``enum`` is a value), each with its base URI."""
    resolver = getattr(validator, "_resolver", None)
    if resolver is None:  # a future jsonschema: validation reports what does not resolve
        return None
    dialect = referencing.jsonschema.specification_with(
        validator.ID_OF(validator.META_SCHEMA) or "", default=referencing.Specification.OPAQUE
    )
    stack = [(dialect.create_resource(schema), resolver)]
    while stack:
        resource, scope = stack.pop()
        contents = resource.contents
        if isinstance(contents, dict):
            for key in _REFERENCES:
                ref = contents.get(key)
                if isinstance(ref, str):
                    try:
                        scope.lookup(ref)
                    except referencing.exceptions.Unresolvable:
                        return ref
        stack.extend((sub, scope.in_subresource(sub)) for sub in resource.subresources())
    return None


def _reference(error: referencing.exceptions.Unresolvable) -> str:
    return str(getattr(getattr(error, "_wrapped", error), "ref", error))


def check_schema(schema: Any) -> None:
    """Raise :class:`SchemaInvalid` (with the reason) unless ``schema`` compiles. A policy's
    schema, checked at load, is then at hand compiled when answers are checked against it."""
    if not isinstance(schema, dict):
        raise SchemaInvalid("a JSON Schema must be an object")
    found = _fallback.compiled_now(schema)
    if isinstance(found, SchemaInvalid):
        raise SchemaInvalid(*found.args)  # a fresh one: re-raising the cached one grows its traceback


class SchemaCache:
    """Compiled schemas (and the reason of those that do not compile), by a digest of their
    canonical JSON: requests resend the same schemas every turn. Bounded by bytes of JSON."""

    def __init__(self, max_bytes: int, limits: SchemaLimits | None = None) -> None:
        self.limits = limits or SchemaLimits()
        self._entries: WeightedCache[bytes, CompiledSchema | SchemaInvalid] = WeightedCache(max_bytes)
        self._compiling: dict[bytes, asyncio.Future[CompiledSchema | SchemaInvalid]] = {}
        self.requests: WeightedCache[bytes, Any] = WeightedCache(max_bytes)  # see proxy.edge.request_schemas

    async def compiled(self, schema: Any, within: int | None = None) -> CompiledSchema:
        """``schema`` compiled, from the cache or in a worker thread. Raises :class:`SchemaTooLarge`
        past the limits and :class:`SchemaInvalid` when it does not compile.

        ``within`` bounds the schema's size when the caller knows one (the request body's): up
        to a few times the limit, the schema is encoded at once (C speed: it sizes the schema
        and keys the cache), and only one not seen before is walked for its properties and
        depth. A schema that may be huge is walked first, which stops at the limit."""
        if within is None or within > ENCODE_FIRST * self.limits.max_bytes:
            measure(schema, self.limits)
        try:
            encoded = _encode(schema)
        except (msgspec.EncodeError, RecursionError, OverflowError):
            raise SchemaTooLarge(f"the schema nests more than {MAX_DEPTH} levels deep") from None
        if len(encoded) > self.limits.max_bytes:
            raise SchemaTooLarge(f"the schema is larger than {self.limits.max_bytes} bytes of JSON")
        key = hashlib.blake2b(encoded, digest_size=16).digest()
        found = self._entries.get(key)
        if found is None:
            measure(schema, self.limits)
            found = await self._compile(key, schema, len(encoded))
        if isinstance(found, SchemaInvalid):
            raise SchemaInvalid(*found.args)  # a fresh one: re-raising the cached one grows its traceback
        return found

    async def _compile(self, key: bytes, schema: Any, size: int) -> CompiledSchema | SchemaInvalid:
        """One compilation per schema at a time, however many requests bring it at once; it
        finishes (and is kept) even when the request that started it is gone."""
        pending = self._compiling.get(key)
        if pending is None:
            pending = asyncio.ensure_future(asyncio.to_thread(_compile_or_reason, schema))
            self._compiling[key] = pending
            pending.add_done_callback(lambda done: self._settle(key, done, size))
        return await asyncio.shield(pending)

    def _settle(self, key: bytes, done: asyncio.Future[CompiledSchema | SchemaInvalid], size: int) -> None:
        self._compiling.pop(key, None)
        if not done.cancelled() and done.exception() is None:
            self._entries.put(key, done.result(), size)

    def compiled_now(self, schema: Any) -> CompiledSchema | SchemaInvalid:
        """``schema`` compiled on the spot, or why it does not compile: for schemas that do not
        come through the edge (the policy's own, checked at load; a replayed request)."""
        try:
            encoded = _encode(schema)
        except (msgspec.EncodeError, RecursionError, OverflowError) as exc:
            return SchemaInvalid(f"the schema is not plain JSON: {exc}")
        key = hashlib.blake2b(encoded, digest_size=16).digest()
        found = self._entries.get(key)
        if found is None:
            found = _compile_or_reason(schema)
            self._entries.put(key, found, len(encoded))
        return found


def _compile_or_reason(schema: Any) -> CompiledSchema | SchemaInvalid:
    """The compiled schema, or the reason it does not compile (without the traceback, whose
    frames would keep the schema alive in the cache)."""
    try:
        return compile_schema(schema)
    except SchemaInvalid as exc:
        return SchemaInvalid(*exc.args)


_fallback = SchemaCache(_FALLBACK_CACHE_BYTES)


def compiled(schema: Mapping[str, Any]) -> CompiledSchema | None:
    """A schema that did not come through the edge, compiled (None: it does not compile)."""
    found = _fallback.compiled_now(schema)
    return None if isinstance(found, SchemaInvalid) else found


def _path(error: schema_errors.ValidationError) -> str:
    path = str(error.json_path)
    if error.validator == "required" and isinstance(error.message, str) and error.message.startswith("'"):
        path += "." + error.message.split("'")[1]
    return path


def _clipped(message: str) -> str:
    return message if len(message) <= _MESSAGE_CHARS else message[: _MESSAGE_CHARS - 1] + "…"


def answer_errors(text: str, schema: CompiledSchema) -> list[str]:
    """What is wrong with a structured answer, one line each; empty when it is valid."""
    value, problem = extract_json(text)
    return [problem] if problem else schema.errors(value)


def extract_json(text: str) -> tuple[Any, str | None]:
    """The JSON a reply carries: the whole text, a fenced block, or the outermost {...} / [...].

    Returns (value, None) or (None, why it is not JSON).
    """
    value, _, problem = _extracted(text)
    return value, problem


def json_text(text: str) -> str | None:
    """The bare JSON text a reply carries (the candidate :func:`extract_json` read), None
    when it carries none: what a client that asked for JSON must receive."""
    _, found, problem = _extracted(text)
    return None if problem else found


def _extracted(text: str) -> tuple[Any, str, str | None]:
    candidates = [text.strip()]
    candidates += [m.strip() for m in _FENCE.findall(text)]
    for opener, closer in (("{", "}"), ("[", "]")):
        start, end = text.find(opener), text.rfind(closer)
        if 0 <= start < end:
            candidates.append(text[start : end + 1])
    first_error = None
    for candidate in candidates:
        if not candidate:
            continue
        try:
            return json.loads(candidate), candidate, None
        except ValueError as exc:  # JSONDecodeError, or a number past int's 4,300 digits
            first_error = first_error or f"the answer is not valid JSON: {exc}"
        except RecursionError:
            first_error = first_error or "the answer is nested too deeply"
    return None, "", first_error or "the answer is empty"

"""JSON Schemas from clients: measured before any work, compiled once off the event loop,
kept in a cache bounded by bytes, and validated with every pattern on the bounded engine."""

from __future__ import annotations

import asyncio
import threading

import pytest

from proxy.schemas.compiled import (
    MAX_DEPTH,
    SchemaCache,
    SchemaInvalid,
    SchemaLimits,
    SchemaTooLarge,
    answer_errors,
    compile_schema,
    measure,
)
from tests.support.timed import Stopwatch

CATASTROPHIC = r"^(a|a)*$"
HOSTILE = "a" * 40 + "!"
UNCHECKED = "could not be checked against the pattern"


def _object(properties: int, *, prefix: str = "p") -> dict:
    return {"type": "object", "properties": {f"{prefix}{i}": {"type": "string"} for i in range(properties)}}


def _nested(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


# -- bounded patterns, wherever jsonschema runs them --------------------------------------


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"type": "string", "pattern": CATASTROPHIC}, HOSTILE),
        ({"type": "object", "patternProperties": {CATASTROPHIC: {"type": "string"}}}, {HOSTILE: "v"}),
        (
            {"type": "object", "patternProperties": {CATASTROPHIC: {}}, "additionalProperties": False},
            {HOSTILE: "v"},
        ),
        (
            {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "allOf": [{"patternProperties": {CATASTROPHIC: {}}}],
                "unevaluatedProperties": False,
            },
            {HOSTILE: "v"},
        ),
        (
            {
                "$schema": "https://json-schema.org/draft/2019-09/schema",
                "patternProperties": {CATASTROPHIC: {}},
                "unevaluatedProperties": False,
            },
            {HOSTILE: "v"},
        ),
    ],
    ids=["pattern", "patternProperties", "additionalProperties", "unevaluatedProperties", "draft2019-09"],
)
def test_a_value_a_pattern_cannot_check_in_time_is_invalid(schema, value):
    assert compile_schema(schema).errors(value) == [
        f"$: the value {UNCHECKED} {CATASTROPHIC!r}: matching took longer than 20 ms"
    ]


def test_the_patterns_of_one_validation_share_one_budget():
    schema = compile_schema({"type": "array", "items": {"type": "string", "pattern": CATASTROPHIC}})

    errors = schema.errors([HOSTILE] * 50)  # 50 matches at 20 ms each would be a second

    assert len(errors) == 1
    assert UNCHECKED in errors[0]
    assert "ran out" in errors[0] or "20 ms" in errors[0]


def test_an_ordinary_pattern_still_reports_the_path():
    schema = compile_schema(
        {"type": "object", "properties": {"day": {"type": "string", "pattern": r"^\d{4}-\d\d-\d\d$"}}}
    )

    assert schema.errors({"day": "2026-11-30"}) == []
    assert schema.errors({"day": "today"}) == [r"$.day: 'today' does not match '^\\d{4}-\\d\\d-\\d\\d$'"]


def test_a_schema_with_patterns_is_validated_off_the_event_loop():
    plain, patterned = compile_schema({"type": "string"}), compile_schema({"type": "string", "pattern": "^a"})

    assert (plain.off_loop(100), patterned.off_loop(100)) == (False, True)
    assert plain.off_loop(1_000_000)


def test_answers_are_checked_with_the_bounded_engine():
    schema = compile_schema({"type": "object", "properties": {"code": {"type": "string", "pattern": CATASTROPHIC}}})

    assert UNCHECKED in answer_errors(f'{{"code": "{HOSTILE}"}}', schema)[0]


# -- checking the schema itself ------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ({"type": "string", "pattern": "(((a{100}){100}){100}){100}"}, "is not a 'regex'"),
        ({"type": "string", "pattern": "(unclosed"}, "is not a 'regex'"),
        ({"patternProperties": {"(((a{100}){100}){100}){100}": {}}}, "is not a 'regex'"),
        ({"type": "not-a-type"}, "invalid JSON Schema"),
        ([1, 2], "must be an object"),
    ],
)
def test_a_schema_whose_patterns_the_bounded_engine_cannot_run_does_not_compile(schema, reason):
    with pytest.raises(SchemaInvalid, match=reason):
        compile_schema(schema)


# -- limits --------------------------------------------------------------------------------

LIMITS = SchemaLimits(max_bytes=10_000, max_properties=50)


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ({"description": "x" * 10_000}, "larger than 10000 bytes"),
        (_object(51), "more than 50 properties"),
        ({"allOf": [_object(30, prefix="a"), _object(30, prefix="b")]}, "more than 50 properties"),
        (_nested(MAX_DEPTH), "nests more than 64 levels"),
    ],
    ids=["bytes", "properties", "properties-all-levels", "depth"],
)
def test_a_schema_past_a_limit_is_too_large(schema, reason):
    with pytest.raises(SchemaTooLarge, match=reason):
        measure(schema, LIMITS)


def test_a_schema_within_the_limits_passes():
    measure(_object(50), LIMITS)


def test_measuring_stops_at_the_limit():
    """An 8 MB schema is refused after reading about as much as the limit allows."""
    visited = []

    class Node(dict):
        def items(self):
            visited.append(self)
            return super().items()

    huge = {"anyOf": [Node(const="x" * 100) for _ in range(80_000)]}  # ~9 MB of JSON
    with pytest.raises(SchemaTooLarge):
        measure(huge, LIMITS)

    assert len(visited) < 200


# -- the cache -----------------------------------------------------------------------------


def test_a_new_schema_compiles_in_a_worker_thread_and_once(monkeypatch):
    compiled_in = []

    def spying(schema):
        compiled_in.append(threading.get_ident())
        return compile_schema(schema)

    monkeypatch.setattr("proxy.schemas.compiled.compile_schema", spying)
    cache = SchemaCache(1_000_000)

    async def main():
        first = await asyncio.gather(*(cache.compiled(_object(5)) for _ in range(3)))
        return first, await cache.compiled(_object(5)), threading.get_ident()

    first, again, loop_thread = asyncio.run(main())

    assert len(compiled_in) == 1
    assert compiled_in[0] != loop_thread
    assert all(c is again for c in first)


def test_the_cache_is_bounded_by_the_bytes_of_its_schemas():
    cache = SchemaCache(max_bytes=20_000)

    async def fill():
        for i in range(20):
            await cache.compiled(_object(100, prefix=f"t{i}_"))  # ~3 kB of JSON each

    asyncio.run(fill())

    assert cache._entries.weight <= 20_000
    assert 0 < len(cache._entries) < 20


def test_a_schema_that_does_not_compile_is_remembered_as_such():
    cache = SchemaCache(1_000_000)

    async def twice():
        for _ in range(2):
            with pytest.raises(SchemaInvalid):
                await cache.compiled({"type": "not-a-type"})

    asyncio.run(twice())

    assert len(cache._entries) == 1


def test_the_cache_refuses_a_schema_past_its_limits_before_compiling():
    cache = SchemaCache(1_000_000, SchemaLimits(max_bytes=1_000, max_properties=10))

    with pytest.raises(SchemaTooLarge):
        asyncio.run(cache.compiled(_object(11)))

    assert len(cache._entries) == 0


# -- references and the time of one validation ---------------------------------------------


def _fanning_out(levels: int, dialect: str | None = None) -> dict:
    """References that unfold into 2**levels checks of one value."""
    defs = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2} for i in range(levels)}
    defs[f"d{levels}"] = {"type": "string"}
    entry = {"allOf": [{"$ref": "#/$defs/d0"}]} | ({"$schema": dialect} if dialect else {})
    return {"type": "object", "properties": {"a": entry}, "$defs": defs}


@pytest.mark.parametrize(
    "ref",
    ["http://169.254.169.254/latest/meta-data/", "https://example.com/s.json#/x", "other.json", "#/$defs/missing"],
)
def test_a_reference_outside_the_schema_does_not_compile(ref):
    with pytest.raises(SchemaInvalid, match="cannot be resolved"):
        compile_schema({"$id": "https://tools.example/", "properties": {"a": {"$ref": ref}}})


@pytest.mark.parametrize(
    ("schema", "valid", "invalid"),
    [
        ({"$defs": {"s": {"type": "string"}}, "properties": {"a": {"$ref": "#/$defs/s"}}}, {"a": "x"}, {"a": 1}),
        ({"$id": "https://tools.example/r", "$defs": {"s": {"$id": "s", "type": "string"}}, "$ref": "s"}, "x", 1),
        ({"$ref": "https://json-schema.org/draft/2020-12/schema"}, {"type": "string"}, {"type": 1}),
        ({"enum": [{"$ref": "http://169.254.169.254/"}]}, {"$ref": "http://169.254.169.254/"}, {}),
    ],
    ids=["local", "by-id", "meta-schema", "a-value-not-a-reference"],
)
def test_references_within_the_schema_compile_and_resolve(schema, valid, invalid):
    compiled = compile_schema(schema)

    assert compiled.errors(valid) == []
    assert compiled.errors(invalid) != []


@pytest.mark.parametrize("dialect", [None, "http://json-schema.org/draft-07/schema#"], ids=["same", "switched-draft"])
def test_a_validation_that_unfolds_past_its_time_is_invalid(dialect):
    schema = compile_schema(_fanning_out(40, dialect))

    with Stopwatch() as watch:
        errors = schema.errors({"a": "x"})

    assert watch.elapsed < 1.0 + watch.scaled(0.5)  # 2**40 checks: days
    assert errors == ["$: the value could not be checked within 1 s"]


def test_a_schema_with_references_is_validated_off_the_event_loop():
    assert compile_schema(_fanning_out(2)).off_loop(10)


def test_a_large_schema_against_a_long_value_is_validated_off_the_event_loop():
    schema = compile_schema({"type": "array", "items": {"anyOf": [{"const": i} for i in range(100)]}})

    assert (schema.off_loop(10), schema.off_loop(1200)) == (False, True)


def test_unique_items_over_thousands_of_objects_takes_linear_time():
    schema = compile_schema({"type": "array", "uniqueItems": True})
    objects = [{"a": i, "b": [i, {"c": str(i)}]} for i in range(5000)]  # jsonschema compared each pair: 39 s

    with Stopwatch() as watch:
        errors = schema.errors(objects)

    assert watch.elapsed < watch.scaled(5)  # pairwise took 39 s
    assert errors == []


@pytest.mark.parametrize(
    ("items", "unique"),
    [
        ([{"a": 1, "b": 2}, {"b": 2, "a": 1}], False),
        ([1, 1.0], False),
        ([[1, {"x": None}], [1, {"x": None}]], False),
        ([1, True], True),
        ([0, False], True),
        ([[1], [True]], True),
        ([{"a": 1}, {"a": True}], True),
        (["1", 1], True),
        ([None, 0], True),
        ([[1, 2], [2, 1]], True),
    ],
)
def test_unique_items_compares_as_json_schema_does(items, unique):
    errors = compile_schema({"uniqueItems": True}).errors(items)

    assert (errors == []) is unique
    assert unique or "has non-unique elements" in errors[0]


def test_an_answer_with_a_number_too_long_to_read_is_not_json():
    assert answer_errors('{"n": 1' + "0" * 5000 + "}", compile_schema({"type": "object"}))[0].startswith(
        "the answer is not valid JSON: "
    )


def test_a_draft_04_schema_with_a_long_enum_of_objects_compiles_in_linear_time():
    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "enum": [{"a": i} for i in range(15_000)]}

    with Stopwatch() as watch:
        compile_schema(schema)  # draft-04's meta-schema asks for unique enum items: 3,000 took 23 s

    assert watch.elapsed < watch.scaled(2.0)

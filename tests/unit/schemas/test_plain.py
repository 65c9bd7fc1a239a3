"""The plain-schema proof: it says "valid" only where jsonschema does, and it is made only for
schemas in the plain subset (anything else goes to jsonschema)."""

from __future__ import annotations

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.schemas.plain import plain_proof

WEATHER = {
    "type": "object",
    "description": "Weather for a city.",
    "properties": {
        "city": {"type": "string", "description": "The city."},
        "days": {"type": "integer"},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "detail": {"type": "boolean"},
        "anything": {},
    },
    "required": ["city"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("value", "proven"),
    [
        ({"city": "Lyon"}, True),
        ({"city": "Lyon", "days": 3, "unit": "celsius", "detail": False, "anything": [1, {"a": None}]}, True),
        ({}, False),  # a required property is missing
        ({"city": 5}, False),
        ({"city": "Lyon", "days": True}, False),  # a bool is no integer
        ({"city": "Lyon", "days": 3.0}, False),  # valid for jsonschema, but not proven: it decides
        ({"city": "Lyon", "unit": "kelvin"}, False),
        ({"city": "Lyon", "extra": 1}, False),  # additionalProperties: false
        (["Lyon"], False),
    ],
)
def test_a_plain_schema_proves_only_plainly_valid_values(value, proven):
    proof = plain_proof(WEATHER)

    assert proof is not None
    assert proof(value) is proven
    if proven:
        assert jsonschema.Draft202012Validator(WEATHER).is_valid(value)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array"},
        {"properties": {"a": {"type": "string"}}},  # no "type": "object" (anything but an object is valid)
        {"type": "object", "$schema": "http://json-schema.org/draft-03/schema#"},  # another dialect
        {"type": "object", "properties": {"a": {"type": "string", "minLength": 2}}},
        {"type": "object", "properties": {"a": {"type": ["string", "null"]}}},
        {"type": "object", "properties": {"a": {"enum": [1, "one"]}}},
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}, "$defs": {"a": {"type": "string"}}},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"type": "object", "patternProperties": {"^x": {"type": "string"}}},
        {"type": "object", "properties": {"a": {"type": "string", "format": "email"}}},
    ],
)
def test_a_schema_outside_the_plain_subset_gets_no_proof(schema):
    assert plain_proof(schema) is None


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)
_property = st.one_of(
    st.just({}),
    st.sampled_from(["string", "integer", "number", "boolean", "null", "array", "object"]).map(lambda t: {"type": t}),
    st.lists(st.text(max_size=3), min_size=1, max_size=3).map(lambda values: {"enum": values}),
)
_names = st.sampled_from(["a", "b", "c"])
_schemas = st.builds(
    lambda properties, required, closed: {
        "type": "object",
        "properties": properties,
        "required": required,
        **({} if closed is None else {"additionalProperties": closed}),
    },
    st.dictionaries(_names, _property, max_size=3),
    st.lists(_names, max_size=2, unique=True),
    st.sampled_from([None, True, False]),
)


@given(_schemas, st.dictionaries(_names | st.text(max_size=2), _json, max_size=4) | _json)
def test_what_the_proof_accepts_jsonschema_accepts(schema, value):
    proof = plain_proof(schema)

    assert proof is not None
    if proof(value):
        assert jsonschema.Draft202012Validator(schema).is_valid(value)

"""A quick proof that a value fits a plain schema, so valid tool arguments skip jsonschema.

Most tool ``parameters`` are plain: an object whose properties each have a simple ``type``
(or a list of strings as ``enum``), some ``required``, perhaps ``additionalProperties:
false``. Checking valid arguments against one with jsonschema costs tens of microseconds on
every tool call; :func:`plain_proof` turns such a schema into a check that only ever says
"valid" where jsonschema would, for every draft (it accepts a value only in the plainest way:
an ``integer`` is a Python int, never ``1.0``). Anything it cannot prove, a schema outside
the plain subset included, goes to jsonschema, which also writes the errors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["plain_proof"]

Proof = Callable[[Any], bool]

_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment"})
_TYPES: Mapping[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
    "array": (list,),
    "object": (dict,),
}
"""The exact Python types (``type(value) in``, so a bool is never a number) msgspec decodes each JSON type to."""
_ANY: tuple[type, ...] = ()
"""A property without ``type``: any value."""


def _property(schema: Any) -> tuple[type, ...] | frozenset[str] | None:
    """What a property's value must be: exact types, a set of strings (an ``enum`` of strings
    only), ``_ANY``; None when the property schema is not plain."""
    if schema is True:
        return _ANY
    if not isinstance(schema, dict) or not set(schema) <= _ANNOTATIONS | {"type", "enum"}:
        return None
    if "enum" in schema:
        values = schema["enum"]
        if "type" in schema or not isinstance(values, list) or not all(type(v) is str for v in values):
            return None
        return frozenset(values)
    kind = schema.get("type")
    if kind is None:
        return _ANY
    return _TYPES.get(kind) if isinstance(kind, str) else None


def plain_proof(schema: Any) -> Proof | None:
    """A check that returns True only for values ``schema`` accepts; None for a schema that is
    not plain (see the module docstring)."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return None
    if not set(schema) <= _ANNOTATIONS | {"type", "properties", "required", "additionalProperties"}:
        return None
    properties, required = schema.get("properties", {}), schema.get("required", [])
    closed = schema.get("additionalProperties", True)
    if not isinstance(properties, dict) or not isinstance(required, list) or closed not in (True, False):
        return None
    if not all(type(name) is str for name in required):
        return None
    rules = {name: _property(sub) for name, sub in properties.items()}
    if any(rule is None for rule in rules.values()):
        return None
    needed = frozenset(required)

    def proves(value: Any) -> bool:
        if type(value) is not dict or not needed <= value.keys():
            return False
        for name, item in value.items():
            rule = rules.get(name)
            if rule is None:
                if closed is False:
                    return False
            elif isinstance(rule, frozenset):
                if type(item) is not str or item not in rule:
                    return False
            elif rule and type(item) not in rule:
                return False
        return True

    return proves

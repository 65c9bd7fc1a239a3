"""JSON Schema, one way: compile once, validate with path-level errors, extract JSON leniently.

Shared by the tool-argument contract and the output contract, so "$.city: 'city' is a
required property" reads the same everywhere.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from jsonschema import exceptions as schema_errors
from jsonschema import validators

__all__ = ["SchemaInvalid", "answer_errors", "check_schema", "extract_json", "schema_errors_of"]

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)
_MESSAGE_CHARS = 300
"""An error message quotes the offending value, which may be the whole answer: clipped."""


class SchemaInvalid(ValueError):
    """A schema that does not compile."""


def check_schema(schema: Any) -> None:
    """Raise :class:`SchemaInvalid` (with the reason) unless ``schema`` compiles."""
    if not isinstance(schema, dict):
        raise SchemaInvalid("a JSON Schema must be an object")
    problem = _problem(json.dumps(schema, sort_keys=True))
    if problem:
        raise SchemaInvalid(problem)


@lru_cache(maxsize=512)
def _problem(schema_json: str) -> str | None:
    """Meta-validation is slow; requests resend the same schema every turn, so check each once."""
    schema = json.loads(schema_json)
    try:
        validators.validator_for(schema).check_schema(schema)
    except schema_errors.SchemaError as exc:
        return f"invalid JSON Schema at {exc.json_path}: {exc.message}"
    return None


@lru_cache(maxsize=512)
def _validator(schema_json: str) -> Any | None:
    schema = json.loads(schema_json)
    try:
        check_schema(schema)
    except SchemaInvalid:
        return None
    return validators.validator_for(schema)(schema)


def _path(error: schema_errors.ValidationError) -> str:
    path = str(error.json_path)
    if error.validator == "required" and isinstance(error.message, str) and error.message.startswith("'"):
        path += "." + error.message.split("'")[1]
    return path


def schema_errors_of(instance: Any, schema: Any, limit: int = 20) -> list[str]:
    """Path-level errors of ``instance`` against ``schema`` (none when the schema is unusable)."""
    validator = _validator(json.dumps(schema, sort_keys=True))
    if validator is None:
        return []
    try:
        errors = sorted(validator.iter_errors(instance), key=lambda e: (_path(e), e.message))
    except RecursionError:
        return ["$: the value is nested too deeply to check"]
    return [f"{_path(e)}: {_clipped(e.message)}" for e in errors[:limit]]


def _clipped(message: str) -> str:
    return message if len(message) <= _MESSAGE_CHARS else message[: _MESSAGE_CHARS - 1] + "…"


def answer_errors(text: str, schema: Any) -> list[str]:
    """What is wrong with a structured answer, one line each; empty when it is valid."""
    value, problem = extract_json(text)
    return [problem] if problem else schema_errors_of(value, schema)


def extract_json(text: str) -> tuple[Any, str | None]:
    """The JSON a reply carries: the whole text, a fenced block, or the outermost {...} / [...].

    Returns (value, None) or (None, why it is not JSON).
    """
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
            return json.loads(candidate), None
        except json.JSONDecodeError as exc:
            first_error = first_error or f"the answer is not valid JSON: {exc}"
        except RecursionError:
            first_error = first_error or "the answer is nested too deeply"
    return None, first_error or "the answer is empty"

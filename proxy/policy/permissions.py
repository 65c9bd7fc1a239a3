"""Tool permission rules: which tool calls the agent may receive, decided before it does.

Rules are evaluated in order and the first match wins; a rule matches a tool name (exact or
glob) and, optionally, conditions on the arguments (a JSON path with a regex or an exact
value). Regexes run on the ``regex`` engine with a per-match time bound, over the whole value
(a prefix would let ``rm -rf /`` hide behind 10,000 spaces, or end an anchored ``allow``
pattern early), so a pattern that backtracks catastrophically on hostile arguments costs at
most that bound, and fails closed: it holds for a deny rule, not for an allow rule. Arguments
that cannot be read unambiguously fail a deny rule's conditions closed too (:func:`decide`).
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import regex
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from proxy.exchange import ToolCall

__all__ = ["MISSING", "Decision", "PermissionRule", "PermissionSettings", "decide", "resolve_path"]

_FROZEN = ConfigDict(frozen=True, extra="forbid")
_PATH = re.compile(r"^\$((\.[A-Za-z_][\w-]*)|(\[\d+\]))*$")
_STEP = re.compile(r"\.([A-Za-z_][\w-]*)|\[(\d+)\]")
MATCH_TIMEOUT_SECS = 0.05
MISSING = object()


class ArgumentCondition(BaseModel):
    """One condition on a call's arguments: the value at ``path`` matches ``regex`` or ``equals``."""

    model_config = _FROZEN

    path: str = Field(description="A JSON path such as $.command or $.files[0].name.")
    regex: str | None = None
    equals: Any = Field(None, description="An exact JSON value (set this or regex).")

    @field_validator("path")
    @classmethod
    def _valid_path(cls, value: str) -> str:
        if not _PATH.match(value):
            raise ValueError(f"path {value!r} is not a JSON path like $.field or $.list[0].field")
        return value

    @field_validator("regex")
    @classmethod
    def _valid_regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                regex.compile(value)
            except regex.error as exc:
                raise ValueError(f"regex {value!r} does not compile: {exc}") from exc
        return value

    @model_validator(mode="after")
    def _one_test(self) -> ArgumentCondition:
        if (self.regex is None) == ("equals" not in self.model_fields_set):
            raise ValueError("set exactly one of regex and equals")
        return self


class PermissionRule(BaseModel):
    model_config = _FROZEN

    id: str = Field(pattern=r"^[A-Za-z0-9_.:-]{1,64}$", description="Named in metrics and logs.")
    tool: str = Field(min_length=1, description="Tool name, exact or a glob (run_*, *shell*).")
    when: tuple[ArgumentCondition, ...] = ()
    action: Literal["allow", "deny", "deny_session"]
    message: str | None = Field(None, description="What the model is told when the call is refused.")
    hide: bool = Field(False, description="Also remove matching tools from requests before they go upstream.")

    @field_validator("tool")
    @classmethod
    def _valid_glob(cls, value: str) -> str:
        if value.count("[") != value.count("]"):
            raise ValueError(f"tool glob {value!r} has unbalanced brackets")
        return value

    @model_validator(mode="after")
    def _hide_only_whole_tools(self) -> PermissionRule:
        if self.hide and (self.action == "allow" or self.when):
            raise ValueError("hide needs a deny rule without argument conditions (it removes the whole tool)")
        return self


class PermissionSettings(BaseModel):
    model_config = _FROZEN

    default: Literal["allow", "deny"] = Field("allow", description="For calls no rule matches.")
    max_denials: int = Field(2, ge=0, le=10, description="Refusals per request before the session ends.")
    rules: tuple[PermissionRule, ...] = ()

    @field_validator("rules")
    @classmethod
    def _unique_ids(cls, rules: tuple[PermissionRule, ...]) -> tuple[PermissionRule, ...]:
        seen: set[str] = set()
        for rule in rules:
            if rule.id in seen:
                raise ValueError(f"rule id {rule.id!r} is used twice")
            seen.add(rule.id)
        return rules

    def hidden(self, tool_name: str) -> PermissionRule | None:
        """The first hiding rule for this tool, if any (hiding is decided by name alone)."""
        return next((r for r in self.rules if r.hide and fnmatch.fnmatchcase(tool_name, r.tool)), None)


@dataclass(frozen=True, slots=True)
class Decision:
    action: Literal["allow", "deny", "deny_session"]
    rule: str
    """The matching rule's id, or ``default``."""
    message: str | None = None


@lru_cache(maxsize=1024)
def _compiled(pattern: str) -> regex.Pattern[str]:
    return regex.compile(pattern)


def resolve_path(value: Any, path: str) -> Any:
    """The value at a ``$.a.b[0]`` path, or a sentinel when absent."""
    current = value
    for name, index in _STEP.findall(path):
        if name:
            if not isinstance(current, dict) or name not in current:
                return MISSING
            current = current[name]
        else:
            position = int(index)
            if not isinstance(current, list) or position >= len(current):
                return MISSING
            current = current[position]
    return current


def _condition_holds(condition: ArgumentCondition, arguments: Any, undecided: bool) -> bool:
    """Whether the condition holds; ``undecided`` when its regex ran out of time."""
    found = resolve_path(arguments, condition.path)
    if found is MISSING:
        return False
    if condition.regex is None:
        return bool(found == condition.equals and type(found) is type(condition.equals))
    text = found if isinstance(found, str) else json.dumps(found, sort_keys=True)
    try:
        return _compiled(condition.regex).search(text, timeout=MATCH_TIMEOUT_SECS, concurrent=False) is not None
    except TimeoutError:
        return undecided


def decide(tool_call: ToolCall, settings: PermissionSettings) -> Decision:
    """The first rule matching the call, else the default.

    Arguments that cannot be read unambiguously (not JSON, a key given twice) never satisfy
    an ``allow`` rule's conditions, and fail a ``deny`` rule's closed: the call is refused
    (as a plain deny, so a model that botched its JSON may try again), never approved on a
    reading the agent's executor might not share. A custom tool's free-text input has no
    fields: conditions on it cannot hold.
    """
    for rule in settings.rules:
        if not fnmatch.fnmatchcase(tool_call.name, rule.tool):
            continue
        if rule.when:
            if tool_call.kind != "function":
                continue
            arguments, problem = tool_call.parsed_arguments()
            if problem is not None:
                if rule.action == "allow":
                    continue
                return Decision("deny", rule.id, f"The call's {problem}; send it again with valid JSON arguments.")
            if not all(_condition_holds(c, arguments, rule.action != "allow") for c in rule.when):
                continue
        return Decision(rule.action, rule.id, rule.message)
    return Decision(settings.default, "default")

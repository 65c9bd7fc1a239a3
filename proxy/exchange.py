"""The normalized exchange: what guards may read, whatever the wire format.

A wire format in :mod:`proxy.wire` (its codec) turns each format's request and reply into these
types, and renders back what the proxy adds (the turns of a nudge). Nothing here knows a wire
format: the request's own JSON stays with its format, so unknown fields survive.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Protocol

import msgspec

from proxy.schemas.arguments import parse_arguments
from proxy.schemas.compiled import CompiledSchema

__all__ = [
    "Channel",
    "Conversation",
    "Echo",
    "Message",
    "Note",
    "PartialReply",
    "Reply",
    "ReturnCalls",
    "Tool",
    "ToolCall",
    "Turn",
    "Usage",
    "fast_frozen",
    "flattened_calls",
    "parse_arguments",
]


def fast_frozen(cls: Any) -> Any:
    """The frozen slotted dataclass ``cls`` built twice as fast, still frozen: the ``__init__``
    that :func:`~dataclasses.dataclass` writes sets each field through ``object.__setattr__``;
    this one (same signature and defaults) through the field's slot. For the types a request
    builds by the dozen."""
    names: dict[str, Any] = {"_FACTORY": _FACTORY}
    params, lines = [], []
    for each in fields(cls):
        names[f"_set_{each.name}"] = getattr(cls, each.name).__set__
        value = each.name if each.init else f"_{each.name}"
        if each.default_factory is not MISSING:  # a fresh default for each instance
            names[f"_{each.name}"], names[f"_new_{each.name}"] = _FACTORY, each.default_factory
            value = f"_new_{each.name}() if {value} is _FACTORY else {value}"
        else:
            names[f"_{each.name}"] = each.default
        if each.init:
            required = each.default is MISSING and each.default_factory is MISSING
            params.append(each.name if required else f"{each.name}=_{each.name}")
        lines.append(f"    _set_{each.name}(self, {value})")
    # The source is made of the class's own field names, never of input, as dataclasses does.
    exec(f"def __init__(self, {', '.join(params)}):\n" + "\n".join(lines), names)  # noqa: S102  # nosec B102
    names["__init__"].__qualname__ = f"{cls.__qualname__}.__init__"
    names["__init__"].__annotations__ = cls.__init__.__annotations__
    cls.__init__ = names["__init__"]
    return cls


_FACTORY = object()
"""The default of a field whose default a factory makes (a fresh one per instance)."""


@fast_frozen
@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str
    """As the model wrote them (JSON for a function, free text for a custom tool)."""
    kind: str = "function"
    """``function`` (JSON arguments) or ``custom`` (free-text input: GPT-5's custom tools)."""
    _parsed: tuple[Any, str | None] | None = field(default=None, init=False, repr=False, compare=False)

    def parsed_arguments(self) -> tuple[Any, str | None]:
        """(value, None), or (None, why the arguments cannot be read): :func:`parse_arguments`,
        once per call, however many guards ask. The one place arguments are decoded."""
        if self._parsed is None:
            object.__setattr__(self, "_parsed", parse_arguments(self.arguments))
        return self._parsed  # type: ignore[return-value]


@fast_frozen
@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    """Prompt tokens served from the provider's cache (chat's ``prompt_tokens_details``, Responses'
    ``input_tokens_details``, Messages' ``cache_read_input_tokens``)."""
    cache_write_tokens: int = 0
    """Prompt tokens written to the provider's cache (Anthropic's ``cache_creation_input_tokens``),
    which cost more than the others."""

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens


_CUT_SHORT = frozenset(("length", "content_filter", "max_tokens", "refusal", "model_context_window_exceeded"))
"""Finish reasons that cut a reply short: chat completions' and Anthropic Messages' names (the
Responses format maps an incomplete response's reason onto them)."""


@fast_frozen
@dataclass(frozen=True, slots=True)
class Reply:
    """The model's answer, normalized: chat's first choice, a response's output items, a
    Messages message."""

    content: str | None
    reasoning: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str | None
    usage: Usage
    model: str | None = None
    refusal: str | None = None
    """The model declined (chat's ``message.refusal``, a Responses refusal part, Messages'
    ``stop_reason: refusal``): an answer the client handles, not silence."""
    other_output: bool = False
    """Output the guards do not read (``audio``, a legacy ``function_call``): not silence either."""
    source: Any = field(default=None, compare=False, repr=False)
    """The format's own reply, for its wire format alone: a format that must send an assistant turn
    back exactly (Messages' signed thinking blocks, Responses' reasoning items) renders
    :class:`Echo` and :class:`ReturnCalls` from it. Chat completions leaves it None."""
    preamble: bool = False
    """Its text is only a preamble the model means to act after (Responses' ``phase:
    "commentary"``), never a final answer: a judge does not take it for "done"."""

    @property
    def has_text(self) -> bool:
        return bool(self.content and self.content.strip())

    @property
    def has_reasoning(self) -> bool:
        return bool(self.reasoning and self.reasoning.strip())

    @property
    def cut_short(self) -> bool:
        """The provider stopped the reply (its output limit, its content filter): the same request
        would stop the same way again, and the client needs that ``finish_reason`` to act on."""
        return self.finish_reason in _CUT_SHORT

    @property
    def answered(self) -> bool:
        """It said something: text, a tool call, a refusal or other output, or was cut short."""
        return bool(self.has_text or self.tool_calls or self.refusal or self.other_output or self.cut_short)

    @property
    def is_empty(self) -> bool:
        """Nothing at all: not even reasoning."""
        return not self.answered and not self.has_reasoning

    @property
    def is_reasoning_only(self) -> bool:
        """It thought but neither answered nor acted."""
        return self.has_reasoning and not self.answered


@fast_frozen
@dataclass(frozen=True, slots=True)
class Message:
    """One turn of the request's history, whatever the wire format called it."""

    role: str
    """``system``, ``developer``, ``user``, ``assistant`` or ``tool`` (a tool result)."""
    text: str = ""
    """Its text, content parts joined (empty for a pure tool-call turn)."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The calls an assistant turn made."""
    call_id: str | None = None
    """For a tool result: the id of the call it answers."""
    reasoning: str = ""
    """The reasoning an assistant turn carries back (chat's ``reasoning_content``, Responses'
    reasoning items, Messages' thinking blocks), if the client resends it."""


@fast_frozen
@dataclass(frozen=True, slots=True)
class Tool:
    """A tool the request offers the model."""

    name: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
    """Its arguments' JSON Schema (``{}`` when it declares none)."""
    kind: str = "function"
    """``function`` (JSON arguments under ``parameters``) or ``custom`` (free text)."""
    description: str = ""


@fast_frozen
@dataclass(frozen=True, slots=True)
class Conversation:
    """The request's conversation as the guards see it (a wire format's codec in :mod:`proxy.wire` builds it)."""

    messages: Sequence[Message] = ()
    model: str | None = None
    tools: Sequence[Tool] = ()
    """The offered tools (chat completions' legacy ``functions`` among them)."""
    output_schema: Mapping[str, Any] | None = None
    """The JSON Schema a structured answer must satisfy, when the request asks for one."""
    stream: bool = False
    output_cap: tuple[str, int] | None = None
    """The output limit the request sets, as (its field's name as the client spells it, tokens)."""
    tool_schemas: Mapping[str, CompiledSchema | None] | None = None
    """The offered tools' ``parameters`` compiled at the edge, by tool name (None for one that
    declares none or does not compile). None: the conversation did not come through the edge
    (a replay, a test), and its schemas are compiled when first needed."""
    answer_schema: CompiledSchema | None = None
    """``output_schema`` compiled at the edge."""
    forced_tool: str | None = None
    """The one tool the request forces the model to call (chat's ``tool_choice`` naming a
    function; each format has its own spelling): its reply can only be that tool's call."""
    held_upstream: bool = False
    """The request continues history the upstream holds and it does not resend (Responses'
    ``previous_response_id``, an ``item_reference``, a ``conversation``)."""
    json_answer: bool = False
    """The request asks for a JSON answer, with a schema or without one (chat's and the
    Responses API's ``json_object``, Gemini's ``responseMimeType: application/json``)."""
    _results: tuple[Message, ...] | None = field(default=None, init=False, repr=False, compare=False)
    _trailing: tuple[Message, ...] | None = field(default=None, init=False, repr=False, compare=False)
    _calls: dict[str, ToolCall] | None = field(default=None, init=False, repr=False, compare=False)

    def with_schemas(
        self, tool_schemas: Mapping[str, CompiledSchema | None], answer: CompiledSchema | None
    ) -> Conversation:
        """The conversation with its schemas compiled (``answer``: the answer schema's)."""
        return self._rebuilt(self.model, self.stream, tool_schemas, answer)

    def addressed(self, model: str, stream: bool) -> Conversation:
        """The conversation with the model and stream its path names (Gemini's)."""
        return self._rebuilt(model, stream, self.tool_schemas, self.answer_schema)

    def _rebuilt(
        self,
        model: str | None,
        stream: bool,
        tool_schemas: Mapping[str, CompiledSchema | None] | None,
        answer_schema: CompiledSchema | None,
    ) -> Conversation:
        """A copy with these fields, built directly (``dataclasses.replace`` costs several times more)."""
        return Conversation(
            self.messages,
            model,
            self.tools,
            self.output_schema,
            stream,
            self.output_cap,
            tool_schemas,
            answer_schema,
            self.forced_tool,
            self.held_upstream,
            self.json_answer,
        )

    def tool_parameters(self) -> dict[str, Any]:
        """Offered function name → its parameters schema (``{}`` when it declares none)."""
        return {tool.name: tool.parameters for tool in self.tools if tool.kind == "function"}

    def calls_by_id(self) -> Mapping[str, ToolCall]:
        """Every tool call the history's assistant turns made, by call id (found once)."""
        if self._calls is None:
            calls = {tool_call.id: tool_call for message in self.messages for tool_call in message.tool_calls}
            object.__setattr__(self, "_calls", calls)
        return self._calls  # type: ignore[return-value]

    def tool_results(self) -> tuple[Message, ...]:
        """Tool results in order: ``tool`` turns, and the user turns of clients that flatten
        tools into text (smolagents' ``Observation:`` and ``Call id: …\nError:`` turns).
        Found once per conversation, however many guards ask."""
        if self._results is None:
            object.__setattr__(self, "_results", self._find_tool_results())
        return self._results  # type: ignore[return-value]

    def _find_tool_results(self) -> tuple[Message, ...]:
        results = []
        first_user_seen = False
        for message in self.messages:
            role = message.role
            if role == "tool":
                results.append(message)
            elif role == "user":
                if first_user_seen and _is_observation(message.text):
                    results.append(message)
                first_user_seen = True
        return tuple(results)

    def trailing_tool_results(self) -> tuple[Message, ...]:
        """The tool results sent after the last assistant turn (this request's new results),
        ``Observation:`` turns among them; a system turn between them (a client's reminder)
        does not hide the ones before it. Found once per conversation."""
        if self._trailing is None:
            object.__setattr__(self, "_trailing", self._find_trailing())
        return self._trailing  # type: ignore[return-value]

    def _find_trailing(self) -> tuple[Message, ...]:
        trailing: list[Message] = []
        messages = self.messages
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            if message.role in ("system", "developer"):
                continue
            if message.role == "tool" or (
                message.role == "user"
                and _is_observation(message.text)
                and any(m.role == "user" for m in messages[:index])
            ):
                trailing.append(message)
            else:
                break
        return tuple(reversed(trailing))

    def assistant_texts(self) -> list[str]:
        """Text of each assistant turn, in order (empty string for pure tool-call turns)."""
        return [m.text for m in self.messages if m.role == "assistant"]

    @property
    def has_assistant_turn(self) -> bool:
        return any(m.role == "assistant" for m in self.messages)

    @property
    def continues(self) -> bool:
        """The request continues a conversation (a turn of the model's in it, or history the
        upstream holds): a new session cannot be what it belongs to."""
        return self.held_upstream or self.has_assistant_turn

    @property
    def used_tools(self) -> bool:
        """The history shows tool use: an assistant tool call or a tool result (an
        ``Observation:`` turn too)."""
        return any(m.role == "tool" or m.tool_calls for m in self.messages) or bool(self.tool_results())

    def first_text(self, *roles: str) -> str | None:
        """Text of the first message with one of ``roles``."""
        for message in self.messages:
            if message.role in roles:
                return message.text
        return None


_OBSERVATION = re.compile(r"(?:Observation:|Call id: [^\n]*\nError:)")
"""How a tool result starts when a client flattens tools into user turns (smolagents: its
observations, and a failed call's error). Not a bare ``Error:``: a person pasting an error
into a chat is no tool result."""


def _is_observation(text: str) -> bool:
    return _OBSERVATION.match(text.lstrip()) is not None


_CALLING = "Calling tools:"
_MAX_FLATTENED_CHARS = 20_000
"""A flattened call list longer than this is not read (``ast.literal_eval`` is not free)."""


def flattened_calls(text: str) -> tuple[ToolCall, ...]:
    """The calls of an assistant turn that a client flattened into text (smolagents writes
    ``Calling tools:\\n[{'id': …, 'function': {'name': …, 'arguments': {…}}}]``, a Python repr)."""
    stripped = text.lstrip()
    if not stripped.startswith(_CALLING) or len(stripped) > _MAX_FLATTENED_CHARS:
        return ()
    try:
        items = ast.literal_eval(stripped[len(_CALLING) :].strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return ()
    calls: list[ToolCall] = []
    for item in items if isinstance(items, list) else ():
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            continue
        arguments = function.get("arguments")
        try:
            raw = arguments if isinstance(arguments, str) else msgspec.json.encode(arguments).decode()
        except (TypeError, msgspec.EncodeError):
            raw = str(arguments)
        calls.append(ToolCall(str(item.get("id", "")), function["name"], raw))
    return tuple(calls)


# -- what the proxy adds to a conversation --------------------------------------------
# A nudge is a list of these turns; the request's wire format renders them.


@dataclass(frozen=True, slots=True)
class Note:
    """A user turn from the proxy: an instruction or a warning."""

    text: str


@dataclass(frozen=True, slots=True)
class Echo:
    """The model's own text reply, repeated as its turn (so a note can answer it)."""

    reply: Reply


@dataclass(frozen=True, slots=True)
class ReturnCalls:
    """The model's tool calls handed back unexecuted, with one result per call (by call id,
    every call answered): the transcript stays valid in every format."""

    reply: Reply
    results: Mapping[str, str]


Turn = Note | Echo | ReturnCalls


# -- a streamed reply, as the hold-back sees it ------------------------------------------


class Channel:
    """The kinds of output a streamed event can carry, as bit flags (plain ints: this runs per event)."""

    NONE = 0
    TEXT = 1
    REASONING = 2
    TOOL_CALLS = 4
    ALL = 7
    FINISH = 8
    """Not a channel but a mark an assembler's ``add`` returns: the event ends a choice."""
    BARE = 16
    """The event carries no output (a usage-only event)."""


class PartialReply(Protocol):
    """The reply so far, while it streams (a format's stream assembler)."""

    @property
    def content(self) -> str: ...

    @property
    def text_length(self) -> int: ...

    @property
    def has_text(self) -> bool: ...

    @property
    def has_reasoning(self) -> bool: ...

    @property
    def has_tool_calls(self) -> bool: ...

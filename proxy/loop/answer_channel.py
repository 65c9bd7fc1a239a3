"""Where an ending goes: the channel the agent reads its answer from.

A client that takes its answer only from a tool cannot read a text ending: smolagents fails
to parse one (its runs end only through ``final_answer``), pydantic-ai's structured output
retries until it gives up (it answers through ``final_result``). So an ending goes to the
request's answer tool when it has one: the tool it forces (its ``tool_choice``), else a completion
tool it offers (the policy's ``completion_tools``, smolagents' ``final_answer``, pydantic-ai's
``final_result*``). A free-text tool gets the summary in its one string field; a structured
one gets a real call the model was forced to make (see :mod:`proxy.loop.finalize`), or the refusal
form when no valid call came back. Of several answer tools (pydantic-ai's ``final_result_<Type>``
for a union output), a free-text one is the channel: an application that offers a type for
giving up (``output_type=[City, GaveUp]``) gets the ending as that type. A JSON-mode request
keeps its refusal, except smolagents' CodeAgent with structured outputs, whose every step is a
``{"thought", "code"}`` object: its ending is the step that calls ``final_answer`` with the
summary, which ends its run with the summary as the answer. Any other request gets text.

Deciding the channel is neutral (here, over the :class:`~proxy.exchange.Conversation` and the
policy), and so is the ending it makes: a neutral :class:`~proxy.exchange.Reply` (one call, or
a refusal) that the request's format renders (:meth:`~proxy.wire.base.Codec.render_reply`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from proxy.exchange import Conversation, Reply, ToolCall

if TYPE_CHECKING:
    from proxy.request import AgentRequest

__all__ = [
    "FRAMEWORK_ANSWER_TOOLS",
    "PROSE_FIELDS",
    "AnswerTool",
    "answer_channel",
    "answer_tool",
    "ending_for",
    "ending_text",
    "final_answer_step",
    "free_text_field",
    "noticed_call",
]

FRAMEWORK_ANSWER_TOOLS = ("final_answer", "final_result")
"""Answer tools the common frameworks offer whatever the policy says: smolagents'
``final_answer``, pydantic-ai's ``final_result`` (and ``final_result_<Type>`` for a union)."""
_DEFAULT_FIELD = "answer"
PROSE_FIELDS = frozenset(
    {"answer", "summary", "notes", "note", "message", "explanation", "reason", "details", "comment", "text", "remarks"}
)
"""Fields of a structured answer that hold words for a person: where a notice may go."""
_encode = msgspec.json.encode


@dataclass(frozen=True, slots=True)
class AnswerTool:
    """The tool an ending is delivered through."""

    name: str
    field: str | None
    """Free text: the argument the summary goes in. None: a structured schema, whose ending is
    a call the model makes (checked against ``parameters``)."""
    parameters: Mapping[str, Any]

    @property
    def free_text(self) -> bool:
        return self.field is not None

    def arguments(self, text: str) -> str:
        """The call's arguments carrying ``text`` (free-text tools only)."""
        return _encode({self.field or _DEFAULT_FIELD: text}).decode()


def _is_answer_tool(name: str, completion_tools: Sequence[str]) -> bool:
    return name in completion_tools or name.startswith(FRAMEWORK_ANSWER_TOOLS)


def answer_tool(conversation: Conversation, completion_tools: Sequence[str]) -> AnswerTool | None:
    """The request's answer tool: the function it forces, else the first completion tool it
    offers (None: it offers none, and the ending is text)."""
    offered = [tool for tool in conversation.tools if tool.kind == "function"]
    forced = conversation.forced_tool
    chosen = next((tool for tool in offered if tool.name == forced), None) if forced else None
    if chosen is not None:
        return AnswerTool(chosen.name, free_text_field(chosen.parameters), chosen.parameters)
    answers = [
        AnswerTool(tool.name, free_text_field(tool.parameters), tool.parameters)
        for tool in offered
        if _is_answer_tool(tool.name, completion_tools)
    ]
    return next((answer for answer in answers if answer.free_text), answers[0] if answers else None)


def free_text_field(parameters: Mapping[str, Any]) -> str | None:
    """The argument a free-text tool takes its answer in: its one string property (``answer``
    for a tool that declares no parameters); None for a structured schema."""
    if not parameters:
        return _DEFAULT_FIELD
    if parameters.get("type", "object") != "object":
        return None
    properties = parameters.get("properties")
    if not properties:  # an object of anything: the answer fits, unless nothing may be added
        return None if parameters.get("additionalProperties") is False else _DEFAULT_FIELD
    if not isinstance(properties, dict) or len(properties) != 1:
        return None
    (name, schema), required = next(iter(properties.items())), parameters.get("required") or []
    if not isinstance(schema, dict) or not set(required) <= {name}:
        return None
    return name if _text_schema(schema) else None


def _text_schema(schema: Any) -> bool:
    """A property that takes free words: a string without enum, const, pattern or format."""
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type", "string")
    text = kind == "string" or (isinstance(kind, list) and "string" in kind)
    return text and not (schema.keys() & {"enum", "const", "pattern", "format"})


def noticed_call(tool_call: ToolCall, answer: AnswerTool, notice: str, first: bool) -> ToolCall | None:
    """A structured answer call with ``notice`` added to the first prose field it fills (a
    free-text string named like ``notes`` or ``summary``: never a value such as a city's name),
    first or last in it; None when it has none (the header and the timeline still carry the
    notice). The caller checks the schema again."""
    arguments, problem = tool_call.parsed_arguments()
    properties = answer.parameters.get("properties")
    if problem is not None or not isinstance(arguments, dict) or not isinstance(properties, dict):
        return None
    for name, schema in properties.items():
        value = arguments.get(name)
        if not isinstance(value, str) or name.lower() not in PROSE_FIELDS or not _text_schema(schema):
            continue
        joined = f"{notice}\n\n{value}" if first else f"{value}\n\n{notice}"
        limit = schema.get("maxLength")
        if isinstance(limit, int) and len(joined) > limit:
            continue
        noticed = _encode({**arguments, name: joined}).decode()
        return ToolCall(tool_call.id, tool_call.name, noticed)
    return None


def ending_text(reply: Reply) -> str:
    """An ending's words, whatever form it took: its text, its refusal, or its answer call's
    answer (the arguments' one string, else the arguments as written)."""
    if reply.has_text and reply.content is not None:
        return reply.content
    if reply.refusal:
        return reply.refusal
    if reply.tool_calls:
        arguments, _ = reply.tool_calls[0].parsed_arguments()
        if isinstance(arguments, dict) and len(arguments) == 1:
            (value,) = arguments.values()
            if isinstance(value, str):
                return value
        return reply.tool_calls[0].arguments
    return reply.content or ""


def answer_channel(request: AgentRequest) -> AnswerTool | None:
    """This request's answer tool (None: text, or a refusal for a JSON-mode request)."""
    if request.wire.codec.wants_structured_output(request.payload):
        return None
    return answer_tool(request.conversation, request.policy.judge.completion_tools)


def ending_for(request: AgentRequest, body: dict[str, Any], *, text_started: bool) -> dict[str, Any]:
    """An ending (made for this request or stored by an earlier one) in this request's channel:
    a call to its answer tool, a refusal for a JSON answer, else text. Once text of the
    answer streamed to the client, the ending follows it as text."""
    wire = request.wire
    if text_started:
        return wire.codec.shaped(request.payload, body, text_started=True)
    tool = answer_channel(request)
    reply = wire.codec.parse_reply(wire.codec.encode(body))
    if reply is None:
        return wire.codec.shaped(request.payload, body, text_started=False)
    calls = reply.tool_calls
    if tool is not None and len(calls) == 1 and calls[0].name == tool.name:
        return body  # already a call to this request's answer tool
    text = ending_text(reply)
    if tool is None:
        step = final_answer_step(request.conversation.output_schema, text)
        if step is not None and wire.codec.wants_structured_output(request.payload):
            return wire.codec.ending(step, model=reply.model, usage=reply.usage)
        if calls:  # a call to a tool this request does not answer through: its words, as text
            body = wire.codec.ending(text, model=reply.model, usage=reply.usage)
        return wire.codec.shaped(request.payload, body, text_started=False)
    if tool.free_text:
        answer = ToolCall(_call_id(text), tool.name, tool.arguments(text))
        return wire.codec.render_reply(Reply(None, None, (answer,), "tool_calls", reply.usage, model=reply.model))
    # A structured tool and no valid call for it: the refusal form, which such clients surface.
    return wire.codec.render_reply(Reply(None, None, (), "stop", reply.usage, model=reply.model, refusal=text))


_CODE_STEP = ("thought", "code")
"""The properties of smolagents' CodeAgent step under structured outputs (``ThoughtAndCodeAnswer``)."""


def final_answer_step(schema: Mapping[str, Any] | None, text: str) -> str | None:
    """For a request whose answer schema is smolagents' CodeAgent step, the step ending its run
    with ``text`` (its code calls ``final_answer``; ``text`` goes in as a JSON string literal,
    which Python reads as the same string); None for any other schema."""
    if schema is None or not isinstance(schema.get("properties"), dict):
        return None
    properties = schema["properties"]
    if sorted(properties) != sorted(_CODE_STEP) or not all(_text_schema(properties[name]) for name in _CODE_STEP):
        return None
    literal = msgspec.json.encode(text).decode()
    return _encode({"thought": text, "code": f"final_answer({literal})"}).decode()


def _call_id(text: str) -> str:
    """The answer call's id, from the ending's words: every rendering of one ending (the reply
    the run is named by, the one the client gets, a replay) carries the same call."""
    return "call_lw_" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:24]

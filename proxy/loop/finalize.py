"""The graceful ending: never a bare error, always what was found, what is missing, what next.

First choice: one last upstream call with tools kept (so a history with tool calls stays
valid) but forbidden (``tool_choice: "none"``), no output constraint (``response_format``,
vLLM's ``guided_*``: a summary is prose, and a schema would make the model invent an object),
and an instruction to summarize. If that call fails or says nothing, a summary is built
locally from the transcript; the tokens the call used are booked all the same.
:class:`Endings` makes a session's ending once: of the parallel requests that end a session,
one makes it and the others answer with it.

A request whose answer tool has a structured schema (pydantic-ai's ``final_result`` for an
output model; see :mod:`proxy.loop.answer_channel`) cannot take a summary as text: its last call
forces that tool instead, and the ending is that call when its arguments satisfy the schema;
otherwise the local summary, which reaches such a request in the refusal form.

Every ending carries its notice (:mod:`proxy.loop.notice`): in the text, or in a structured
answer's free-text field where its schema leaves room for one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from proxy.books.ledger import Ledger
from proxy.errors import ProxyError
from proxy.exchange import Conversation, Reply, ToolCall, Turn, Usage
from proxy.loop.answer_channel import AnswerTool, answer_channel, noticed_call
from proxy.loop.notice import notice_for, placed
from proxy.observe.metrics import Metrics
from proxy.observe.tracing import Tracing
from proxy.policy.models import Policy
from proxy.request import AgentRequest, RequestNotes
from proxy.schemas.compiled import compiled
from proxy.session.base import FIELDS, SessionDelta, SessionState
from proxy.session.instructions import task_of
from proxy.session.runs import instruction_mark
from proxy.text import one_spaced
from proxy.upstream.client import UpstreamClient
from proxy.verdict import Finalize

if TYPE_CHECKING:
    from proxy.wire.base import Codec, WireFormat

__all__ = ["Ending", "Endings", "Finalizer", "FormatLookup", "local_summary", "replayed_ending"]

_CLIP = 300


@dataclass(frozen=True, slots=True)
class Ending:
    body: dict[str, Any]
    via: str
    """``upstream`` or ``local``."""
    usage: Usage
    upstream_called: bool


def _clip(text: str, limit: int = _CLIP) -> str:
    text = one_spaced(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


FormatLookup = Callable[[str], "WireFormat | None"]
"""The format of a name (None: one this build does not speak), given by the edge that knows
the registry: the loop reads formats through the request's ``wire`` and this seam only."""


def replayed_ending(wire: WireFormat, state: SessionState, formats: FormatLookup) -> dict[str, Any]:
    """The session's stored ending as a body of ``wire``'s format. One session may be
    reached over several routes (one ``X-Session-Id``): an ending stored by another format is
    read by that format (found through ``formats``) and rendered anew, never sent in the wrong
    API's shape."""
    raw = state.ending or ""
    stored_in = state.values.get(FIELDS.ENDING_WIRE)
    if not stored_in or stored_in == wire.name:
        return wire.codec.decode(raw)
    source = formats(stored_in)
    reply = source.codec.parse_reply(raw.encode()) if source is not None else None
    if reply is None:
        return wire.codec.ending("The session has ended.", model=None)
    return wire.codec.render_reply(reply)


def local_summary(conversation: Conversation, detail: str) -> str:
    """A summary from the transcript alone, for when the model cannot give one."""
    found: list[str] = []
    names: dict[str, str] = {}
    for tool_call in conversation.calls_by_id().values():
        names[tool_call.id] = tool_call.name or "tool"
    for message in conversation.tool_results():  # ``Observation:`` turns too
        if message.text.strip():
            found.append(f"{names.get(str(message.call_id), 'a tool')} returned: {_clip(message.text)}")
    task = _clip(task_of(conversation) or "the task", 200)
    lines = [f"I have to stop here: {detail}.", "", "What was found:"]
    lines += [f"- {item}" for item in found[-5:]] or ["- Nothing conclusive yet."]
    lines += ["", "What is missing:", f"- A complete answer to: {task}"]
    lines += [
        "",
        "Suggested next step:",
        "- Review the findings above, then retry with a narrower request or hand the task to a person.",
    ]
    return "\n".join(lines)


class Finalizer:
    def __init__(self, upstream: UpstreamClient) -> None:
        self._upstream = upstream

    async def end(
        self,
        verdict: Finalize,
        policy: Policy,
        codec: Codec,
        payload: Mapping[str, Any],
        extra: Sequence[Turn],
        conversation: Conversation,
        url: str,
        headers: Sequence[tuple[str, str]],
        *,
        local_only: bool = False,
        cap_output: bool = False,
        answer: AnswerTool | None = None,
        notice: str | None = None,
    ) -> Ending:
        """The ending reply for ``verdict``, from the model if it can, else built here.

        ``local_only`` forbids the last call (a hard cost cap); ``cap_output`` bounds it even
        when the client set no output limit (a budget ending may overshoot by one capped call).
        ``answer``: the request's answer tool; a structured one is forced in the last call.
        ``notice``: what the ending tells the person, placed as ``policy.finalize.notice`` says.
        """
        model = conversation.model
        placement = policy.finalize.notice

        def told(text: str) -> str:
            return placed(text, notice, placement)

        if policy.finalize.use_upstream and not local_only:
            instruction = f"{policy.finalize.instruction} (The session is ending because {verdict.detail}.)"
            if answer is not None and not answer.free_text:
                ending = policy.finalize.answer_instruction.replace("{tool}", answer.name)
                forced = f"{ending} (The session is ending because {verdict.detail}.)"
                body = codec.render_summary_request(
                    payload, extra, forced, policy.finalize.max_tokens, cap_output, answer_tool=answer.name
                )
                return await self._structured(
                    verdict, codec, body, conversation, url, headers, answer, notice, placement
                )
            body = codec.render_summary_request(payload, extra, instruction, policy.finalize.max_tokens, cap_output)
            try:
                reply = await self._upstream.send("POST", url, headers, body)
            except ProxyError:
                reply = None
            spent = Usage()  # what the call cost, booked whether or not its reply is used
            if reply is not None and reply.response.status_code == 200:
                parsed = codec.parse_reply(reply.response.content)
                if parsed is not None:
                    spent = parsed.usage
                if parsed is not None and parsed.has_text and parsed.content is not None:
                    return Ending(
                        codec.ending(told(parsed.content), model=parsed.model or model, usage=parsed.usage),
                        "upstream",
                        parsed.usage,
                        upstream_called=True,
                    )
            summary = told(local_summary(conversation, verdict.detail))
            return Ending(codec.ending(summary, model=model), "local", spent, upstream_called=True)
        summary = told(local_summary(conversation, verdict.detail))
        return Ending(codec.ending(summary, model=model), "local", Usage(), False)

    async def _structured(
        self,
        verdict: Finalize,
        codec: Codec,
        body: bytes,
        conversation: Conversation,
        url: str,
        headers: Sequence[tuple[str, str]],
        answer: AnswerTool,
        notice: str | None,
        placement: str,
    ) -> Ending:
        """The forced call to a structured answer tool as the ending, when its arguments satisfy
        the tool's schema (with the notice in a free-text field, where one still satisfies it);
        else the local summary (a refusal, as this request takes it)."""
        try:
            reply = await self._upstream.send("POST", url, headers, body)
        except ProxyError:
            reply = None
        spent = Usage()
        if reply is not None and reply.response.status_code == 200:
            parsed = codec.parse_reply(reply.response.content)
            tool_call = next((c for c in parsed.tool_calls if c.name == answer.name), None) if parsed else None
            if parsed is not None and tool_call is not None and await _satisfies(tool_call, answer, conversation):
                noticed = noticed_call(tool_call, answer, notice, placement == "first") if notice else None
                if noticed is not None and await _satisfies(noticed, answer, conversation):
                    tool_call = noticed
                model = parsed.model or conversation.model
                ending = Reply(None, None, (tool_call,), "tool_calls", parsed.usage, model=model)
                return Ending(codec.render_reply(ending), "upstream", parsed.usage, upstream_called=True)
            spent = parsed.usage if parsed is not None else spent  # the unusable call is paid for all the same
        summary = placed(local_summary(conversation, verdict.detail), notice, placement)
        return Ending(codec.ending(summary, model=conversation.model), "local", spent, upstream_called=True)


async def _satisfies(tool_call: ToolCall, answer: AnswerTool, conversation: Conversation) -> bool:
    """The call's arguments are JSON that satisfies the answer tool's schema (the one compiled
    at the edge, when it was)."""
    arguments, problem = tool_call.parsed_arguments()
    if problem is not None:
        return False
    prepared = conversation.tool_schemas
    schema = prepared.get(answer.name) if prepared is not None else compiled(answer.parameters)
    if schema is None:  # declares none (anything goes), or does not compile (nothing can satisfy it)
        return not answer.parameters
    if schema.off_loop(len(tool_call.arguments)):
        return not await asyncio.to_thread(schema.errors, arguments)
    return not schema.errors(arguments)


class Endings:
    def __init__(
        self,
        upstream: UpstreamClient,
        ledger: Ledger,
        metrics: Metrics,
        tracing: Tracing,
        formats: FormatLookup,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock
        self._finalizer = Finalizer(upstream)
        self._formats = formats
        self._ledger = ledger
        self._metrics = metrics
        self._tracing = tracing

    def stored(self, wire: WireFormat, state: SessionState) -> dict[str, Any]:
        """The session's stored ending, in ``wire``'s format whichever format stored it."""
        return replayed_ending(wire, state, self._formats)

    async def make(
        self,
        request: AgentRequest,
        verdict: Finalize,
        state: SessionState,
        delta: SessionDelta,
        notes: RequestNotes,
        extra: Sequence[Turn],
        payload: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The ending this request answers with (written to ``delta`` when it makes it; the
        caller commits). Counted, traced and logged with its reason. ``payload``: the request as
        it went upstream, when that is not the client's own (spliced, amended)."""
        seen = await self._ledger.claim_ending(request, notes)
        if not notes.claim:  # another request of this session makes (or made) the ending
            seen = await self._ledger.await_ending(request, notes, seen or state)
            if not notes.claim:
                return self._shared(request, verdict, seen, notes)
        local_only = verdict.reason == "budget_cost" and request.policy.budgets.hard_cost_cap
        now = self._clock()
        notice = notice_for(verdict, delta.applied_to(state), request.policy, _named(request), now)
        ending = await self._finalizer.end(
            verdict,
            request.policy,
            request.wire.codec,
            request.payload if payload is None else payload,
            extra,
            request.conversation,
            request.url,
            request.headers,
            local_only=local_only,
            cap_output=verdict.reason.startswith("budget_"),
            answer=answer_channel(request),
            notice=notice,
        )
        if ending.upstream_called:
            delta.incr(FIELDS.STEPS)
            self._ledger.charge(request, delta, ending.usage, ending.body.get("model"), kind="finalize")
            self._metrics.upstream_calls.labels(request.tenant, request.policy.name, "finalize").inc()
        delta.assign(FIELDS.TERMINATION, verdict.reason)
        delta.assign(FIELDS.ENDING, request.wire.codec.encode(ending.body).decode())
        delta.assign(FIELDS.ENDING_WIRE, request.wire.name)
        delta.assign(FIELDS.RUN_SAID, instruction_mark(request.conversation))
        notes.terminated = verdict.reason
        guard, via = verdict.guard, ending.via
        delta.event("ending", round(now * 1000), reason=verdict.reason, guard=guard, notice=notice, summary_via=via)
        self._metrics.terminations.labels(request.tenant, request.policy.name, verdict.reason).inc()
        self._tracing.event("loopwarden.termination", {"reason": verdict.reason, "summary_via": ending.via})
        request.log(
            "termination",
            {
                "reason": verdict.reason,
                "summary_via": ending.via,
                **({"cause": verdict.cause} if verdict.cause else {}),
            },
        )
        return ending.body

    def _shared(
        self, request: AgentRequest, verdict: Finalize, seen: SessionState, notes: RequestNotes
    ) -> dict[str, Any]:
        """The session is ending and another request claimed the ending: answer without an
        upstream call, with the stored ending when there is one, else (it was not made in
        time) a summary of this request's own transcript, built here. This request stores
        no ending: the claimer does, and later calls replay that one."""
        if seen.termination and seen.ending:
            notes.terminated = seen.termination
            body = self.stored(request.wire, seen)
            answer = "stored"
        else:
            notes.terminated = verdict.reason
            policy = request.policy
            notice = notice_for(verdict, seen, policy, _named(request), self._clock())
            summary = placed(local_summary(request.conversation, verdict.detail), notice, policy.finalize.notice)
            body = request.wire.codec.ending(summary, model=request.conversation.model)
            answer = "local"
        self._metrics.of(self._metrics.endings_shared, request.tenant, request.policy.name, answer).inc()
        request.log(
            "ending_shared",
            {
                "reason": notes.terminated,
                "answer": answer,
            },
        )
        return body


def _named(request: AgentRequest) -> str | None:
    """The session's name for a notice; None while the notice itself is about to name it (a
    derived run's first request: its delivered reply, this ending, names the run)."""
    return request.session.id if request.session.named else None

"""Premature stop: a short text answer after tool use goes to an LLM judge ("really done?").

Only exits are judged: a text-only reply (or a call to a completion tool such as
``final_answer``) in a session that has used tools. Long replies (``judge_skip_threshold``),
oversized inputs and answers that satisfy the requested JSON schema (the agent's own
definition of done) pass unjudged; after ``judge_max_continues`` continuations per session
replies pass. Not done → the model is told why and continues, transparently. A judge that
times out, errs or returns anything but a valid verdict with its nonce counts as not done
unless ``judge_fail_open``. A definite verdict is reused for the same task and answer for
``verdict_memory_secs``. With the judge off, a long task answered in a few words is
still nudged (``detect_short_response``). A long reply that only hands the turn back (a
question to the user, an announced next step, little else: :mod:`proxy.guards.hand_back`)
is judged all the same, or with the judge off nudged (``hand_back_check``). What the judge did rides on the verdict
(:class:`~proxy.verdict.JudgeCall`) for the step log to count: the guard writes no metrics.
"""

from __future__ import annotations

import asyncio

from proxy.exchange import Channel, Echo, Note, PartialReply, Reply, ReturnCalls, Turn
from proxy.guards.base import GuardContext
from proxy.guards.fingerprint import CALL_SEQUENCE
from proxy.guards.hand_back import hands_back, substance
from proxy.judge.client import Judge, JudgeRequest
from proxy.policy.models import JudgeSettings
from proxy.schemas.compiled import answer_errors
from proxy.session.instructions import task_of
from proxy.verdict import PASS, Finalize, JudgeCall, Nudge, Pass, ReplyVerdict

__all__ = ["PrematureStopGuard"]

STRIKE = "judge_continue"
_STOPPED_EARLY = "the model kept answering before the task was done, as often as the policy allows"
_SKIPPED = Pass(seen=(JudgeCall("skipped"),))
_HANDED_BACK = "the reply only asks what to do next or announces work, it gives no answer"
_SENTENCE_DONE = (".", "!", "?", "\n", ":")


def _hands_back(answer: str, settings: JudgeSettings) -> bool:
    """A long reply that hands the turn back (see :mod:`proxy.guards.hand_back`)."""
    return (
        settings.hand_back_check
        and len(answer) < settings.hand_back_max_chars
        and hands_back(answer, settings.hand_back_min_substance)
    )


def _answers_so_far(text: str, settings: JudgeSettings) -> bool:
    """What of a streamed text has arrived already holds an answer's substance (its complete
    sentences only: the one still arriving may yet turn into a question), or is too long to
    be a hand-back: the rest cannot make it one."""
    if not settings.hand_back_check or len(text) >= settings.hand_back_max_chars:
        return True
    cut = max(text.rfind(mark) for mark in _SENTENCE_DONE)
    return cut > 0 and substance(text[: cut + 1])[0] >= settings.hand_back_min_substance


def _answer(reply: Reply, completion_tools: tuple[str, ...]) -> tuple[str | None, str | None]:
    """(answer text, completion tool call id) of an exit reply; (None, None) when not an exit."""
    if not reply.tool_calls:
        return (reply.content or "") if reply.has_text else None, None
    if len(reply.tool_calls) == 1 and reply.tool_calls[0].name in completion_tools:
        tool_call = reply.tool_calls[0]
        arguments, _ = tool_call.parsed_arguments()
        answer = arguments.get("answer") if isinstance(arguments, dict) else None
        return (answer if isinstance(answer, str) else tool_call.arguments), tool_call.id
    return None, None


async def _schema_valid(reply: Reply, context: GuardContext) -> bool:
    """The answer satisfies the JSON schema the request or the output contract asks for."""
    schema = context.answer_schema(reply)
    if schema is None or reply.content is None:
        return False
    if schema.off_loop(len(reply.content)):
        return not await asyncio.to_thread(answer_errors, reply.content, schema)
    return not answer_errors(reply.content, schema)


def _continue_turns(reply: Reply, call_id: str | None, text: str) -> tuple[Turn, ...]:
    if call_id is None:
        return (Echo(reply), Note(text))
    return (ReturnCalls(reply, {call_id: text}),)


def _task(context: GuardContext) -> str:
    """The task: the person's latest instruction (with the first, where the latest only says to
    go on), or for a continuation of a stored response (only new items) the one its run began with."""
    return task_of(context.conversation, context.state)


def _preamble(reply: Reply, context: GuardContext, exhausted: bool) -> ReplyVerdict:
    """A preamble (Responses' ``phase: "commentary"``) announces work to do: never "done",
    so it is continued without asking the judge."""
    reason = "the reply only announced a next step (a preamble), it is no final answer"
    if exhausted:
        return Finalize(
            "incomplete", f"the model kept stopping before the task was done ({reason})", evidence=_STOPPED_EARLY
        )
    text = context.policy.nudges.judge_not_done.format(reason=reason)
    return Nudge("judge_continue", f"judge: {reason}", _continue_turns(reply, None, text), STRIKE)


class PrematureStopGuard:
    """Asks whether a final answer after tool use is really the end (see the module's docstring)."""

    def __init__(self, judge: Judge) -> None:
        self._judge = judge

    async def check_reply(self, reply: Reply, context: GuardContext) -> ReplyVerdict:
        settings = context.policy.judge
        answer, call_id = _answer(reply, settings.completion_tools)
        if answer is None:
            return PASS
        used_tools = context.conversation.used_tools or bool(context.state.items(CALL_SEQUENCE))
        if not used_tools:
            return PASS
        target = context.judge_target if settings.use_llm_judge else None
        exhausted = context.state.strikes(STRIKE) >= settings.judge_max_continues
        if exhausted and (target is None or settings.after_max_continues == "pass"):
            return PASS
        task = _task(context)
        if target is None:
            if len(answer) >= settings.judge_skip_threshold and _hands_back(answer, settings):
                text = context.policy.nudges.judge_not_done.format(reason=_HANDED_BACK)
                return Nudge("hand_back_nudge", _HANDED_BACK, _continue_turns(reply, call_id, text), STRIKE)
            short = len(task) >= settings.long_task_chars and len(answer.strip()) < settings.short_response_chars
            if settings.detect_short_response and short:
                text = context.policy.nudges.short_response
                return Nudge(
                    "short_response_nudge",
                    "short reply to a long task",
                    _continue_turns(reply, call_id, text),
                    STRIKE,
                )
            return PASS
        if reply.preamble and call_id is None:
            return _preamble(reply, context, exhausted)
        long = len(answer) >= settings.judge_skip_threshold and not _hands_back(answer, settings)
        if long or len(task) + len(answer) > settings.judge_max_input_chars:
            return _SKIPPED
        if not settings.judge_schema_valid_answers and await _schema_valid(reply, context):
            return _SKIPPED
        outcome = await self._judge.decide(
            JudgeRequest(
                task,
                answer,
                target,
                settings.judge_timeout_secs,
                settings.structured_output,
                settings.verdict_memory_secs,
            )
        )
        latency = None if outcome.remembered else outcome.latency
        if outcome.done is True:
            seen = (JudgeCall("remembered" if outcome.remembered else "done", latency),)
            return Pass(spent=outcome.usage, seen=seen)
        if outcome.done is None:
            seen = (JudgeCall("error", latency, outcome.error or "upstream_error"),)
            if settings.judge_fail_open:
                return Pass(spent=outcome.usage, seen=seen)
            if exhausted:
                detail = f"the answer could not be checked ({outcome.reason})"
                evidence = "the answer could not be checked by the completion judge"
                return Finalize(
                    "incomplete", detail, spent=outcome.usage, cause=outcome.error, seen=seen, evidence=evidence
                )
            text = context.policy.nudges.judge_unavailable
            turns = _continue_turns(reply, call_id, text)
            return Nudge("judge_continue", outcome.reason, turns, STRIKE, outcome.usage, seen=seen)
        seen = (JudgeCall("remembered" if outcome.remembered else "not_done", latency),)
        if exhausted:
            detail = f"the model kept stopping before the task was done ({outcome.reason.rstrip('.')})"
            return Finalize("incomplete", detail, spent=outcome.usage, seen=seen, evidence=_STOPPED_EARLY)
        text = context.policy.nudges.judge_not_done.format(reason=outcome.reason.rstrip("."))
        return Nudge(
            "judge_continue",
            f"judge{' (remembered)' if outcome.remembered else ''}: {outcome.reason}",
            _continue_turns(reply, call_id, text),
            STRIKE,
            outcome.usage,
            seen=seen,
        )

    def holds(self, partial: PartialReply, context: GuardContext) -> int:
        """A text that may end the task waits until it is long enough to pass unjudged and holds
        an answer's substance (then it streams on); any other is judged whole at the end.
        A completion tool call waits."""
        settings = context.policy.judge
        used_tools = context.conversation.used_tools or bool(context.state.items(CALL_SEQUENCE))
        llm = settings.use_llm_judge and context.judge_target is not None
        exhausted = context.state.strikes(STRIKE) >= settings.judge_max_continues
        if not used_tools or (exhausted and (not llm or settings.after_max_continues == "pass")):
            return Channel.NONE
        tools = Channel.TOOL_CALLS if settings.completion_tools else Channel.NONE
        if partial.has_tool_calls:
            return tools
        short = (llm and partial.text_length < settings.judge_skip_threshold) or not _answers_so_far(
            partial.content, settings
        )
        if not llm and not short and settings.detect_short_response:
            task = _task(context)
            answer = partial.content.strip()
            short = len(task) >= settings.long_task_chars and len(answer) < settings.short_response_chars
        return tools | (Channel.TEXT if short else Channel.NONE)

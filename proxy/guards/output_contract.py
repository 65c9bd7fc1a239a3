"""Output contract: a final text answer must be JSON that satisfies the schema the request
(``response_format: json_schema``) or the policy (``output_contract.schema``) asks for, or
any JSON when the request asks for JSON without a schema (JSON mode).

JSON is extracted leniently (whole text, a fenced block, or the outermost object). A bad
answer goes back to the model with the path-level errors (``$.score: 'high' is not of
type 'number'``). After ``max_retries`` the session ends (``invalid_output``), which a
client that asked for JSON receives as a refusal, as OpenAI's structured outputs promise
(a valid object or a refusal); ``after_max_retries: pass`` lets the answer through instead,
flagged ``output_schema_invalid``. A valid answer wrapped in a fence or a sentence reaches the
client as the bare JSON the contract checked (a Rewrite, ``json_unwrapped``): strict parsers
(the openai SDK's ``parse``, the Agents SDK's ``output_type``) read nothing else.

Checking a long answer, or one against a schema with patterns, runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable

from proxy.exchange import Channel, Echo, Note, PartialReply, Reply
from proxy.guards.base import GuardContext
from proxy.schemas.compiled import CompiledSchema, answer_errors, json_text
from proxy.verdict import PASS, Finalize, Nudge, Pass, ReplyVerdict, Rewrite

__all__ = ["OutputContractGuard"]


class OutputContractGuard:
    def holds(self, partial: PartialReply, context: GuardContext) -> int:
        """A structured answer is valid or not only as a whole."""
        conversation = context.conversation
        if (
            conversation.output_schema is None
            and not conversation.json_answer
            and context.policy.output_contract.schema_ is None
        ):
            return Channel.NONE
        return Channel.TEXT

    def check_reply(self, reply: Reply, context: GuardContext) -> ReplyVerdict | Awaitable[ReplyVerdict]:
        schema = context.answer_schema(reply)
        if schema is None or reply.content is None:
            return PASS
        if schema.off_loop(len(reply.content)):
            return asyncio.to_thread(self._decide, reply, reply.content, schema, context)
        return self._decide(reply, reply.content, schema, context)

    def _decide(self, reply: Reply, content: str, schema: CompiledSchema, context: GuardContext) -> ReplyVerdict:
        errors = answer_errors(content, schema)
        if not errors:
            bare = json_text(content)
            if bare is None or bare == content.strip():
                return PASS
            return Rewrite(
                "json_unwrapped",
                "the valid JSON answer came wrapped: sent bare",
                dataclasses.replace(reply, content=bare),
            )
        settings = context.policy.output_contract
        if context.retries.get("schema_retry", 0) >= settings.max_retries:
            if settings.after_max_retries == "pass":
                return Pass(flags=("output_schema_invalid",))
            return Finalize(
                "invalid_output",
                f"the answer kept failing the required JSON schema: {errors[0]}",
                evidence=f"the answer failed the required JSON schema {settings.max_retries + 1} times",
            )
        text = context.policy.nudges.output_contract.format(errors="\n".join(errors))
        return Nudge(
            kind="schema_retry",
            reason=f"{len(errors)} schema error(s): {errors[0]}",
            turns=(Echo(reply), Note(text)),
        )

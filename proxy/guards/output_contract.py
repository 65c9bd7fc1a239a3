"""Output contract: a final text answer must be JSON that satisfies the schema the request
(``response_format: json_schema``) or the policy (``output_contract.schema``) asks for.

JSON is extracted leniently (whole text, a fenced block, or the outermost object). A bad
answer goes back to the model with the path-level errors (``$.score: 'high' is not of
type 'number'``); after ``max_retries`` it passes, flagged ``output_schema_invalid``.
"""

from __future__ import annotations

from proxy.exchange import Reply
from proxy.guards.base import GuardContext
from proxy.schemas import extract_json, schema_errors_of
from proxy.stream_assembly import Channel, PartialReply
from proxy.verdict import PASS, Nudge, Pass, Verdict

__all__ = ["OutputContractGuard"]


class OutputContractGuard:
    name = "output_contract"

    def holds(self, partial: PartialReply, context: GuardContext) -> int:
        """A structured answer is valid or not only as a whole."""
        if context.conversation.output_schema is None and context.policy.output_contract.schema_ is None:
            return Channel.NONE
        return Channel.TEXT

    def check_reply(self, reply: Reply, context: GuardContext) -> Verdict:
        schema = context.conversation.output_schema or context.policy.output_contract.schema_
        if schema is None or reply.tool_calls or not reply.has_text or reply.content is None:
            return PASS
        value, problem = extract_json(reply.content)
        errors = [problem] if problem else schema_errors_of(value, schema)
        if not errors:
            return PASS
        if context.retries.get("schema_retry", 0) >= context.policy.output_contract.max_retries:
            return Pass(flags=("output_schema_invalid",))
        text = context.policy.nudges.output_contract.format(errors="\n".join(errors))
        return Nudge(
            kind="schema_retry",
            reason=f"{len(errors)} schema error(s): {errors[0]}",
            messages=({"role": "assistant", "content": reply.content}, {"role": "user", "content": text}),
        )

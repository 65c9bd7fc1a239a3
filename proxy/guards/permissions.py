"""Tool permissions: a refused call never reaches the agent.

The model gets its call back, refused with the rule's message, and chooses another way; if
it insists past ``max_denials`` in one request, or a ``deny_session`` rule matches, the
session ends with reason ``permission``. Tools hidden by a rule are removed from the
request before it goes upstream, so the model is not tempted. Every decision is counted by
rule id and action (the verdict carries the decisions; the step log counts them).
"""

from __future__ import annotations

from proxy.exchange import Channel, PartialReply, Reply, ReturnCalls
from proxy.guards.base import GuardContext
from proxy.policy.permissions import Decision, decide
from proxy.verdict import PASS, Amend, Finalize, Nudge, Pass, PermissionCheck, ReplyVerdict, RequestVerdict

__all__ = ["PermissionGuard"]

_NOT_RUN = "Not executed: another call in this reply was refused. Send again the calls you still need."


class PermissionGuard:
    def check_request(self, context: GuardContext) -> RequestVerdict:
        """Remove hidden tools from what the model is offered."""
        settings = context.policy.permissions
        if not any(rule.hide for rule in settings.rules):
            return PASS
        hidden = [name for name in context.conversation.tool_parameters() if settings.hidden(name)]
        if not hidden:
            return PASS
        return Amend(
            kind="tools_hidden", reason=f"hidden: {', '.join(sorted(hidden))}", tool_notes={}, drop_tools=tuple(hidden)
        )

    def holds(self, partial: PartialReply, context: GuardContext) -> int:
        """A refused call must never reach the client, even in part."""
        settings = context.policy.permissions
        return Channel.NONE if not settings.rules and settings.default == "allow" else Channel.TOOL_CALLS

    def check_reply(self, reply: Reply, context: GuardContext) -> ReplyVerdict:
        settings = context.policy.permissions
        if not reply.tool_calls or (not settings.rules and settings.default == "allow"):
            return PASS
        decisions: list[Decision] = [decide(tool_call, settings) for tool_call in reply.tool_calls]
        seen = tuple(PermissionCheck(d.rule, d.action) for d in decisions if d.rule != "default" or d.action != "allow")
        refused = [(c, d) for c, d in zip(reply.tool_calls, decisions, strict=True) if d.action != "allow"]
        if not refused:
            return Pass(seen=seen) if seen else PASS
        tool_call, decision = refused[0]
        if (
            any(d.action == "deny_session" for _, d in refused)
            or context.retries.get("permission_denied", 0) >= settings.max_denials
        ):
            ending = next((d for _, d in refused if d.action == "deny_session"), decision)
            what = f"the model asked for {tool_call.name}, which rule {ending.rule} forbids"
            return Finalize("permission", what, seen=seen, evidence=what)
        results = {}
        for each, verdict in zip(reply.tool_calls, decisions, strict=True):
            reason = verdict.message or "this call is not allowed here"
            results[each.id] = (
                _NOT_RUN
                if verdict.action == "allow"
                else f"Refused by policy (rule {verdict.rule}): {reason} Choose another way to continue."
            )
        return Nudge(
            kind="permission_denied",
            reason=f"{tool_call.name} refused by rule {decision.rule}",
            turns=(ReturnCalls(reply, results),),
            seen=seen,
        )

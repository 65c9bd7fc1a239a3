"""Guards: one module each, all following :mod:`proxy.guards.base`."""

from proxy.guards.base import GuardContext, RequestGuard, ResponseGuard
from proxy.guards.budget import BudgetGuard
from proxy.guards.empty_reply import EmptyReplyGuard
from proxy.guards.no_progress import NoProgressGuard
from proxy.guards.output_contract import OutputContractGuard
from proxy.guards.permissions import PermissionGuard
from proxy.guards.premature_stop import PrematureStopGuard
from proxy.guards.reasoning_only import ReasoningOnlyGuard
from proxy.guards.stalled_progress import StalledProgressGuard
from proxy.guards.tool_args import ToolArgsGuard
from proxy.guards.tool_failures import ToolFailuresGuard
from proxy.guards.tool_loop import ToolLoopGuard
from proxy.judge.client import Judge

__all__ = [
    "BudgetGuard",
    "EmptyReplyGuard",
    "GuardContext",
    "NoProgressGuard",
    "OutputContractGuard",
    "PermissionGuard",
    "PrematureStopGuard",
    "ReasoningOnlyGuard",
    "RequestGuard",
    "ResponseGuard",
    "StalledProgressGuard",
    "ToolArgsGuard",
    "ToolFailuresGuard",
    "ToolLoopGuard",
    "default_request_guards",
    "default_response_guards",
]


def default_request_guards() -> list[RequestGuard]:
    """In order: endings first (budgets, failing tools), then nudges, then amendments."""
    return [BudgetGuard(), ToolFailuresGuard(), NoProgressGuard(), ToolLoopGuard(), PermissionGuard()]


def default_response_guards(judge: Judge | None = None) -> list[ResponseGuard]:
    """In order: say something, say it validly (a refused call is not validated or counted),
    do not repeat yourself (nor stall on ever-new arguments), and (last, since it costs a model
    call) do not stop early."""
    guards: list[ResponseGuard] = [
        EmptyReplyGuard(),
        ReasoningOnlyGuard(),
        PermissionGuard(),
        ToolArgsGuard(),
        ToolLoopGuard(),
        NoProgressGuard(),
        StalledProgressGuard(judge),
        OutputContractGuard(),
    ]
    if judge is not None:
        guards.append(PrematureStopGuard(judge))
    return guards

"""Guards: one module each, all following :mod:`proxy.guards.base`."""

from proxy.guards.base import GuardContext, RequestGuard, ResponseGuard
from proxy.guards.budget import BudgetGuard
from proxy.guards.empty_reply import EmptyReplyGuard
from proxy.guards.no_progress import NoProgressGuard
from proxy.guards.reasoning_only import ReasoningOnlyGuard
from proxy.guards.tool_args import ToolArgsGuard
from proxy.guards.tool_failures import ToolFailuresGuard
from proxy.guards.tool_loop import ToolLoopGuard

__all__ = [
    "BudgetGuard",
    "EmptyReplyGuard",
    "GuardContext",
    "NoProgressGuard",
    "ReasoningOnlyGuard",
    "RequestGuard",
    "ResponseGuard",
    "ToolArgsGuard",
    "ToolFailuresGuard",
    "ToolLoopGuard",
    "default_request_guards",
    "default_response_guards",
]


def default_request_guards() -> list[RequestGuard]:
    """In order: endings first (budgets, failing tools), then nudges, then amendments."""
    return [BudgetGuard(), ToolFailuresGuard(), NoProgressGuard(), ToolLoopGuard()]


def default_response_guards() -> list[ResponseGuard]:
    """In order: say something, say it validly, then do not repeat yourself."""
    return [EmptyReplyGuard(), ReasoningOnlyGuard(), ToolArgsGuard(), ToolLoopGuard(), NoProgressGuard()]

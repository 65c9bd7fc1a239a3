"""Guards: one module each, all following :mod:`proxy.guards.base`."""

from proxy.guards.base import GuardContext, RequestGuard, ResponseGuard
from proxy.guards.empty_reply import EmptyReplyGuard
from proxy.guards.reasoning_only import ReasoningOnlyGuard
from proxy.guards.step_limit import StepLimitGuard

__all__ = [
    "EmptyReplyGuard",
    "GuardContext",
    "ReasoningOnlyGuard",
    "RequestGuard",
    "ResponseGuard",
    "StepLimitGuard",
    "default_request_guards",
    "default_response_guards",
]


def default_request_guards() -> list[RequestGuard]:
    return [StepLimitGuard()]


def default_response_guards() -> list[ResponseGuard]:
    return [EmptyReplyGuard(), ReasoningOnlyGuard()]

"""Budget grants: more of a session's budgets, given through the sessions API.

A grant raises one or more of a session's budgets (steps, tokens, cost, active time) on top
of its policy's, up to the policy's ``budgets.grant_ceiling`` per budget, counted over every
grant the session received. What was granted lives in the session's hash (``granted_*``),
where admission reads it in its own atomic step (:func:`proxy.books.budgets.session_limits`)
and the budget guard through :func:`proxy.books.budgets.remaining`. A session a budget
ended (``budget_*``) whose budget is granted more is lifted: its stored ending is cleared in
the grant's atomic step, so its next request is served anew instead of getting the ending.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from proxy.books.pricing import MICROS
from proxy.errors import GrantOverCeiling, InvalidRequest
from proxy.policy.models import Policy
from proxy.session.base import FIELDS, Grant, SessionDelta, SessionState

__all__ = [
    "BUDGETS",
    "MOST_PER_GRANT",
    "Budget",
    "grant_delta",
    "granted",
    "lifted_reasons",
    "over_ceiling",
    "parse_grants",
]


@dataclass(frozen=True, slots=True)
class Budget:
    """One grantable budget: its name in the API, its field, its unit there, its ending."""

    name: str
    field: str
    scale: int
    """Stored units per API unit (micro-dollars per USD, ms per second)."""
    reason: str
    """The termination reason this budget's ending carries."""
    whole: bool
    """Granted in whole numbers only (steps, tokens)."""


BUDGETS = (
    Budget("steps", FIELDS.GRANTED_STEPS, 1, "budget_steps", True),
    Budget("tokens", FIELDS.GRANTED_TOKENS, 1, "budget_tokens", True),
    Budget("cost_usd", FIELDS.GRANTED_COST, MICROS, "budget_cost", False),
    Budget("active_secs", FIELDS.GRANTED_ACTIVE_MS, 1000, "budget_time", False),
)
_BY_NAME = {budget.name: budget for budget in BUDGETS}
MOST_PER_GRANT = 10**12
"""The largest amount one grant may ask for, in API units: far over any ceiling, and small
enough that every stored amount stays an exact integer (in Lua's doubles too)."""


def _ceiling(policy: Policy, budget: Budget) -> int:
    """The policy's ceiling for ``budget``, in stored units: 0 for a budget the policy does not
    set (nothing to raise), so the store refuses it after finding the session, as any grant
    over its ceiling (a 404 for another's session comes first)."""
    if not _policy_sets(policy, budget):
        return 0
    return round(float(getattr(policy.budgets.grant_ceiling, budget.name)) * budget.scale)


def _policy_sets(policy: Policy, budget: Budget) -> bool:
    """Steps are always budgeted; the other budgets only when the policy sets them."""
    budgets = policy.budgets
    limit = {"tokens": budgets.max_tokens, "cost_usd": budgets.max_cost_usd, "active_secs": budgets.max_active_secs}
    return budget.name == "steps" or limit[budget.name] is not None


def parse_grants(body: object, policy: Policy) -> list[Grant]:
    """The grants a PATCH body asks for; a 400 naming the field for anything else."""
    if not isinstance(body, Mapping) or not body:
        names = ", ".join(_BY_NAME)
        raise InvalidRequest(f"The body must be a JSON object granting at least one of: {names}.", param=None)
    grants = []
    for name, value in body.items():
        budget = _BY_NAME.get(name)
        if budget is None:
            raise InvalidRequest(f"{name!r} is not a grantable budget (use {', '.join(_BY_NAME)}).", param=name)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())  # JSON's 1e3 too
        if not number or not 0 < value <= MOST_PER_GRANT or (budget.whole and not whole):
            kind = "a positive whole number" if budget.whole else "a positive number"
            raise InvalidRequest(f"{name} must be {kind}, at most {MOST_PER_GRANT:.0e}.", param=name)
        amount = round(value * budget.scale)
        grants.append(Grant(budget.name, budget.field, max(amount, 1), _ceiling(policy, budget)))
    return grants


def lifted_reasons(grants: list[Grant]) -> list[str]:
    """The endings these grants lift: those of the budgets they raise."""
    return [_BY_NAME[grant.budget].reason for grant in grants]


def grant_delta(grants: list[Grant], at_ms: int, by: str) -> SessionDelta:
    """The grants' increments and their timeline event (``by``: ``owner`` or ``admin``)."""
    delta = SessionDelta()
    amounts: dict[str, str | int | float | bool | None] = {}
    for grant in grants:
        delta.incr(grant.granted, grant.amount)
        budget = _BY_NAME[grant.budget]
        amounts[grant.budget] = grant.amount if budget.scale == 1 else grant.amount / budget.scale
    delta.event("grant", at_ms, by=by, **amounts)
    return delta


def granted(state: SessionState, policy: Policy) -> dict[str, dict[str, float]]:
    """Per budget the policy lets grant: granted so far, the ceiling, and what is left of it."""
    view = {}
    for budget in BUDGETS:
        ceiling = _ceiling(policy, budget)
        if not ceiling:
            continue
        given = state.counter(budget.field)
        view[budget.name] = {
            "granted": given / budget.scale,
            "ceiling": ceiling / budget.scale,
            "left": max(ceiling - given, 0) / budget.scale,
        }
    return view


def over_ceiling(refused: str, state: SessionState, policy: Policy) -> GrantOverCeiling:
    """The 409 of a grant over its ceiling, saying what may still be granted of that budget."""
    budget = _BY_NAME[refused]
    ceiling = _ceiling(policy, budget)
    left = max(ceiling - state.counter(budget.field), 0) / budget.scale
    if not _policy_sets(policy, budget):
        message = f"The policy {policy.name!r} sets no {refused} budget to grant more of."
    elif not ceiling:
        message = f"The policy {policy.name!r} allows no grants of {refused} (budgets.grant_ceiling.{refused})."
    else:
        shown = f"{left:g}" if budget.scale == 1 else f"{left:.6g}"
        message = (
            f"This grant of {refused} is over the policy's ceiling of {ceiling / budget.scale:g} per session: "
            f"{shown} more may be granted. Nothing was granted."
        )
    return GrantOverCeiling(message, param=refused)

"""Efficacy scenarios built from the answer shapes (tests/support/answer_shapes.py), part of the
scenario table (``scenarios.scenarios()``): each long legitimate answer as a well-behaved run
(any intervention on it is a false one), each hand-back as a misbehaviour that recovers once
the judge says "not done", and each wrapped JSON answer as a well-behaved structured run whose
client must receive the bare JSON.

What is correct here is the scenario's own answer: a long answer reaches the client as the
model wrote it (it need not be about the weather), a hand-back's run ends with both
temperatures, a wrapped JSON answer reaches the client as the schema's object.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from tests.support.answer_shapes import HAND_BACKS, JSON_REPLIES, LEGITIMATE

if TYPE_CHECKING:
    from tests.bench.efficacy.scenarios import Reply, Scenario, Seen

__all__ = ["EXPECTED_INTERVENTIONS", "FAMILIES", "answer_scenarios", "is_long_answer", "json_in", "respond_answer"]

FAMILIES = {
    "long_answer": "a long legitimate answer of its own shape (list, table, code, an offer after the answer…)",
    "hand_back": "asks the user or announces work instead of answering",
    "wrapped_json": "the schema's object in a fence or a sentence",
}
EXPECTED_INTERVENTIONS = {"wrapped_json": frozenset({"json_unwrapped"})}
"""What the guard must do on a family's well-behaved runs (not a false intervention): a client
that asked for JSON gets the bare JSON the contract checked."""
_NOT_JUDGED = 120
"""How much of a long answer the honest judge compares (a judge's prompt may cut it short)."""


def answer_scenarios() -> list[Scenario]:
    """The 31 scenarios: 22 long answers, 5 hand-backs, 4 wrapped JSON answers."""
    from tests.bench.efficacy.scenarios import Scenario

    return [
        *(Scenario("long_answer", name, True, description=FAMILIES["long_answer"]) for name in LEGITIMATE),
        *(Scenario("hand_back", name, False, description=FAMILIES["hand_back"]) for name in HAND_BACKS),
        *(
            Scenario("wrapped_json", name, True, schema=True, description=FAMILIES["wrapped_json"])
            for name in JSON_REPLIES
        ),
    ]


def _folded(text: str) -> str:
    return " ".join(text.split())


def is_long_answer(answer: Any, variant: str, *, judged: bool = False) -> bool:
    """The client got the long answer as the model wrote it (white space aside); ``judged``:
    the judge's view of it, which may be cut short, starts as it does."""
    if not isinstance(answer, str) or not answer.strip():
        return False
    expected, got = _folded(LEGITIMATE[variant]), _folded(answer)
    return expected.startswith(got[:_NOT_JUDGED]) if judged else got == expected


def json_in(text: str) -> Any:
    """The JSON object a reply carries (bare, fenced or in a sentence), or None: what an honest
    judge reads as the answer."""
    found = re.search(r"\{.*\}", text, re.S)
    if found is None:
        return None
    try:
        return json.loads(found.group(0))
    except ValueError:
        return None


def respond_answer(scenario: Scenario, seen: Seen) -> Reply | None:
    """The scripted model's reply for an answer scenario; None for any other scenario. Tools are
    called as a well-behaved model calls them; the final reply is the scenario's shape."""
    from tests.bench.efficacy.scenarios import Reply, well_behaved

    if scenario.name not in FAMILIES:
        return None
    step = well_behaved(seen, "ok")
    if step.tool_calls or seen.finalize or len(seen.found) < 2:
        return step
    if scenario.name == "long_answer":
        return Reply(LEGITIMATE[scenario.variant])
    if scenario.name == "wrapped_json":
        return Reply(JSON_REPLIES[scenario.variant][0])
    return step if seen.corrected else Reply(HAND_BACKS[scenario.variant])

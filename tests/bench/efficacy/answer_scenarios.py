"""Efficacy scenarios built from the answer shapes (tests/support/answer_shapes.py), in the form
of ``scenarios.py``, for the scenario table to include: each long legitimate answer as a
well-behaved run (any intervention on it is a false one), each hand-back as a misbehaviour that
recovers once the judge says "not done", and each wrapped JSON answer as a well-behaved
structured run. Not wired into ``run_efficacy`` yet: the scenario table's owner includes them."""

from __future__ import annotations

from tests.bench.efficacy.scenarios import Reply, Scenario, Seen, well_behaved
from tests.support.answer_shapes import HAND_BACKS, JSON_REPLIES, LEGITIMATE

__all__ = ["ANSWER_SCENARIOS", "respond_answer"]

ANSWER_SCENARIOS: list[Scenario] = [
    *(Scenario("long_answer", name, True, description="a long legitimate answer") for name in LEGITIMATE),
    *(Scenario("hand_back", name, False, description="asks or announces instead of answering") for name in HAND_BACKS),
    *(Scenario("wrapped_json", name, True, schema=True, description="valid JSON in a fence") for name in JSON_REPLIES),
]


def respond_answer(scenario: Scenario, seen: Seen) -> Reply | None:
    """The scripted model's reply for an answer scenario; None for any other scenario. Tools are
    called as a well-behaved model calls them; the final reply is the scenario's shape."""
    if scenario.name not in ("long_answer", "hand_back", "wrapped_json"):
        return None
    step = well_behaved(seen, "ok")
    if step.tool_calls or seen.finalize:
        return step
    if scenario.name == "long_answer":
        return Reply(LEGITIMATE[scenario.variant])
    if scenario.name == "wrapped_json":
        return Reply(JSON_REPLIES[scenario.variant][0])
    return step if seen.corrected else Reply(HAND_BACKS[scenario.variant])

"""What the efficacy matrix of the openai SDK agent loop shows: every scripted model,
streaming off and on, straight to the model API and through the proxy; and smolagents and
pydantic-ai, which answer through a tool, against the endings.

Whole matrices run for minutes, so they are the benchmark's, not the test suite's (which
runs one quick smoke run per client, ``tests/integration/test_efficacy_smoke.py``). Run
these checks by path: ``python -m pytest tests/bench/efficacy/check_openai_matrix.py``.
The full benchmark (every client) is ``python -m tests.bench.efficacy.run_efficacy``.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.bench.efficacy import scenarios
from tests.bench.efficacy.run_efficacy import RunResult, disturbed, run_matrix, summarize

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # a module fixture runs a whole matrix


@pytest.fixture(scope="module")
def runs() -> list[RunResult]:
    return asyncio.run(run_matrix(["openai"], [False, True], [False, True]))


def pick(runs: list[RunResult], *, proxy: bool, **where: object) -> list[RunResult]:
    chosen = [r for r in runs if r.proxy is proxy]
    for name, value in where.items():
        if name == "variant":
            chosen = [r for r in chosen if r.scenario.endswith(f"/{value}")]
        else:
            chosen = [r for r in chosen if getattr(r, name) == value]
    return chosen


def test_without_the_proxy_every_misbehaving_run_fails(runs):
    direct = pick(runs, proxy=False, behaved=False)

    assert direct
    assert all(r.outcome in ("silent", "crashed") for r in direct)


def test_without_the_proxy_every_well_behaved_run_finishes_but_wrapped_json_which_crashes(runs):
    behaved = pick(runs, proxy=False, behaved=True)

    assert [r.scenario for r in behaved if r.outcome != "correct"] == [
        r.scenario for r in behaved if r.scenario.startswith("wrapped_json/")
    ]
    assert {r.outcome for r in behaved if r.scenario.startswith("wrapped_json/")} == {"crashed"}


def test_with_the_proxy_no_well_behaved_run_is_disturbed(runs):
    """Long answers of every shape pass untouched; a wrapped JSON answer arrives bare (its one
    intervention, ``json_unwrapped``)."""
    guarded = pick(runs, proxy=True, behaved=True)

    assert [(r.scenario, r.interventions, r.terminated, r.outcome) for r in guarded if disturbed(r)] == []


def test_with_the_proxy_a_hand_back_is_judged_not_done_once_and_the_run_ends_correct(runs):
    handed = [r for r in pick(runs, proxy=True) if r.scenario.startswith("hand_back/")]

    assert handed
    assert [(r.scenario, r.stream, r.outcome, r.interventions) for r in handed] == [
        (r.scenario, r.stream, "correct", ["judge_continue"]) for r in handed
    ]


def test_with_the_proxy_models_that_take_a_correction_finish_correctly(runs):
    rescued = pick(runs, proxy=True, variant="recovers") + pick(runs, proxy=True, variant="storm")

    assert rescued
    assert [(r.scenario, r.stream, r.outcome) for r in rescued if r.outcome != "correct"] == []


@pytest.mark.parametrize(
    "scenario",
    [
        "empty/persistent",
        "reasoning_only/persistent",
        "repeat/persistent",
        "invalid_args/persistent",
        "done_early/persistent",
        "schema/persistent",
        "ever_new/persistent",
    ],
)
def test_with_the_proxy_models_that_never_recover_end_gracefully(runs, scenario):
    ended = pick(runs, proxy=True, scenario=scenario)

    assert len(ended) == 2
    assert all(r.outcome == "graceful" and r.terminated for r in ended)


@pytest.mark.parametrize("scenario", ["cycle/persistent", "token_hog/persistent", "wander/persistent"])
def test_with_the_proxy_endless_runs_end_with_a_summary_that_answers(runs, scenario):
    ended = pick(runs, proxy=True, scenario=scenario)

    assert ended
    assert all(r.outcome == "correct" and r.terminated for r in ended)


def test_with_the_proxy_a_cycle_ends_within_a_six_request_client_cap(runs):
    ended = pick(runs, proxy=True, scenario="cycle/persistent")

    assert [(r.terminated, r.error) for r in ended] == [("loop", None)] * 2


def test_with_the_proxy_the_last_step_a_client_allows_is_the_ending(runs):
    """The client's cap equals the policy's max_steps: the reply to its last request is the ending."""
    ended = pick(runs, proxy=True, scenario="wander/persistent")

    assert [(r.outcome, r.terminated, r.error) for r in ended] == [("correct", "budget_steps", None)] * 2


def test_without_a_session_id_runs_of_the_same_task_never_share_a_session():
    """The same task back to back and three at a time, through one proxy, without X-Session-Id:
    every run ends as it does alone (no ending, strike or budget crosses runs)."""
    chosen = [s for s in scenarios.scenarios() if s.key in ("short/ok", "done_early/persistent", "repeat/recovers")]
    shared = asyncio.run(run_matrix(["openai"], [False], [True], chosen, derived=True, copies=3))

    assert sorted((r.scenario, r.outcome, r.terminated) for r in shared) == sorted(
        [
            ("short/ok", "correct", None),
            ("done_early/persistent", "graceful", "incomplete"),
            ("repeat/recovers", "correct", None),
        ]
        * 3
    )
    assert [r.judge_calls for r in shared if r.scenario == "done_early/persistent"] == [1] * 3


def test_with_the_proxy_the_token_hog_costs_a_fraction(runs):
    direct = sum(r.tokens for r in pick(runs, proxy=False, scenario="token_hog/persistent"))
    guarded = sum(r.tokens for r in pick(runs, proxy=True, scenario="token_hog/persistent"))

    assert guarded < direct / 3


def test_with_the_proxy_no_run_of_the_openai_loop_ends_silently_or_crashes(runs):
    summary = summarize(pick(runs, proxy=True))

    assert (summary.silent, summary.crashed) == (0, 0)


def test_with_the_proxy_a_token_hog_hears_the_converge_note_before_its_budget_ends(runs):
    hogs = pick(runs, proxy=True, scenario="token_hog/recovers")

    assert all("budget_note" in r.interventions for r in hogs)


def test_with_the_proxy_a_structured_answer_that_is_never_right_ends_as_a_refusal(runs):
    ended = pick(runs, proxy=True, scenario="schema/persistent")

    assert [(r.terminated, r.answer.startswith("refusal: 1. What I found")) for r in ended] == [
        ("invalid_output", True)
    ] * 2


def test_with_the_proxy_a_schema_valid_answer_costs_no_judge_call(runs):
    assert [r.judge_calls for r in pick(runs, proxy=True, scenario="structured/ok")] == [0, 0]


def test_with_the_proxy_a_model_that_keeps_saying_done_costs_one_judge_call(runs):
    ended = pick(runs, proxy=True, scenario="done_early/persistent")

    assert [(r.judge_calls, r.terminated) for r in ended] == [(1, "incomplete")] * 2


def test_a_production_sized_agent_changes_the_cost_not_the_outcome(runs):
    chosen = [s for s in scenarios.scenarios() if s.key in ("short/ok", "done_early/persistent")]
    production = asyncio.run(run_matrix(["openai"], [False], [True], chosen, profile=scenarios.PROFILES["production"]))
    small = {r.scenario: r for r in pick(runs, proxy=True, stream=False)}

    assert [(r.scenario, r.outcome) for r in production] == [
        ("short/ok", "correct"),
        ("done_early/persistent", "graceful"),
    ]
    assert all(r.tokens > 2 * small[r.scenario].tokens for r in production)
    assert all(r.judge_tokens == small[r.scenario].judge_tokens for r in production)


def test_with_the_proxy_ever_new_arguments_end_as_no_progress(runs):
    ended = pick(runs, proxy=True, scenario="ever_new/persistent")

    assert [r.terminated for r in ended] == ["no_progress"] * 2
    assert all("stalled_progress_nudge" in r.interventions for r in ended)


ANSWER_TOOL_SCENARIOS = ("short/ok", "structured/ok", "empty/persistent", "schema/persistent", "ever_new/persistent")


@pytest.fixture(scope="module")
def answer_tool_runs() -> list[RunResult]:
    """smolagents (final_answer) and pydantic-ai (final_result for a structured answer),
    through the proxy, streaming off and on."""
    chosen = [s for s in scenarios.scenarios() if s.key in ANSWER_TOOL_SCENARIOS]
    return asyncio.run(run_matrix(["smolagents", "pydantic_ai"], [False, True], [True], chosen))


def test_clients_that_answer_through_a_tool_accept_every_ending(answer_tool_runs):
    misbehaving = [r for r in answer_tool_runs if not r.behaved]

    assert len(misbehaving) == 10  # 3 scenarios x 2 stream modes for pydantic-ai; smolagents runs no schema one
    assert [(r.client, r.scenario, r.stream, r.outcome, r.error) for r in misbehaving if r.error] == []
    assert all(r.terminated for r in misbehaving)


def test_pydantic_ai_gets_its_structured_ending_as_a_valid_final_result(answer_tool_runs):
    ended = [r for r in answer_tool_runs if r.client == "pydantic_ai" and r.scenario == "schema/persistent"]

    assert [(r.outcome, r.terminated) for r in ended] == [("correct", "invalid_tool_args")] * 2


def test_clients_that_answer_through_a_tool_see_no_intervention_when_well_behaved(answer_tool_runs):
    behaved = [r for r in answer_tool_runs if r.behaved]

    assert [
        (r.client, r.scenario, r.interventions, r.outcome) for r in behaved if r.interventions or r.outcome != "correct"
    ] == []

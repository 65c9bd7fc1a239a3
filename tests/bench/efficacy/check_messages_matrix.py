"""What the efficacy matrix on /v1/messages shows: the anthropic SDK agent loop against every
scripted model, streaming off and on, straight to the model API and through the proxy.

A whole matrix is the benchmark's, not the test suite's (which runs one quick smoke run per
client, ``tests/integration/test_efficacy_smoke.py``). Run these checks by path:
``python -m pytest tests/bench/efficacy/check_messages_matrix.py``.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.bench.efficacy.run_efficacy import RunResult, disturbed, run_matrix, summarize

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # a module fixture runs a whole matrix


@pytest.fixture(scope="module")
def runs() -> list[RunResult]:
    return asyncio.run(run_matrix(["anthropic"], [False, True], [False, True]))


def pick(runs: list[RunResult], *, proxy: bool, **where: object) -> list[RunResult]:
    return [r for r in runs if r.proxy is proxy and all(getattr(r, k) == v for k, v in where.items())]


def test_without_the_proxy_every_misbehaving_run_fails(runs):
    direct = pick(runs, proxy=False, behaved=False)

    assert direct
    assert [(r.scenario, r.outcome) for r in direct if r.outcome not in ("silent", "crashed")] == []


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
    rescued = [r for r in pick(runs, proxy=True) if r.scenario.endswith(("/recovers", "/storm"))]

    assert rescued
    assert [(r.scenario, r.stream, r.outcome, r.error) for r in rescued if r.outcome != "correct"] == []


def test_with_the_proxy_no_run_ends_silently_or_crashes(runs):
    summary = summarize(pick(runs, proxy=True))

    assert (summary.silent, summary.crashed) == (0, 0), [
        (r.scenario, r.stream, r.outcome, r.error) for r in pick(runs, proxy=True) if r.outcome in ("silent", "crashed")
    ]

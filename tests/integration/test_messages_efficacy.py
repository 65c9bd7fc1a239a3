"""The efficacy benchmark on /v1/messages, short: the anthropic SDK agent loop against every
scripted model, streaming off and on, straight to the model API and through the proxy."""

from __future__ import annotations

import asyncio

import pytest

from tests.bench.efficacy.run_efficacy import RunResult, run_matrix, summarize


@pytest.fixture(scope="module")
def runs() -> list[RunResult]:
    return asyncio.run(run_matrix(["anthropic"], [False, True], [False, True]))


def pick(runs: list[RunResult], *, proxy: bool, **where: object) -> list[RunResult]:
    return [r for r in runs if r.proxy is proxy and all(getattr(r, k) == v for k, v in where.items())]


def test_without_the_proxy_every_misbehaving_run_fails(runs):
    direct = pick(runs, proxy=False, behaved=False)

    assert direct
    assert [(r.scenario, r.outcome) for r in direct if r.outcome not in ("silent", "crashed")] == []


def test_without_the_proxy_every_well_behaved_run_finishes(runs):
    assert [(r.scenario, r.outcome) for r in pick(runs, proxy=False, behaved=True) if r.outcome != "correct"] == []


def test_with_the_proxy_no_well_behaved_run_sees_an_intervention(runs):
    guarded = pick(runs, proxy=True, behaved=True)

    assert [(r.scenario, r.interventions, r.terminated) for r in guarded if r.interventions or r.terminated] == []
    assert all(r.outcome == "correct" for r in guarded)


def test_with_the_proxy_models_that_take_a_correction_finish_correctly(runs):
    rescued = [r for r in pick(runs, proxy=True) if r.scenario.endswith(("/recovers", "/storm"))]

    assert rescued
    assert [(r.scenario, r.stream, r.outcome, r.error) for r in rescued if r.outcome != "correct"] == []


def test_with_the_proxy_no_run_ends_silently_or_crashes(runs):
    summary = summarize(pick(runs, proxy=True))

    assert (summary.silent, summary.crashed) == (0, 0), [
        (r.scenario, r.stream, r.outcome, r.error) for r in pick(runs, proxy=True) if r.outcome in ("silent", "crashed")
    ]

"""One quick run of each efficacy client through the proxy: a scripted model repeats a tool
call, is warned, and recovers; the client ends with the correct answer.

Each run is its own test (a whole matrix in a module fixture outlasted the per-test timeout
on a busy machine). The matrices and what they show are the benchmark's:
``python -m tests.bench.efficacy.run_efficacy``, and its checks
``python -m pytest tests/bench/efficacy/check_openai_matrix.py tests/bench/efficacy/check_messages_matrix.py``.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.bench.efficacy import scenarios
from tests.bench.efficacy.clients import CLIENTS
from tests.bench.efficacy.run_efficacy import run_matrix

OPTIONAL = {"langgraph": "langgraph", "langgraph-responses": "langgraph"}
"""Clients whose library only the benchmark's extra installs (``pip install '.[efficacy]'``)."""
REPEATS_THEN_RECOVERS = next(s for s in scenarios.scenarios() if s.key == "repeat/recovers")


@pytest.mark.parametrize("client", list(CLIENTS))
def test_a_client_whose_model_repeats_a_call_is_warned_and_finishes_correctly(client):
    if client in OPTIONAL:
        pytest.importorskip(OPTIONAL[client])

    (run,) = asyncio.run(run_matrix([client], [True], [True], [REPEATS_THEN_RECOVERS]))

    assert (run.outcome, run.error, run.terminated) == ("correct", None, None)
    assert "loop_warning" in run.interventions

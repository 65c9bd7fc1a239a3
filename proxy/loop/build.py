"""The one way to assemble the guard loop: production, ``loopwarden replay`` and the tests run
the same guards in the same order, so what a replay or a test shows is what serving does."""

from __future__ import annotations

import time
from collections.abc import Callable

from proxy.books.ledger import ENDING_WAIT_SECS
from proxy.books.pricing import PriceTable
from proxy.guards import default_request_guards, default_response_guards
from proxy.judge.client import Judge
from proxy.loop.finalize import FormatLookup
from proxy.loop.pipeline import Pipeline
from proxy.loop.recording import StepRecorder
from proxy.observe.metrics import Metrics
from proxy.observe.tracing import Tracing
from proxy.session.base import SessionStore
from proxy.upstream.client import UpstreamClient

__all__ = ["build_pipeline"]


def build_pipeline(
    upstream: UpstreamClient,
    store: SessionStore,
    metrics: Metrics,
    *,
    formats: FormatLookup,
    clock: Callable[[], float] = time.time,
    prices: PriceTable | None = None,
    log_contents: bool = False,
    tracing: Tracing | None = None,
    recorder: StepRecorder | None = None,
    keepalive_secs: float = 15.0,
    ending_wait_secs: float = ENDING_WAIT_SECS,
) -> Pipeline:
    """The pipeline with every guard, the judge asking through ``upstream``'s client.
    ``formats``: the registry's lookup (``format_named``), handed in by the edge so the loop
    never imports a wire format (a stored ending of another format is read through it)."""
    return Pipeline(
        upstream,
        store,
        metrics,
        default_request_guards(),
        default_response_guards(Judge(upstream)),
        formats,
        clock=clock,
        prices=prices,
        log_contents=log_contents,
        tracing=tracing,
        recorder=recorder,
        keepalive_secs=keepalive_secs,
        ending_wait_secs=ending_wait_secs,
    )

"""What a started proxy asks of the cyclic garbage collector."""

from __future__ import annotations

import gc

from litestar.testing import TestClient

from proxy.edge.app import YOUNG_GC_THRESHOLD, create_app
from proxy.settings import Settings


def test_a_started_proxy_collects_young_objects_only_after_ten_thousand_net_allocations():
    before = gc.get_threshold()
    try:
        with TestClient(create_app(Settings(upstream="http://127.0.0.1:9/v1"))) as client:
            assert client.get("/healthz").status_code == 200

            assert gc.get_threshold() == (YOUNG_GC_THRESHOLD, *before[1:])
            assert gc.get_freeze_count() > 0  # what startup built is out of every collection
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()

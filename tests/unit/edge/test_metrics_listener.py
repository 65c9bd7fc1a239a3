"""The metrics listener serves /metrics on a port of its own, over real HTTP, and says clearly
when it cannot listen."""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator

import httpx
import pytest

from proxy.edge.listening import ListenError
from proxy.edge.metrics_listener import MetricsListener
from proxy.observe.metrics import Metrics


@pytest.fixture
def listening() -> Iterator[MetricsListener]:
    metrics = Metrics()
    metrics.of(metrics.interventions, "acme", "default", "tool_loop", "loop_warning").inc()
    listener = MetricsListener(metrics, "127.0.0.1", 0)
    listener.start()
    yield listener
    listener.stop()


def test_a_free_port_is_picked_and_the_exposition_served_there(listening):
    response = httpx.get(f"http://127.0.0.1:{listening.port}/metrics")

    assert listening.port != 0
    assert response.status_code == 200
    assert (
        'loopwarden_interventions_total{guard="tool_loop",kind="loop_warning",policy="default",tenant="acme"} 1.0'
        in response.text
    )


def test_a_port_in_use_is_a_listen_error_naming_the_address_and_the_flag(listening):
    taken = MetricsListener(Metrics(), "127.0.0.1", listening.port)

    with pytest.raises(ListenError) as failed:
        taken.bind()

    assert failed.value.errno == errno.EADDRINUSE
    assert f"the metrics listener cannot listen on 127.0.0.1:{listening.port}" in failed.value.strerror
    assert "--metrics-port (LOOPWARDEN_METRICS_PORT)" in failed.value.strerror


def test_an_address_the_host_does_not_have_is_a_listen_error_naming_the_host_flag():
    with pytest.raises(ListenError, match=r"cannot listen on 192\.0\.2\.1:0: .*--metrics-host"):
        MetricsListener(Metrics(), "192.0.2.1", 0).start()


def test_a_bound_listener_knows_its_port_before_it_serves():
    listener = MetricsListener(Metrics(), "127.0.0.1", 0)
    listener.bind()
    try:
        bound = listener.port
        listener.start()

        assert bound != 0
        assert listener.port == bound
        assert httpx.get(f"http://127.0.0.1:{bound}/metrics").status_code == 200
    finally:
        listener.stop()


def test_a_stopped_listener_frees_its_port_and_stops_again_harmlessly():
    listener = MetricsListener(Metrics(), "127.0.0.1", 0)
    listener.start()
    port = listener.port

    listener.stop()
    listener.stop()

    with socket.create_server(("127.0.0.1", port)):
        pass  # the port is free again


def test_listeners_that_reuse_the_port_share_it():
    first = MetricsListener(Metrics(), "127.0.0.1", 0, reuse_port=True)
    first.start()
    second = MetricsListener(Metrics(), "127.0.0.1", first.port, reuse_port=True)
    try:
        second.start()

        assert second.port == first.port
    finally:
        second.stop()
        first.stop()

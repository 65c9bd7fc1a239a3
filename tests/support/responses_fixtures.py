"""The fixtures of the Responses API tests: one scripted Responses upstream per test process
(HTTP only, and one that speaks the WebSocket mode too), reset around each test, and a proxy in
front of it. A test module imports the ones it uses."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.fake_responses import FakeResponses
from tests.support.fake_responses_socket import FakeResponsesSocket
from tests.support.fake_upstream import emptied, running
from tests.support.proxy_server import RunningProxy

__all__ = ["fake", "proxy", "responses_server", "socket_fake", "socket_server"]


@pytest.fixture(scope="session")
def responses_server() -> Iterator[FakeResponses]:
    yield from running(FakeResponses)


@pytest.fixture
def fake(responses_server: FakeResponses) -> Iterator[FakeResponses]:
    """The scripted Responses upstream, empty before and after the test."""
    yield from emptied(responses_server)


@pytest.fixture
def proxy(make_proxy: Callable[..., RunningProxy], fake: FakeResponses) -> Any:
    """A proxy with default settings in front of the Responses upstream."""
    return make_proxy(upstream=fake.url)


@pytest.fixture(scope="session")
def socket_server() -> Iterator[FakeResponsesSocket]:
    yield from running(FakeResponsesSocket)


@pytest.fixture
def socket_fake(socket_server: FakeResponsesSocket) -> Iterator[FakeResponsesSocket]:
    """The scripted Responses upstream that takes WebSockets, empty before and after the test."""
    yield from emptied(socket_server)

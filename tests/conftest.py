"""Shared fixtures: one scripted upstream per session (per xdist worker), proxies started per
test as needed, or one per ``shared_proxy`` module."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from hypothesis import settings

from tests.support.fake_upstream import FakeUpstream
from tests.support.proxy_server import RunningProxy, start_proxy
from tests.support.waiting import wait_for

# the fake Messages and Gemini APIs' fixtures
pytest_plugins = ["tests.support.fake_messages", "tests.support.fake_gemini"]

# Property tests are bounded by their examples, not by time: hypothesis's default 200 ms
# deadline per example fails a correct test on a busy machine.
settings.register_profile("loopwarden", deadline=None)
settings.load_profile("loopwarden")


@pytest.fixture(scope="session")
def _upstream_server() -> Iterator[FakeUpstream]:
    server = FakeUpstream().start()
    yield server
    server.stop()


@pytest.fixture
def upstream(_upstream_server: FakeUpstream) -> Iterator[FakeUpstream]:
    """The fake model API, with an empty script and no recorded requests."""
    _upstream_server.reset()
    yield _upstream_server
    _upstream_server.reset()


@pytest.fixture(scope="session")
def _stopping_proxies() -> Iterator[list[RunningProxy]]:
    """Idle proxies told to stop, finishing their shutdown while later tests run; joined at the end."""
    stopping: list[RunningProxy] = []
    yield stopping
    for running in stopping:
        running.thread.join(15)


@pytest.fixture
def make_proxy(upstream: FakeUpstream, _stopping_proxies: list[RunningProxy]) -> Iterator[Callable[..., RunningProxy]]:
    """Start proxies pointing at the fake upstream; each is stopped after the test.

    uvicorn's graceful stop is mostly waiting (its tick, its drain pause, the metrics
    listener's poll), so a proxy stops listening at once and, when idle, finishes its stop
    while the next test runs; one with a request still in flight is waited for, so that
    request cannot reach the shared upstream during a later test.
    """
    started: list[RunningProxy] = []

    def factory(**overrides: Any) -> RunningProxy:
        overrides.setdefault("upstream", upstream.url)
        running = start_proxy(**overrides)
        started.append(running)
        return running

    yield factory
    for running in started:
        running.request_stop()
    _stopping_proxies[:] = [running for running in _stopping_proxies if running.thread.is_alive()]
    for running in started:
        if running.idle:
            _stopping_proxies.append(running)
        else:
            running.thread.join(15)


@pytest.fixture(scope="session")
def _shared_proxies(_upstream_server: FakeUpstream) -> Iterator[dict[str, RunningProxy]]:
    """Default proxies shared by the tests of a ``shared_proxy`` module, one per module."""
    shared: dict[str, RunningProxy] = {}
    yield shared
    for running in shared.values():
        running.stop()


@pytest.fixture
def proxy(
    request: pytest.FixtureRequest,
    make_proxy: Callable[..., RunningProxy],
    upstream: FakeUpstream,
    _shared_proxies: dict[str, RunningProxy],
) -> Iterator[RunningProxy]:
    """A proxy with default settings and no tenants file (the quick-start setup).

    Fresh for each test, unless the module is marked ``shared_proxy``: then its tests share
    one, which is for tests whose requests leave nothing a later test could see (no
    metrics, logs, readiness or session state read; no session id or opening reused
    mid-loop; no upstream failures that spend the process-wide retry budget). A shared
    proxy is waited for until no request is in flight after each test, or replaced.
    """
    if request.node.get_closest_marker("shared_proxy") is None:
        yield make_proxy()
        return
    module = request.node.module.__name__
    running = _shared_proxies.get(module)
    if running is None:
        running = _shared_proxies[module] = start_proxy(upstream=upstream.url)
    yield running
    if not wait_for(lambda: running.idle):
        del _shared_proxies[module]
        running.stop()


SLOW_TIMEOUT_SECS = 300
"""The per-test timeout of a ``slow`` test (the default, 60 s, is pyproject's): starting a
process or an agent CLI, or a whole matrix, takes minutes on a busy machine."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_SECS))


_CONFIGURED_REDIS_CLEANUP = pytest.StashKey[contextlib.ExitStack]()


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under pytest-xdist the workers share a configured Redis database, so the controller,
    not a worker that finishes early, removes what the run wrote there once all are done."""
    from tests.support.redis import CONFIGURED_URL, written_keys_removed

    if CONFIGURED_URL and session.config.pluginmanager.hasplugin("dsession"):
        cleanup = contextlib.ExitStack()
        cleanup.enter_context(written_keys_removed(CONFIGURED_URL))
        session.config.stash[_CONFIGURED_REDIS_CLEANUP] = cleanup


def pytest_sessionfinish(session: pytest.Session) -> None:
    cleanup = session.config.stash.get(_CONFIGURED_REDIS_CLEANUP, None)
    if cleanup is not None:
        cleanup.close()


@pytest.fixture(scope="session")
def _redis_server() -> Iterator[str]:
    from tests.support.redis import redis_for_tests

    with redis_for_tests(remove_written="PYTEST_XDIST_WORKER" not in os.environ) as url:
        yield url


@pytest.fixture
def redis_url(_redis_server: str) -> str:
    """URL of the real Redis the tests run against, never skipped: a private server of the
    test run's own, or ``LOOPWARDEN_TEST_REDIS_URL`` (the keys written there removed at the end)."""
    return _redis_server


@pytest.fixture
def write_tenants(tmp_path, monkeypatch):
    """Write a tenants file, ``write_tenants({name: proxy_key, ...})`` → its path (a string):
    each tenant's upstream key is ``PROVIDER_KEY``, set here to ``provider_key``; ``fields``
    adds a tenant's further fields (see :func:`tests.support.tenants.tenants_yaml`)."""
    from tests.support.tenants import PROVIDER_KEY, tenants_yaml

    def write(
        keys: Mapping[str, str], provider_key: str = PROVIDER_KEY, fields: Mapping[str, str] | None = None
    ) -> str:
        monkeypatch.setenv("PROVIDER_KEY", provider_key)
        path = tmp_path / "tenants.yaml"
        path.write_text(tenants_yaml(keys, fields))
        return str(path)

    return write


@pytest.fixture
def write_policies(tmp_path):
    """Write policy files into a fresh directory: ``write_policies(name=yaml_text, ...)`` → its path."""
    directory = tmp_path / "policies"
    directory.mkdir()

    def write(**files: str):
        for name, text in files.items():
            (directory / f"{name}.yaml").write_text(text)
        return directory

    return write


@pytest.fixture
def private_redis():
    """A redis-server only this test uses (to freeze or restart it)."""
    from tests.support.redis import PrivateRedis

    server = PrivateRedis().start()
    yield server
    server.stop()


class _ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def log_records():
    """Every record the proxy's logger emits during the test, as JSON lines would render them."""
    handler = _ListHandler()
    logger = logging.getLogger("loopwarden")
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler.records
    logger.removeHandler(handler)
    logger.setLevel(previous)


@pytest.fixture
def processes():
    """Processes a test starts (``loopwarden serve`` …); killed after the test."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(10)


@pytest.fixture(scope="session")
def redis_cluster():
    """A local 3-node Redis Cluster, shared by the tests that need one."""
    from tests.support.redis import LocalCluster

    cluster = LocalCluster().start()
    yield cluster
    cluster.stop()


@pytest.fixture
def fault_proxy():
    """Start TCP fault proxies in front of ports, ``fault_proxy(port)``; stopped after the test."""
    from tests.support.faultproxy import FaultProxy

    started: list[FaultProxy] = []

    def start(port: int) -> FaultProxy:
        started.append(FaultProxy(port).start())
        return started[-1]

    yield start
    for proxy in started:
        proxy.stop()


@pytest.fixture
def faulty_redis(private_redis, fault_proxy):
    """A fault proxy in front of the private redis-server (its ``url`` is not Redis's: use its port)."""
    return fault_proxy(private_redis.port)

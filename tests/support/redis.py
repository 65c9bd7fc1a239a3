"""The real Redis server the tests use (never a fake).

By default the test run starts a redis-server of its own on a free port and stops it at
the end, so it neither reads nor leaves anything in a Redis that happens to answer on
6379. ``LOOPWARDEN_TEST_REDIS_URL`` points the tests at a given server and database
instead; they then delete, at the end of the run, every key they wrote there.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import redis

from tests.support.waiting import PATIENCE_SECS

CONFIGURED_URL = os.environ.get("LOOPWARDEN_TEST_REDIS_URL") or None


def _free_port(*, with_bus: bool) -> int:
    """A free loopback port; a Cluster node also needs port + 10000 (its bus) free and valid."""
    for _ in range(200):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if not with_bus:
            return port
        if port + 10000 > 65535:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair for a Redis Cluster node")


@dataclass
class PrivateRedis:
    """A redis-server of the test's own, so it can be frozen or restarted without harming others."""

    port: int = 0
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    extra_args: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> PrivateRedis:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is required for the state-store tests (apt-get install redis-server)")
        chosen = not self.port
        for _ in range(5):
            if chosen:
                self.port = _free_port(with_bus="--cluster-enabled" in self.extra_args)
            if self._spawn(binary):
                return self
            if not chosen:
                break
            # Another process (a parallel test worker) took the free port before the server bound it.
        raise RuntimeError(f"private redis-server on port {self.port} did not start")

    def _spawn(self, binary: str) -> bool:
        """Run the server on ``self.port``; False when it exits (the port was taken) or never answers."""
        self.process = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                *self.extra_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + PATIENCE_SECS
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return True
            except OSError:
                time.sleep(0.05)
        self.process.kill()
        self.process.wait(10)
        return False

    def freeze(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait(10)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()


@dataclass
class LocalCluster:
    """A 3-node Redis Cluster on loopback (no replicas), for the cluster tests."""

    nodes: list[PrivateRedis] = field(default_factory=list)
    workdir: str = ""

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self, size: int = 3) -> LocalCluster:
        import tempfile

        self.workdir = tempfile.mkdtemp(prefix="lw-cluster-")
        for _ in range(size):
            node = PrivateRedis(
                extra_args=[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--dir",
                    tempfile.mkdtemp(dir=self.workdir),
                ]
            )
            self.nodes.append(node.start())
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        subprocess.run(
            ["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=PATIENCE_SECS,
        )
        deadline = time.monotonic() + PATIENCE_SECS
        while time.monotonic() < deadline:
            states = [
                subprocess.run(
                    ["redis-cli", "-p", str(node.port), "cluster", "info"], capture_output=True, text=True
                ).stdout
                for node in self.nodes
            ]
            if all("cluster_state:ok" in state for state in states):
                return self
            time.sleep(0.1)
        raise RuntimeError("the local Redis Cluster did not become ready")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


@contextlib.contextmanager
def written_keys_removed(url: str) -> Iterator[None]:
    """Delete, on exit, the keys of ``url``'s database that were not there on entry."""
    client = redis.Redis.from_url(url)
    try:
        before = set(client.scan_iter(count=1000))
        yield
        written = [key for key in client.scan_iter(count=1000) if key not in before]
        for start in range(0, len(written), 500):
            client.unlink(*written[start : start + 500])
    finally:
        client.close()


@contextlib.contextmanager
def redis_for_tests(configured: str | None = CONFIGURED_URL, *, remove_written: bool = True) -> Iterator[str]:
    """The URL the tests use: ``configured`` (cleaned up after, unless ``remove_written`` is
    False: a parallel worker leaves that to the run's controller), else a private server."""
    if configured is not None:
        if not remove_written:
            yield configured
            return
        with written_keys_removed(configured):
            yield configured
        return
    server = PrivateRedis().start()
    try:
        yield server.url
    finally:
        server.stop()

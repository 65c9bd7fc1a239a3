"""The upstream connections of a process: kept alive per origin, bounded, expired, and each
new one resolved through the egress check and, for https, verified."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from proxy.upstream import pool as pool_module
from proxy.upstream.egress import EgressBlocked
from proxy.upstream.http1 import Http1Connection
from proxy.upstream.pool import ConnectFailed, ConnectionPool, Origin
from tests.support.processes import free_port

_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
_REQUEST = b"GET / HTTP/1.1\r\nhost: upstream\r\n\r\n"


class CountingResolver(AbstractResolver):
    """Every name is 127.0.0.1; counts the lookups."""

    def __init__(self) -> None:
        self.lookups = 0

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.lookups += 1
        return [ResolveResult(hostname=host, host="127.0.0.1", port=port, family=socket.AF_INET, proto=0, flags=0)]

    async def close(self) -> None:
        return None


@contextlib.asynccontextmanager
async def upstream(ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[tuple[int, list[int]]]:
    """A keep-alive server answering 200 ``{}``; yields its port and how many connections it accepted."""
    accepted: list[int] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                writer.write(_OK)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=ssl_context)
    try:
        yield server.sockets[0].getsockname()[1], accepted
    finally:
        server.close()
        await server.wait_closed()


def origin(port: int, scheme: str = "http", host: str = "upstream.test") -> Origin:
    return Origin(scheme, host, port, f"{host}:{port}")


async def call(pool: ConnectionPool, where: Origin) -> bytes:
    connection = await pool.acquire(where, 5.0, 5.0)
    connection.send(_REQUEST, None, head_only=False)
    await connection.head(5.0)
    body = await connection.whole(5.0)
    pool.release(connection, where)
    return body


async def test_sequential_calls_share_one_connection():
    async with upstream() as (port, accepted):
        pool = ConnectionPool(limit=4, keepalive_expiry=30, resolver=CountingResolver())
        for _ in range(3):
            assert await call(pool, origin(port)) == b"{}"
        await pool.close()
    assert len(accepted) == 1


async def test_a_call_past_the_limit_waits_for_a_freed_connection():
    async with upstream() as (port, accepted):
        pool = ConnectionPool(limit=1, keepalive_expiry=30, resolver=CountingResolver())
        held = await pool.acquire(origin(port), 5.0, 5.0)
        waiting = asyncio.ensure_future(call(pool, origin(port)))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        held.send(_REQUEST, None, head_only=False)
        await held.head(5.0)
        await held.whole(5.0)
        pool.release(held, origin(port))
        assert await waiting == b"{}"
        await pool.close()
    assert len(accepted) == 1


async def test_a_call_past_the_limit_gives_up_at_the_pool_timeout():
    async with upstream() as (port, _):
        pool = ConnectionPool(limit=1, keepalive_expiry=30, resolver=CountingResolver())
        await pool.acquire(origin(port), 5.0, 5.0)
        with pytest.raises(httpx.PoolTimeout):
            await pool.acquire(origin(port), 5.0, 0.05)
        await pool.close()


async def test_a_connection_idle_past_the_expiry_is_closed_not_reused():
    async with upstream() as (port, accepted):
        pool = ConnectionPool(limit=4, keepalive_expiry=0.05, resolver=CountingResolver())
        assert await call(pool, origin(port)) == b"{}"
        first = pool._idle[origin(port)][0]
        await asyncio.sleep(0.1)
        second = await pool.acquire(origin(port), 5.0, 5.0)
        assert (second is first, first.closed) == (False, True)
        await pool.close()
    assert len(accepted) == 2


async def test_a_connection_the_upstream_closed_while_idle_is_not_reused():
    async with upstream() as (port, accepted):
        pool = ConnectionPool(limit=4, keepalive_expiry=30, resolver=CountingResolver())
        assert await call(pool, origin(port)) == b"{}"
        idle = pool._idle[origin(port)][0]
        assert idle.transport is not None
        idle.transport.close()  # as an upstream's own idle timeout would
        await asyncio.sleep(0.05)
        assert await call(pool, origin(port)) == b"{}"
        await pool.close()
    assert len(accepted) == 2


async def test_a_refused_connection_is_a_connect_error_that_says_so():
    port = free_port()  # nothing listens there, and no other process is handed it
    pool = ConnectionPool(limit=4, keepalive_expiry=30, resolver=CountingResolver())
    with pytest.raises(httpx.ConnectError) as raised:
        await pool.acquire(origin(port), 5.0, 5.0)
    assert isinstance(raised.value.__cause__, ConnectFailed)
    assert isinstance(raised.value.__cause__.os_error, ConnectionRefusedError)
    await pool.close()


async def test_a_name_resolving_only_to_a_blocked_address_is_never_connected_to():
    class Metadata(CountingResolver):
        async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET):  # type: ignore[override]
            return [ResolveResult(hostname=host, host="169.254.169.254", port=port, family=2, proto=0, flags=0)]

    pool = ConnectionPool(limit=4, keepalive_expiry=30, resolver=Metadata())
    with pytest.raises(httpx.ConnectError) as raised:
        await pool.acquire(origin(80), 5.0, 5.0)
    assert isinstance(raised.value.__cause__.os_error, EgressBlocked)  # type: ignore[union-attr]
    await pool.close()


async def test_a_name_is_looked_up_again_once_its_answer_is_older_than_the_ttl(monkeypatch):
    resolver = CountingResolver()
    async with upstream() as (port, _):
        pool = ConnectionPool(limit=4, keepalive_expiry=0, resolver=resolver)  # every call connects anew
        await call(pool, origin(port))
        await call(pool, origin(port))
        assert resolver.lookups == 1
        monkeypatch.setattr(pool_module, "DNS_TTL", 0.0)
        pool._addresses.clear()
        await call(pool, origin(port))
        await call(pool, origin(port))
        await pool.close()
    assert resolver.lookups == 3


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and upstream.test, and its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "upstream.test")])
    now = datetime.datetime.now(datetime.UTC)
    names = [x509.DNSName("upstream.test"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return folder / "cert.pem", folder / "key.pem"


def _server_tls(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    return context


async def test_an_https_upstream_is_called_over_verified_tls(certificate):
    trusting = ssl.create_default_context(cafile=str(certificate[0]))
    async with upstream(_server_tls(certificate)) as (port, _):
        pool = ConnectionPool(limit=4, keepalive_expiry=30, resolver=CountingResolver(), ssl_context=trusting)
        assert await call(pool, origin(port, "https")) == b"{}"
        await pool.close()


async def test_an_https_upstream_whose_certificate_is_not_trusted_is_not_called(certificate):
    async with upstream(_server_tls(certificate)) as (port, _):
        pool = ConnectionPool(limit=4, keepalive_expiry=30, resolver=CountingResolver())
        with pytest.raises(httpx.ConnectError) as raised:
            await pool.acquire(origin(port, "https"), 5.0, 5.0)
        assert isinstance(raised.value.__cause__.os_error, ssl.SSLCertVerificationError)  # type: ignore[union-attr]
        await pool.close()


async def test_closing_the_pool_closes_its_connections():
    async with upstream() as (port, _):
        pool = ConnectionPool(limit=4, keepalive_expiry=30, resolver=CountingResolver())
        busy = await pool.acquire(origin(port), 5.0, 5.0)
        await call(pool, origin(port))
        idle = list(pool._idle[origin(port)])
        await pool.close()
        assert (busy.closed, len(idle), idle[0].closed) == (True, 1, True)


async def test_a_wait_for_a_connection_ends_at_the_deadline_before_the_pool_timeout():
    async with upstream() as (port, _):
        pool = ConnectionPool(limit=1, keepalive_expiry=30, resolver=CountingResolver())
        await pool.acquire(origin(port), 5.0, 5.0)
        with pytest.raises(TimeoutError):
            await pool.acquire(origin(port), 5.0, 5.0, asyncio.get_running_loop().time() + 0.05)
        await pool.close()


def closed_dedicated(pool: ConnectionPool, connection: Http1Connection) -> None:
    """What the protocol a dedicated connection was handed to does when it closes."""
    connection.abort()
    pool.free_dedicated()


async def test_dedicated_connections_are_new_and_counted_apart_from_pooled_ones():
    async with upstream() as (port, accepted):
        pool = ConnectionPool(limit=1, keepalive_expiry=30, resolver=CountingResolver())
        assert await call(pool, origin(port)) == b"{}"  # one pooled connection, idle now
        dedicated = await pool.dedicated(origin(port), 5.0, 5.0)  # not the idle one, and not held to its place

        assert await call(pool, origin(port)) == b"{}"
        assert len(accepted) == 2
        closed_dedicated(pool, dedicated)
        await pool.close()


async def test_a_dedicated_connection_past_the_limit_waits_for_a_freed_place():
    async with upstream() as (port, _):
        pool = ConnectionPool(limit=1, keepalive_expiry=30, resolver=CountingResolver())
        first = await pool.dedicated(origin(port), 5.0, 5.0)
        waiting = asyncio.ensure_future(pool.dedicated(origin(port), 5.0, 5.0))
        await asyncio.sleep(0.05)
        assert not waiting.done()

        closed_dedicated(pool, first)

        closed_dedicated(pool, await waiting)
        await pool.close()


async def test_a_dedicated_connection_past_the_limit_gives_up_at_the_pool_timeout():
    async with upstream() as (port, _):
        pool = ConnectionPool(limit=1, keepalive_expiry=30, resolver=CountingResolver())
        first = await pool.dedicated(origin(port), 5.0, 5.0)
        with pytest.raises(httpx.PoolTimeout):
            await pool.dedicated(origin(port), 5.0, 0.05)
        closed_dedicated(pool, first)
        await pool.close()


async def test_a_dedicated_connection_that_fails_to_open_frees_its_place():
    pool = ConnectionPool(limit=1, keepalive_expiry=30, resolver=CountingResolver())
    port = free_port()  # nothing listens there
    with pytest.raises(httpx.ConnectError):
        await pool.dedicated(origin(port), 5.0, 0.05)

    with pytest.raises(httpx.ConnectError):  # not a PoolTimeout: the failed one holds no place
        await pool.dedicated(origin(port), 5.0, 0.05)
    await pool.close()

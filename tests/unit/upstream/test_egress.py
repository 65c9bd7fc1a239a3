"""The egress check at connect time: a host name that resolves to a metadata, link-local,
multicast or unspecified address is never connected to; loopback and private addresses are,
as the load-time check allows them. DNS answers come from an injected resolver, never real DNS."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import httpx
import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from proxy.errors import UpstreamUnreachable
from proxy.settings import Settings
from proxy.upstream.client import UpstreamClient
from proxy.upstream.egress import EgressBlocked, EgressResolver
from proxy.upstream.transport import UpstreamTransport


class ScriptedResolver(AbstractResolver):
    """DNS answers from a table; each lookup takes the next answer of its name (rebinding)."""

    def __init__(self, answers: dict[str, list[list[str]]]) -> None:
        self.answers = answers
        self.lookups: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.lookups.append(host)
        addresses = self.answers[host].pop(0) if len(self.answers[host]) > 1 else self.answers[host][0]
        return [
            ResolveResult(hostname=host, host=address, port=port, family=family, proto=0, flags=0)
            for address in addresses
        ]

    async def close(self) -> None:
        return None


@pytest.fixture
async def local_server() -> AsyncIterator[int]:
    """A loopback HTTP server answering every request with 200 ``{}``."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


@pytest.mark.parametrize(
    ("addresses", "kept"),
    [
        (["169.254.169.254"], None),
        (["169.254.170.2"], None),
        (["100.100.100.200"], None),
        (["fd00:ec2::254"], None),
        (["::ffff:169.254.169.254"], None),
        (["fe80::1"], None),
        (["0.0.0.0"], None),
        (["224.0.0.1"], None),
        (["127.0.0.1"], ["127.0.0.1"]),
        (["10.1.2.3"], ["10.1.2.3"]),
        (["::1"], ["::1"]),
        (["93.184.215.14"], ["93.184.215.14"]),
        (["169.254.169.254", "127.0.0.1"], ["127.0.0.1"]),
    ],
)
async def test_a_name_keeps_only_the_addresses_the_proxy_may_call(addresses, kept):
    resolver = EgressResolver(ScriptedResolver({"api.example.test": [addresses]}))
    if kept is None:
        with pytest.raises(EgressBlocked):
            await resolver.resolve("api.example.test", 443)
    else:
        assert [answer["host"] for answer in await resolver.resolve("api.example.test", 443)] == kept


async def test_a_metadata_host_name_is_refused_before_any_lookup():
    scripted = ScriptedResolver({})
    with pytest.raises(EgressBlocked):
        await EgressResolver(scripted).resolve("metadata.google.internal", 80)
    assert scripted.lookups == []


async def test_a_name_resolving_to_the_metadata_address_is_never_connected_to():
    resolver = ScriptedResolver({"169.254.169.254.nip.io": [["169.254.169.254"]]})
    async with httpx.AsyncClient(transport=UpstreamTransport(resolver=resolver)) as client:
        with pytest.raises(httpx.ConnectError) as raised:
            await client.get("http://169.254.169.254.nip.io/latest/meta-data/")
    assert isinstance(raised.value.__cause__.os_error, EgressBlocked)  # type: ignore[union-attr]


async def test_a_name_resolving_to_loopback_is_connected_to(local_server):
    resolver = ScriptedResolver({"upstream.test": [["127.0.0.1"]]})
    async with httpx.AsyncClient(transport=UpstreamTransport(resolver=resolver)) as client:
        reply = await client.get(f"http://upstream.test:{local_server}/v1/models")
    assert reply.status_code == 200


async def test_every_lookup_is_checked_so_a_rebound_name_is_refused():
    scripted = ScriptedResolver({"rebind.test": [["127.0.0.1"], ["169.254.169.254"]]})
    resolver = EgressResolver(scripted)
    assert [answer["host"] for answer in await resolver.resolve("rebind.test", 80)] == ["127.0.0.1"]
    with pytest.raises(EgressBlocked):
        await resolver.resolve("rebind.test", 80)


async def test_the_client_hears_the_upstream_is_unreachable_and_why():
    resolver = ScriptedResolver({"169.254.169.254.nip.io": [["169.254.169.254"]]})
    client = UpstreamClient(
        Settings(upstream="http://169.254.169.254.nip.io/v1", retry_attempts=1), UpstreamTransport(resolver=resolver)
    )
    try:
        with pytest.raises(UpstreamUnreachable) as raised:
            await client.send("POST", "http://169.254.169.254.nip.io/v1/chat/completions", [], b"{}")
    finally:
        await client.aclose()
    assert raised.value.status == 502
    assert "must not call" in raised.value.message

"""The lean pipelined connection the Redis store runs its scripts on, against a real redis-server:
deadlines, replies kept in step, reconnection, database and password, scripts flushed."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as redis
from redis.exceptions import ConnectionError as RedisConnectionError

from proxy.session.resp import LeanConnection, LeanScript, RedisAddress, _bulks, _command, lean_url, redis_target


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("redis://127.0.0.1:6390/0", RedisAddress("127.0.0.1", 6390, 0, None, None)),
        ("redis://cache/3", RedisAddress("cache", 6379, 3, None, None)),
        ("redis://:s%40cret@cache:7000", RedisAddress("cache", 7000, 0, None, "s@cret")),
        ("redis://bob:pw@cache:7000/1", RedisAddress("cache", 7000, 1, "bob", "pw")),
        ("rediss://cache:6380/0", None),  # TLS: redis-py's
        ("unix:///run/redis.sock", None),
        ("redis://cache:6379/0?socket_keepalive=true", None),
        ("redis://cache:6379/zero", None),
    ],
)
def test_which_urls_the_lean_connection_serves(url, address):
    assert lean_url(url) == address


def _lean(url: str, timeout: float = 5.0) -> LeanConnection:
    address = lean_url(url)
    assert address is not None
    return LeanConnection(address, timeout)


async def test_commands_in_flight_past_their_deadline_all_time_out(private_redis):
    connection = _lean(private_redis.url, timeout=0.3)
    await connection.execute("PING")
    private_redis.freeze()
    try:
        results = await asyncio.gather(
            connection.execute("ECHO", "a"), connection.execute("ECHO", "b"), return_exceptions=True
        )
    finally:
        private_redis.thaw()

    assert [type(result) for result in results] == [TimeoutError, TimeoutError]
    assert await connection.execute("ECHO", "after") == "after"  # a new connection, in step
    await connection.aclose()


async def test_a_command_sent_after_others_were_answered_still_times_out_on_its_own_deadline(private_redis):
    connection = _lean(private_redis.url, timeout=0.4)
    await connection.execute("PING")  # the watchdog is armed on this one's deadline
    await asyncio.sleep(0.2)
    private_redis.freeze()
    try:
        late = await asyncio.wait_for(asyncio.gather(connection.execute("ECHO", "late"), return_exceptions=True), 30)
    finally:
        private_redis.thaw()

    assert [type(result) for result in late] == [TimeoutError]
    await connection.aclose()


async def test_pipelined_commands_share_one_watchdog_timer(private_redis, monkeypatch):
    connection = _lean(private_redis.url)
    await connection.execute("PING")
    loop = asyncio.get_running_loop()
    armed: list[float] = []
    call_at, call_later = loop.call_at, loop.call_later
    monkeypatch.setattr(loop, "call_at", lambda when, *args: armed.append(when) or call_at(when, *args))
    monkeypatch.setattr(loop, "call_later", lambda delay, *args: armed.append(delay) or call_later(delay, *args))

    replies = await asyncio.gather(*(connection.execute("ECHO", str(n)) for n in range(100)))

    assert replies == [str(n) for n in range(100)]
    assert len(armed) <= 1
    await connection.aclose()


async def test_a_cancelled_commands_late_reply_reaches_no_other_caller(private_redis):
    connection = _lean(private_redis.url)
    await connection.execute("PING")
    private_redis.freeze()
    first = asyncio.create_task(connection.execute("ECHO", "first"))
    await asyncio.sleep(0.1)
    first.cancel()
    private_redis.thaw()

    second = await connection.execute("ECHO", "second")

    assert first.cancelled()
    assert second == "second"
    await connection.aclose()


async def test_a_restarted_server_fails_what_was_in_flight_then_is_reconnected(private_redis):
    connection = _lean(private_redis.url)
    await connection.execute("SET", "k", "v")
    private_redis.restart()

    with pytest.raises(RedisConnectionError):
        await connection.execute("GET", "k")
    assert await connection.execute("GET", "k") is None  # restarted empty, on a new connection
    await connection.aclose()


async def test_the_database_and_password_of_the_url_are_used(private_redis):
    admin = redis.Redis.from_url(private_redis.url, decode_responses=True)
    await admin.config_set("requirepass", "s@cret")
    base = f"redis://:s%40cret@127.0.0.1:{private_redis.port}"
    connection = _lean(f"{base}/3")

    await connection.execute("SET", "k", "in three")

    third = redis.Redis.from_url(f"{base}/3", decode_responses=True)
    assert await third.get("k") == "in three"
    await third.aclose()
    await admin.aclose()
    await connection.aclose()


async def test_a_script_flushed_from_the_server_is_loaded_again(private_redis):
    connection = _lean(private_redis.url)
    script = LeanScript(connection, "return ARGV[1] .. KEYS[1]")
    admin = redis.Redis.from_url(private_redis.url)

    before = await script(["k"], ["v-"])
    await admin.script_flush()
    after = await script(["k"], ["w-"])

    assert (before, after) == ("v-k", "w-k")
    await admin.aclose()
    await connection.aclose()


@pytest.mark.parametrize(
    ("url", "cluster", "target"),
    [
        ("redis://127.0.0.1:6390/0", False, "Redis at 127.0.0.1:6390/0"),
        ("redis://:s3cret@cache/3", False, "Redis at cache:6379/3"),
        ("redis://user:s3cret@cache:7000", False, "Redis at cache:7000"),
        ("rediss://user:s3cret@cache:6380/1", False, "Redis at cache:6380/1 over TLS"),
        ("redis://[::1]:6379", False, "Redis at [::1]:6379"),
        ("unix:///run/redis.sock?db=2", False, "Redis at unix:/run/redis.sock"),
        ("redis://:s3cret@node-1:7000/0", True, "Redis Cluster at node-1:7000"),
        ("redis://cache:sixty/0", False, "Redis at cache (the URL's port is not a number)"),
    ],
    ids=["plain", "password", "user", "tls", "ipv6", "unix", "cluster", "bad-port"],
)
def test_a_redis_target_names_where_the_url_points_and_never_its_credentials(url, cluster, target):
    assert redis_target(url, cluster=cluster) == target


class _Writes:
    """A transport that records each write (one system call each) and passes it on."""

    def __init__(self, transport) -> None:
        self._transport = transport
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        self._transport.write(data)

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


async def test_commands_sent_while_others_are_in_flight_go_out_in_one_write(private_redis):
    connection = _lean(private_redis.url)
    await connection.execute("PING")
    protocol = connection._protocol
    recorded = protocol.transport = _Writes(protocol.transport)

    replies = await asyncio.gather(*(connection.execute("ECHO", str(n)) for n in range(50)))

    assert replies == [str(n) for n in range(50)]  # in order: written in the order they were sent
    assert len(recorded.writes) == 2  # the first at once (nothing in flight), the other 49 at the turn's end
    await connection.aclose()


async def test_a_command_alone_or_sent_at_once_is_written_before_send_returns(private_redis):
    connection = _lean(private_redis.url)
    await connection.execute("PING")
    protocol = connection._protocol
    recorded = protocol.transport = _Writes(protocol.transport)

    alone = connection.send_encoded(b"*2\r\n$4\r\nECHO\r\n$5\r\nalone\r\n", at_once=False)
    assert len(recorded.writes) == 1  # nothing in flight: no wait for the turn's end
    held = connection.send_encoded(b"*2\r\n$4\r\nECHO\r\n$4\r\nheld\r\n", at_once=False)
    assert len(recorded.writes) == 1  # another in flight: held for the turn's end...
    now = connection.send_now("ECHO", "now")  # ...or the next one sent at once, in one write with it
    assert recorded.writes[1:] == [b"*2\r\n$4\r\nECHO\r\n$4\r\nheld\r\n*2\r\n$4\r\nECHO\r\n$3\r\nnow\r\n"]

    assert [await alone, await held, await now] == ["alone", "held", "now"]
    await asyncio.sleep(0)  # the turn's end writes nothing more
    assert len(recorded.writes) == 2
    await connection.aclose()


@pytest.mark.parametrize(
    "args",
    [
        ("EVALSHA", "df399efb", 2, "lw:{t:s}", b"lw:{t:s}:op", "field", -3, 1.5, 0.1, 1e20, -0.0, 10**30, "é", ""),
        ("PING",),
        ("SET", "k", True),  # not a type the store sends: hiredis refuses it, the fallback writes it as before
    ],
)
def test_a_command_is_packed_as_its_bulk_strings(args):
    assert _command(*args) == b"*%d\r\n%s" % (len(args), _bulks(args))


def test_a_text_that_cannot_be_encoded_fails_as_before():
    with pytest.raises(UnicodeEncodeError):
        _command("SET", "k", "\ud800")

"""The tests' own Redis: private by default, and a configured one is left as it was found."""

from __future__ import annotations

import pytest
import redis as redis_client

from tests.support.redis import redis_for_tests


def test_without_a_configured_url_the_tests_get_a_private_server_stopped_at_the_end():
    with redis_for_tests(None) as url:
        client = redis_client.Redis.from_url(url)
        assert client.ping()
        assert not url.startswith("redis://127.0.0.1:6379/")
        client.close()

    with pytest.raises(redis_client.ConnectionError):
        redis_client.Redis.from_url(url, socket_connect_timeout=1).ping()


def test_a_configured_server_keeps_what_it_had_and_loses_what_the_tests_wrote(private_redis):
    client = redis_client.Redis.from_url(private_redis.url)
    client.set("theirs", "1")

    with redis_for_tests(private_redis.url) as url:
        assert url == private_redis.url
        client.set("ours", "1")
        client.hset("lw:{t:s}", "steps", 1)

    assert sorted(client.keys()) == [b"theirs"]
    client.close()


def test_a_parallel_worker_leaves_the_configured_servers_cleanup_to_the_controller(private_redis):
    client = redis_client.Redis.from_url(private_redis.url)

    with redis_for_tests(private_redis.url, remove_written=False) as url:
        assert url == private_redis.url
        client.set("ours", "1")

    assert client.keys() == [b"ours"]
    client.close()


def test_a_private_server_whose_free_port_was_taken_meanwhile_starts_on_another(monkeypatch):
    import socket

    from tests.support import redis as test_redis

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    ports = iter([taken.getsockname()[1]])
    pick = test_redis._free_port
    monkeypatch.setattr(test_redis, "_free_port", lambda *, with_bus: next(ports, None) or pick(with_bus=with_bus))

    server = test_redis.PrivateRedis().start()
    try:
        assert server.port != taken.getsockname()[1]
        assert redis_client.Redis.from_url(server.url).ping()
    finally:
        server.stop()
        taken.close()

"""Redis session store: one hash per session, one round trip to load, one script to commit.

Keys look like ``lw:{tenant:session}``; the braces are a Redis Cluster hash tag, so every
key a session may grow (it is one hash today) lands on one slot and the commit script stays
atomic on a cluster. The commit applies increments with HINCRBY inside a Lua script, so
there is no read-modify-write in Python and concurrent requests lose no update; every
commit refreshes the TTL, so no key lives forever. ``redis-py``'s ``Script`` re-loads the
script after a ``SCRIPT FLUSH`` or a restart (NOSCRIPT), invisibly.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from proxy.session.base import SessionDelta, SessionState, StoreUnavailable

__all__ = ["RedisStore"]

# KEYS[1] = session hash. ARGV = ttl_ms, n_defaults, n_assignments, n_increments, replace, n_appends,
# then the pairs of each group, then for each append: field, keep, items (comma-joined).
_COMMIT = """
local key = KEYS[1]
if ARGV[5] == '1' then redis.call('DEL', key) end
local i = 7
for _ = 1, tonumber(ARGV[2]) do
  redis.call('HSETNX', key, ARGV[i], ARGV[i + 1]); i = i + 2
end
for _ = 1, tonumber(ARGV[3]) do
  redis.call('HSET', key, ARGV[i], ARGV[i + 1]); i = i + 2
end
for _ = 1, tonumber(ARGV[4]) do
  redis.call('HINCRBY', key, ARGV[i], ARGV[i + 1]); i = i + 2
end
for _ = 1, tonumber(ARGV[6]) do
  local field, keep, added = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]; i = i + 3
  local old = redis.call('HGET', key, field)
  local list = (old and old ~= '') and (old .. ',' .. added) or added
  local _, commas = string.gsub(list, ',', '')
  while commas >= keep do
    list = string.sub(list, string.find(list, ',', 1, true) + 1); commas = commas - 1
  end
  redis.call('HSET', key, field, list)
end
redis.call('PEXPIRE', key, ARGV[1])
return redis.call('HGETALL', key)
"""


async def _once_more(command: Callable[[], Awaitable[Any]]) -> Any:
    """Run a command; on a dead connection (a restarted server) run it once more, at once.

    A pooled connection to a server that restarted fails on first use; the second try gets a
    fresh connection. Timeouts are not retried: a frozen server costs one timeout, not several.
    If a connection broke after a commit ran but before its reply arrived, the retry applies
    it twice: counters then over-count one step, the safe direction for budgets.
    """
    try:
        return await command()
    except RedisConnectionError:
        return await command()


class RedisStore:
    """Sessions in Redis (standalone or Cluster), shared by every replica."""

    def __init__(self, client: redis.Redis | Any) -> None:
        self._client = client
        self._commit = client.register_script(_COMMIT)

    @classmethod
    def from_url(cls, url: str, *, timeout: float = 1.0, max_connections: int = 128) -> RedisStore:
        """A store with socket timeouts and a pool that waits for a free connection at its cap."""
        pool = redis.BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=timeout,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            health_check_interval=30,
            decode_responses=True,
            # redis-py retries timeouts 3 times by default: a frozen server would cost four
            # timeouts per command. Retries here are explicit instead (see _once_more).
            retry=Retry(NoBackoff(), 0),
        )
        return cls(redis.Redis(connection_pool=pool))

    async def load(self, key: str) -> SessionState:
        try:
            values: dict[str, str] = await _once_more(lambda: self._client.hgetall(key))
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"load failed: {type(exc).__name__}") from exc
        return SessionState(values)

    async def commit(self, key: str, delta: SessionDelta, ttl_seconds: int) -> SessionState:
        args: list[str | int] = [
            ttl_seconds * 1000,
            len(delta.defaults),
            len(delta.assignments),
            len(delta.increments),
            1 if delta.replace else 0,
            len(delta.appends),
        ]
        for mapping in (delta.defaults, delta.assignments, delta.increments):
            for name, value in mapping.items():
                args.extend((name, value))
        for name, (items, keep) in delta.appends.items():
            args.extend((name, keep, ",".join(items)))
        try:
            flat = await _once_more(lambda: self._commit(keys=[key], args=args))
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"commit failed: {type(exc).__name__}") from exc
        return SessionState(dict(zip(flat[::2], flat[1::2], strict=True)))

    async def reset(self, key: str) -> bool:
        try:
            return bool(await self._client.delete(key))
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"reset failed: {type(exc).__name__}") from exc

    async def ping(self) -> None:
        try:
            await self._client.ping()
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"ping failed: {type(exc).__name__}") from exc

    async def aclose(self) -> None:
        await self._client.aclose()

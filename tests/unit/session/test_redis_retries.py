"""When the Redis store runs a command again, and when it does not (a table of cases)."""

from __future__ import annotations

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

from proxy.session.redis import _once_more


def scripted(*outcomes: Exception | str):
    """A command that raises or returns each outcome in turn; counts its calls."""
    calls = []

    async def command():
        outcome = outcomes[len(calls)]
        calls.append(outcome)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return command, calls


@pytest.mark.parametrize(
    ("outcomes", "result", "calls"),
    [
        (["ok"], "ok", 1),
        ([RedisConnectionError(), "ok"], "ok", 2),  # a pooled connection to a restarted server
        ([NoScriptError(), "ok"], "ok", 2),  # SCRIPT FLUSH between Script's own reload and its call
        ([NoScriptError(), NoScriptError(), NoScriptError(), "ok"], "ok", 4),
        ([RedisConnectionError(), NoScriptError(), "ok"], "ok", 3),  # restarted: reconnect, then reload
    ],
    ids=["first-try", "reconnect", "flushed-once", "flushed-thrice", "restarted"],
)
async def test_commands_run_again_after_a_reconnect_or_a_flush(outcomes, result, calls):
    command, made = scripted(*outcomes)

    assert await _once_more(command) == result
    assert len(made) == calls


@pytest.mark.parametrize(
    ("outcomes", "error", "calls"),
    [
        ([RedisTimeoutError()], RedisTimeoutError, 1),  # a frozen server costs one timeout, not several
        ([RedisConnectionError(), RedisConnectionError()], RedisConnectionError, 2),
        ([NoScriptError()] * 4, NoScriptError, 4),
    ],
    ids=["timeout", "still-down", "flushed-forever"],
)
async def test_commands_give_up_on_timeouts_and_lasting_faults(outcomes, error, calls):
    command, made = scripted(*outcomes)

    with pytest.raises(error):
        await _once_more(command)
    assert len(made) == calls

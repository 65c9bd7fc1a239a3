"""The tests' own timing: bounds stretch with the machine's slowdown, never shrink; waits end
when their condition holds and report whether it did; a process that never gets healthy
fails with its log."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest

from tests.support.processes import free_port, wait_healthy
from tests.support.timed import Stopwatch
from tests.support.waiting import async_wait_for, wait_for


def test_a_bound_is_never_tighter_than_written():
    with Stopwatch() as watch:
        pass

    assert watch.slowdown >= 1.0
    assert watch.scaled(0.5) >= 0.5


def test_the_stopwatch_times_its_block():
    with Stopwatch() as watch:
        time.sleep(0.05)

    assert watch.elapsed >= 0.05


def test_a_wait_ends_as_soon_as_its_condition_holds():
    seen: list[int] = []

    held = wait_for(lambda: seen.append(1) or len(seen) >= 3, interval=0)

    assert (held, len(seen)) == (True, 3)


def test_a_wait_that_runs_out_says_its_condition_did_not_hold():
    assert wait_for(lambda: False, within=0.05) is False


async def test_a_wait_inside_the_event_loop_lets_the_awaited_task_run():
    done = asyncio.Event()
    asyncio.get_running_loop().call_soon(done.set)

    assert await async_wait_for(done.is_set) is True


def test_a_process_that_exits_before_it_is_healthy_fails_with_its_log():
    process = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stderr.write('bad setting: port'); sys.exit(2)"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    with pytest.raises(RuntimeError, match=r"exited early with 2; its log:\nbad setting: port"):
        wait_healthy(f"http://127.0.0.1:{free_port()}", process)


STILL_STARTING = "import sys, time; sys.stderr.write('still starting'); sys.stderr.flush(); time.sleep(60)"


def test_a_process_that_never_gets_healthy_is_stopped_and_fails_with_its_log():
    process = subprocess.Popen(
        [sys.executable, "-c", STILL_STARTING],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    with pytest.raises(RuntimeError, match=r"was not healthy in 0.3 s; its log:\nstill starting"):
        wait_healthy(f"http://127.0.0.1:{free_port()}", process, within=0.3)

    assert process.poll() is not None

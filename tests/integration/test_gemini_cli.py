"""Gemini CLI itself (``gemini -p``, non-interactive) behind the proxy, offline against the fake
Gemini API: ``GOOGLE_GEMINI_BASE_URL`` at the proxy, ``GEMINI_API_KEY`` its key, telemetry,
usage statistics and update checks off in the settings of a home of its own.

The ``gemini`` binary comes from the npm package ``@google/gemini-cli`` (see
:mod:`tests.support.agent_clis`).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.agent_clis import agent_cli
from tests.support.assertions import summary_of
from tests.support.turns import Turn, calling

GEMINI = agent_cli("gemini", "LOOPWARDEN_GEMINI")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(GEMINI is None, reason="Gemini CLI not installed: npm ci --prefix tests/agents"),
]
TASK = "How many people live in Lyon?"
ANSWER = "Lyon has 522,250 inhabitants."
SUMMARY = "Found: the directory listing. Missing: the population. Next: ask INSEE."
SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
}


def gemini(proxy, tmp_path: Path, prompt: str = TASK) -> subprocess.CompletedProcess[str]:
    """``gemini -p`` pointed at the proxy (no network but that), in a workspace of its own."""
    assert GEMINI is not None
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    work.mkdir(exist_ok=True)
    (work / "notes.txt").write_text("Lyon, France.\n")
    (home / ".gemini" / "settings.json").write_text(json.dumps(SETTINGS))
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "GEMINI_API_KEY": "gk-test",
        "GOOGLE_GEMINI_BASE_URL": proxy.url,
        "GEMINI_CLI_NO_RELAUNCH": "true",
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "NO_COLOR": "1",
    }
    return subprocess.run(
        [GEMINI, "-p", prompt, "-m", "gemini-2.5-flash"],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def proxy(make_proxy, gemini_upstream):
    return make_proxy(upstream=gemini_upstream.url)


def listing(call_id: str) -> Turn:
    return calling("list_directory", {"dir_path": "."}, call_id)


def test_a_well_behaved_run_passes_untouched(proxy, gemini_upstream, tmp_path):
    gemini_upstream.script(listing("c1"), Turn(ANSWER))

    done = gemini(proxy, tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ANSWER
    assert len(gemini_upstream.requests) == 2
    sent = gemini_upstream.requests[1]
    assert sent.path == "/v1/models/gemini-2.5-flash:streamGenerateContent"
    assert sent.header("x-goog-api-key") == "gk-test"
    assert b"[LoopWarden]" not in sent.body
    assert b"notes.txt" in sent.body  # the listing came back as the function's response
    assert gemini_upstream.rejected == []  # the call went back with its thought signature


def test_an_empty_reply_is_nudged_once_and_the_cli_sees_only_the_good_one(proxy, gemini_upstream, tmp_path):
    gemini_upstream.script(Turn(), Turn(ANSWER))

    done = gemini(proxy, tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ANSWER
    assert len(gemini_upstream.requests) == 2
    assert b"empty" in gemini_upstream.requests[1].body


def test_the_same_call_with_the_same_result_forever_ends_the_run_with_a_summary(proxy, gemini_upstream, tmp_path):
    gemini_upstream.script(*[listing(f"c{n}") for n in range(8)])
    gemini_upstream.summary = Turn(SUMMARY)

    done = gemini(proxy, tmp_path)

    assert done.returncode == 0, done.stderr
    assert summary_of(done.stdout.strip()) == SUMMARY
    assert "LoopWarden stopped this run (no_progress)" in done.stdout  # identical listings: no progress
    assert len(gemini_upstream.requests) <= 7
    assert gemini_upstream.rejected == []


def test_reasoning_only_forever_ends_the_run_after_three_strikes(proxy, gemini_upstream, tmp_path):
    gemini_upstream.script(*[Turn(reasoning=f"Thinking, round {n}.") for n in range(3)])
    gemini_upstream.summary = Turn(SUMMARY)

    done = gemini(proxy, tmp_path)

    assert done.returncode == 0, done.stderr
    assert summary_of(done.stdout.strip()) == SUMMARY
    assert "LoopWarden stopped this run (reasoning_only)" in done.stdout

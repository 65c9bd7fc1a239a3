"""Policies change without a restart: on file change and on SIGHUP; bad versions are refused."""

from __future__ import annotations

import signal
import subprocess
import sys

import httpx
import pytest

from tests.support.fake_upstream import Json, chat_completion
from tests.support.processes import free_port, spawn, wait_healthy
from tests.support.waiting import PATIENCE_SECS, wait_for

MESSAGES = [{"role": "user", "content": "hi"}]


def policy_of(proxy_url: str, session: str) -> httpx.Response:
    return httpx.post(
        f"{proxy_url}/v1/chat/completions",
        json={"model": "m", "messages": MESSAGES},
        headers={"Authorization": "Bearer sk-p", "X-Session-Id": session},
    )


def test_changed_policy_file_is_picked_up(make_proxy, upstream, write_policies):
    directory = write_policies(default="max_steps: 50\n")
    proxy = make_proxy(policies_dir=str(directory), policy_reload_interval=0.1)
    policy_of(proxy.url, "a")

    (directory / "default.yaml").write_text("max_steps: 1\n")
    upstream.script(*[Json(chat_completion("The summary.")) for _ in range(20)])

    assert wait_for(lambda: "x-loopwarden-terminated" in policy_of(proxy.url, "a").headers)


def test_invalid_new_version_is_refused_and_the_old_one_stays(make_proxy, upstream, write_policies, log_records):
    directory = write_policies(default="max_steps: 3\n")
    proxy = make_proxy(policies_dir=str(directory), policy_reload_interval=0.1)

    (directory / "default.yaml").write_text("max_steps: lots\n")
    assert wait_for(lambda: any(r.getMessage() == "policy_reload_rejected" for r in log_records))
    responses = [policy_of(proxy.url, "b") for _ in range(3)]

    assert [r.headers.get("x-loopwarden-terminated") for r in responses] == [None, None, "budget_steps"]


@pytest.mark.slow
def test_sighup_reloads_policies(upstream, write_policies, processes):
    directory = write_policies(default="max_steps: 50\n")
    port = free_port()
    proc = spawn(
        [
            "serve",
            "--upstream",
            upstream.url,
            "--port",
            str(port),
            "--policies-dir",
            str(directory),
            "--policy-reload-interval",
            "0",
        ]
    )
    processes.append(proc)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc)
    assert "x-loopwarden-terminated" not in policy_of(url, "h").headers

    (directory / "default.yaml").write_text("max_steps: 1\n")
    proc.send_signal(signal.SIGHUP)

    assert wait_for(lambda: "x-loopwarden-terminated" in policy_of(url, "h").headers)


@pytest.mark.slow
def test_check_policies_accepts_the_shipped_directory():
    result = subprocess.run(
        [sys.executable, "-m", "proxy", "check-policies", "policies"], capture_output=True, text=True
    )

    assert result.returncode == 0
    assert "ok  default" in result.stdout


@pytest.mark.slow
def test_check_policies_names_the_bad_file_and_field(write_policies):
    directory = write_policies(broken="max_steps: -5\n")

    result = subprocess.run(
        [sys.executable, "-m", "proxy", "check-policies", str(directory)], capture_output=True, text=True
    )

    assert result.returncode == 1
    assert "broken.yaml" in result.stderr
    assert "max_steps" in result.stderr


@pytest.mark.slow
def test_serve_refuses_to_start_with_a_bad_policy(write_policies, upstream):
    directory = write_policies(default="mode: sometimes\n")

    result = subprocess.run(
        [sys.executable, "-m", "proxy", "serve", "--upstream", upstream.url, "--policies-dir", str(directory)],
        capture_output=True,
        text=True,
        timeout=PATIENCE_SECS,
    )

    assert result.returncode == 2
    assert "default.yaml" in result.stderr
    assert "mode" in result.stderr


@pytest.mark.slow
def test_serve_refuses_a_tenant_naming_a_missing_policy(tmp_path, upstream, write_policies):
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(
        'tenants:\n  - name: a\n    key_sha256: ["' + "0" * 64 + '"]\n    upstream: {forward_client_key: true}\n'
        "    policies: [default, nonexistent]\n"
    )

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "proxy",
            "serve",
            "--upstream",
            upstream.url,
            "--tenants-file",
            str(tenants),
            "--policies-dir",
            str(write_policies(default="")),
        ],
        capture_output=True,
        text=True,
        timeout=PATIENCE_SECS,
    )

    assert result.returncode == 2
    assert "nonexistent" in result.stderr

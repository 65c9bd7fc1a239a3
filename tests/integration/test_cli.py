"""The command line: serve, flags and variables, bad settings, key hashing, graceful shutdown."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import openai
import pytest

from tests.support.fake_upstream import Json, chat_completion
from tests.support.processes import free_port, spawn, wait_healthy
from tests.support.waiting import PATIENCE_SECS, wait_for

pytestmark = pytest.mark.slow  # starts loopwarden as a process of its own


def test_serve_with_flags_proxies_for_the_openai_sdk(upstream, processes):
    port = free_port()
    process = spawn(["serve", "--upstream", upstream.url, "--port", str(port)])
    processes.append(process)
    wait_healthy(f"http://127.0.0.1:{port}", process)
    upstream.script(Json(chat_completion("from a real process")))

    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-provider")
    completion = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])

    assert completion.choices[0].message.content == "from a real process"


def test_serve_reads_loopwarden_environment_variables(upstream, processes):
    port = free_port()
    process = spawn(["serve"], env={"LOOPWARDEN_UPSTREAM": upstream.url, "LOOPWARDEN_PORT": str(port)})
    processes.append(process)

    wait_healthy(f"http://127.0.0.1:{port}", process)
    assert httpx.get(f"http://127.0.0.1:{port}/readyz").json() == {"status": "ready"}


def test_flags_win_over_environment_variables(upstream, processes):
    port = free_port()
    process = spawn(["serve", "--port", str(port)], env={"LOOPWARDEN_UPSTREAM": upstream.url, "LOOPWARDEN_PORT": "1"})
    processes.append(process)

    wait_healthy(f"http://127.0.0.1:{port}", process)


def test_invalid_setting_exits_2_naming_the_setting():
    result = subprocess.run(
        [sys.executable, "-m", "proxy", "serve", "--upstream", "http://x/v1", "--read-timeout", "soon"],
        capture_output=True,
        text=True,
        timeout=PATIENCE_SECS,
    )

    assert result.returncode == 2
    assert "read_timeout" in result.stderr


def test_missing_upstream_exits_2_with_a_clear_message():
    result = subprocess.run(
        [sys.executable, "-m", "proxy", "serve"], capture_output=True, text=True, timeout=PATIENCE_SECS
    )

    assert result.returncode == 2
    assert "--upstream" in result.stderr


def test_bad_tenants_file_exits_2_naming_file_and_field(tmp_path):
    path = tmp_path / "tenants.yaml"
    path.write_text("tenants:\n  - name: acme\n    key_sha256: [nothex]\n    upstream: {forward_client_key: true}\n")

    result = subprocess.run(
        [sys.executable, "-m", "proxy", "serve", "--upstream", "http://x/v1", "--tenants-file", str(path)],
        capture_output=True,
        text=True,
        timeout=PATIENCE_SECS,
    )

    assert result.returncode == 2
    assert str(path) in result.stderr
    assert "key_sha256" in result.stderr


def test_hash_key_prints_the_sha256_hex():
    result = subprocess.run(
        [sys.executable, "-m", "proxy", "hash-key", "lw-secret"], capture_output=True, text=True, timeout=PATIENCE_SECS
    )

    assert result.stdout.strip() == hashlib.sha256(b"lw-secret").hexdigest()


def test_sigterm_lets_in_flight_requests_finish_then_refuses_new_ones(upstream, processes):
    port = free_port()
    process = spawn(["serve", "--upstream", upstream.url, "--port", str(port), "--shutdown-timeout", "10"])
    processes.append(process)
    wait_healthy(f"http://127.0.0.1:{port}", process)
    upstream.script(Json(chat_completion("finished during drain"), delay=1.0))
    result: dict[str, httpx.Response] = {}

    def call() -> None:
        result["response"] = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={"model": "m", "messages": []},
            headers={"Authorization": "Bearer sk-p"},
            timeout=PATIENCE_SECS,
        )

    caller = threading.Thread(target=call)
    caller.start()
    wait_for(lambda: upstream.requests)
    process.send_signal(signal.SIGTERM)
    wait_for(lambda: _refused(f"http://127.0.0.1:{port}/healthz"))

    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
    caller.join(PATIENCE_SECS)
    assert result["response"].status_code == 200
    assert result["response"].json()["choices"][0]["message"]["content"] == "finished during drain"
    assert process.wait(PATIENCE_SECS) == 0
    logged = [json.loads(line) for line in process.stderr.read().splitlines() if line.startswith("{")]
    events = [line["event"] for line in logged]
    (stopping,) = [line for line in logged if line["event"] == "shutting_down"]
    assert stopping == {**stopping, "signal": "SIGTERM", "in_flight": 1, "grace_secs": 10}
    assert events.index("shutting_down") < events.index("request") < events.index("stopped") == len(events) - 1


def _refused(url: str) -> bool:
    """Whether nothing listens at ``url`` any more (a stopping server closes its socket first)."""
    try:
        httpx.get(url, timeout=2)
    except httpx.ConnectError:
        return True
    except httpx.TransportError:
        pass
    return False


def test_hash_key_reads_the_key_from_stdin_without_a_terminal():
    result = subprocess.run(
        [sys.executable, "-m", "proxy", "hash-key"],
        input="lw-from-stdin\n",
        capture_output=True,
        text=True,
        timeout=PATIENCE_SECS,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == hashlib.sha256(b"lw-from-stdin").hexdigest()


def test_hash_key_with_nothing_on_stdin_exits_2_without_a_traceback():
    result = subprocess.run(
        [sys.executable, "-m", "proxy", "hash-key"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=PATIENCE_SECS,
    )

    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "no key" in result.stderr


def test_check_policies_reports_every_bad_file(tmp_path):
    (tmp_path / "a_bad.yaml").write_text("max_steps: -1\n")
    (tmp_path / "b_good.yaml").write_text("max_steps: 10\n")
    (tmp_path / "c_bad.yaml").write_text("colour: blue\n")

    result = subprocess.run(
        [sys.executable, "-m", "proxy", "check-policies", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=PATIENCE_SECS,
    )

    assert result.returncode == 1
    assert "a_bad.yaml" in result.stderr
    assert "c_bad.yaml" in result.stderr
    assert "ok  b_good" in result.stdout


def _events(stderr: str) -> set[str]:
    return {json.loads(line)["event"] for line in stderr.splitlines() if line.startswith("{")}


def test_log_level_debug_logs_more_than_info(upstream, processes):
    events = {}
    for level in ("info", "debug"):
        port = free_port()
        process = spawn(["serve", "--upstream", upstream.url, "--port", str(port), "--log-level", level])
        processes.append(process)
        wait_healthy(f"http://127.0.0.1:{port}", process)
        upstream.script(Json(chat_completion()))
        httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            headers={"Authorization": "Bearer sk-p"},
        )
        process.send_signal(signal.SIGTERM)
        events[level] = _events(process.communicate(timeout=PATIENCE_SECS)[1])

    assert events["info"] < events["debug"]
    assert {"settings", "session_identified"} <= events["debug"] - events["info"]


def test_serve_outside_the_checkout_has_the_shipped_policies_and_prices(upstream, processes, tmp_path):
    port, metrics_port = free_port(), free_port()
    process = spawn(
        ["serve", "--upstream", upstream.url, "--port", str(port), "--metrics-port", str(metrics_port)], cwd=tmp_path
    )
    processes.append(process)
    wait_healthy(f"http://127.0.0.1:{port}", process)
    reply = chat_completion()
    reply["model"] = "gpt-4o"
    reply["usage"] = {"prompt_tokens": 1000, "completion_tokens": 1000, "total_tokens": 2000}
    upstream.script(Json(reply))

    response = httpx.post(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": "Bearer sk-p", "X-LoopWarden-Policy": "strict"},
    )
    metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").text
    process.send_signal(signal.SIGTERM)
    logged = [
        json.loads(line) for line in process.communicate(timeout=PATIENCE_SECS)[1].splitlines() if line.startswith("{")
    ]

    assert response.status_code == 200, response.text
    assert response.headers["x-loopwarden-policy"] == "strict"
    assert 'loopwarden_cost_usd_total{policy="strict",tenant="default"} 0.0125' in metrics
    (configuration,) = [line for line in logged if line["event"] == "configuration"]
    assert {"default", "strict", "lenient"} <= set(configuration["policies"])
    assert configuration["pricing"].endswith("pricing.yaml")
    assert configuration["priced_models"] > 0


@pytest.mark.parametrize(
    ("taken_by", "listener", "flag"),
    [
        pytest.param("--port", "the API", "--port (LOOPWARDEN_PORT)", id="api-port"),
        pytest.param(
            "--metrics-port", "the metrics listener", "--metrics-port (LOOPWARDEN_METRICS_PORT)", id="metrics"
        ),
    ],
)
def test_a_port_in_use_exits_2_naming_the_port_and_the_flag_before_saying_it_serves(upstream, taken_by, listener, flag):
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        busy = taken.getsockname()[1]
        ports = {"--port": str(free_port()), "--metrics-port": "0", taken_by: str(busy)}
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "proxy",
                "serve",
                "--upstream",
                upstream.url,
                *(x for p in ports.items() for x in p),
            ],
            capture_output=True,
            text=True,
            timeout=PATIENCE_SECS,
            env={**os.environ, "LOOPWARDEN_METRICS_PORT": "0"},
        )

    assert result.returncode == 2
    (said,) = [line for line in result.stderr.splitlines() if line.startswith("loopwarden: ")]
    assert said.startswith(f"loopwarden: {listener} cannot listen on 127.0.0.1:{busy}: port {busy} is already in use")
    assert said.endswith(flag)
    assert "Traceback" not in result.stderr
    assert "Errno" not in result.stderr
    assert '"serving"' not in result.stderr


def test_the_serving_line_names_the_version_and_both_bound_ports(upstream, processes):
    from proxy.version import VERSION

    process = spawn(["serve", "--upstream", upstream.url, "--port", "0"])
    processes.append(process)
    first = process.stderr.readline()
    while '"serving"' not in first and first:
        first = process.stderr.readline()
    serving = json.loads(first)

    wait_healthy(f"http://127.0.0.1:{serving['port']}", process)
    metrics = httpx.get(f"http://127.0.0.1:{serving['metrics_port']}/metrics", timeout=PATIENCE_SECS)
    assert serving["version"] == VERSION
    assert 0 not in (serving["port"], serving["metrics_port"])
    assert metrics.status_code == 200


def test_version_prints_the_version_of_the_installed_package():
    from proxy.version import VERSION

    result = subprocess.run(
        [str(Path(sys.executable).with_name("loopwarden")), "--version"],
        capture_output=True,
        text=True,
        timeout=PATIENCE_SECS,
    )

    assert (result.returncode, result.stdout) == (0, f"loopwarden {VERSION}\n")


def test_check_policies_without_a_directory_checks_what_serve_loads(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "proxy", "check-policies"],
        capture_output=True,
        text=True,
        timeout=PATIENCE_SECS,
        cwd=tmp_path,
    )

    assert result.returncode == 0, result.stderr
    checked = {line.split("  mode=")[0] for line in result.stdout.splitlines()}
    assert {"ok  default", "ok  strict", "ok  lenient"} <= checked

"""The test harness's process helpers: ports no other process can be handed, health that is the proxy's."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.support.processes import free_port, wait_healthy

EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


@pytest.mark.skipif(not EPHEMERAL.exists(), reason="the kernel's ephemeral range is read from /proc")
def test_a_free_port_is_never_one_the_kernel_hands_out_for_port_zero():
    low = int(EPHEMERAL.read_text().split()[0])

    assert all(free_port() < low for _ in range(50))


def test_workers_pick_ports_from_slices_that_do_not_overlap(monkeypatch):
    picked: dict[str, set[int]] = {}
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        picked[worker] = {free_port() for _ in range(40)}

    assert max(picked["gw0"]) < min(picked["gw1"])


class _AnyPathOk(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"# HELP up 1\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_another_server_answering_on_the_port_is_not_taken_for_the_proxy():
    server = http.server.HTTPServer(("127.0.0.1", free_port()), _AnyPathOk)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        with pytest.raises(RuntimeError, match=r"was not healthy in 0\.5 s"):
            wait_healthy(f"http://127.0.0.1:{server.server_address[1]}", process, within=0.5)
    finally:
        server.shutdown()
        server.server_close()

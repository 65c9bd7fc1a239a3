"""Instructions the proxy executes per request, counted by callgrind: repeatable to a fraction
of a percent, whatever else the machine is doing (wall-clock throughput here swings ±20 %).

Starts ``fast_upstream.py`` and ``loopwarden serve`` under ``valgrind --tool=callgrind`` with
instrumentation off, warms up, switches counting on for ``--requests`` sequential requests
over one keep-alive connection, and prints instructions per request for each body.

``--store redis`` serves with Redis state (``--redis-url``; give it a private server: the
bench writes sessions). ``--sessions unique`` sends a fresh ``X-Session-Id`` per request
(over a WebSocket, a fresh ``client_metadata.session_id`` per turn), as the performance issue
measured (every request then loads, or admits, and commits); the default sends none, so each
request is a derived run's opening (a body with an assistant turn in it, ``agent`` and
``responses-agent-stream``, is then one run throughout, which its step budget soon ends);
``--sessions varied`` makes each request a derived run of its own, as a client that sends no
session id has: a later step of one of an agent's runs (``agent``: its first call's id fresh,
the opening the agent's runs share), or an opening of its own (a mark in its first user text).

    .venv/bin/python tests/bench/count_instructions.py --bodies plain,stream --requests 200
    .venv/bin/python tests/bench/count_instructions.py --bodies responses-stream --transport websocket
    .venv/bin/python tests/bench/count_instructions.py --store redis --redis-url redis://127.0.0.1:6390 \
        --sessions unique
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, cast

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from run_bench import BODIES, REQUEST_HEADERS, path_of  # noqa: E402
from ttfb import free_port, start_proxy, start_upstream, wait_ready  # noqa: E402


def varied(fields: dict[str, Any]) -> dict[str, Any]:
    """A chat or Responses body of a derived run of its own, as a client that sends no session id
    has: a later step of an agent's run (its first reply's call id made fresh: the opening, which
    every run of that agent shares, is the same) or, for a body that is an opening, its first
    user text marked."""
    mark = uuid.uuid4().hex
    if '"call_1"' in json.dumps(fields):
        return cast(dict[str, Any], json.loads(json.dumps(fields).replace('"call_1"', f'"call_{mark}"')))
    turns = fields.get("messages") or fields.get("input")
    if isinstance(turns, str):
        return {**fields, "input": f"{turns} ({mark})"}
    turns = [dict(turn) for turn in turns]
    first = next(turn for turn in turns if turn.get("role") == "user")
    if isinstance(first["content"], str):
        first["content"] += f" ({mark})"
    else:
        first["content"] = [*first["content"], {"type": "input_text", "text": mark}]
    return {**fields, "messages" if "messages" in fields else "input": turns}


def send(port: int, name: str, count: int, sessions: str) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body, path = BODIES[name], path_of(name)
    for _ in range(count):
        headers = {**REQUEST_HEADERS, "X-Session-Id": uuid.uuid4().hex} if sessions == "unique" else REQUEST_HEADERS
        if sessions == "varied":
            body = json.dumps(varied(json.loads(BODIES[name])), separators=(",", ":")).encode()
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"status {response.status}")
    connection.close()


def send_socket(port: int, name: str, count: int, sessions: str) -> None:
    """``count`` turns of a Responses body over one WebSocket (``unique``: each turn names a
    session of its own in ``client_metadata.session_id``, as Codex names its session)."""
    from websockets.sync.client import connect

    fields = {**json.loads(BODIES[name]), "type": "response.create"}
    url = f"ws://127.0.0.1:{port}{path_of(name)}"
    with connect(url, additional_headers=REQUEST_HEADERS, max_size=None) as socket:
        for _ in range(count):
            if sessions == "unique":
                fields["client_metadata"] = {"session_id": uuid.uuid4().hex}
            socket.send(json.dumps(varied(fields) if sessions == "varied" else fields, separators=(",", ":")))
            while (kind := json.loads(socket.recv(timeout=60))["type"]) not in TERMINAL:
                if kind == "error":
                    raise RuntimeError("an error event")


FLOORS = {"lean-floor": "lean_floor_app.py", "floor": "floor_app.py"}
"""The pass-throughs ``--server`` counts instead of the proxy."""
TERMINAL = ("response.completed", "response.incomplete", "response.failed")
SENDERS = {"http": send, "websocket": send_socket}


def count(
    name: str,
    requests: int,
    warmup: int,
    redis_url: str | None,
    sessions: str,
    log_level: str,
    tree: Path | None,
    server: str = "proxy",
    transport: str = "http",
    keep: Path | None = None,
) -> float:
    upstream_port, proxy_port = free_port(), free_port()
    upstream = start_upstream(upstream_port)
    with tempfile.TemporaryDirectory() as work:
        log = Path(work) / "callgrind.log"
        callgrind = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={work}/out",
            f"--log-file={log}",
        ]
        if server == "proxy":
            proxy = start_proxy(upstream_port, proxy_port, callgrind, redis_url, log_level=log_level, tree=tree)
        else:  # a floor: the lean one is the yardstick of the performance issue's targets
            floor = [sys.executable, str(BENCH_DIR / FLOORS[server]), "--upstream"]
            argv = [*callgrind, *floor, f"http://127.0.0.1:{upstream_port}/v1", "--port", str(proxy_port)]
            proxy = subprocess.Popen(argv, cwd=BENCH_DIR, stderr=subprocess.DEVNULL)
        try:
            wait_ready(upstream_port)
            wait_ready(proxy_port, timeout=120)
            SENDERS[transport](proxy_port, name, warmup, sessions)
            subprocess.run(["callgrind_control", "-i", "on", str(proxy.pid)], check=True, capture_output=True)
            SENDERS[transport](proxy_port, name, requests, sessions)
            subprocess.run(["callgrind_control", "-i", "off", str(proxy.pid)], check=True, capture_output=True)
        finally:
            proxy.send_signal(signal.SIGTERM)
            proxy.wait(60)
            upstream.send_signal(signal.SIGTERM)
            upstream.wait(10)
        time.sleep(0.2)
        if keep is not None:
            shutil.copy(f"{work}/out", keep / f"callgrind.{name}.{transport}.out")
        collected = re.search(r"Collected : (\d+)", log.read_text())
        if collected is None:
            raise RuntimeError(f"no callgrind total in {log}")
        return int(collected.group(1)) / requests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bodies", default="plain,stream,stream-tools")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=60)
    parser.add_argument("--store", choices=("memory", "redis"), default="memory")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/15", help="With --store redis.")
    parser.add_argument("--sessions", choices=("derived", "unique", "varied"), default="derived")
    parser.add_argument("--log-level", default="info", help="The proxy's --log-level (default: info, the default).")
    parser.add_argument("--tree", type=Path, help="Count the proxy of this tree (default: this one), e.g. main's.")
    parser.add_argument(
        "--server",
        choices=("proxy", *FLOORS),
        default="proxy",
        help="lean-floor: count the bare litestar + httpx-aiohttp pass-through instead; floor: the bare ASGI "
        "pass-through on the proxy's own server and client stack (chat bodies only).",
    )
    parser.add_argument(
        "--transport",
        choices=tuple(SENDERS),
        default="http",
        help="websocket: the Responses bodies as response.create events over one socket (responses* bodies only).",
    )
    parser.add_argument("--keep", type=Path, help="Copy each body's callgrind profile into this folder.")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install -y valgrind)")
        return 2
    for name in args.bodies.split(","):
        redis_url = args.redis_url if args.store == "redis" else None
        per_request = count(
            name,
            args.requests,
            args.warmup,
            redis_url,
            args.sessions,
            args.log_level,
            args.tree,
            args.server,
            args.transport,
            args.keep,
        )
        what = args.store if args.server == "proxy" else args.server
        line = f"{name:13s} {what:6s} {args.sessions:7s} {args.transport:9s} {per_request / 1e6:.3f} M"
        print(line + " instructions per request")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

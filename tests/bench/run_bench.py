"""Throughput/latency benchmark: direct upstream vs. a bare ASGI floor vs. the proxy.

Every piece is a separate process on loopback: a fast fake upstream (``fast_upstream.py``),
the server under test, and ``wrk`` as the load generator (or a slower aiohttp fallback when
wrk is missing). Each target is measured at each concurrency for ``--duration`` seconds,
after a short unrecorded warm-up, and the server's CPU time per request is read from
/proc. Linux only. See README.md beside this file.

    .venv/bin/python tests/bench/run_bench.py --duration 5 --json bench.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import http.client
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import FrameType

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parents[1]
PYTHON = sys.executable
HOST = "127.0.0.1"

# What every load generator sends: a minimal chat completion request (``--body`` picks which).
REQUEST_PATH = "/v1/chat/completions"


def _function(name: str, argument: str) -> dict[str, object]:
    """A function tool as an agent declares it: a description, one required string argument."""
    return {
        "name": name,
        "description": f"{name.replace('_', ' ')}: looks things up for the agent and returns what it found.",
        "parameters": {
            "type": "object",
            "properties": {
                argument: {"type": "string", "description": "What to look for."},
                "limit": {"type": "integer"},
            },
            "required": [argument],
        },
    }


_TOOLS = [
    {"type": "function", "function": _function(name, "query")} for name in ("search_web", "read_page", "get_weather")
]
_AGENT_BODY = json.dumps(
    {
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are a careful research agent. " * 22},
            {"role": "user", "content": "Find the population of Lyon and the weather there today, then summarize."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "search_web", "arguments": '{"query":"Lyon population"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "Lyon has about 520,000 inhabitants. " * 8},
        ],
        "tools": _TOOLS,
    },
    separators=(",", ":"),
).encode()
_RESPONSES_AGENT_BODY = json.dumps(
    {
        "model": "m",
        "instructions": "You are a careful coding agent: read before you change, and test what you change. " * 90,
        "input": [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Find the population of Lyon and summarize."}],
            },
            {"type": "function_call", "call_id": "call_1", "name": "search_web", "arguments": '{"query":"Lyon"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "Lyon has about 520,000 inhabitants. " * 8},
        ],
        "tools": [{"type": "function", **_function(name, "q")} for name in ("search", "read_page", "get_weather")],
        "store": False,
        "stream": True,
    },
    separators=(",", ":"),
).encode()
BODIES = {
    "plain": b'{"model":"m","messages":[{"role":"user","content":"hi"}]}',
    "stream": b'{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}',
    "stream-tools": b'{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,'
    b'"tools":[{"type":"function","function":{"name":"search","parameters":{"type":"object"}}}]}',
    # The performance issue's body: 2.3 KB of chat with three tools, an agent's step (a tool result in, the
    # upstream answers the next tool call)
    "agent": _AGENT_BODY,
    # The same three on the Responses API (POST /v1/responses)
    "responses": b'{"model":"m","input":"hi"}',
    "responses-stream": b'{"model":"m","input":"hi","stream":true}',
    "responses-stream-tools": b'{"model":"m","input":"hi","stream":true,'
    b'"tools":[{"type":"function","name":"search","parameters":{"type":"object"}}]}',
    # A Codex-like step: 7.5 KB of instructions, three tools, a tool result in; answered with a valid tool call
    "responses-agent-stream": _RESPONSES_AGENT_BODY,
}


MESSAGES_BODIES = {
    "messages": b'{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}',
    "messages-stream": b'{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"hi"}],"stream":true}',
    "messages-stream-tools": b'{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"hi"}],'
    b'"stream":true,"tools":[{"name":"search","input_schema":{"type":"object"}}]}',
}
"""The same three, as Anthropic Messages requests (``POST /v1/messages``)."""
BODIES.update(MESSAGES_BODIES)
GEMINI_BODIES = {
    "gemini": b'{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}',
    "gemini-stream": b'{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{}}',
    "gemini-stream-tools": b'{"contents":[{"role":"user","parts":[{"text":"hi"}]}],'
    b'"tools":[{"functionDeclarations":[{"name":"search","parameters":{"type":"OBJECT"}}]}]}',
}
"""Plain, streamed and a streamed tool call, as Gemini ``generateContent`` requests (the path
streams, not the body)."""
BODIES.update(GEMINI_BODIES)
BODY_PATHS: dict[str, str] = {
    **{name: "/v1/responses" for name in BODIES if name.startswith("responses")},
    **{name: "/v1/messages" for name in MESSAGES_BODIES},
    "gemini": "/v1beta/models/m:generateContent",
    "gemini-stream": "/v1beta/models/m:streamGenerateContent?alt=sse",
    "gemini-stream-tools": "/v1beta/models/m:streamGenerateContent?alt=sse",
}
"""Where each body goes; a body not named here goes to ``/v1/chat/completions``. A new wire
format (or transport) gets benchmarked by adding its bodies to ``BODIES`` and their route here:
every tool here (``run_bench.py --body``, ``count_instructions.py --bodies``, ``ttfb.py``)
takes the name."""


def path_of(name: str) -> str:
    """The route a named body is sent to."""
    return BODY_PATHS.get(name, "/v1/chat/completions")


def path_for(body: bytes) -> str:
    """Where a body goes, by its bytes (for callers that hold a body, not its name)."""
    return next((path_of(name) for name, known in BODIES.items() if known == body), "/v1/chat/completions")


REQUEST_BODY = BODIES["plain"]
REQUEST_HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench"}

CLK_TCK = os.sysconf("SC_CLK_TCK")
READY_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
REQUEST_TIMEOUT_S = 5  # a request slower than this counts as a socket timeout


# -- targets ------------------------------------------------------------------------

ServerCommand = Callable[[str, int], list[str]]
"""argv of a server process, given the upstream base URL (``http://host:port/v1``) and its port."""


@dataclass(frozen=True)
class Target:
    """One thing to put load on. ``command=None`` means the fake upstream itself."""

    name: str
    description: str
    command: ServerCommand | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment for the server process (e.g. LOOPWARDEN_* settings)."""
    environment: Callable[[], Mapping[str, str]] | None = None
    """Extra environment decided when the target starts (the tree a proxy target runs from)."""

    def process_env(self) -> Mapping[str, str]:
        return {**self.env, **(self.environment() if self.environment else {})}


LOG_LEVEL = "info"
"""The proxy targets' ``--log-level``: the default setting, which is what users run (``--log-level``)."""
BASE_TREE: Path | None = None
"""Where ``proxy-base`` and ``proxy-redis-base`` run the proxy from (``--base-tree``: e.g. a
``git worktree`` of main, to compare a change with it side by side)."""


def proxy_target(
    name: str, description: str, *extra_flags: str, env: Mapping[str, str] | None = None, base: bool = False
) -> Target:
    """A target running ``loopwarden serve`` with ``extra_flags`` after the common ones; from
    ``BASE_TREE`` when ``base``."""

    def command(upstream: str, port: int) -> list[str]:
        return [
            PYTHON,
            "-m",
            "proxy",
            "serve",
            "--upstream",
            upstream,
            "--port",
            str(port),
            "--log-level",
            LOG_LEVEL,
            "--metrics-port",
            "0",
            *extra_flags,
        ]

    def tree_env() -> Mapping[str, str]:
        tree = BASE_TREE if base else REPO_DIR
        if base and tree is None:
            raise BenchError(f"{name} needs --base-tree")
        return {**(env or {}), "PYTHONPATH": str(tree), "LOOPWARDEN_BENCH_TREE": str(tree)}

    return Target(name, description, command, env or {}, tree_env)


def _reference_command(upstream: str, port: int) -> list[str]:
    return [PYTHON, str(BENCH_DIR / "reference_app.py"), "--upstream", upstream, "--port", str(port)]


def _litestar_sse_command(upstream: str, port: int) -> list[str]:
    return [PYTHON, str(BENCH_DIR / "reference_litestar_sse.py"), "--upstream", upstream, "--port", str(port)]


def _lean_floor_command(upstream: str, port: int) -> list[str]:
    return [PYTHON, str(BENCH_DIR / "lean_floor_app.py"), "--upstream", upstream, "--port", str(port)]


def _floor_command(upstream: str, port: int) -> list[str]:
    return [PYTHON, str(BENCH_DIR / "floor_app.py"), "--upstream", upstream, "--port", str(port)]


# Add targets here; ``--targets`` picks from these names, in the order given.
TARGETS: dict[str, Target] = {
    target.name: target
    for target in (
        Target("direct", "load generator -> fake upstream"),
        Target(
            "reference",
            "-> the issue's reference: bare ASGI + httpx.AsyncClient on httpx-aiohttp -> upstream",
            _reference_command,
        ),
        Target(
            "reference-sse",
            "-> the streaming issue's reference: bare litestar SSE relay on httpx-aiohttp -> upstream",
            _litestar_sse_command,
        ),
        Target(
            "lean-floor",
            "-> the performance issue's floor: bare litestar + httpx on httpx-aiohttp pass-through -> upstream",
            _lean_floor_command,
        ),
        Target("floor", "-> bare ASGI pass-through (uvicorn + UpstreamTransport) -> upstream", _floor_command),
        proxy_target("proxy", "-> loopwarden serve (guard pipeline, memory state) -> upstream"),
        proxy_target(
            "proxy-redis",
            "-> loopwarden serve (guard pipeline, Redis state) -> upstream",
            "--redis-url",
            os.environ.get("LOOPWARDEN_BENCH_REDIS_URL", "redis://127.0.0.1:6379/15"),
        ),
        proxy_target("proxy-base", "-> loopwarden serve from --base-tree (memory state) -> upstream", base=True),
        proxy_target(
            "proxy-redis-base",
            "-> loopwarden serve from --base-tree (Redis state) -> upstream",
            "--redis-url",
            os.environ.get("LOOPWARDEN_BENCH_REDIS_URL", "redis://127.0.0.1:6379/15"),
            base=True,
        ),
    )
}


# -- processes ----------------------------------------------------------------------


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGKILL it if the benchmark itself dies (even by SIGKILL)."""
    with contextlib.suppress(OSError, AttributeError):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


@dataclass
class Server:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class Processes:
    """Owns every server the benchmark starts and stops all of them on exit, whatever happened."""

    def __init__(self, log_dir: Path) -> None:
        self._log_dir = log_dir
        self._running: list[Server] = []

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> Server:
        log_path = self._log_dir / f"{name}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                list(argv),
                cwd=(env or {}).get("LOOPWARDEN_BENCH_TREE", REPO_DIR),
                env={**os.environ, **(env or {})},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Its own session: a Ctrl-C in the terminal reaches only us, and we stop the
                # servers in order; the death signal covers us being killed outright.
                start_new_session=True,
                preexec_fn=_die_with_parent,  # safe: this process runs no threads
            )
        server = Server(name, process, log_path)
        self._running.append(server)
        return server

    def stop(self, server: Server) -> None:
        if server in self._running:
            self._running.remove(server)
        if server.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            log(f"{server.name} (pid {server.pid}) ignored SIGTERM for {STOP_TIMEOUT:.0f}s; killing it")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGKILL)
            server.process.wait()

    def stop_all(self) -> None:
        for server in reversed(list(self._running)):
            self.stop(server)

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop_all()


def free_port() -> int:
    # Racy in principle (the port is free when we look, not when the server binds), but the
    # readiness check below catches a server that failed to bind.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / CLK_TCK


def _request(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(HOST, port, timeout=5)
    try:
        connection.request(method, path, body=body, headers=REQUEST_HEADERS if body is not None else {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def wait_ready(server: Server, port: int) -> None:
    """Poll ``GET /healthz`` until it answers 200; fail fast if the process died."""
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise BenchError(f"{server.name} exited with {server.process.returncode}:\n{server.log_tail()}")
        with contextlib.suppress(OSError, http.client.HTTPException):
            if _request(port, "GET", "/healthz")[0] == 200:
                return
        time.sleep(0.05)
    raise BenchError(f"{server.name} not ready on port {port} after {READY_TIMEOUT:.0f}s:\n{server.log_tail()}")


def smoke_test(name: str, port: int) -> None:
    """One request before the load: a target that answers wrongly is flagged up front."""
    status, body = _request(port, "POST", REQUEST_PATH, REQUEST_BODY)
    if status != 200 or not any(mark in body for mark in (b'"chat.completion', b'"response', b'"message')):
        log(f"WARNING: {name} answered {status} to the smoke request: {body[:300]!r}")


# -- load generators ----------------------------------------------------------------


@dataclass(frozen=True)
class Load:
    """What one load run measured, whatever generated it."""

    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    non_2xx: int
    socket_errors: int

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


LoadGenerator = Callable[[int, int, int], Load]
"""(port, concurrency, duration in seconds) -> Load"""

_WRK_MARKER = "BENCH_RESULT "
_WRK_SCRIPT = """\
-- Generated by run_bench.py: a fixed POST, and a machine-readable summary at the end.
wrk.method = "POST"
wrk.body = [==[{body}]==]
{headers}
{sessions}

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "{marker}{{\\"requests\\":%d,\\"duration_us\\":%d,\\"p50_us\\":%d,\\"p99_us\\":%d,"
    .. "\\"status\\":%d,\\"connect\\":%d,\\"read\\":%d,\\"write\\":%d,\\"timeout\\":%d}}\\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.status, e.connect, e.read, e.write, e.timeout))
end
"""


# With ``--sessions unique``: a new X-Session-Id per request (a prefix per run, then a count).
_WRK_UNIQUE_SESSIONS = """\
local prefix, n = string.format("%x-", os.time()), 0
request = function()
  n = n + 1
  wrk.headers["X-Session-Id"] = prefix .. n
  return wrk.format()
end
"""


# With ``--sessions varied``: each request a derived run of its own, as from a client that sends no
# session id (an agent body's first call id made fresh: the opening its runs share stays the same).
_WRK_VARIED_RUNS = """\
local prefix, n, template = string.format("%x", os.time()), 0, wrk.body
request = function()
  n = n + 1
  local body = (template:gsub('"call_1"', '"call_' .. prefix .. n .. '"'))
  return wrk.format(nil, nil, nil, body)
end
"""
_WRK_SESSIONS = {"derived": "", "unique": _WRK_UNIQUE_SESSIONS, "varied": _WRK_VARIED_RUNS}


def wrk_generator(script_dir: Path, sessions: str = "derived", cpus: str | None = None) -> LoadGenerator:
    """``wrk -t1 -cN --latency`` driven by a generated Lua script that reports JSON in ``done``."""
    body = REQUEST_BODY.decode()
    assert "]==]" not in body
    headers = "\n".join(f'wrk.headers["{name}"] = "{value}"' for name, value in REQUEST_HEADERS.items())
    script = script_dir / "post.lua"
    script.write_text(
        _WRK_SCRIPT.format(body=body, headers=headers, sessions=_WRK_SESSIONS[sessions], marker=_WRK_MARKER)
    )

    def run(port: int, concurrency: int, duration: int) -> Load:
        argv = [
            "wrk",
            "-t1",
            f"-c{concurrency}",
            f"-d{duration}s",
            f"--timeout={REQUEST_TIMEOUT_S}s",
            "--latency",
            "-s",
            str(script),
            f"http://{HOST}:{port}{REQUEST_PATH}",
        ]
        done = subprocess.run(
            pinned(argv, cpus),
            capture_output=True,
            text=True,
            timeout=duration + 30,
            check=False,
            preexec_fn=_die_with_parent,
        )
        line = next((ln for ln in done.stdout.splitlines() if ln.startswith(_WRK_MARKER)), None)
        if done.returncode != 0 or line is None:
            raise BenchError(f"wrk failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        raw = json.loads(line.removeprefix(_WRK_MARKER))
        return Load(
            requests=raw["requests"],
            seconds=raw["duration_us"] / 1e6,
            p50_ms=raw["p50_us"] / 1000,
            p99_ms=raw["p99_us"] / 1000,
            non_2xx=raw["status"],
            socket_errors=raw["connect"] + raw["read"] + raw["write"] + raw["timeout"],
        )

    return run


def python_generator(port: int, concurrency: int, duration: int) -> Load:
    """Fallback when wrk is missing: aiohttp on uvloop, one keep-alive connection per worker.

    It runs in this process and is far slower than wrk, so at high rates it, not the
    target, is the bottleneck; compare its numbers only with each other.
    """
    import aiohttp
    import uvloop

    async def load() -> Load:
        url = f"http://{HOST}:{port}{REQUEST_PATH}"
        latencies: list[float] = []
        counts = {"non_2xx": 0, "errors": 0}
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            started = time.perf_counter()
            deadline = started + duration

            async def worker() -> None:
                while (now := time.perf_counter()) < deadline:
                    try:
                        async with session.post(url, data=REQUEST_BODY, headers=REQUEST_HEADERS) as response:
                            await response.read()
                            if not 200 <= response.status < 400:
                                counts["non_2xx"] += 1
                    except (aiohttp.ClientError, TimeoutError):
                        counts["errors"] += 1
                        continue
                    latencies.append(time.perf_counter() - now)

            await asyncio.gather(*(worker() for _ in range(concurrency)))
            elapsed = time.perf_counter() - started
        latencies.sort()
        return Load(
            requests=len(latencies) + counts["errors"],
            seconds=elapsed,
            p50_ms=_percentile(latencies, 50) * 1000,
            p99_ms=_percentile(latencies, 99) * 1000,
            non_2xx=counts["non_2xx"],
            socket_errors=counts["errors"],
        )

    return uvloop.run(load())


def _percentile(ordered: Sequence[float], pct: float) -> float:
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(len(ordered) * pct / 100))]


# -- the benchmark ------------------------------------------------------------------


class BenchError(Exception):
    """A setup step failed; the message says which and shows the relevant log."""


@dataclass(frozen=True)
class Result:
    target: str
    concurrency: int
    requests: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    server_cpu_us_per_req: float | None
    """CPU (user + system) of the target's server process per request; None for direct."""
    upstream_cpu_us_per_req: float
    """The same for the fake upstream: shows how close it comes to being the bottleneck."""
    non_2xx: int
    socket_errors: int
    round: int = 1


_COLUMNS = (
    ("target", "<", 16),
    ("conc", ">", 5),
    ("req/s", ">", 9),
    ("p50 ms", ">", 8),
    ("p99 ms", ">", 8),
    ("server µs/req", ">", 14),
    ("upstrm µs/req", ">", 14),
    ("non-2xx", ">", 8),
    ("sock err", ">", 9),
)


def _row(cells: Sequence[str]) -> str:
    return "  ".join(f"{cell:{align}{width}}" for cell, (_, align, width) in zip(cells, _COLUMNS, strict=True))


def format_header() -> str:
    return _row([name for name, _, _ in _COLUMNS])


def format_result(r: Result) -> str:
    server = "-" if r.server_cpu_us_per_req is None else f"{r.server_cpu_us_per_req:.0f}"
    return _row(
        [
            r.target,
            str(r.concurrency),
            f"{r.rps:.0f}",
            f"{r.p50_ms:.2f}",
            f"{r.p99_ms:.2f}",
            server,
            f"{r.upstream_cpu_us_per_req:.0f}",
            str(r.non_2xx),
            str(r.socket_errors),
        ]
    )


def measure(
    generator: LoadGenerator,
    target: str,
    port: int,
    concurrency: int,
    duration: int,
    server: Server | None,
    upstream: Server,
) -> Result:
    watched = [p for p in (server, upstream) if p is not None]
    before = {p.name: cpu_seconds(p.pid) for p in watched}
    load = generator(port, concurrency, duration)
    spent = {p.name: cpu_seconds(p.pid) - before[p.name] for p in watched}
    for process in watched:  # a server that died mid-run would otherwise show up only as socket errors
        if process.process.poll() is not None:
            raise BenchError(f"{process.name} died during the run:\n{process.log_tail()}")

    def per_request(name: str) -> float:
        return spent[name] / load.requests * 1e6 if load.requests else float("nan")

    return Result(
        target=target,
        concurrency=concurrency,
        requests=load.requests,
        seconds=round(load.seconds, 3),
        rps=round(load.rps, 1),
        p50_ms=round(load.p50_ms, 3),
        p99_ms=round(load.p99_ms, 3),
        server_cpu_us_per_req=round(per_request(server.name), 1) if server else None,
        upstream_cpu_us_per_req=round(per_request(upstream.name), 1),
        non_2xx=load.non_2xx,
        socket_errors=load.socket_errors,
    )


def pinned(argv: Sequence[str], cpus: str | None) -> list[str]:
    """``argv`` run on ``cpus`` only (``taskset -c``), when given."""
    return ["taskset", "-c", cpus, *argv] if cpus else list(argv)


def run(args: argparse.Namespace, generator: LoadGenerator, log_dir: Path) -> list[Result]:
    """Every target at every concurrency, ``args.rounds`` times, the targets interleaved: on a
    busy machine, rounds compare targets measured minutes apart at most."""
    results: list[Result] = []
    with Processes(log_dir) as processes:
        upstream_port = free_port()
        upstream = processes.start(
            "upstream",
            pinned([PYTHON, str(BENCH_DIR / "fast_upstream.py"), "--port", str(upstream_port)], args.load_cpus),
        )
        wait_ready(upstream, upstream_port)
        upstream_base = f"http://{HOST}:{upstream_port}/v1"

        print(format_header(), flush=True)
        for round_number in range(1, args.rounds + 1):
            for name in args.targets:
                target = TARGETS[name]
                server: Server | None = None
                port = upstream_port
                if target.command is not None:
                    port = free_port()
                    argv = pinned(target.command(upstream_base, port), args.server_cpus)
                    server = processes.start(name, argv, target.process_env())
                    wait_ready(server, port)
                log(f"{name}: {target.description}" + (f" (pid {server.pid})" if server else ""))
                smoke_test(name, port)
                if args.warmup > 0:
                    generator(port, max(args.concurrency), args.warmup)
                for concurrency in args.concurrency:
                    result = measure(generator, name, port, concurrency, args.duration, server, upstream)
                    result = replace(result, round=round_number)
                    results.append(result)
                    print(format_result(result), flush=True)
                if server is not None:
                    processes.stop(server)  # one target at a time: they would compete for the cores
    return results


def ratios(results: Sequence[Result], to: str) -> list[str]:
    """Per target and concurrency: the median over rounds of req/s and CPU per request, and the
    median of each round's ratio to target ``to`` measured in the same round."""
    lines = [f"medians over rounds; ratios are medians of per-round ratios to {to}"]
    lines.append(f"{'target':<18} {'conc':>5} {'req/s':>8} {'x rps':>7} {'µs/req':>8} {'x µs':>7} {'p99 ms':>8}")
    keys = dict.fromkeys((r.target, r.concurrency) for r in results)
    by_round = {(r.target, r.concurrency, r.round): r for r in results}
    for target, concurrency in keys:
        mine = [r for r in results if r.target == target and r.concurrency == concurrency]
        paired = [(r, by_round.get((to, concurrency, r.round))) for r in mine]
        rps_ratio = [r.rps / base.rps for r, base in paired if base is not None and base.rps]
        cpu_ratio = [
            r.server_cpu_us_per_req / base.server_cpu_us_per_req
            for r, base in paired
            if base is not None and r.server_cpu_us_per_req and base.server_cpu_us_per_req
        ]
        cpu = [r.server_cpu_us_per_req for r in mine if r.server_cpu_us_per_req is not None]
        lines.append(
            f"{target:<18} {concurrency:>5} {statistics.median(r.rps for r in mine):>8.0f} "
            f"{statistics.median(rps_ratio) if rps_ratio else float('nan'):>7.3f} "
            f"{statistics.median(cpu) if cpu else float('nan'):>8.0f} "
            f"{statistics.median(cpu_ratio) if cpu_ratio else float('nan'):>7.3f} "
            f"{statistics.median(r.p99_ms for r in mine):>8.2f}"
        )
    return lines


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _positive_ints(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _target_names(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in TARGETS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown target(s) {unknown}; known: {', '.join(TARGETS)}")
    return names


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Benchmark the proxy against a direct upstream and a bare floor.")
    parser.add_argument("--duration", type=int, default=5, help="Seconds per measured run (default 5).")
    parser.add_argument("--warmup", type=int, default=1, help="Unrecorded seconds per target first (default 1; 0=off).")
    parser.add_argument("--concurrency", type=_positive_ints, default=[1, 16, 64], help="Default 1,16,64.")
    parser.add_argument(
        "--targets", type=_target_names, default=list(TARGETS), help=f"Default and known: {','.join(TARGETS)}."
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="Also write the results as JSON here.")
    parser.add_argument(
        "--body",
        choices=tuple(BODIES),
        default="plain",
        help="plain: a JSON completion; stream: a text SSE stream; stream-tools: a streamed tool call "
        "(held back by the proxy until checked); responses, responses-stream, responses-stream-tools: the same "
        "on POST /v1/responses; messages*: the same three on /v1/messages; gemini, gemini-stream, "
        "gemini-stream-tools: the same three as Gemini generateContent calls.",
    )
    parser.add_argument(
        "--loadgen",
        choices=("auto", "wrk", "python"),
        default="auto",
        help="auto: wrk if installed, else the (slower) Python fallback.",
    )
    parser.add_argument(
        "--sessions",
        choices=("derived", "unique", "varied"),
        default="derived",
        help="derived: no session header (each request opens a derived run); unique: a new X-Session-Id per "
        "request, as the performance issue measured (every request loads or admits, and commits); varied: an "
        "agent body's first call id fresh per request, a derived run of its own on the opening its runs "
        "share (agent, responses-agent-stream). wrk only.",
    )
    parser.add_argument("--keep-logs", action="store_true", help="Keep the servers' logs and print where.")
    parser.add_argument("--rounds", type=int, default=1, help="Measure every target this often, interleaved.")
    parser.add_argument("--ratio-to", metavar="TARGET", help="Print medians of per-round ratios to this target.")
    parser.add_argument(
        "--log-level", default="info", help="The proxy targets' --log-level (default: info, the default)."
    )
    parser.add_argument("--base-tree", type=Path, help="The tree proxy-base and proxy-redis-base run from.")
    parser.add_argument("--server-cpus", help="taskset -c list for the server under test (e.g. 0).")
    parser.add_argument("--load-cpus", help="taskset -c list for wrk and the fake upstream (e.g. 1).")
    return parser


def _pick_generator(
    choice: str, script_dir: Path, sessions: str = "derived", cpus: str | None = None
) -> tuple[str, LoadGenerator]:
    if choice != "python" and shutil.which("wrk"):
        return "wrk", wrk_generator(script_dir, sessions, cpus)
    if choice == "wrk":
        raise BenchError("wrk is not installed (apt-get install -y wrk)")
    if choice == "auto":
        log(
            "wrk not found: falling back to the Python load generator, which saturates long before the "
            "servers do. Install wrk for real numbers: apt-get update && apt-get install -y wrk"
        )
    return "python", python_generator


def _raise_keyboard_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def _work_dir(keep: bool) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="loopwarden-bench-"))
    try:
        yield path
    finally:
        if keep:
            log(f"logs kept in {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    global REQUEST_BODY, REQUEST_PATH, LOG_LEVEL, BASE_TREE  # every generator and the smoke test send it
    REQUEST_BODY = BODIES[args.body]
    LOG_LEVEL = args.log_level
    BASE_TREE = args.base_tree.resolve() if args.base_tree else None
    REQUEST_PATH = path_of(args.body)
    if not Path("/proc/self/stat").exists():
        log("this benchmark reads CPU times from /proc: Linux only")
        return 2
    # SIGTERM unwinds like Ctrl-C, so the finally blocks stop every server either way.
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        with _work_dir(args.keep_logs) as work_dir:
            loadgen, generator = _pick_generator(args.loadgen, work_dir, args.sessions, args.load_cpus)
            log(
                f"loopwarden bench: {os.cpu_count()} CPUs, load generator {loadgen}, "
                f"{args.duration}s per run, concurrency {args.concurrency}, targets {args.targets}"
            )
            results = run(args, generator, work_dir)
    except KeyboardInterrupt:
        log("interrupted; all servers stopped")
        return 130
    except BenchError as exc:
        log(f"benchmark failed: {exc}")
        return 1

    if args.ratio_to:
        print("\n".join(ratios(results, args.ratio_to)), flush=True)
    failures = sum(r.non_2xx + r.socket_errors for r in results)
    if failures:
        log(f"WARNING: {failures} failed requests (see the non-2xx and sock err columns)")
    if args.json:
        report = {
            "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
            "settings": {
                "body": args.body,
                "sessions": args.sessions,
                "duration_s": args.duration,
                "warmup_s": args.warmup,
                "concurrency": args.concurrency,
                "targets": args.targets,
                "load_generator": loadgen,
                "rounds": args.rounds,
                "log_level": args.log_level,
                "server_cpus": args.server_cpus,
                "load_cpus": args.load_cpus,
            },
            "results": [asdict(r) for r in results],
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        log(f"results written to {args.json}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

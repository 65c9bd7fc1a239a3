"""Guard efficacy: real agent clients against scripted misbehaving models, with and without the proxy.

    .venv/bin/pip install -e '.[efficacy]'
    .venv/bin/python -m tests.bench.efficacy.run_efficacy                  # everything, one table
    .venv/bin/python -m tests.bench.efficacy.run_efficacy --clients openai --streams off --json out.json
    .venv/bin/python -m tests.bench.efficacy.run_efficacy --agent production   # six tools, long instructions

Every scenario (see ``scenarios.py``) runs once per client (openai SDK loop, OpenAI Agents
SDK, LangGraph ReAct), per streaming mode and per path (straight to the scripted model
API, or through LoopWarden with ``policies/default.yaml`` beside this file). Runs are
sequential, so the proxy's ``/metrics`` before and after a run tell what the guards did
in it; the scripted upstream books every model call and token of a run.

Each run ends one of four ways: ``correct`` (the answer holds both temperatures, or the
schema's object), ``graceful`` (a summary of what was found, what is missing and the next
step), ``silent`` (an empty or wrong answer, no error) or ``crashed`` (the client raised).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.bench.efficacy import scenarios
from tests.bench.efficacy.answer_scenarios import EXPECTED_INTERVENTIONS, FAMILIES
from tests.bench.efficacy.clients import CLIENTS, NO_STRUCTURED_OUTPUT, Run
from tests.bench.efficacy.scripted_upstream import ScriptedUpstream
from tests.support.proxy_server import RunningProxy, start_proxy

POLICIES = Path(__file__).parent / "policies"
RUN_TIMEOUT = 60.0
OUTCOMES = ("correct", "graceful", "silent", "crashed")
RANK = {"correct": 3, "graceful": 2, "crashed": 1, "silent": 0}
"""Which outcome is better: a crash at least says the run failed."""
PROXY_SETTINGS: dict[str, Any] = {"policy_reload_interval": 0}  # the shipped retry settings


@dataclass
class RunResult:
    client: str
    stream: bool
    proxy: bool
    scenario: str
    behaved: bool
    outcome: str
    steps: int
    tokens: int
    judge_calls: int = 0
    judge_tokens: int = 0
    added_tokens: int = 0
    retry_tokens: int = 0
    finalize_tokens: int = 0
    finalize_metered: int = 0
    """The ending's summary calls as the proxy's metrics booked them (``finalize_tokens``: as billed)."""
    interventions: list[str] = field(default_factory=list)
    terminated: str | None = None
    error: str | None = None
    answer: str = ""
    seconds: float = 0.0

    @property
    def guard_tokens(self) -> int:
        """Tokens the guard spent beyond what the agent asked for: its judge calls, and the
        prompt tokens its corrections (nudges, warnings, notes, rejected replies echoed back)
        added to agent calls. A retried call otherwise is the step the agent needed anyway
        (``retry_tokens`` has retried calls in full), and the graceful ending's summary call
        is the ending itself (``finalize_tokens``); both are reported apart."""
        return self.judge_tokens + self.added_tokens


def disturbed(r: RunResult) -> bool:
    """A well-behaved run the guard got in the way of: an intervention (bar the one its scenario
    asks for: a wrapped JSON answer unwrapped), an ending, or an answer that is not correct."""
    family = r.scenario.partition("/")[0]
    unasked = [k for k in r.interventions if k not in EXPECTED_INTERVENTIONS.get(family, ())]
    return r.behaved and bool(unasked or r.terminated or r.outcome != "correct")


def _counters(text: str) -> Counter[tuple[str, str]]:
    """(series, label value) → value, for the series the runner diffs."""
    wanted = {
        "loopwarden_interventions": "kind",
        "loopwarden_terminations": "reason",
        "loopwarden_tokens": "kind",
        "loopwarden_flags": "kind",
    }
    values: Counter[tuple[str, str]] = Counter()
    for family in text_string_to_metric_families(text):
        label = wanted.get(family.name)
        if label is None:
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):
                values[(family.name, sample.labels.get(label, ""))] += int(sample.value)
    return values


async def _scrape(client: httpx.AsyncClient, proxy: RunningProxy | None) -> Counter[tuple[str, str]]:
    if proxy is None:
        return Counter()
    response = await client.get(f"{proxy.metrics_url}/metrics")
    return _counters(response.text)


async def run_one(
    upstream: ScriptedUpstream,
    proxy: RunningProxy | None,
    http: httpx.AsyncClient,
    client: str,
    scenario: scenarios.Scenario,
    stream: bool,
    profile: scenarios.AgentProfile = scenarios.PROFILES["small"],
    *,
    derived: bool = False,
    copies: int = 1,
) -> list[RunResult]:
    """One run, or ``copies`` of it at once: then every run gets the group's interventions and
    endings (a disturbed group counts as disturbed runs), and the first its metered tokens."""
    before = await _scrape(http, proxy)
    runs = await asyncio.gather(
        *(_run_client(upstream, proxy, client, scenario, stream, profile, derived) for _ in range(copies))
    )
    diff = await _scrape(http, proxy) - before
    guards = Counter({key: n for key, n in diff.items() if key[0] != "loopwarden_tokens"})
    return [
        _result(upstream, client, scenario, stream, proxy is not None, diff if i == 0 else guards, *run)
        for i, run in enumerate(runs)
    ]


async def _run_client(
    upstream: ScriptedUpstream,
    proxy: RunningProxy | None,
    client: str,
    scenario: scenarios.Scenario,
    stream: bool,
    profile: scenarios.AgentProfile,
    derived: bool,
) -> tuple[str, Any, BaseException | None, float]:
    run_id = secrets.token_hex(4)
    model = f"bench/{scenario.name}/{scenario.variant}/{run_id}"
    base_url = proxy.base_url if proxy is not None else upstream.url
    session = None if derived else f"bench-{run_id}"
    started = time.perf_counter()
    answer: Any = None
    error: BaseException | None = None
    try:
        async with asyncio.timeout(RUN_TIMEOUT):
            answer = await CLIENTS[client](Run(base_url, model, session, scenario, stream, profile))
    except Exception as exc:  # every way a client can fail is an outcome here
        error = exc
    return model, answer, error, time.perf_counter() - started


def _result(
    upstream: ScriptedUpstream,
    client: str,
    scenario: scenarios.Scenario,
    stream: bool,
    through: bool,
    diff: Counter[tuple[str, str]],
    model: str,
    answer: Any,
    error: BaseException | None,
    seconds: float,
) -> RunResult:
    book = upstream.books[model]
    if isinstance(answer, scenarios.Refusal):
        text = f"refusal: {answer.text}"
    else:
        text = answer if isinstance(answer, str) else json.dumps(answer, default=str) if answer is not None else ""
    return RunResult(
        client=client,
        stream=stream,
        proxy=through,
        scenario=scenario.key,
        behaved=scenario.behaved,
        outcome=scenarios.outcome_of(answer, error, scenario),
        steps=book.steps,
        tokens=book.total_tokens,
        judge_calls=book.calls["judge"],
        judge_tokens=book.tokens["judge"],
        added_tokens=book.added_tokens,
        retry_tokens=diff[("loopwarden_tokens", "nudge")],
        finalize_tokens=book.tokens["finalize"],
        finalize_metered=diff[("loopwarden_tokens", "finalize")],
        interventions=sorted(
            [kind for (series, kind), n in diff.items() if series == "loopwarden_interventions" for _ in range(n)]
            + [f"flag:{kind}" for (series, kind), n in diff.items() if series == "loopwarden_flags" and n]
        ),
        terminated=next((r for (series, r), n in diff.items() if series == "loopwarden_terminations" and n), None),
        error=None if error is None else f"{type(error).__name__}: {str(error)[:160]}",
        answer=text[:200],
        seconds=round(seconds, 3),
    )


async def run_matrix(
    clients: Sequence[str],
    streams: Sequence[bool],
    paths: Sequence[bool],
    chosen: Iterable[scenarios.Scenario] | None = None,
    progress: bool = False,
    log_level: str = "info",
    redis_url: str | None = None,
    profile: scenarios.AgentProfile = scenarios.PROFILES["small"],
    *,
    derived: bool = False,
    copies: int = 1,
) -> list[RunResult]:
    """Every scenario x client x streaming mode x path (True: through the proxy); ``derived``: no
    ``X-Session-Id`` (every run opens with the same task, so only the proxy's derived sessions keep
    them apart), ``copies`` of each run at once."""
    upstream = ScriptedUpstream().start()
    settings = {**PROXY_SETTINGS, "log_level": log_level, "redis_url": redis_url}
    proxy = start_proxy(upstream=upstream.url, policies_dir=POLICIES, **settings) if True in paths else None
    results: list[RunResult] = []
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            for through in paths:
                for client in clients:
                    for stream in streams:
                        for scenario in chosen or scenarios.scenarios():
                            if scenario.schema and client in NO_STRUCTURED_OUTPUT:
                                continue
                            group = await run_one(
                                upstream,
                                proxy if through else None,
                                http,
                                client,
                                scenario,
                                stream,
                                profile,
                                derived=derived,
                                copies=copies,
                            )
                            results += group
                            for result in group if progress else ():
                                print(_progress_line(result), file=sys.stderr, flush=True)
    finally:
        if proxy is not None:
            proxy.stop()
        upstream.stop()
    return results


def _progress_line(r: RunResult) -> str:
    path = "proxy" if r.proxy else "direct"
    stream = "stream" if r.stream else "plain"
    extra = f" [{r.error}]" if r.error else ""
    return f"{path:6} {r.client:9} {stream:6} {r.scenario:27} {r.outcome:8} steps={r.steps} tokens={r.tokens}{extra}"


# -- the report ------------------------------------------------------------------------


@dataclass
class Summary:
    misbehaving: int
    rescued: int
    silent: int
    crashed: int
    behaved: int
    false_interventions: int
    tokens: int
    guard_tokens: int
    judge_calls: int
    judge_tokens: int
    added_tokens: int
    retry_tokens: int
    finalize_tokens: int
    finalize_metered: int
    made_worse: int

    @property
    def rescued_share(self) -> float:
        return self.rescued / self.misbehaving if self.misbehaving else 1.0

    @property
    def false_share(self) -> float:
        return self.false_interventions / self.behaved if self.behaved else 0.0

    @property
    def guard_share(self) -> float:
        return self.guard_tokens / self.tokens if self.tokens else 0.0


def _worse(results: Sequence[RunResult]) -> list[RunResult]:
    """Runs through the proxy that ended worse than the same run straight to the model API."""
    direct = {(r.client, r.stream, r.scenario): r.outcome for r in results if not r.proxy}
    return [
        r
        for r in results
        if r.proxy and RANK[r.outcome] < RANK[direct.get((r.client, r.stream, r.scenario), r.outcome)]
    ]


def summarize(results: Sequence[RunResult], worse: Sequence[RunResult] = ()) -> Summary:
    """``worse``: the runs :func:`_worse` found among all the results."""
    bad = [r for r in results if not r.behaved]
    good = [r for r in results if r.behaved]
    return Summary(
        misbehaving=len(bad),
        rescued=sum(r.outcome in ("correct", "graceful") for r in bad),
        silent=sum(r.outcome == "silent" for r in results),
        crashed=sum(r.outcome == "crashed" for r in results),
        behaved=len(good),
        false_interventions=sum(disturbed(r) for r in good),
        tokens=sum(r.tokens for r in results),
        guard_tokens=sum(r.guard_tokens for r in results),
        judge_calls=sum(r.judge_calls for r in results),
        judge_tokens=sum(r.judge_tokens for r in results),
        added_tokens=sum(r.added_tokens for r in results),
        retry_tokens=sum(r.retry_tokens for r in results),
        finalize_tokens=sum(r.finalize_tokens for r in results),
        finalize_metered=sum(r.finalize_metered for r in results),
        made_worse=sum(any(r is w for w in worse) for r in results),
    )


def _counts(rows: Sequence[RunResult]) -> str:
    if not rows:
        return "-"
    counted = Counter(r.outcome for r in rows)
    return " / ".join(str(counted[o]) for o in OUTCOMES)


def _mean(values: Iterable[int]) -> str:
    items = list(values)
    return f"{sum(items) / len(items):,.0f}" if items else "-"


def table(results: Sequence[RunResult]) -> str:
    """One markdown table: a row per scenario (per family for the answer shapes: ``long_answer/*``),
    outcomes without and with the proxy."""
    by: dict[str, list[RunResult]] = defaultdict(list)
    for r in results:
        by[_row(r.scenario)].append(r)
    lines = [
        "| scenario | runs | without proxy: correct / graceful / silent / crashed | with proxy: correct / graceful / "
        "silent / crashed | steps (without → with) | tokens (without → with) | guard tokens | interventions |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for scenario in scenarios.scenarios():
        rows = by.pop(_row(scenario.key), [])
        if not rows:
            continue
        direct = [r for r in rows if not r.proxy]
        guarded = [r for r in rows if r.proxy]
        kinds = Counter(k for r in guarded for k in r.interventions)
        ended = Counter(r.terminated for r in guarded if r.terminated)
        what = ", ".join(f"{k} x{n}" for k, n in kinds.most_common(3))
        if ended:
            what += ("; " if what else "") + "ended: " + ", ".join(f"{k} x{n}" for k, n in ended.most_common())
        label = f"{'✓ ' if scenario.behaved else ''}{_row(scenario.key)}"
        lines.append(
            f"| {label} | {max(len(direct), len(guarded))} | {_counts(direct)} | {_counts(guarded)} "
            f"| {_mean(r.steps for r in direct)} → {_mean(r.steps for r in guarded)} "
            f"| {_mean(r.tokens for r in direct)} → {_mean(r.tokens for r in guarded)} "
            f"| {_mean(r.guard_tokens for r in guarded)} | {what or 'none'} |"
        )
    return "\n".join(lines)


def _row(key: str) -> str:
    family = key.partition("/")[0]
    return f"{family}/*" if family in FAMILIES else key


def breakdown(results: Sequence[RunResult]) -> str:
    """Per client and streaming mode, with the proxy and without: the targets' numbers."""
    lines = [
        "| client | stream | path | misbehaving runs correct or graceful | silent | crashed | made worse "
        "| well-behaved runs disturbed | guard tokens | ending tokens metered |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    worse = _worse(results)
    keys = sorted(
        {(r.client, r.stream, r.proxy) for r in results}, key=lambda k: (list(CLIENTS).index(k[0]), k[1], k[2])
    )
    for client, stream, through in keys:
        rows = [r for r in results if (r.client, r.stream, r.proxy) == (client, stream, through)]
        s = summarize(rows, worse)
        metered = f"{s.finalize_metered:,}/{s.finalize_tokens:,}" if through else "-"
        lines.append(
            f"| {client} | {'on' if stream else 'off'} | {'proxy' if through else 'direct'} "
            f"| {s.rescued}/{s.misbehaving} ({s.rescued_share:.0%}) | {s.silent} | {s.crashed} "
            f"| {s.made_worse if through else '-'} | {s.false_interventions}/{s.behaved} "
            f"| {f'{s.guard_share:.1%}' if through else '-'} "
            f"| {metered} |"
        )
    return "\n".join(lines)


def misses(results: Sequence[RunResult]) -> str:
    """Every misbehaving run through the proxy that did not end correct or graceful, and every
    disturbed well-behaved one, with what it ended in."""
    lines = [
        f"- {r.client} stream {'on' if r.stream else 'off'} {r.scenario}: {r.outcome}"
        f"{f' (ended: {r.terminated})' if r.terminated else ''}: {r.error or r.answer[:120]!r}"
        for r in results
        if r.proxy and ((not r.behaved and r.outcome not in ("correct", "graceful")) or disturbed(r))
    ]
    return "\n".join(lines) or "none"


def _share(part: int, whole: int) -> str:
    return f"{part / whole if whole else 0:.1%}"


def verdict(results: Sequence[RunResult]) -> str:
    guarded = summarize([r for r in results if r.proxy], _worse(results))
    direct = summarize([r for r in results if not r.proxy])
    good_tokens = sum(r.tokens for r in results if r.proxy and r.behaved)
    good_guard = sum(r.guard_tokens for r in results if r.proxy and r.behaved)
    lines = [
        f"with the proxy: {guarded.rescued}/{guarded.misbehaving} misbehaving runs correct or graceful "
        f"({guarded.rescued_share:.1%}, target ≥ 95 %); {guarded.silent} silent (target 0); "
        f"{guarded.crashed} crashed; {guarded.made_worse} made worse than without it; "
        f"{guarded.false_interventions}/{guarded.behaved} well-behaved runs "
        f"disturbed ({guarded.false_share:.1%}, target ≤ 2 %); guard tokens "
        f"{guarded.guard_tokens:,}/{guarded.tokens:,} ({guarded.guard_share:.1%}, target ≤ 5 %: "
        f"{guarded.judge_calls} judge calls {guarded.judge_tokens:,}, "
        f"corrections added to prompts {guarded.added_tokens:,}; "
        f"{_share(good_guard, good_tokens)} on well-behaved runs); reported apart: "
        f"retried calls in full {guarded.retry_tokens:,} ({_share(guarded.retry_tokens, guarded.tokens)}), "
        f"graceful endings' summary calls {guarded.finalize_tokens:,} "
        f"({_share(guarded.finalize_tokens, guarded.tokens)}; {guarded.finalize_metered:,} in the proxy's metrics)",
    ]
    if direct.misbehaving or direct.behaved:
        lines.append(
            f"without the proxy: {direct.rescued}/{direct.misbehaving} misbehaving runs correct "
            f"({direct.rescued_share:.1%}); {direct.silent} silent; {direct.crashed} crashed"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--clients", default=",".join(CLIENTS), help="openai,agents,langgraph,anthropic,smolagents,pydantic_ai"
    )
    parser.add_argument("--streams", default="off,on", help="off,on")
    parser.add_argument("--paths", default="direct,proxy", help="direct,proxy")
    parser.add_argument("--scenarios", default="", help="comma-separated scenario names (default: all)")
    parser.add_argument("--json", type=Path, help="also write every run as JSON here")
    parser.add_argument(
        "--sessions",
        choices=("header", "derived"),
        default="header",
        help="header: each run sends its own X-Session-Id; derived: none, the proxy tells the runs apart",
    )
    parser.add_argument("--parallel", type=int, default=1, help="run this many copies of each run at once")
    parser.add_argument("--redis-url", help="keep the proxy's session state in this Redis (default: in memory)")
    parser.add_argument("--quiet", action="store_true", help="no line per run on stderr")
    parser.add_argument(
        "--agent",
        choices=sorted(scenarios.PROFILES),
        default="small",
        help="small: one tool, a paragraph of instructions; production: six tools, two pages of instructions",
    )
    args = parser.parse_args(argv)
    names = {n for n in args.scenarios.split(",") if n}
    chosen = [s for s in scenarios.scenarios() if not names or s.name in names]
    started = time.perf_counter()
    results = asyncio.run(
        run_matrix(
            [c for c in args.clients.split(",") if c],
            [s == "on" for s in args.streams.split(",") if s],
            [p == "proxy" for p in args.paths.split(",") if p],
            chosen,
            progress=not args.quiet,
            log_level="warning",
            redis_url=args.redis_url,
            profile=scenarios.PROFILES[args.agent],
            derived=args.sessions == "derived",
            copies=args.parallel,
        )
    )
    print(table(results))
    print()
    print(breakdown(results))
    print()
    print("Misbehaving runs through the proxy not correct or graceful, and well-behaved ones disturbed:")
    print(misses(results))
    print()
    print(verdict(results))
    print(f"\n{len(results)} runs in {time.perf_counter() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

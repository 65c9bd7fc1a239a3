"""The benchmark's before/after table, from two runs' ``--json`` files: per client and format
(JSON replies or streamed), how the runs ended without the proxy, through the proxy before
and after a change, and the judge calls a well-behaved run cost.

    python -m tests.bench.efficacy.run_efficacy --paths proxy --json before.json   # on the old tree
    python -m tests.bench.efficacy.run_efficacy --json after.json                  # on the new one
    python -m tests.bench.efficacy.before_after before.json after.json

The runs without the proxy come from whichever file has them (the scripted models and the
clients are the benchmark's, the same for both trees). A cell is correct / graceful / silent /
crashed over all the runs of its row, then the well-behaved runs disturbed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from tests.bench.efficacy.clients import CLIENTS
from tests.bench.efficacy.run_efficacy import OUTCOMES, RunResult, disturbed

__all__ = ["judge_calls", "load", "table"]


def load(path: Path) -> list[RunResult]:
    return [RunResult(**row) for row in json.loads(path.read_text())]


def _cell(rows: Sequence[RunResult]) -> str:
    if not rows:
        return "-"
    counted = Counter(r.outcome for r in rows)
    good = [r for r in rows if r.behaved]
    return " / ".join(str(counted[o]) for o in OUTCOMES) + f" · {sum(disturbed(r) for r in good)}/{len(good)}"


def _per_run(rows: Sequence[RunResult]) -> str:
    good = [r for r in rows if r.behaved]
    return f"{sum(r.judge_calls for r in good) / len(good):.2f}" if good else "-"


def table(before: Sequence[RunResult], after: Sequence[RunResult], label: str = "before") -> str:
    """A row per client and format: without the proxy, ``label`` (before) and after."""
    direct = [r for r in after if not r.proxy] or [r for r in before if not r.proxy]
    old = [r for r in before if r.proxy]
    new = [r for r in after if r.proxy]
    lines = [
        f"| client | format | without the proxy | {label} | after "
        f"| judge calls per well-behaved run ({label} → after) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    order = list(CLIENTS)
    keys = sorted({(r.client, r.stream) for r in [*direct, *old, *new]}, key=lambda k: (order.index(k[0]), k[1]))
    for client, stream in keys:
        picked = [[r for r in rows if (r.client, r.stream) == (client, stream)] for rows in (direct, old, new)]
        lines.append(
            f"| {client} | {'stream' if stream else 'json'} | {' | '.join(_cell(rows) for rows in picked)} "
            f"| {_per_run(picked[1])} → {_per_run(picked[2])} |"
        )
    return "\n".join(lines)


def judge_calls(before: Sequence[RunResult], after: Sequence[RunResult], label: str = "before") -> str:
    """Judge calls per well-behaved run through the proxy, by scenario family (``short/ok``,
    ``long_answer/*``…), before and after."""
    families = sorted({r.scenario.partition("/")[0] for r in [*before, *after] if r.behaved and r.proxy})
    lines = [f"| well-behaved family | runs | judge calls per run ({label} → after) |", "| --- | --- | --- |"]
    for family in families:
        old = [r for r in before if r.proxy and r.scenario.partition("/")[0] == family]
        new = [r for r in after if r.proxy and r.scenario.partition("/")[0] == family]
        lines.append(f"| {family} | {len(new) or len(old)} | {_per_run(old)} → {_per_run(new)} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--label", default="before", help="what the before column is called (a commit)")
    args = parser.parse_args(argv)
    before, after = load(args.before), load(args.after)
    print(table(before, after, args.label))
    print()
    print(judge_calls(before, after, args.label))
    return 0


if __name__ == "__main__":
    sys.exit(main())

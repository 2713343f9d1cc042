"""Soak test: the fuzz properties of tests/test_fuzz.py over many more random examples than CI runs.

Fresh random examples, the same `check_example`, going on after a failure: the output is a count of broken
properties with one script that shows each. Exit code 1 when anything failed.

    python benchmarks/soak.py --examples 1000 [--seed 7] [--json PATH]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import common  # also puts the project root on sys.path
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage

from shared_tools.results import AgentLimits
from tests.conftest import IMPLEMENTATIONS
from tests.fuzz_model import limits, scripts
from tests.test_fuzz import check_example, comparable, run_example


def soak(examples: int, random_seed: int | None) -> dict[str, Any]:
    runs: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    problems: dict[str, tuple[str, list[AIMessage], AgentLimits]] = {}
    stops: Counter[str] = Counter()

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],  # no shrinking: every failure is kept and counted as it was drawn
        suppress_health_check=list(HealthCheck),
    )
    @given(script=scripts(), budgets=limits, parallel=st.booleans(), use_async=st.booleans())
    def one(script: list[AIMessage], budgets: AgentLimits, parallel: bool, use_async: bool) -> None:
        outcomes = {}
        for kind in IMPLEMENTATIONS:
            example = run_example(kind, script, budgets, parallel, use_async)
            runs[kind] += 1
            broken = check_example(example)
            if example.result is not None:
                stops[f"{kind}: {example.result.stop_reason.value}"] += 1
            if broken:
                failed[kind] += 1
            for problem in broken:
                problems.setdefault(f"{kind}: {problem[:160]}", (kind, script, budgets))
            outcomes[kind] = comparable(example)
        if parallel:  # the cross-check compares sequential runs, where the order of results is fixed
            return
        runs["both agree"] += 1
        first = next(iter(outcomes.values()))
        if any(outcome != first for outcome in outcomes.values()):
            failed["both agree"] += 1
            problems.setdefault("the implementations disagree", (" / ".join(outcomes), script, budgets))

    if random_seed is not None:
        one = seed(random_seed)(one)
    one()
    return {"runs": runs, "failed": failed, "problems": problems, "stops": stops}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=1_000, help="random scripts per implementation")
    parser.add_argument("--seed", type=int, default=None, help="fix hypothesis' random seed")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the counts and the machine as JSON")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the agents log every invalid reply; the counts below are the output
    info = common.machine()
    started = time.perf_counter()
    report = soak(args.examples, args.seed)
    elapsed = time.perf_counter() - started
    print(f"soak: {args.examples} random scripts, seed {args.seed}, {elapsed:.0f} s")
    for name in (*IMPLEMENTATIONS, "both agree"):
        print(f"  {name:<12} {report['runs'][name]:>6} examples  {report['failed'][name]:>4} failed")
    print("  stop reasons: " + ", ".join(f"{k} {v}" for k, v in sorted(report["stops"].items())))
    for problem, (kind, script, budgets) in report["problems"].items():
        print(f"FAILED {problem}\n  {kind} {budgets}\n  script: {[m.model_dump() for m in script]!r:.1500}")
    print(common.machine_line(info))
    common.write_json(
        args.json,
        {
            "benchmark": "soak",
            "machine": info,
            "examples": args.examples,
            "seed": args.seed,
            "elapsed_s": elapsed,
            "runs": dict(report["runs"]),
            "failed": dict(report["failed"]),
            "stops": dict(report["stops"]),
            "problems": [
                {
                    "problem": problem,
                    "implementation": kind,
                    "limits": budgets,
                    "script": [m.model_dump() for m in script],
                }
                for problem, (kind, script, budgets) in report["problems"].items()
            ],
        },
    )
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())

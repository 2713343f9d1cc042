"""Tokens per job and per step for every compare.py scenario and contender, what truncation saves, and the bill.

Runs the scenarios through the comparison's own runner on the scripted model (deterministic counts, no timing):
tokens per run and step, big-results with and without the 2,000-character cut, and a month of seed jobs.

    python benchmarks/tokens.py [SCENARIO ...] [--runs 1] [--json PATH]
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import common
from rich.table import Table

from comparison import SCENARIOS, SCENARIOS_BY_NAME, RunOptions, RunRecord, Scenario, run_scenario

JOBS_PER_DAY = 1_000
DAYS_PER_MONTH = 30
TRUNCATION_TARGET = 0.40


def run_all(scenarios: list[Scenario]) -> list[RunRecord]:
    """Every scenario on every contender, through the runner `python compare.py` uses."""
    records: list[RunRecord] = []
    with tempfile.TemporaryDirectory(prefix="bench-tokens-") as scratch:
        options = RunOptions(session_db=Path(scratch) / "sessions.db")
        for scenario in scenarios:
            run_scenario(scenario, options, records.append)
    return records


def fingerprint(records: list[RunRecord]) -> list[tuple[Any, ...]]:
    """What must not change between two runs of a deterministic benchmark."""
    return [(r.scenario, r.variant, r.contender, r.turn, r.outcome, r.tokens_per_step) for r in records]


def same_outcome(a: RunRecord, b: RunRecord) -> bool:
    """Same stop, same cart, same tools called: the customer could not tell the two runs apart."""
    tools = [[e["name"] for e in r.tool_events()] for r in (a, b)]
    return a.outcome == b.outcome and a.cart == b.cart and a.cart_total == b.cart_total and tools[0] == tools[1]


def truncation_rows(records: list[RunRecord]) -> list[dict[str, Any]]:
    """big-results, full vs truncated, per contender."""
    by_key = {(r.variant, r.contender): r for r in records if r.scenario == "big-results"}
    # The article job with 5 results: what the job costs without a big result, so the cut can be judged on the
    # part of the bill the big result adds.
    seed = {r.contender: r.tokens for r in records if (r.scenario, r.variant) == ("bookstore", "default")}
    rows = []
    for (variant, contender), full in by_key.items():
        if variant != "full" or ("truncated", contender) not in by_key:
            continue
        cut = by_key[("truncated", contender)]
        rows.append(
            {
                "contender": contender,
                "full": full.tokens,
                "truncated": cut.tokens,
                "fewer": 1 - cut.tokens / full.tokens if full.tokens else 0.0,
                "of_the_extra": (full.tokens - cut.tokens) / (full.tokens - seed[contender])
                if contender in seed and full.tokens > seed[contender]
                else None,
                "same_outcome": same_outcome(full, cut),
                "outcome_full": full.outcome,
                "outcome_truncated": cut.outcome,
            }
        )
    return rows


def projection_rows(records: list[RunRecord]) -> list[dict[str, Any]]:
    """The article's arithmetic: tokens of one job × jobs a day, for the article job and the big-results job."""
    rows = []
    for scenario, variant in (("bookstore", "default"), ("big-results", "full"), ("big-results", "truncated")):
        for r in records:
            if r.scenario == scenario and r.variant == variant:
                rows.append(
                    {
                        "job": f"{scenario}/{variant}",
                        "contender": r.contender,
                        "tokens_per_job": r.tokens,
                        "per_day": r.tokens * JOBS_PER_DAY,
                        "per_month": r.tokens * JOBS_PER_DAY * DAYS_PER_MONTH,
                    }
                )
    return rows


def runs_table(records: Sequence[RunRecord]) -> Table:
    """Every run counted: how it ended, its model calls and its tokens, in all and per step."""
    return common.table(
        "Tokens per run and per model call (scripted model, compare.py's scenarios)",
        ("scenario", "variant", "contender", "turn", "outcome", "model calls", "tokens", "tokens per step"),
        [
            (
                r.scenario,
                r.variant,
                r.contender,
                r.turn,
                r.outcome if len(r.outcome) <= 32 else r.outcome[:31] + "…",
                r.model_calls,
                f"{r.tokens:,}",
                " → ".join(f"{t:,}" for t in r.tokens_per_step),
            )
            for r in records
        ],
    )


def truncation_table(truncation: Sequence[dict[str, Any]]) -> Table:
    """big-results with and without the cut, per contender (`truncation_rows`)."""
    return common.table(
        f"big-results: max_results=50, with and without the cut (target ≥ {TRUNCATION_TARGET:.0%} fewer, same outcome)",
        (
            "contender",
            "full",
            "truncated",
            "fewer",
            "of what 50 results add",
            "same outcome",
            "outcome (full / truncated)",
        ),
        [
            (
                t["contender"],
                f"{t['full']:,}",
                f"{t['truncated']:,}",
                f"{t['fewer']:.0%}",
                "-" if t["of_the_extra"] is None else f"{t['of_the_extra']:.0%}",
                "yes" if t["same_outcome"] else "NO",
                f"{t['outcome_full']} / {t['outcome_truncated']}",
            )
            for t in truncation
        ],
    )


def projection_table(projection: Sequence[dict[str, Any]]) -> Table:
    """The article's monthly projection of the tokens per job (`projection_rows`)."""
    return common.table(
        f"The article's projection: tokens per job × {JOBS_PER_DAY:,} jobs a day × {DAYS_PER_MONTH} days",
        ("job", "contender", "tokens per job", "per day", "per month"),
        [
            (p["job"], p["contender"], f"{p['tokens_per_job']:,}", f"{p['per_day']:,}", f"{p['per_month']:,}")
            for p in projection
        ],
    )


def run_json(r: RunRecord) -> dict[str, Any]:
    """One run as the JSON document lists it."""
    return {
        "scenario": r.scenario,
        "variant": r.variant,
        "contender": r.contender,
        "turn": r.turn,
        "outcome": r.outcome,
        "model_calls": r.model_calls,
        "tool_calls": r.tool_calls,
        "tokens": r.tokens,
        "tokens_per_step": r.tokens_per_step,
    }


def main() -> None:
    # Nothing here is timed: --runs is how often the tokens are counted, to show the counts do not change.
    parser = common.parser(
        __doc__.splitlines()[0],
        default_runs=1,
        runs_help="count every scenario this many times; 2 or more checks that the counts are identical",
    )
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="scenarios to count (default: all)")
    args = parser.parse_args()
    unknown = [name for name in args.scenarios if name not in SCENARIOS_BY_NAME]
    if unknown:
        parser.error(f"unknown scenario {unknown[0]!r}; choose from: {', '.join(SCENARIOS_BY_NAME)}")
    scenarios = [SCENARIOS_BY_NAME[name] for name in args.scenarios] or list(SCENARIOS)
    console = common.console()
    info = common.machine()

    records = run_all(scenarios)
    # Counting twice must give the same numbers; if not, something in the runs is not deterministic. One count
    # compares nothing, so it says nothing either way (None), rather than a "true" nobody checked.
    deterministic: bool | None = None
    if args.runs > 1:
        deterministic = all(fingerprint(run_all(scenarios)) == fingerprint(records) for _ in range(args.runs - 1))

    console.print(runs_table(records))
    truncation = truncation_rows(records)
    if truncation:
        console.print(truncation_table(truncation))
    projection = projection_rows(records)
    if projection:
        console.print(projection_table(projection))
    if args.runs > 1:
        console.print(f"{args.runs} counts, identical: {'yes' if deterministic else 'NO'}")
    console.print(common.machine_line(info))
    common.write_json(
        args.json,
        {
            "benchmark": "tokens",
            "machine": info,
            "deterministic": deterministic,
            "runs": [run_json(r) for r in records],
            "truncation": truncation,
            "projection": projection,
        },
    )


if __name__ == "__main__":
    main()

"""What every benchmark shares: the command line, interleaved timing, summary statistics, the machine record.

Machines here are shared and noisy, so variants run round-robin after a warm-up (`interleave`) and are reported as
medians with p10/p90 and as ratios; `machine` records where and when. Importing this module puts the project root
on `sys.path`, so ``python benchmarks/x.py`` works from a checkout. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import logging
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    # `python benchmarks/x.py` puts benchmarks/ on the path, not the project root; every script imports both,
    # so importing this module first makes the project importable without installing it.
    sys.path.insert(0, str(ROOT))

PACKAGES = (
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langchain-core",
    "langchain",
    "pydantic",
    "opentelemetry-sdk",
)

Prepare = Callable[[], Callable[[], Any]]
"""Builds one run's fixtures (untimed) and returns the run itself (timed)."""


@dataclass(frozen=True)
class Stats:
    """Summary of one variant's samples, in microseconds."""

    n: int
    median: float
    p10: float
    p90: float

    @classmethod
    def of(cls, samples_us: Sequence[float]) -> Stats:
        ordered = sorted(samples_us)
        return cls(len(ordered), statistics.median(ordered), _quantile(ordered, 0.10), _quantile(ordered, 0.90))


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank quantile; with a handful of samples the extremes are what you get, which is honest."""
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


@dataclass(frozen=True)
class Measured:
    """Wall and CPU time of one variant over all its timed runs."""

    wall: Stats
    cpu: Stats


def interleave(variants: Mapping[str, Prepare], runs: int, *, warmup: int = 3) -> dict[str, Measured]:
    """Time every variant `runs` times, round-robin, after `warmup` untimed rounds.

    CPU time is `time.process_time`, which counts every thread of the process (executor hops included).
    The garbage collector runs between runs, never inside one, so one variant does not pay for another's
    garbage.
    """
    wall: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(warmup + runs):
        for name, prepare in variants.items():
            job = prepare()
            gc.collect()
            gc.disable()
            try:
                cpu_start, wall_start = time.process_time(), time.perf_counter()
                job()
                wall_end, cpu_end = time.perf_counter(), time.process_time()
            finally:
                gc.enable()
            if round_ >= warmup:
                wall[name].append((wall_end - wall_start) * 1e6)
                cpu[name].append((cpu_end - cpu_start) * 1e6)
    return {name: Measured(Stats.of(wall[name]), Stats.of(cpu[name])) for name in variants}


def machine() -> dict[str, Any]:
    """Where and when: platform, CPUs, Python, the library versions that matter, and how busy the box was."""
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "packages": versions,
    }


def machine_line(info: Mapping[str, Any]) -> str:
    load = info["load_average"]
    packages = ", ".join(f"{k} {v}" for k, v in info["packages"].items() if v)
    return (
        f"{info['date']} · {info['platform']} · {info['cpu_count']} CPU · Python {info['python']} · "
        f"load {load} · {packages}"
    )


def parser(
    description: str, *, default_runs: int, runs_help: str = "timed runs per variant"
) -> argparse.ArgumentParser:
    """The options every benchmark takes; `runs_help` for a benchmark whose runs are not timed."""
    result = argparse.ArgumentParser(description=description)
    result.add_argument("--runs", type=int, default=default_runs, help=f"{runs_help} (default {default_runs})")
    result.add_argument("--json", type=Path, metavar="PATH", help="also write the numbers and the machine as JSON")
    return result


def console() -> Console:
    """The console the tables go to. Also quiets the agents' logs to errors, as compare.py does: the tool
    failures they log as warnings are part of the experiments, not news."""
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    # Wide enough that the tables never wrap in a log file or a CI page.
    return Console(width=max(170, Console().width), highlight=False)


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Table:
    result = Table(title=title, title_justify="left")
    for i, column in enumerate(columns):
        result.add_column(column, justify="left" if i == 0 else "right")
    for row in rows:
        result.add_row(*(str(cell) for cell in row))
    return result


def us(value: float) -> str:
    """Microseconds with a thousands separator, no decimals."""
    return f"{value:,.0f}"


def ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}×" if base else "-"


def write_json(path: Path | None, document: Mapping[str, Any]) -> None:
    if path is not None:
        path.write_text(json.dumps(document, indent=1, default=_default) + "\n", encoding="utf-8")


def _default(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    return str(value)

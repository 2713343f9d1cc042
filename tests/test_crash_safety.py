"""Crash safety: a session killed with SIGKILL mid-turn loses no finished turn and adds no book twice.

A child process runs a SQLite (or Postgres) `GraphSession` and is killed during a stock check or right after
add_to_cart committed; this process reopens the thread and finishes the turn with `continue_unfinished`. Without
the tool-call id the same crash adds the book twice; the dead process's turn lock is taken over.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from comparison.scenarios import INSTRUCTIONS, SEED_GOAL
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.models import make_model
from shared_tools.results import AgentOptions
from tests.conftest import blocking

ROOT = Path(__file__).resolve().parent.parent
ORDER_QUESTION = "Where is my order 4512?"
QUIET_ORCHARD = 7

CHILD = """
import sys, time
from langgraph_version import GraphAgent, GraphSession
from shared_tools.bookstore.faults import Faults
from shared_tools.results import AgentOptions
from shared_tools.models import make_model
from comparison.scenarios import INSTRUCTIONS, SEED_GOAL
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools

store_path, thread_path, marker, kill_at, idempotent = sys.argv[1:6]

def on_event(event):
    with open(marker, "a", encoding="utf-8") as file:
        file.write(event.name + "\\n")
    if event.name == kill_at:
        time.sleep(120)  # inside the node: the parent kills us here

store = BookStore(store_path)
tools = make_tools(store, faults=Faults(latency_s=0.5), idempotent=idempotent == "1")
agent = GraphAgent(make_model("scripted"), tools, AgentOptions(parallel_tools=False, on_event=on_event))
where = {"url": thread_path} if thread_path.startswith("postgresql:") else {"path": thread_path}
opener = GraphSession.postgres if "url" in where else GraphSession.sqlite
with opener(agent, INSTRUCTIONS, thread_id="shop", **where) as session:
    session.ask("Where is my order 4512?")
    with open(marker, "a", encoding="utf-8") as file:
        file.write("turn 1 done\\n")
    session.ask(SEED_GOAL)
print("the run was not killed")
"""


def run_and_kill(
    tmp_path: Path, kill_at: str, *, idempotent: bool, threads: str | None = None
) -> tuple[Path, Path, int]:
    """Start the child, wait until turn 2 reaches `kill_at` (as its on_event reports), SIGKILL it; the paths
    of its store and its threads (or the Postgres URL `threads`), and its pid."""
    store_path, thread_path, marker = tmp_path / "store.db", tmp_path / "threads.db", tmp_path / "events.txt"
    where = threads or str(thread_path)
    marker.touch()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(store_path), where, str(marker), kill_at, str(int(idempotent))],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while True:
            lines = marker.read_text(encoding="utf-8").splitlines()
            if "turn 1 done" in lines and kill_at in lines[lines.index("turn 1 done") :]:
                break
            if child.poll() is not None:
                pytest.fail(f"the child ended before it could be killed: {child.communicate()}")
            time.sleep(0.02)  # polling for the child's progress, not a timing assertion
        os.kill(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL
    return store_path, thread_path, child.pid


def turn_holders(thread_path: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(thread_path) as db:
        return db.execute("SELECT thread_id, pid FROM turn_locks").fetchall()


def advisory_locks_held(url: str) -> int:
    """Graph turn locks held in the database at `url` (the lock of a killed client goes when its backend notices
    the closed socket, so this waits a little for that, never for a turn)."""
    import psycopg

    from langgraph_version.postgres import TURN_LOCK_CLASS

    query = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND granted"
    with psycopg.connect(url, autocommit=True) as db:
        for _ in range(200):
            row = db.execute(query, (TURN_LOCK_CLASS,)).fetchone()
            if row is not None and row[0] == 0:
                return 0
            time.sleep(0.05)  # polling for the server to reap the dead client, not a timing assertion
        return int(row[0]) if row is not None else 0


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
@pytest.mark.parametrize("threads_in", ["sqlite", "postgres"])
@pytest.mark.parametrize(
    ("kill_at", "idempotent", "copies"),
    [
        pytest.param("add_to_cart", True, 1, id="after-the-add-before-its-checkpoint"),
        pytest.param("check_stock", True, 1, id="during-the-stock-checks"),
        pytest.param("add_to_cart", False, 2, id="after-the-add-without-the-call-id"),
    ],
)
def test_a_killed_session_resumes_without_losing_a_turn_or_adding_twice(
    tmp_path: Path, kill_at: str, idempotent: bool, copies: int, threads_in: str, request: pytest.FixtureRequest
) -> None:
    from langgraph_version import GraphAgent, GraphSession

    url = request.getfixturevalue("postgres_url") if threads_in == "postgres" else None
    store_path, thread_path, pid = run_and_kill(tmp_path, kill_at, idempotent=idempotent, threads=url)
    if url is None:
        assert turn_holders(thread_path) == [("shop", pid)], "killed mid-turn, it never released the thread"
    else:
        assert advisory_locks_held(url) == 0, "Postgres ended the killed client's transaction and its lock"

    store = BookStore(store_path)
    tools = make_tools(store, idempotent=idempotent)
    agent = GraphAgent(make_model("scripted"), tools, AgentOptions(parallel_tools=False))
    where: dict[str, str] = {"url": url} if url is not None else {"path": str(thread_path)}
    opener = GraphSession.postgres if url is not None else GraphSession.sqlite
    with opener(agent, INSTRUCTIONS, thread_id="shop", **where) as session:
        questions = [i for i, m in enumerate(blocking(session.messages)) if isinstance(m, HumanMessage)]
        turn_one = blocking(session.messages)[questions[0] : questions[1]]
        assert [m.content for m in turn_one if isinstance(m, HumanMessage)] == [ORDER_QUESTION]
        assert isinstance(turn_one[-1], AIMessage) and "TRK-88" in turn_one[-1].content, "turn 1 is kept whole"
        assert blocking(session.unfinished)

        result = session.continue_unfinished()
        assert result is not None and result.ok, result
        assert "The Quiet Orchard" in (result.answer or "")
        assert session.continue_unfinished() is None and not blocking(session.unfinished)
        if url is None:
            assert turn_holders(thread_path) == [], "the dead process's turn was taken over, then released"

        messages = blocking(session.messages)
        assert [m.content for m in messages if isinstance(m, HumanMessage)] == [ORDER_QUESTION, SEED_GOAL]
        adds = [m for m in messages if isinstance(m, ToolMessage) and m.name == "add_to_cart"]
        assert len(adds) == 1, "the re-run node answered the add's call once"
    assert store.cart("c1").quantity_of(QUIET_ORCHARD) == copies
    assert store.check_invariants() == []

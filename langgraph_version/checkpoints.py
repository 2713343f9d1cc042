"""Checkpoints in a SQLite file, and the turn lock a checkpointer lacks: one turn per thread across processes.

`SqliteCheckpoints` opens LangGraph's `AsyncSqliteSaver` for one call at a time and keeps a `turn_locks`
table beside the checkpoints (a stale row of a dead process is taken over); `turn_lock_for` is the lock of a
thread within this process. `langgraph_version.postgres` is the same for Postgres.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
import uuid
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import aiosqlite
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from langgraph_version.serde import CheckpointSerializer
from shared_tools.results import ConcurrentTurn

HOST = socket.gethostname()

TURN_LOCKS_TABLE = """
CREATE TABLE IF NOT EXISTS turn_locks (
    thread_id TEXT PRIMARY KEY,
    owner     TEXT NOT NULL,  -- a fresh id for every turn taken
    pid       INTEGER NOT NULL,
    host      TEXT NOT NULL,
    taken_at  REAL NOT NULL   -- time.time()
)
"""



class SqliteCheckpoints:
    """A SQLite file of checkpoints, opened with LangGraph's `AsyncSqliteSaver` for one call at a time.

    An `AsyncSqliteSaver` belongs to the event loop it was made on, and every sync call of a session runs on a
    fresh event loop (`run_blocking`), so each call opens the file on its own loop and closes it before it
    returns. aiosqlite runs a connection's statements in order and closes it after the last one, so a call's
    checkpoints are all written when it returns (or raises): nothing is ever left pending, and nothing is left
    open, which is why closing a session has nothing to wait for.

    `synchronous` is SQLite's ``PRAGMA synchronous``, NORMAL by default: the saver puts the file in WAL mode,
    where NORMAL still keeps every committed checkpoint through a killed process (the crash test SIGKILLs one)
    and only a power cut or OS crash can lose the last few, while SQLite's own default, FULL, adds an fsync
    per checkpoint (benchmarks/overhead.py measures both).

    The file also holds one table of our own, `turn_locks`: one row per thread with a turn in progress (see
    `turn`). Checkpoints are written with `CheckpointSerializer`, which also stores what msgpack cannot (a
    model's 10**30), as does the session's default in-memory saver; a checkpointer you pass keeps its own.
    """

    def __init__(self, path: str, *, synchronous: Literal["OFF", "NORMAL", "FULL", "EXTRA"] = "NORMAL") -> None:
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, got {synchronous!r}")
        self.path = path
        self.synchronous = synchronous
        self._turn_table_ready = False

    @asynccontextmanager
    async def open(self) -> AsyncIterator[AsyncSqliteSaver]:
        async with aiosqlite.connect(self.path) as connection:
            await connection.execute(f"PRAGMA synchronous={self.synchronous}")
            # Pages freed by pruning go back to the file system (`_prune`); only takes effect on a new file.
            await connection.execute("PRAGMA auto_vacuum=INCREMENTAL")
            saver = AsyncSqliteSaver(connection, serde=CheckpointSerializer())
            await saver.setup()  # most methods do this on first use, but not `adelete_thread` on a new file
            yield saver

    @asynccontextmanager
    async def turn(self, thread_id: str, *, wait: float) -> AsyncIterator[None]:
        """Hold the turn of `thread_id` for as long as the block runs, whichever process asks for it.

        The row is taken in a short write transaction (``BEGIN IMMEDIATE``: SQLite lets one writer in at a
        time, so two processes cannot both find the thread free) and deleted when the block ends. Another
        process's turn is waited for, polling, at most `wait` seconds; then `ConcurrentTurn` says who holds it.
        A process that died mid-turn (SIGKILL, a power cut) never deletes its row, so a row whose process no
        longer exists on this host is stale and is taken over; a row from another host is always believed,
        since its process cannot be checked from here (nor can a reused process id, which is rare).
        """
        owner = uuid.uuid4().hex
        async with aiosqlite.connect(self.path, isolation_level=None) as db:
            await db.execute(f"PRAGMA synchronous={self.synchronous}")
            if not self._turn_table_ready:
                await db.execute(TURN_LOCKS_TABLE)
                self._turn_table_ready = True
            deadline = time.monotonic() + wait
            while (holder := await _take_turn(db, thread_id, owner)) is not None:
                if time.monotonic() >= deadline:
                    _, pid, host, taken_at = holder
                    raise ConcurrentTurn(
                        f"thread {thread_id!r} in {self.path} has a turn in progress in another process "
                        f"(pid {pid} on {host}, started {time.time() - taken_at:.1f} s ago); waited {wait:g} s "
                        "for it to finish. Ask again when it has finished."
                    )
                await asyncio.sleep(0.05)
            _TURNS_HELD_HERE.add(owner)
            try:
                yield
            finally:
                _TURNS_HELD_HERE.discard(owner)  # from here on, a row left behind reads as stale
                await db.execute("DELETE FROM turn_locks WHERE thread_id = ? AND owner = ?", (thread_id, owner))


_TURNS_HELD_HERE: set[str] = set()
"""Owners of the `turn_locks` rows this process holds now; a row with our pid and another owner is a leftover."""


async def _take_turn(db: aiosqlite.Connection, thread_id: str, owner: str) -> tuple[Any, ...] | None:
    """Take the thread's turn for `owner` if nobody holds it, or its holder is gone; else the holder's row."""
    await db.execute("BEGIN IMMEDIATE")
    try:
        async with db.execute(
            "SELECT owner, pid, host, taken_at FROM turn_locks WHERE thread_id = ?", (thread_id,)
        ) as cursor:
            holder = await cursor.fetchone()
        if holder is None or _holder_gone(*holder[:3]):
            await db.execute(
                "INSERT OR REPLACE INTO turn_locks VALUES (?, ?, ?, ?, ?)",
                (thread_id, owner, os.getpid(), HOST, time.time()),
            )
            holder = None
        await db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            await db.execute("ROLLBACK")
        raise
    return None if holder is None else tuple(holder)


def _holder_gone(owner: str, pid: int, host: str) -> bool:
    if host != HOST:
        return False
    if pid == os.getpid():
        return owner not in _TURNS_HELD_HERE
    return not _process_alive(pid)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: is there such a process?
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # there is, and it belongs to someone else
    # A zombie (dead, not yet reaped by its parent) still answers signal 0.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class _TurnLock:
    """The turn of one thread within this process. A threading lock, not an asyncio one: sync calls from two
    threads each run an event loop of their own (as in `handwritten.Session`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()


_TURN_LOCKS: weakref.WeakValueDictionary[tuple[Any, ...], _TurnLock] = weakref.WeakValueDictionary()
_TURN_LOCKS_GUARD = threading.Lock()


def turn_lock_for(key: tuple[Any, ...]) -> _TurnLock:
    """The one lock of a thread (a checkpointer and a thread id) shared by every session on it in this process."""
    with _TURN_LOCKS_GUARD:
        lock = _TURN_LOCKS.get(key)
        if lock is None:
            lock = _TURN_LOCKS[key] = _TurnLock()
        return lock



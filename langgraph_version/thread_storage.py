"""What a checkpointer thread holds, counted where it is stored: `thread_storage` (checkpoints, bytes) for a
SQLite file, Postgres or `InMemorySaver`, one COUNT and one SUM each, never by loading every checkpoint.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

from langgraph_version.checkpoints import SqliteCheckpoints
from langgraph_version.postgres import PostgresCheckpoints


def _stored_size(value: Any) -> int:
    """The bytes in a checkpointer's stored entry (nested tuples and dicts of serialized bytes)."""
    if isinstance(value, bytes | bytearray):
        return len(value)
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, dict):
        return sum(_stored_size(v) for v in value.values())
    if isinstance(value, tuple | list):
        return sum(_stored_size(v) for v in value)
    return 0


def thread_storage(session: Any, thread_id: str) -> tuple[int, int]:
    """(checkpoints, bytes) a thread holds in its checkpointer, counted where they are stored.

    SQLite: one COUNT and one SUM over the thread's rows (checkpoints and pending writes). `InMemorySaver`: its
    storage dicts for the thread. Anything else: (0, 0), since it cannot be counted without loading it.
    """
    saver = getattr(session, "checkpointer", None)
    if saver is None:  # a CheckpointThread keeps its saver in its graph (in memory) or its `checkpoints`
        saver = getattr(session, "checkpoints", None) or getattr(getattr(session, "_graph", None), "checkpointer", None)
    if isinstance(saver, SqliteCheckpoints):
        return sqlite_thread_storage(Path(saver.path), thread_id)
    if isinstance(saver, PostgresCheckpoints):
        return postgres_thread_storage(saver.url, thread_id)
    if isinstance(saver, InMemorySaver):
        stored = saver.storage.get(thread_id, {})
        checkpoints = sum(len(by_id) for by_id in stored.values())
        size = _stored_size(stored)
        size += sum(_stored_size(v) for k, v in saver.writes.items() if k[0] == thread_id)
        size += sum(_stored_size(v) for k, v in saver.blobs.items() if k[0] == thread_id)
        return checkpoints, size
    return 0, 0


def sqlite_thread_storage(path: Path, thread_id: str) -> tuple[int, int]:
    """(checkpoints, bytes) of one thread in a LangGraph SQLite checkpoint file, read-only."""
    if not path.exists():
        return 0, 0
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "checkpoints" not in tables:
            return 0, 0
        count, size = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata)), 0) FROM checkpoints"
            " WHERE thread_id = ?",
            (thread_id,),
        ).fetchone()
        if "writes" in tables:
            size += db.execute(
                "SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes WHERE thread_id = ?", (thread_id,)
            ).fetchone()[0]
    return int(count), int(size)


def postgres_thread_storage(url: str, thread_id: str) -> tuple[int, int]:
    """(checkpoints, bytes) of one thread in LangGraph's Postgres checkpoint tables (0, 0 before they exist)."""
    import psycopg

    with psycopg.connect(url, autocommit=True, prepare_threshold=None) as db:
        if db.execute("SELECT to_regclass('checkpoints') IS NULL").fetchone() == (True,):
            return 0, 0
        count, size = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(pg_column_size(checkpoint) + pg_column_size(metadata)), 0)"
            " FROM checkpoints WHERE thread_id = %s",
            (thread_id,),
        ).fetchone() or (0, 0)
        for table in ("checkpoint_blobs", "checkpoint_writes"):
            row = db.execute(f"SELECT COALESCE(SUM(LENGTH(blob)), 0) FROM {table} WHERE thread_id = %s", (thread_id,))
            size += (row.fetchone() or (0,))[0]
    return int(count), int(size)

"""Checkpoints in Postgres, for threads several processes on several machines share, and their turn lock.

`PostgresCheckpoints` opens LangGraph's `AsyncPostgresSaver` per call (or on a pool, `postgres_pool`), runs
its migrations once under an advisory lock, and holds a thread's turn with a transaction-level advisory lock;
`prune_postgres` is LangGraph's keep_latest once the last turns are all stored. psycopg is optional (the
``postgres`` extra), so it is imported only when used.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from langgraph_version.checkpoints import HOST
from langgraph_version.serde import CheckpointSerializer
from shared_tools import guards
from shared_tools.results import ConcurrentTurn

log = logging.getLogger(__name__)

CONNECTION_KWARGS: dict[str, Any] = {"autocommit": True, "prepare_threshold": None}
"""How every Postgres connection of a session is opened (add ``row_factory=dict_row``, which LangGraph's saver
reads rows with): autocommit, as `AsyncPostgresSaver.from_conn_string` does, and no server-side prepared
statements (``prepare_threshold=None``; LangGraph's own helper uses 0, prepare everything), so a PgBouncer in
transaction mode, which hands each transaction to whichever server connection is free, never meets a
statement prepared on another one. A pool you pass to `PostgresCheckpoints` needs the same kwargs
(`postgres_pool` makes one)."""

TURN_LOCK_CLASS = 0x4C47  # "LG"
"""First key of the advisory lock of a graph thread's turn (the second is ``hashtext(thread_id)``). The two-key
form never meets a one-key ``pg_advisory_lock(bigint)`` another part of the database may take; two threads
whose names hash alike only take turns with each other."""

SETUP_LOCK = (TURN_LOCK_CLASS, 0)
"""The advisory lock `PostgresCheckpoints.setup` holds: LangGraph's migrations are not safe to race."""


def postgres_pool(url: str, *, min_size: int = 1, max_size: int = 10, **options: Any) -> Any:
    """A psycopg `AsyncConnectionPool` (not open yet: ``async with`` it on the event loop that will use it) whose
    connections a `PostgresCheckpoints` can use: `CONNECTION_KWARGS` plus LangGraph's ``row_factory``."""
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    kwargs = {**CONNECTION_KWARGS, "row_factory": dict_row, "application_name": _application_name()}
    return AsyncConnectionPool(url, min_size=min_size, max_size=max_size, kwargs=kwargs, open=False, **options)


def _application_name() -> str:
    # Shown in pg_stat_activity, and by `ConcurrentTurn` to say who holds a turn.
    return f"agent-loop-compare pid {os.getpid()} on {HOST}"[:63]


class PostgresCheckpoints:
    """Checkpoints in a Postgres database, through LangGraph's `AsyncPostgresSaver`; the role `SqliteCheckpoints`
    has for a file, for threads that several processes on several machines share.

    What the checkpointer gives for free: every superstep's checkpoint written in a transaction, readable by
    any process, with its tables created by `setup` (LangGraph's migrations, run here once per object under an
    advisory lock, because two processes migrating one empty database at once collide). What it does not give:
    one turn at a time (`turn`, an advisory lock held in Postgres) and whose conversation a thread is (the
    session's `customer` state).

    Each call opens a connection of its own on its own event loop and closes it when it returns (a session's
    sync calls each run on a fresh loop, and a psycopg connection or pool belongs to the loop it was opened on),
    unless `pool` is given: an open psycopg `AsyncConnectionPool` on the loop every call runs on (a server's),
    made with `postgres_pool` or with the same `CONNECTION_KWARGS`. Checkpoints are written with
    `CheckpointSerializer`, as on SQLite.
    """

    def __init__(self, url: str, *, pool: Any = None) -> None:
        self.url = url
        self.pool = pool
        self._ready = False

    def __repr__(self) -> str:
        return f"PostgresCheckpoints({guards.mask_pii(self.url)!r})"

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[Any]:
        if self.pool is not None:
            async with self.pool.connection() as connection:
                yield connection
            return
        from psycopg import AsyncConnection
        from psycopg.rows import dict_row

        kwargs = {**CONNECTION_KWARGS, "row_factory": dict_row, "application_name": _application_name()}
        async with await AsyncConnection.connect(self.url, **kwargs) as connection:
            yield connection

    async def setup(self) -> None:
        """Create LangGraph's checkpoint tables if they are missing; safe when several processes do it at once.

        The migrations include ``CREATE INDEX CONCURRENTLY``, which cannot run in a transaction, so the lock is a
        session-level one on a connection opened for it alone (straight to Postgres: behind a PgBouncer in
        transaction mode, run this once at deploy time, e.g. ``asyncio.run(PostgresCheckpoints(url).setup())``).
        The first time, that index build also waits for every transaction open in the database, turns in
        progress included (`turn`, `handwritten.postgres.turn`): one more reason to run it before serving.
        """
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg import AsyncConnection
        from psycopg.rows import dict_row

        kwargs = {**CONNECTION_KWARGS, "row_factory": dict_row, "application_name": _application_name()}
        async with await AsyncConnection.connect(self.url, **kwargs) as connection:
            # Polled, not `pg_advisory_lock`: a statement blocked on the lock is a transaction, and the holder's
            # CREATE INDEX CONCURRENTLY waits for every transaction, so a blocked waiter would deadlock it.
            while not await _fetch_one(connection, "SELECT pg_try_advisory_lock(%s, %s)", SETUP_LOCK):
                await asyncio.sleep(0.05)
            await AsyncPostgresSaver(connection, serde=CheckpointSerializer()).setup()
            # Closing the connection releases the lock, on every way out.
        self._ready = True

    @asynccontextmanager
    async def open(self) -> AsyncIterator[Any]:
        """An `AsyncPostgresSaver` for one call, on the running event loop (tables created on first use)."""
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        if not self._ready:
            await self.setup()
        if self.pool is not None:
            yield AsyncPostgresSaver(self.pool, serde=CheckpointSerializer())
            return
        async with self._connection() as connection:
            yield AsyncPostgresSaver(connection, serde=CheckpointSerializer())

    @asynccontextmanager
    async def turn(self, thread_id: str, *, wait: float) -> AsyncIterator[None]:
        """Hold the turn of `thread_id` for as long as the block runs, whichever process or machine asks for it.

        The lock is Postgres's: ``pg_try_advisory_xact_lock`` in a transaction kept open on a connection of its
        own for the whole turn, so it ends with the transaction: when the block ends, when it raises, and when
        the process dies or the network drops, since Postgres ends a dead client's transaction. No stale row to
        judge, as on SQLite. A transaction-level lock, not a session-level one, because a PgBouncer in
        transaction mode keeps a client on one server connection only for the length of a transaction. It is
        polled, so a cancel while waiting simply ends the wait, and after `wait` seconds `ConcurrentTurn` says
        which client holds it. The price: one connection per turn in progress.

        The tables are set up first: ``CREATE INDEX CONCURRENTLY`` waits for every open transaction, this turn's
        included, so migrating inside a turn would wait for itself.
        """
        if not self._ready:
            await self.setup()
        async with self._connection() as connection, connection.transaction():
            deadline = time.monotonic() + wait
            while not await _fetch_one(
                connection, "SELECT pg_try_advisory_xact_lock(%s, hashtext(%s))", (TURN_LOCK_CLASS, thread_id)
            ):
                if time.monotonic() >= deadline:
                    holder = await _fetch_one(connection, TURN_HOLDER, (TURN_LOCK_CLASS, thread_id))
                    raise ConcurrentTurn(
                        f"thread {thread_id!r} has a turn in progress in another process ({holder or 'gone'}); "
                        f"waited {wait:g} s for it to finish. Ask again when it has finished."
                    )
                await asyncio.sleep(0.05)
            yield


TURN_HOLDER = """
SELECT format('%%s, backend %%s, for %%s s', a.application_name, a.pid,
              round(extract(epoch FROM now() - a.xact_start)::numeric, 1))
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
  AND l.classid = %s AND l.objid = hashtext(%s)::bigint::oid
"""


async def _fetch_one(connection: Any, query: str, params: tuple[Any, ...]) -> Any:
    """The first column of the first row, whatever the connection's row factory (a pool's may be LangGraph's)."""
    cursor = await connection.execute(query, params)
    row = await cursor.fetchone()
    if row is None:
        return None
    return next(iter(row.values())) if isinstance(row, dict) else row[0]


async def prune_postgres(saver: Any, thread_id: str, started_from: list[str]) -> None:
    """LangGraph's keep_latest on the thread, once the checkpoints the last turns started from are all still there
    (the thread holds at least `prune_turns` turns of checkpoints since the last prune).

    keep_latest runs in a transaction of its own at REPEATABLE READ; the turn lock is held, so nothing of ours
    writes to the thread meanwhile, and a serialization failure (someone else's write, say a delete) only means
    the thread is pruned after a later turn.
    """
    from psycopg import AsyncConnection, errors

    query = "SELECT count(*) FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = '' AND checkpoint_id = ANY(%s)"
    async with saver.lock:  # the saver's connection runs one statement at a time
        if isinstance(saver.conn, AsyncConnection):
            kept = await _fetch_one(saver.conn, query, (thread_id, started_from))
        else:
            async with saver.conn.connection() as connection:
                kept = await _fetch_one(connection, query, (thread_id, started_from))
    if kept < len(started_from):
        return  # a prune since one of those turns began: fewer than `prune_turns` turns are stored
    try:
        await saver.aprune([thread_id], strategy="keep_latest")
    except (errors.SerializationFailure, errors.DeadlockDetected) as exc:
        log.warning("pruning thread %r gave way to another writer (%s); pruned after a later turn", thread_id, exc)

"""The hand-written `Session` kept in Postgres: a thread row and its messages, and a turn lock shared by processes.

A save appends only the messages added since the last one, under the row's lock (``SELECT ... FOR UPDATE``),
and raises `SessionConflict` when another process saved since this one read; `turn` holds an advisory lock for
a whole turn (load, ask, save). The JSON file beside it is `handwritten.storage`. psycopg is optional (the
``postgres`` extra), so only `handwritten.session` imports this module, and only when a URL is used.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg import AsyncConnection

from handwritten.storage import SessionConflict, Stored
from shared_tools.results import ConcurrentTurn

log = logging.getLogger(__name__)

TABLES = """
CREATE TABLE IF NOT EXISTS handwritten_threads (
    thread_id    TEXT PRIMARY KEY,
    customer     TEXT,              -- whose conversation: a load for anyone else is refused
    instructions TEXT NOT NULL,
    revision     INTEGER NOT NULL   -- one more on every save: the conflict check
);
CREATE TABLE IF NOT EXISTS handwritten_messages (
    thread_id TEXT NOT NULL REFERENCES handwritten_threads ON DELETE CASCADE,
    position  INTEGER NOT NULL,
    message   TEXT NOT NULL,        -- one message as messages_to_dict writes it, ASCII JSON
    PRIMARY KEY (thread_id, position)
);
"""

LOCK_CLASS = 0x4857  # "HW"
"""First key of this module's advisory locks (0: creating the tables; a thread's turn: ``hashtext(thread_id)``).
LangGraph's side uses another class, so a graph thread and a hand-written one of the same name never wait on
each other."""

CONNECTION_KWARGS: dict[str, Any] = {"autocommit": True, "prepare_threshold": None}
"""No server-side prepared statements, so a PgBouncer in transaction mode can sit in between."""


@asynccontextmanager
async def connect(url: str) -> AsyncIterator[AsyncConnection[Any]]:
    """A connection with the tables created (once per process and URL; safe when processes race)."""
    name = f"agent-loop-compare pid {os.getpid()} on {socket.gethostname()}"[:63]
    async with await AsyncConnection.connect(url, application_name=name, **CONNECTION_KWARGS) as connection:
        if url not in _READY:
            async with connection.transaction():
                # Two CREATE TABLE IF NOT EXISTS racing can still both try to create the table; one at a time.
                await connection.execute("SELECT pg_advisory_xact_lock(%s, 0)", (LOCK_CLASS,))
                await connection.execute(TABLES)
            _READY.add(url)
        yield connection


_READY: set[str] = set()


async def read(url: str, thread_id: str) -> Stored | None:
    """The stored conversation of `thread_id`, or None when it was never saved."""
    async with connect(url) as connection, connection.transaction():
        # One snapshot for both reads, so a save in between cannot pair a revision with other messages.
        await connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cursor = await connection.execute(
            "SELECT instructions, customer, revision FROM handwritten_threads WHERE thread_id = %s", (thread_id,)
        )
        row = await cursor.fetchone()
        if row is None:
            return None
        cursor = await connection.execute(
            "SELECT message FROM handwritten_messages WHERE thread_id = %s ORDER BY position", (thread_id,)
        )
        messages = [json.loads(text) for (text,) in await cursor.fetchall()]
    instructions, customer, revision = row
    return Stored(instructions, customer, revision, messages)


async def write(
    url: str,
    thread_id: str,
    *,
    read_revision: int,
    customer: str | None,
    instructions: str,
    messages: list[dict[str, Any]],
    start: int,
) -> int:
    """Store `messages` from position `start` on (0: all of them, replacing what was there) in one transaction,
    if the thread is still at `read_revision` (0: never saved); the new revision. `SessionConflict` otherwise,
    with nothing written."""
    async with connect(url) as connection, connection.transaction():
        cursor = await connection.execute(
            "SELECT revision FROM handwritten_threads WHERE thread_id = %s FOR UPDATE", (thread_id,)
        )
        row = await cursor.fetchone()
        stored = 0 if row is None else row[0]
        if stored != read_revision:
            raise SessionConflict(
                f"thread {thread_id!r} was saved by another session since this one read it (revision {stored}, "
                f"this session has {read_revision}); load it again to continue the conversation"
            )
        revision = read_revision + 1
        if row is None:
            cursor = await connection.execute(
                "INSERT INTO handwritten_threads VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING revision",
                (thread_id, customer, instructions, revision),
            )
            if await cursor.fetchone() is None:  # another session saved it first, between our read and insert
                raise SessionConflict(f"thread {thread_id!r} was saved by another session at the same moment")
        else:
            await connection.execute(
                "UPDATE handwritten_threads SET revision = %s WHERE thread_id = %s", (revision, thread_id)
            )
        await connection.execute(
            "DELETE FROM handwritten_messages WHERE thread_id = %s AND position >= %s", (thread_id, start)
        )
        async with connection.cursor() as rows:
            await rows.executemany(
                "INSERT INTO handwritten_messages VALUES (%s, %s, %s)",
                [(thread_id, start + i, _json(message)) for i, message in enumerate(messages[start:])],
            )
    return revision


def _json(message: dict[str, Any]) -> str:
    # ensure_ascii, as in the JSON file: a reply cut off mid-emoji holds a lone surrogate, which UTF-8 cannot
    # encode but a JSON escape can, and a NUL, which a Postgres text cannot hold, becomes \\u0000.
    return json.dumps(message, ensure_ascii=True, separators=(",", ":"))


@asynccontextmanager
async def turn(url: str, thread_id: str, *, wait: float = 30.0) -> AsyncIterator[None]:
    """Hold the turn of the conversation `thread_id` while the block runs, whichever process or machine asks.

    ``pg_try_advisory_xact_lock`` in a transaction kept open for the turn on a connection of its own: it ends
    with the block, with an exception, and with the process (Postgres ends a dead client's transaction), so
    nothing is ever left locked. Polled, so a cancel while waiting ends the wait; after `wait` seconds,
    `ConcurrentTurn`. Use it around load, ask and save::

        async with postgres.turn(url, thread):
            session = await Session.aload_postgres(url, thread, loop, customer_id=customer)
            await session.aask(question)
            await session.asave_postgres(url, thread)
    """
    async with connect(url) as connection, connection.transaction():
        deadline = time.monotonic() + wait
        while True:
            cursor = await connection.execute(
                "SELECT pg_try_advisory_xact_lock(%s, hashtext(%s))", (LOCK_CLASS, thread_id)
            )
            row = await cursor.fetchone()
            if row is not None and row[0]:
                break
            if time.monotonic() >= deadline:
                raise ConcurrentTurn(
                    f"conversation {thread_id!r} has a turn in progress in another process; waited {wait:g} s "
                    "for it to finish. Ask again when it has finished."
                )
            await asyncio.sleep(0.05)
        yield


async def delete(url: str, thread_id: str) -> None:
    """Forget a conversation (its messages go with it)."""
    async with connect(url) as connection:
        await connection.execute("DELETE FROM handwritten_threads WHERE thread_id = %s", (thread_id,))

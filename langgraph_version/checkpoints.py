"""How a session's thread is stored: the messages channel, checkpoints in a SQLite file, and the turn lock.

`messages_channel` picks delta or full storage for the messages; `SqliteCheckpoints` opens LangGraph's `SqliteSaver`
on the event loop's own thread (`InlineSqliteSaver`) for one call at a time, with a `turn_locks` table beside the
checkpoints (a dead process's row is taken over) and pruning. `langgraph_version.postgres` is the same for Postgres.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, closing
from typing import Any, Literal

from langchain_core.messages import AnyMessage, BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels.base import BaseChannel
from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph.message import add_messages

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


SNAPSHOT_EVERY = 100
"""Updates of `messages` between two full copies of it in a checkpoint (LangGraph's default): a read replays at
most this many writes; a 200-turn thread of one tool call per turn (4 updates a turn) holds 8 copies."""

MESSAGE_IDS = uuid.UUID("6f1c3c1e-3b8e-4c55-9a55-0d3c8a4f7e21")
"""The namespace of the ids `add_message_batches` derives for messages that arrive without one."""

Storage = Literal["delta", "full"]
"""How a thread's `messages` is checkpointed: "delta" (a `DeltaChannel`, BETA in langgraph 1.2: its on-disk form
may change) or "full" (LangGraph's default channel: the whole list in every checkpoint)."""


def add_message_batches(messages: Sequence[AnyMessage], writes: Sequence[Any]) -> list[AnyMessage]:
    """`add_messages` applied to each write in turn: the `DeltaChannel` reducer.

    A left fold gives the same list however the writes are batched, which `DeltaChannel` requires. A message
    without an id gets one made from the id of the message before it, its position in the write and its
    content, so the same writes replayed onto the same list give the same ids; `add_messages` would give a
    random one on every replay, and a `RemoveMessage` written later would name a message that no longer exists.
    """
    merged: list[AnyMessage] = list(messages)
    for write in writes:
        batch = write if isinstance(write, list) else [write]
        previous = merged[-1].id if merged else ""
        for position, message in enumerate(batch):
            if isinstance(message, BaseMessage) and message.id is None:
                seed = f"{previous}/{position}/{message.type}/{message.content!r}"
                message.id = str(uuid.uuid5(MESSAGE_IDS, seed))
        merged = add_messages(merged, batch)  # type: ignore[assignment]
    return merged


def messages_channel(storage: Storage) -> BaseChannel:
    """The channel that checkpoints `AgentState.messages` the way `storage` says, put in the compiled graph's
    channels in place of the one the state type gives (LangGraph's default, "full").

    "delta" stores in a checkpoint only what was added, and a full copy every `SNAPSHOT_EVERY` updates, so a
    thread's storage grows with its turns, not their square; reading a state replays the writes since the
    last copy, with `add_message_batches`.
    """
    channel: BaseChannel
    if storage == "delta":
        channel = DeltaChannel(add_message_batches, snapshot_frequency=SNAPSHOT_EVERY)
    else:
        channel = BinaryOperatorAggregate(list, add_messages)
    channel.key = "messages"
    return channel


class InlineSqliteSaver(SqliteSaver):
    """LangGraph's `SqliteSaver` with its async methods run inline, on the event loop's own thread.

    A checkpoint write to a local SQLite file in WAL mode takes tens of microseconds, less than handing each
    statement to a worker thread and back, as aiosqlite does. The price: while another process commits to the
    same file, the loop waits for it (SQLite's busy timeout, 5 s at most, as aiosqlite's thread would). No
    other thread ever touches the connection, so closing it can never race with a write.
    """

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.get_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        # Read whole before the first yield: the saver's lock must not be held across an await.
        for item in list(self.list(config, filter=filter, before=before, limit=limit)):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)

    async def aget_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Mapping[str, Any]:
        return self.get_delta_channel_history(config=config, channels=channels)


class SqliteCheckpoints:
    """A SQLite file of checkpoints, opened with `InlineSqliteSaver` for one call at a time.

    Every sync call of a session runs on a fresh event loop (`run_blocking`), perhaps on another thread, so
    each call opens the file on its own and closes it before it returns (or raises): each checkpoint is
    committed as it is written, nothing is ever left pending, and nothing is left open, which is why closing
    a session has nothing to wait for. Opening a SQLite connection costs a few microseconds.

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

    def _connect(self, **options: Any) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, **options)
        connection.execute(f"PRAGMA synchronous={self.synchronous}")
        return connection

    @asynccontextmanager
    async def open(self) -> AsyncIterator[InlineSqliteSaver]:
        with closing(self._connect()) as connection:
            # Pages freed by pruning go back to the file system (`prune_sqlite`); only takes effect on a new file.
            connection.execute("PRAGMA auto_vacuum=INCREMENTAL")
            saver = InlineSqliteSaver(connection, serde=CheckpointSerializer())
            saver.setup()
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
        with closing(self._connect(isolation_level=None)) as db:
            if not self._turn_table_ready:
                db.execute(TURN_LOCKS_TABLE)
                self._turn_table_ready = True
            deadline = time.monotonic() + wait
            while (holder := _take_turn(db, thread_id, owner)) is not None:
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
                db.execute("DELETE FROM turn_locks WHERE thread_id = ? AND owner = ?", (thread_id, owner))


def prune_sqlite(saver: SqliteSaver, config: RunnableConfig, oldest: str) -> None:
    """Delete the checkpoints (and their writes) of `config`'s thread that are not on the path from its head
    back to `oldest`, in one short transaction; nothing if that path does not reach `oldest`.

    SqliteSaver has no prune, so this is its two tables by hand. Parent links are read straight from the
    table: `list` would deserialize every checkpoint on the way.
    """
    thread_id = config["configurable"]["thread_id"]
    head = saver.get_tuple(config)
    with saver.cursor() as cursor:
        cursor.execute(
            "SELECT checkpoint_id, parent_checkpoint_id FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ''",
            (thread_id,),
        )
        parents = dict(cursor.fetchall())
        keep: list[str] = []
        at = None if head is None else head.config["configurable"]["checkpoint_id"]
        while at is not None and at != oldest and len(keep) <= len(parents):  # bounded: a loop of links ends it
            keep.append(at)
            at = parents.get(at)
        if at != oldest:
            return  # the walk did not reach it: keep everything
        keep.append(oldest)
        kept = f"checkpoint_id NOT IN ({','.join('?' * len(keep))})"
        for table in ("writes", "checkpoints"):
            cursor.execute(
                f"DELETE FROM {table} WHERE thread_id = ? AND checkpoint_ns = '' AND {kept}", (thread_id, *keep)
            )
    saver.conn.execute("PRAGMA incremental_vacuum")  # give the freed pages back: the file shrinks


_TURNS_HELD_HERE: set[str] = set()
"""Owners of the `turn_locks` rows this process holds now; a row with our pid and another owner is a leftover."""


def _take_turn(db: sqlite3.Connection, thread_id: str, owner: str) -> tuple[Any, ...] | None:
    """Take the thread's turn for `owner` if nobody holds it, or its holder is gone; else the holder's row."""
    db.execute("BEGIN IMMEDIATE")
    try:
        holder = db.execute(
            "SELECT owner, pid, host, taken_at FROM turn_locks WHERE thread_id = ?", (thread_id,)
        ).fetchone()
        if holder is None or _holder_gone(*holder[:3]):
            db.execute(
                "INSERT OR REPLACE INTO turn_locks VALUES (?, ?, ?, ?, ?)",
                (thread_id, owner, os.getpid(), HOST, time.time()),
            )
            holder = None
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
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

"""One multi-turn conversation of any contender behind one interface: ask, finish, rewind, list turns, close.

`open_conversation` picks the adapter (hand-written `Session`, `GraphSession`, a prebuilt `CheckpointThread`, MAF's
`AgentSession`) and where it is kept (memory, SQLite, Postgres); `check_thread_name` and `check_saved_conversation`
refuse a bad name or a damaged or foreign conversation before anything opens.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sqlite3
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, messages_to_dict

from comparison.approvals import DemoHuman
from comparison.contenders import Contender
from shared_tools.conversation import (
    Conversation,
    HistoryPolicy,
    decide_each,
    despite_cancel,
    resume_until_answered,
    resume_with,
)
from shared_tools.history import Rewound, Turn, count_turns, turns_of
from shared_tools.results import AgentResult, Approve
from shared_tools.sync import run_blocking

log = logging.getLogger(__name__)

THREAD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A thread name: it becomes part of a file name and of a customer id, so no path separators and no "..".
Starts with a letter or digit (not "." or "-"), at most 64 characters."""


class ConversationNotSaved(Exception):
    """A turn ran, but its conversation could not be saved: another process saved the file since it was read.

    `result` is the turn's answer (the customer should still see it); the file keeps the other process's turns.
    """

    def __init__(self, result: AgentResult, reason: str) -> None:
        super().__init__(reason)
        self.result = result


def check_thread_name(name: str) -> None:
    """Raise ValueError unless `name` can name a thread (see `THREAD_NAME`): ``../x`` must not become a path."""
    if not THREAD_NAME.fullmatch(name):
        raise ValueError(
            f"thread name {name[:80]!r} is not allowed; use letters, digits, '.', '_' and '-' "
            "(at most 64, starting with a letter or digit)"
        )


def session_json_path(db: Path, thread_id: str) -> Path:
    """Where the hand-written session of `thread_id` is saved: a JSON file beside the session database."""
    check_thread_name(thread_id)
    return db.with_name(f"{db.stem}.{thread_id}.json")


def check_saved_conversation(contender: str, thread_id: str, db: Path | str, customer_id: str | None) -> None:
    """Raise ValueError (`CustomerMismatch` among them) when the saved conversation of `thread_id` cannot be
    resumed: a damaged or wrong-shape file, or another customer's conversation. Reads, never writes.

    Only the hand-written session's JSON file is read here; a graph thread's customer is checked by
    `GraphSession` itself, on the first read of the thread, before anything runs or is shown.
    """
    if contender == "maf" and not _is_url(db):
        path = maf_session_path(Path(db), thread_id)
        if path.exists():
            from maf_version.session import read_saved

            read_saved(path, customer_id)
        return
    if contender != "handwritten":
        return
    if _is_url(db):
        _load_postgres_session(str(db), thread_id, None, customer_id)
        return
    path = session_json_path(Path(db), thread_id)
    if path.exists():
        _load_session(path, None, customer_id)


def _load_session(path: Path, loop: Any, customer_id: str | None, policy: HistoryPolicy | None = None) -> Any:
    from handwritten import Session

    try:
        return Session.load(path, loop, customer_id=customer_id, **(policy or HistoryPolicy()).kwargs())
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} cannot be read as a saved session ({exc})") from None
    except (AttributeError, IndexError, KeyError, TypeError) as exc:  # a shape Session.load did not foresee
        raise ValueError(f"{path} is a damaged saved session ({type(exc).__name__}: {exc})") from None


def _is_url(target: object) -> bool:
    from shared_tools.bookstore.store import is_postgres_url

    return is_postgres_url(target)


def shown_target(target: Path | str | None) -> str:
    """Where a conversation is kept, for a person: a path, or a URL with its password masked."""
    if target is None:
        return "memory"
    if _is_url(target):
        from shared_tools.guards import mask_pii

        return mask_pii(str(target))
    return str(target)


def _load_postgres_session(
    url: str, thread_id: str, loop: Any, customer_id: str | None, policy: HistoryPolicy | None = None
) -> Any:
    """The hand-written session of `thread_id` in Postgres, or None when there is none yet."""
    return run_blocking(
        lambda: _aload_postgres_session(url, thread_id, loop, customer_id, policy), instead="_aload_postgres_session"
    )


async def _aload_postgres_session(
    url: str, thread_id: str, loop: Any, customer_id: str | None, policy: HistoryPolicy | None = None
) -> Any:
    from handwritten import Session

    try:
        return await Session.aload_postgres(
            url, thread_id, loop, customer_id=customer_id, **(policy or HistoryPolicy()).kwargs()
        )
    except LookupError:
        return None


class HandwrittenConversation:
    """`handwritten.Session`, kept in memory, saved to a JSON file after every turn, or (`url` and `thread_id`)
    kept in Postgres. There every turn (and rewind) is load, ask, save under the thread's turn lock
    (`handwritten.postgres.turn`), so any process may take the next turn of a conversation another process
    answered the last time, and two turns at once take turns instead of one losing its save."""

    def __init__(
        self,
        loop: Contender,
        instructions: str,
        path: Path | None = None,
        *,
        resume: bool = False,
        customer_id: str | None = None,
        policy: HistoryPolicy | None = None,
        url: str | None = None,
        thread_id: str | None = None,
    ) -> None:
        from handwritten import Session

        self.path = path
        self.url = url
        self.thread_id = thread_id
        self.loop = loop
        self.instructions = instructions
        self.customer_id = customer_id
        self.policy = policy
        given = (policy or HistoryPolicy()).kwargs()
        if url is not None:
            assert thread_id is not None, "a Postgres session is named by its thread"
            loaded = _load_postgres_session(url, thread_id, loop, customer_id, policy) if resume else None
            if not resume:
                from handwritten import postgres

                # A demo re-run starts its thread from scratch, as on a file.
                run_blocking(lambda: postgres.delete(url, thread_id), instead="postgres.delete")
            self.session = (
                loaded if loaded is not None else Session(loop, instructions, customer_id=customer_id, **given)
            )
        elif path is not None and resume and path.exists():
            self.session = _load_session(path, loop, customer_id, policy)
        else:
            if path is not None:
                # A fresh conversation in a file that holds an old one (a demo re-run with the same
                # --session-db) replaces it, as the graph's thread is deleted; saving over it would be refused.
                path.unlink(missing_ok=True)
            self.session = Session(loop, instructions, customer_id=customer_id, **given)

    def ask(self, question: str) -> AgentResult:
        from handwritten import SessionConflict

        if self.url is not None:
            return run_blocking(lambda: self.aask(question), instead="HandwrittenConversation.aask(...)")
        try:
            result = self.session.ask(question)
        except KeyboardInterrupt:
            self._save_cancelled()
            raise
        except Exception:
            self._save_cut_short()
            raise
        try:
            self.save()
        except SessionConflict as exc:
            reason = f"this turn was not saved and nothing was overwritten: {exc}"
            raise ConversationNotSaved(result, reason) from exc
        return result

    async def aask(self, question: str, *, cancel: Any = None) -> AgentResult:
        """One turn, saved where the conversation is kept; a cancelled turn is saved too (its history tells the
        truth) and returned as its CANCELLED result."""
        from handwritten.loop import AgentCancelled

        result: AgentResult | None = None
        try:
            async with self._turn():
                try:
                    result = await self.session.aask(question, cancel=cancel)
                except AgentCancelled as cancelled:
                    result = cancelled.result
                except Exception:
                    await self._asave_cut_short()  # an outage: what the turn did is saved, marked unfinished
                    raise
                await despite_cancel(self._asave())
        except asyncio.CancelledError:
            # A task cancel that lands after the loop stopped on the cancel event (the page cancels both ways)
            # hits the save or the lock's release: the turn is saved, so its result stands.
            if result is None:
                raise
        assert result is not None
        return result

    @asynccontextmanager
    async def _turn(self) -> AsyncIterator[None]:
        """Postgres: the thread's turn lock, and the conversation as last saved by whichever process saved it."""
        if self.url is None or self.thread_id is None:
            yield
            return
        from handwritten import postgres

        async with postgres.turn(self.url, self.thread_id):
            latest = await _aload_postgres_session(self.url, self.thread_id, self.loop, self.customer_id, self.policy)
            if latest is not None:
                self.session = latest
            yield

    async def _asave(self) -> None:
        if self.url is not None and self.thread_id is not None:
            await self.session.asave_postgres(self.url, self.thread_id)
        elif self.path is not None:
            self.session.save(self.path)  # a small local file, written at once: no await for a cancel to land on

    async def arewind(self, turns: int = 1) -> Rewound:
        async with self._turn():
            arewind = getattr(self.session, "arewind", None)
            rewound: Rewound = await arewind(turns) if arewind is not None else self.session.rewind(turns)
            await despite_cancel(self._asave())
        return rewound

    def save(self) -> None:
        """Save the session where it is kept (`SessionConflict` when another process saved it meanwhile)."""
        if self.url is not None and self.thread_id is not None:
            url, thread_id = self.url, self.thread_id
            run_blocking(lambda: self.session.asave_postgres(url, thread_id), instead="Session.asave_postgres(...)")
        elif self.path is not None:
            self.session.save(self.path)

    def _save_cancelled(self) -> None:
        """After a Ctrl-C: save the turn as far as it got. The session kept it (its open calls answered, one cut
        off mid-run as "may have completed"), so an add that landed is in the history the next process reads; a
        save that fails here does not hide the interrupt."""
        try:
            self.save()
        except Exception:
            log.exception("the turn a Ctrl-C cut off could not be saved")

    def _save_cut_short(self) -> None:
        """After an outage: save the turn as far as it got (`Session.unfinished`), so the next process finishes
        it instead of asking again; a save that fails here does not hide the outage."""
        if self.session.unfinished:
            try:
                self.save()
            except Exception:
                log.exception("the turn an outage cut short could not be saved")

    def finish_unfinished(self) -> AgentResult | None:
        """Finish a turn an outage cut short (`Session.continue_unfinished`), and save it; None when there is none."""
        if self.url is not None:
            return run_blocking(self.afinish_unfinished, instead="HandwrittenConversation.afinish_unfinished()")
        try:
            result = self.session.continue_unfinished()
        except KeyboardInterrupt:
            self._save_cancelled()
            raise
        except Exception:
            self._save_cut_short()
            raise
        if result is not None:
            self.save()
        return result

    async def afinish_unfinished(self) -> AgentResult | None:
        async with self._turn():
            try:
                result = await self.session.acontinue_unfinished()
            except Exception:
                await self._asave_cut_short()
                raise
            if result is not None:
                await despite_cancel(self._asave())
        return result

    async def _asave_cut_short(self) -> None:
        """`_save_cut_short`, awaited (Postgres)."""
        if self.session.unfinished:
            try:
                await despite_cancel(self._asave())
            except Exception:
                log.exception("the turn an outage cut short could not be saved")

    def rewind(self, turns: int = 1) -> Rewound:
        """Cut the last `turns` turns off the list, and off the saved file (or row) too."""
        if self.url is not None:
            return run_blocking(lambda: self.arewind(turns), instead="HandwrittenConversation.arewind(...)")
        rewound: Rewound = self.session.rewind(turns)
        self.save()
        return rewound

    def turns(self) -> list[Turn]:
        return turns_of(self.session.messages)

    def facts(self) -> dict[str, Any]:
        messages = self.session.messages
        if self.path is not None and self.path.exists():
            stored = self.path.stat().st_size
        elif self.url is not None:
            stored = len(json.dumps(messages_to_dict(messages), separators=(",", ":"), ensure_ascii=False).encode())
        else:
            # What a save would write: the compact JSON of the list.
            stored = len(json.dumps(messages_to_dict(messages), separators=(",", ":"), ensure_ascii=True))
        return {
            "messages": len(messages),
            "turns": count_turns(messages),
            "stored_bytes": stored,
            "kept_in": shown_target(self.url or self.path),
        }

    def close(self) -> None:
        pass


class GraphConversation:
    """A checkpointer thread, in memory or in a SQLite file: `langgraph_version.GraphSession` for our guarded
    graph, `CheckpointThread` for the framework-only contenders.

    A run that pauses for approval is answered through `approve` (no one to ask: refused) and resumed, so
    `ask` returns only when the turn is over, as the hand-written loop's does.
    """

    def __init__(
        self,
        agent: Contender,
        instructions: str,
        thread_id: str,
        path: Path | str | None = None,
        *,
        resume: bool = False,
        customer_id: str | None = None,
        approve: Approve | None = None,
        policy: HistoryPolicy | None = None,
        storage: dict[str, Any] | None = None,
    ) -> None:
        """`policy` is the history policy of our graph's session; `storage`, keyword arguments of
        `GraphSession.sqlite` (its checkpoint storage options), for a SQLite thread of our graph."""
        from langgraph_version import GraphAgent, GraphSession
        from langgraph_version.prebuilt.thread import CheckpointThread

        self.path = path
        self.approve = approve
        self.thread_id = thread_id
        self.session: Any
        given = (policy or HistoryPolicy()).kwargs()
        if not isinstance(agent, GraphAgent):
            if given:
                raise ValueError(f"{type(agent).__name__} has no history policy: keep_turns and summarize are ours")
            self.session = CheckpointThread(agent, instructions, thread_id, path, customer_id=customer_id)  # type: ignore[arg-type]
            if path is not None and not resume:
                self._delete()
        elif path is None:
            self.session = GraphSession(agent, instructions, thread_id=thread_id, customer_id=customer_id, **given)
        elif _is_url(path):
            self.session = GraphSession.postgres(
                agent, instructions, url=str(path), thread_id=thread_id, customer_id=customer_id, **given
            )
            if not resume:
                self._delete()
        else:
            self.session = GraphSession.sqlite(
                agent,
                instructions,
                path=str(path),
                thread_id=thread_id,
                customer_id=customer_id,
                **given,
                **(storage or {}),
            )
            if not resume:
                self._delete()  # a demo re-run with the same --session-db starts its thread from scratch

    def _delete(self) -> None:
        run_blocking(self.session.adelete, instead=f"{type(self.session).__name__}.adelete()")

    def _read(self, view: Any) -> Any:
        """One of the session's async views (`pending`, `messages`, ...), read from this sync harness."""
        return run_blocking(view, instead=f"{type(self.session).__name__}.{view.__name__}()")

    def ask(self, question: str) -> AgentResult:
        return self._answered(self.session.ask(question))

    def finish_unfinished(self) -> AgentResult | None:
        """A pause nobody answered (the process ended at the approval prompt) is asked again, then finished;
        a turn a crash or an outage cut short is finished from its last checkpoint."""
        pending = self._read(self.session.pending)
        if pending:
            return self._answered(resume_with(self.session, decide_each(pending, self.approve)))
        result = self.session.continue_unfinished()
        return None if result is None else self._answered(result)

    def _answered(self, result: AgentResult) -> AgentResult:
        return resume_until_answered(self.session, result, self.approve)[0]

    def rewind(self, turns: int = 1) -> Rewound:
        """Fork the thread from the checkpoint before the last `turns` turns; the old branch stays in its history."""
        rewound: Rewound = self.session.rewind(turns)
        return rewound

    def replay(self, checkpoint_id: str) -> AgentResult:
        """Run the thread again from an earlier checkpoint (what is after it runs again: tools included)."""
        session = self.session
        return self._answered(run_blocking(lambda: session.areplay(checkpoint_id), instead="GraphSession.areplay(...)"))

    def checkpoint_before_tool(self, tool: str) -> str:
        """The id of the last checkpoint whose next step runs the tools node on a reply that calls `tool`."""
        for snapshot in self._read(self.session.history):  # newest first
            messages = snapshot.values.get("messages") or []
            last = messages[-1] if messages else None
            if (
                "tools" in snapshot.next
                and isinstance(last, AIMessage)
                and any(c["name"] == tool for c in last.tool_calls)
            ):
                return str(snapshot.config["configurable"]["checkpoint_id"])
        raise LookupError(f"thread {self.thread_id!r} has no checkpoint before a {tool} call")

    def turns(self) -> list[Turn]:
        """The user turns, with the checkpoint each started from (`GraphSession.turn_history`)."""
        turn_history = getattr(self.session, "turn_history", None)
        if turn_history is None:  # a framework-only thread: its questions, without checkpoint ids
            return turns_of(self._read(self.session.messages))
        turns: list[Turn] = self._read(turn_history)
        return turns

    def facts(self) -> dict[str, Any]:
        """Messages, user turns, checkpoints and stored bytes of the thread: read from the checkpointer's own
        storage (one count, one sum), never by walking the checkpoint history, which loads every checkpoint."""
        messages = self._read(self.session.messages)
        checkpoints, stored = thread_storage(self.session, self.thread_id)
        return {
            "messages": len(messages),
            "turns": count_turns(messages),
            "checkpoints": checkpoints,
            "stored_bytes": stored,
            "kept_in": shown_target(self.path),
        }

    def close(self) -> None:
        self.session.close()


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
    from langgraph.checkpoint.memory import InMemorySaver

    from langgraph_version.checkpoints import SqliteCheckpoints
    from langgraph_version.postgres import PostgresCheckpoints

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


def maf_session_path(db: Path, thread_id: str) -> Path:
    """Where MAF's session of `thread_id` is saved: a JSON file beside the session database."""
    check_thread_name(thread_id)
    return db.with_name(f"{db.stem}.{thread_id}.maf.json")


NO_MAF_POSTGRES = "MAF keeps a session with AgentSession.to_dict() in a file; there is no Postgres history provider"
NO_MAF_SUMMARY = (
    "MafSession has a window (keep_turns, a HistoryProvider that sends the last turns) but writes no summary: "
    "MAF's own compaction (Agent(compaction_strategy=...)) is not wired into this comparison"
)


class MafConversation:
    """MAF's `AgentSession` behind `Conversation`: in memory, or saved to a JSON file (`to_dict`) after every turn.

    Its approval pauses (an agent built without a human) are answered through `approve`, as a graph's are."""

    def __init__(
        self,
        agent: Contender,
        instructions: str,
        path: Path | None = None,
        *,
        resume: bool = False,
        customer_id: str | None = None,
        approve: Approve | None = None,
        keep_turns: int | None = None,
    ) -> None:
        from maf_version import MafSession

        if path is not None and not resume:
            path.unlink(missing_ok=True)  # a demo re-run starts its conversation from scratch, as the others do
        self.path = path
        self.approve = approve
        self.session = MafSession(
            agent,
            instructions,
            path=path,
            customer_id=customer_id,  # type: ignore[arg-type]
            keep_turns=keep_turns,
        )

    def ask(self, question: str) -> AgentResult:
        result = self.session.ask(question)
        answered, _ = resume_until_answered(self.session, result, self.approve)
        return answered

    async def aask(self, question: str, *, cancel: Any = None) -> AgentResult:
        """One turn; a cancelled one is saved too (its history tells the truth) and returned as its CANCELLED
        result. An approval pause comes back as AWAITING_APPROVAL (the page's agent asks its human instead)."""
        from maf_version import MafCancelled

        try:
            return await self.session.aask(question, cancel=cancel)
        except MafCancelled as cancelled:
            return cancelled.result

    async def arewind(self, turns: int = 1) -> Rewound:
        rewound: Rewound = await self.session.arewind(turns)
        return rewound

    def finish_unfinished(self) -> AgentResult | None:
        return None  # the file is written after a turn ends (a cut one included), so it never holds half a turn

    def rewind(self, turns: int = 1) -> Rewound:
        rewound: Rewound = self.session.rewind(turns)
        return rewound

    def turns(self) -> list[Turn]:
        return turns_of(self.session.messages)

    def facts(self) -> dict[str, Any]:
        messages = self.session.messages
        if self.path is not None and self.path.exists():
            stored = self.path.stat().st_size
        else:
            # What a save would write: the compact JSON of MAF's session dict.
            stored = len(json.dumps(self.session.session.to_dict(), separators=(",", ":"), ensure_ascii=True))
        return {
            "messages": len(messages),
            "turns": count_turns(messages),
            "stored_bytes": stored,
            "kept_in": shown_target(self.path),
        }

    def close(self) -> None:
        pass


def open_conversation(
    contender: str,
    agent: Contender,
    instructions: str,
    thread_id: str,
    db: Path | str | None,
    *,
    resume: bool,
    customer_id: str | None = None,
    approve: Approve | None = None,
    policy: HistoryPolicy | None = None,
    storage: dict[str, Any] | None = None,
) -> Conversation:
    """The contender's session; `db` set means persisted: a SQLite file (for the graph; a JSON file beside it for
    the hand-written session) or a ``postgresql://`` URL (every contender's thread `thread_id` in that database).

    `customer_id` is recorded with the conversation; `approve` answers the graph's approval pauses (the
    hand-written loop was given its own when it was built); `policy` is the history policy of either session;
    `storage`, the checkpoint storage options of a SQLite graph thread (ignored elsewhere).
    """
    if contender == "maf":
        if _is_url(db):
            raise ValueError(f"maf: {NO_MAF_POSTGRES}")
        if policy is not None and policy.summarize:
            raise ValueError(f"maf: {NO_MAF_SUMMARY}")
        path = None if db is None else maf_session_path(Path(db), thread_id)
        keep = None if policy is None else policy.keep_turns
        return MafConversation(
            agent, instructions, path, resume=resume, customer_id=customer_id, approve=approve, keep_turns=keep
        )
    if contender == "handwritten":
        if _is_url(db):
            check_thread_name(thread_id)
            return HandwrittenConversation(
                agent,
                instructions,
                resume=resume,
                customer_id=customer_id,
                policy=policy,
                url=str(db),
                thread_id=thread_id,
            )
        json_path = None if db is None else session_json_path(Path(db), thread_id)
        return HandwrittenConversation(
            agent, instructions, json_path, resume=resume, customer_id=customer_id, policy=policy
        )
    return GraphConversation(
        agent,
        instructions,
        thread_id,
        db,
        resume=resume,
        customer_id=customer_id,
        approve=approve,
        policy=policy,
        storage=storage,
    )


def run_gated_graph(agent: Contender, instructions: str, goal: str, human: DemoHuman) -> AgentResult:
    """Run the graph in a session; whenever it pauses for approval, the human answers and the run resumes.

    The guarded graph runs in a `GraphSession`; `create_agent` in a checkpointer thread of its own
    (`prebuilt.thread.CheckpointThread`), where `HumanInTheLoopMiddleware`'s pause is answered in its format.
    """
    from langgraph_version import GraphAgent, GraphSession
    from langgraph_version.prebuilt.thread import CheckpointThread

    thread_id = f"approval-{uuid.uuid4().hex[:8]}"
    session: Any
    if isinstance(agent, GraphAgent):
        session = GraphSession(agent, instructions, thread_id=thread_id)
    else:
        session = CheckpointThread(agent, instructions, thread_id)  # type: ignore[arg-type]
    result, pauses = resume_until_answered(session, session.ask(goal), human.approve)
    human.pauses += pauses
    return result


def takes_cancel_event(session: Any) -> bool:
    """Whether `session`'s calls take the cooperative cancel event: our graph's `GraphSession` does; the
    frameworks' `CheckpointThread` takes only a task cancel (for the page, which holds sessions, not agents)."""
    from langgraph_version import GraphSession

    return isinstance(session, GraphSession)


async def setup_postgres_checkpoints(url: str) -> None:
    """Make LangGraph's checkpoint tables at `url` (its migrations; nothing to do once they are made)."""
    from langgraph_version.postgres import PostgresCheckpoints

    await PostgresCheckpoints(url).setup()

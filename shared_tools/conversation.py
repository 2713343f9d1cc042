"""What every contender's conversation is and holds the same way: the `Conversation` protocol and how it is
opened, its history policy, one turn at a time, a conversation only for its own customer (its saved file read
once), what it holds, and a pause answered until the turn ends.

The agents' sessions build on these, so the owner check and the turn lock are written once; the harness, `chat`
and the page use any conversation through `Conversation` alone."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, TypedDict, runtime_checkable

from shared_tools.history import Rewound, Turn, count_turns, turns_of
from shared_tools.results import AgentResult, Approve, CustomerMismatch, StopReason
from shared_tools.sync import run_blocking


@runtime_checkable
class Conversation(Protocol):
    """A multi-turn conversation of any contender, wherever it is kept (memory, a file, SQLite, Postgres).

    Async inside: `aask` comes back at an approval pause (AWAITING_APPROVAL, its requests in `apending`) for
    `aresume` to answer, and a cancel (the `cancel` event, or the task's) ends the turn as CANCELLED, kept in the
    history. The sync drivers are for scripts: `ask` goes on to the turn's end, each pause answered through the
    `approve` the conversation was opened with (none: a no).
    """

    async def aopen(self, *, resume: bool) -> None: ...
    async def aask(self, question: str, *, cancel: threading.Event | None = None) -> AgentResult: ...
    async def aresume(self, approved: Any, *, cancel: threading.Event | None = None) -> AgentResult: ...
    async def acontinue_unfinished(self, *, cancel: threading.Event | None = None) -> AgentResult | None: ...
    async def arewind(self, turns: int = 1) -> Rewound: ...
    async def amessages(self) -> list[Any]: ...
    async def apending(self) -> list[dict[str, Any]]: ...
    async def aturns(self) -> list[Turn]: ...
    async def afacts(self) -> dict[str, Any]: ...
    def ask(self, question: str, *, cancel: threading.Event | None = None) -> AgentResult: ...
    def resume(self, approved: Any, *, cancel: threading.Event | None = None) -> AgentResult: ...
    def continue_unfinished(self, *, cancel: threading.Event | None = None) -> AgentResult | None: ...
    def rewind(self, turns: int = 1) -> Rewound: ...
    def close(self) -> None: ...


class DamagedCheckpoint(ValueError):
    """A stored checkpoint value that cannot be read back: the thread's file or database is damaged."""


class NoRewind(Exception):
    """This conversation keeps no rewind of ours (a framework's own checkpointer thread): nothing was changed."""


class ConversationNotSaved(Exception):
    """A turn ran, but its conversation could not be saved: another process saved the file since it was read.

    `result` is the turn's answer (the customer should still see it); the file keeps the other process's turns.
    """

    def __init__(self, result: AgentResult, reason: str) -> None:
        super().__init__(reason)
        self.result = result


class PolicyKeywords(TypedDict, total=False):
    """A `HistoryPolicy` as a session's keywords, passed on by the calls that open one (`Session.load`...)."""

    keep_turns: int | None
    summarize: bool


class Opening(TypedDict, total=False):
    """The keywords of every contender's ``aopen_conversation(agent, instructions, thread_id, where, *, resume,
    **opening)`` (`ContenderSpec.conversation`); the harness gives each (None: not set), and a contender leaves
    unread the ones it has no use for."""

    customer_id: str | None
    approve: Approve | None
    policy: HistoryPolicy | None
    storage: dict[str, Any] | None


@dataclass(frozen=True)
class HistoryPolicy:
    """What the model is sent of a long conversation (`shared_tools.history`), the same in every session:
    `keep_turns=N` the last N user turns, `summarize` the turns before them folded into one summary."""

    keep_turns: int | None = None
    summarize: bool = False

    def __post_init__(self) -> None:
        keep = self.keep_turns
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
            raise ValueError(f"keep_turns must be a whole number of at least 1 (a window of user turns), got {keep!r}")
        if self.summarize and keep is None:
            raise ValueError("summarize needs keep_turns: the summary stands in for the turns outside that window")

    def kwargs(self) -> PolicyKeywords:
        """Only the knobs that are set, so a session without a policy is built exactly as before."""
        given: PolicyKeywords = {}
        if self.keep_turns is not None:
            given["keep_turns"] = self.keep_turns
        if self.summarize:
            given["summarize"] = True
        return given


THREAD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A thread name: it becomes part of a file name and of a customer id, so no path separators and no "..".
Starts with a letter or digit (not "." or "-"), at most 64 characters."""


def check_thread_name(name: str) -> None:
    """Raise ValueError unless `name` can name a thread (see `THREAD_NAME`): ``../x`` must not become a path."""
    if not THREAD_NAME.fullmatch(name):
        raise ValueError(
            f"thread name {name[:80]!r} is not allowed; use letters, digits, '.', '_' and '-' "
            "(at most 64, starting with a letter or digit)"
        )


def beside(db: Path, thread_id: str, suffix: str) -> Path:
    """The file of the conversation `thread_id` kept beside the session database `db` (`suffix`: ".json")."""
    check_thread_name(thread_id)
    return db.with_name(f"{db.stem}.{thread_id}{suffix}")


def shown_target(target: object) -> str:
    """Where a conversation is kept, for a person: a path, or a URL with its password masked ("memory": None)."""
    from shared_tools.bookstore.store import is_postgres_url
    from shared_tools.guards import mask_pii

    if target is None:
        return "memory"
    return mask_pii(str(target)) if is_postgres_url(target) else str(target)


def check_owner(owner: str | None, customer_id: str | None, what: str) -> None:
    """Refuse (`CustomerMismatch`) the conversation `what` recorded for `owner` to anyone else: it holds that
    customer's name, address and cart. Nothing is checked without a customer to ask for, or for a conversation
    nobody claimed yet."""
    if customer_id is not None and owner is not None and owner != customer_id:
        raise CustomerMismatch(f"{what} is the conversation of customer {owner!r}, not of {customer_id!r}")


def read_document(path: Path, format: str, customer_id: str | None, what: str) -> dict[str, Any]:
    """The JSON document a conversation saved at `path`: ValueError unless it is one of `format` (`what` names
    it: "saved MAF session"), `CustomerMismatch` when it is another customer's."""
    try:
        document = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"{path} is not a {what} (not JSON: {type(exc).__name__}: {exc})") from None
    if not isinstance(document, dict) or document.get("format") != format:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise ValueError(f"{path} is not a {what} (format {found!r}, expected {format!r})")
    check_owner(document.get("customer"), customer_id, str(path))
    return document


def facts_of(messages: Sequence[Any], stored_bytes: int, where: object) -> dict[str, Any]:
    """A conversation's `afacts`: its messages, its user turns, the bytes it keeps and where (`shown_target`)."""
    return {
        "messages": len(messages),
        "turns": count_turns(messages),
        "stored_bytes": stored_bytes,
        "kept_in": shown_target(where),
    }


def file_size(path: Path | None) -> int:
    """The bytes of the file at `path` (0: none, or kept in memory)."""
    return path.stat().st_size if path is not None and path.exists() else 0


@dataclass(frozen=True)
class KeptBeside:
    """Where a framework's conversation is kept: in memory, or a file (or folder) named by `suffix` beside the
    session database, never in Postgres and never windowed (`no_postgres`, `no_window` say why)."""

    contender: str
    suffix: str
    no_postgres: str
    no_window: str

    def opened(
        self, where: Path | str | None, thread_id: str, *, resume: bool, policy: HistoryPolicy | None
    ) -> Path | None:
        """The place of `thread_id` (None: memory), emptied for a fresh one (not `resume`); ValueError for a
        Postgres `where` or a history window."""
        from shared_tools.bookstore.store import is_postgres_url

        if is_postgres_url(where):
            raise ValueError(f"{self.contender}: {self.no_postgres}")
        if policy is not None and (policy.keep_turns is not None or policy.summarize):
            raise ValueError(f"{self.contender}: {self.no_window}")
        path = None if where is None else beside(Path(where), thread_id, self.suffix)
        if path is not None and not resume:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        return path

    def saved(self, where: Path | str, thread_id: str) -> Path | None:
        """The place `acheck_saved` reads (None: a Postgres `where`, refused when the conversation opens)."""
        from shared_tools.bookstore.store import is_postgres_url

        return None if is_postgres_url(where) else beside(Path(where), thread_id, self.suffix)


class WholeTurns:
    """The part of a conversation alike in each framework that asks its approvals inside the turn (no pause to
    answer) and keeps only whole turns (none left unfinished); `amessages` and `stored_bytes` are its own."""

    kept_in: Path | None = None

    async def amessages(self) -> list[Any]:
        raise NotImplementedError

    def stored_bytes(self) -> int:
        return file_size(self.kept_in)

    async def apending(self) -> list[dict[str, Any]]:
        return []

    async def aturns(self) -> list[Turn]:
        return turns_of(await self.amessages())

    async def afacts(self) -> dict[str, Any]:
        return facts_of(await self.amessages(), self.stored_bytes(), self.kept_in)

    def continue_unfinished(self, *, cancel: threading.Event | None = None) -> AgentResult | None:
        return None

    async def acontinue_unfinished(self, *, cancel: threading.Event | None = None) -> AgentResult | None:
        return None


class SyncDrivers:
    """A conversation's sync `ask`, `resume` and `rewind` (for scripts) over its own `aask`, `aresume` and
    `arewind`; inside a running event loop each says which of those to await instead."""

    async def aask(self, question: str, *, cancel: threading.Event | None = None) -> AgentResult:
        raise NotImplementedError

    async def aresume(self, approved: Any, *, cancel: threading.Event | None = None) -> AgentResult:
        raise NotImplementedError

    async def arewind(self, turns: int = 1) -> Rewound:
        raise NotImplementedError

    def ask(self, question: str, *, cancel: threading.Event | None = None) -> AgentResult:
        return run_blocking(lambda: self.aask(question, cancel=cancel), instead=f"{type(self).__name__}.aask(...)")

    def resume(self, approved: Any, *, cancel: threading.Event | None = None) -> AgentResult:
        return run_blocking(
            lambda: self.aresume(approved, cancel=cancel), instead=f"{type(self).__name__}.aresume(...)"
        )

    def rewind(self, turns: int = 1) -> Rewound:
        return run_blocking(lambda: self.arewind(turns), instead=f"{type(self).__name__}.arewind(...)")


async def in_worker_thread(
    turn: OneTurnAtATime, ask: Callable[..., AgentResult], question: str, cancel: threading.Event | None
) -> AgentResult:
    """`ask(question, cancel=...)`, a sync turn, in a worker thread, one turn at a time. A task cancel cannot stop
    a thread: it sets the event the turn checks, waits for the turn to end there, then is raised."""
    cancel = cancel or threading.Event()
    async with turn.held():
        task = asyncio.ensure_future(asyncio.to_thread(ask, question, cancel=cancel))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            cancel.set()
            await asyncio.gather(task, return_exceptions=True)
            raise


class OneTurnAtATime:
    """The turn of one conversation within this process: two turns at once would each run from the same history,
    and one question with its answer would drop out. A threading lock, not an asyncio one (sync calls from two
    threads each run an event loop of their own), polled, so waiting never blocks an event loop and a cancel
    while waiting simply ends the wait."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    @asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        while not self.lock.acquire(blocking=False):
            await asyncio.sleep(0.005)
        try:
            yield
        finally:
            self.lock.release()


_SHARED: weakref.WeakValueDictionary[tuple[Any, ...], OneTurnAtATime] = weakref.WeakValueDictionary()
_SHARED_GUARD = threading.Lock()


def turn_of(key: tuple[Any, ...]) -> OneTurnAtATime:
    """The one turn lock of the conversation `key` (where it is kept, and its name) in this process, shared by
    every session object open on it."""
    with _SHARED_GUARD:
        turn = _SHARED.get(key)
        if turn is None:
            turn = _SHARED[key] = OneTurnAtATime()
        return turn


async def despite_cancel(work: Coroutine[Any, Any, None]) -> None:
    """Run `work` to its end even if the task is cancelled meanwhile (a turn's save must not be cut in half);
    the cancel is then raised, so the caller still learns of it."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
    task.result()
    if cancelled:
        raise asyncio.CancelledError


class PausedSession(Protocol):
    """What `resume_until_answered` needs of a session paused for approval: answer the pause and go on (one
    bool for a pause of one request, one answer per request for several)."""

    def resume(self, approved: Any) -> AgentResult: ...


def decide_each(requests: Sequence[dict[str, Any]], approve: Approve | None) -> list[bool]:
    """One answer per request of a pause, each put to the human on its own (no human: every one is a no), so a
    yes approves only the call it was asked about."""
    if approve is None:
        return [False] * len(requests)
    return [approve(request["tool_call"], request["reason"]) is True for request in requests]


def resume_with(session: PausedSession, answers: Sequence[bool]) -> AgentResult:
    """Resume a pause with one answer per request: a pause of one request (the guarded graph's, which asks one
    question at a time) takes its bool, a pause of several (`HumanInTheLoopMiddleware`'s) the list."""
    return session.resume(answers[0] if len(answers) == 1 else list(answers))


def resume_until_answered(
    session: PausedSession, result: AgentResult, approve: Approve | None
) -> tuple[AgentResult, int]:
    """Answer a run's approval pauses, one after another, until the run ends; the result and the pauses.

    Each resume is a new stretch of the same run (it may pause again on the next risky call), so the returned
    result's trace is the stretches put together.
    """
    trace = list(result.trace)
    pauses = 0
    while result.stop_reason is StopReason.AWAITING_APPROVAL:
        pauses += 1
        result = resume_with(session, decide_each(result.pending or [], approve))
        trace += result.trace
    return replace(result, trace=trace), pauses

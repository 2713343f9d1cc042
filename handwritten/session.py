"""A multi-turn conversation over an `AgentLoop`: the history kept between questions, and saved to disk.

`Session` is the hand-written counterpart of a framework session (the seed's `AgentSession`, a LangGraph
checkpointer thread): each `ask` runs the loop with the whole earlier conversation as history and fresh
per-run budgets, and keeps the history the run returns, including after a cancellation (the loop answers
any cancelled tool call, so the history stays valid). What a checkpointer gives a framework user for free
is written out here in a few lines each: one turn at a time per conversation (a second `ask` waits for the
first), the customer the conversation belongs to, and a save that is atomic (a temp file, then
`os.replace`) and refuses to overwrite a file another process saved since this session read it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, messages_from_dict, messages_to_dict

from handwritten.loop import AgentCancelled, AgentLoop
from shared_tools.results import AgentResult, CustomerMismatch
from shared_tools.sync import run_blocking

log = logging.getLogger(__name__)

FORMAT = "agent-loop-compare/session/2"
READABLE_FORMATS = ("agent-loop-compare/session/1", FORMAT)
"""Version 1 had no customer and no revision; it still loads."""


class SessionConflict(RuntimeError):
    """The session file was saved by someone else since this session read it; saving would lose their turns."""


class Session:
    """One conversation: ask several questions, each one seeing the earlier turns."""

    def __init__(
        self,
        loop: AgentLoop,
        instructions: str,
        messages: list[BaseMessage] | None = None,
        *,
        customer_id: str | None = None,
    ) -> None:
        """`customer_id` records whose conversation this is (see `load`); the loop's tools must act for them."""
        self.loop = loop
        self.instructions = instructions
        self.customer_id = customer_id
        self._messages: list[BaseMessage] = list(messages or [])
        self._revision = 0
        """How many saves the file had when this session last read or wrote it (0: never saved)."""
        # A threading lock, not an asyncio one: sync `ask`s from two threads each run their own event loop.
        self._turn = threading.Lock()

    @property
    def messages(self) -> list[BaseMessage]:
        """The whole conversation so far, system message first (a copy)."""
        return list(self._messages)

    @property
    def turns(self) -> int:
        """How many questions this conversation has had."""
        return sum(isinstance(m, HumanMessage) for m in self._messages)

    def ask(self, question: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """`aask` for sync callers. Inside a running event loop, await `aask` instead."""
        return run_blocking(lambda: self.aask(question, cancel=cancel), instead="Session.aask(...)")

    async def aask(self, question: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """Run the loop on `question` with the conversation so far; the budgets are fresh for every question.

        Turns are taken one at a time: a second `aask` (another task, another thread) waits for the first, so
        neither question nor answer is lost the way two runs over the same starting history would lose one.
        """
        async with self._one_turn_at_a_time():
            try:
                result = await self.loop.arun(
                    self.instructions, question, history=self._messages or None, cancel=cancel
                )
            except AgentCancelled as cancelled:
                self._messages = cancelled.result.messages  # keep the partial turn; the next ask can continue it
                raise
            self._messages = result.messages
            return result

    @contextlib.asynccontextmanager
    async def _one_turn_at_a_time(self) -> AsyncIterator[None]:
        # Polled, so that waiting never blocks an event loop and a cancel while waiting simply ends the wait.
        while not self._turn.acquire(blocking=False):
            await asyncio.sleep(0.005)
        try:
            yield
        finally:
            self._turn.release()

    def save(self, path: str | Path) -> None:
        """Write the conversation to `path` as compact JSON, atomically.

        Raises `SessionConflict`, writing nothing, when the file was saved by another session (another process)
        since this one loaded or last saved it: the other session's turns would otherwise be overwritten.
        """
        path = Path(path)
        with _file_lock(path):
            on_disk = _read_revision(path)
            if on_disk != self._revision:
                raise SessionConflict(
                    f"{path} was saved by another session since this one read it (revision {on_disk}, this "
                    f"session has {self._revision}); load it again to continue the conversation"
                )
            data: dict[str, Any] = {
                "format": FORMAT,
                "revision": self._revision + 1,
                "customer": self.customer_id,
                "instructions": self.instructions,
                "messages": messages_to_dict(self._messages),
            }
            _write_atomically(path, data)
            self._revision += 1
        log.info("saved session (%d messages, revision %d) to %s", len(self._messages), self._revision, path)

    @classmethod
    def load(cls, path: str | Path, loop: AgentLoop, *, customer_id: str | None = None) -> Session:
        """A session continuing the conversation saved at `path`, run by `loop`.

        With `customer_id`, a conversation saved for another customer is refused (`CustomerMismatch`): it holds
        that customer's name, address and cart, and must not be shown to anyone else.
        """
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path} is not a saved session (not JSON: {exc})") from None
        if not isinstance(data, dict) or data.get("format") not in READABLE_FORMATS:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"{path} is not a saved session (format {found!r}, expected {FORMAT!r})")
        owner = data.get("customer")
        if customer_id is not None and owner is not None and owner != customer_id:
            raise CustomerMismatch(f"{path} is the conversation of customer {owner!r}, not of {customer_id!r}")
        try:
            instructions, messages = str(data["instructions"]), messages_from_dict(data["messages"])
            revision = int(data.get("revision", 0))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path} is a damaged saved session ({type(exc).__name__}: {exc})") from None
        session = cls(loop, instructions, messages, customer_id=owner or customer_id)
        session._revision = revision
        return session


def _read_revision(path: Path) -> int:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return 0
    return int(data.get("revision", 0)) if isinstance(data, dict) else 0


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock for one read-check-write, so two processes cannot both pass the revision check.

    The folder is locked, not the file: `os.replace` gives the file a new inode, which a lock on the old one
    would not cover, and a lock file of its own would be left lying next to every session.
    """
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        yield
    finally:
        os.close(folder)  # which releases the lock


def _write_atomically(path: Path, data: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            # ensure_ascii: a reply cut off mid-emoji holds a lone surrogate, which UTF-8 cannot encode but a
            # JSON escape can, so such a conversation still saves (and loads back unchanged).
            json.dump(data, file, ensure_ascii=True, separators=(",", ":"))
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise

"""A multi-turn conversation over an `AgentLoop`: the history kept between questions, trimmed, rewound and saved.

`Session` is the hand-written counterpart of a framework session (the seed's `AgentSession`, a LangGraph
checkpointer thread): each `ask` runs the loop with the earlier conversation as history and fresh per-run
budgets, and keeps the history the run returns, including after a cancellation (the loop answers any cancelled
tool call, so the history stays valid). What a checkpointer and LangChain's message utilities give a framework
user is written out here in a few lines each: one turn at a time per conversation (a second `ask` waits for
the first), the customer the conversation belongs to, the history policy of `shared_tools.history`
(`keep_turns`: what `trim_messages` does, by hand; `summarize`: what `SummarizationMiddleware` does, by hand),
`rewind` (time travel: the list is cut, and the store is not rewound), and a save whose cost does not grow with
the conversation: an append-only JSON Lines file (a header line, then one line of new messages per save), which
a rewind or a summary rewrites atomically (a temp file, then `os.replace`), and which refuses to overwrite a
file another process saved since this session read it. The same conversation can live in Postgres instead
(`load_postgres`, `save_postgres`: a thread row and its messages, `handwritten.postgres`), with the same
conflict rule and, there, a turn lock several processes share (`handwritten.postgres.turn`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from langchain_core.messages import BaseMessage, SystemMessage, messages_from_dict, messages_to_dict

from handwritten.loop import AgentCancelled, AgentLoop, history_so_far
from shared_tools.history import (
    Rewound,
    count_turns,
    forgetting_calls,
    is_summary,
    is_user_turn,
    plan_fold,
    summary_message,
    write_summary,
)
from shared_tools.results import AgentResult, CustomerMismatch, RunUsage
from shared_tools.sync import run_blocking

log = logging.getLogger(__name__)

FORMAT = "agent-loop-compare/session/3"
READABLE_FORMATS = ("agent-loop-compare/session/1", "agent-loop-compare/session/2", FORMAT)
"""Version 1 (one JSON document, no customer, no revision) and version 2 (one JSON document) still load; a
session loaded from one is saved as version 3 (JSON Lines) at its next save."""


CUT_SHORT = "cut_short"
"""`additional_kwargs` key, True on the last message of a turn an outage cut short (`Session.unfinished`): saved
with it, so another process knows to finish that turn first."""


class SessionConflict(RuntimeError):
    """The session file was saved by someone else since this session read it; saving would lose their turns."""


class Session:
    """One conversation: ask several questions, each one seeing the earlier turns (or the last `keep_turns`)."""

    def __init__(
        self,
        loop: AgentLoop,
        instructions: str,
        messages: list[BaseMessage] | None = None,
        *,
        customer_id: str | None = None,
        keep_turns: int | None = None,
        summarize: bool = False,
    ) -> None:
        """`customer_id` records whose conversation this is (see `load`); the loop's tools must act for them.

        `keep_turns=N` sends the model only the system message, the summary if any and the last N user turns
        (the whole history is still kept and saved); `summarize=True` folds the turns that fall out of that
        window into one summary message written by the loop's model (`shared_tools.history`).
        """
        if keep_turns is not None and (not _is_count(keep_turns) or keep_turns < 1):
            raise ValueError(f"keep_turns must be at least 1 (a window of user turns), got {keep_turns!r}")
        if summarize and keep_turns is None:
            raise ValueError("summarize needs keep_turns: the summary stands in for the turns outside that window")
        self.loop = loop
        self.instructions = instructions
        self.customer_id = customer_id
        self.keep_turns = keep_turns
        self.summarize = summarize
        self.summary_tokens = 0
        """Tokens the summary calls spent in this session: not part of any question's token budget."""
        self._messages: list[BaseMessage] = list(messages or [])
        self._revision = 0
        """How many saves the file had when this session last read or wrote it (0: never saved)."""
        self._path: Path | None = None
        """The file this session was loaded from or last saved to: `rewind` saves there again."""
        self._thread: tuple[str, str] | None = None
        """Or the Postgres conversation (URL, thread id) it was loaded from or last saved to (`_path` is None)."""
        self._saved: int | None = None
        """How many leading messages of `_messages` are stored there as they are here; None: rewrite it whole."""
        # Threading locks, not asyncio ones: sync `ask`s from two threads each run their own event loop.
        self._turn = threading.Lock()
        self._state = threading.Lock()
        """Held while `_messages` is replaced and while a save reads it, so a save never writes half a change."""

    @property
    def messages(self) -> list[BaseMessage]:
        """The whole conversation so far, system message first (a copy)."""
        return list(self._messages)

    @property
    def turns(self) -> int:
        """How many user turns the history holds (turns folded into the summary are no longer counted)."""
        return count_turns(self._messages)

    def history_turns(self) -> list[str]:
        """The user's questions still in the history, oldest first."""
        return [message.text for message in self._messages if is_user_turn(message)]

    # --- asking --------------------------------------------------------------------------------------------------

    def ask(self, question: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """`aask` for sync callers. Inside a running event loop, await `aask` instead."""
        return run_blocking(lambda: self.aask(question, cancel=cancel), instead="Session.aask(...)")

    async def aask(self, question: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """Run the loop on `question` with the conversation so far; the budgets are fresh for every question.

        Turns are taken one at a time: a second `aask` (another task, another thread) waits for the first, so
        neither question nor answer is lost the way two runs over the same starting history would lose one.
        The result's `messages` are the whole history, not only the window the model was sent.
        """
        async with self._one_turn_at_a_time():
            if self.summarize and not (cancel is not None and cancel.is_set()):
                await self._fold_old_turns()
            full = self._messages
            sent = self._window(full)
            try:
                unsent = _left_out(full, sent)
                result = await self.loop.arun(
                    self.instructions, question, history=sent or None, cancel=cancel, unsent=unsent
                )
            except AgentCancelled as cancelled:
                # Keep the partial turn (the loop answered its open calls), so the next ask can continue it.
                cancelled.result = self._keep(full, sent, cancelled.result)
                raise
            except Exception as failure:
                self._keep_cut_short(full, sent, failure)
                raise
            return self._keep(full, sent, result)

    @property
    def unfinished(self) -> bool:
        """Whether the last turn was cut short by an outage (`continue_unfinished` finishes it)."""
        return bool(self._messages) and self._messages[-1].additional_kwargs.get(CUT_SHORT) is True

    def continue_unfinished(self, *, cancel: threading.Event | None = None) -> AgentResult | None:
        """`acontinue_unfinished` for sync callers."""
        return run_blocking(lambda: self.acontinue_unfinished(cancel=cancel), instead="Session.acontinue_unfinished()")

    async def acontinue_unfinished(self, *, cancel: threading.Event | None = None) -> AgentResult | None:
        """Finish the turn an outage cut short, from the calls it finished (they are not run again); None when
        the last turn is not unfinished. Ask a new question only after this: its model would not know that the
        cut-short turn's add landed, and would add the book a second time."""
        async with self._one_turn_at_a_time():
            if not self.unfinished:
                return None
            full = self._messages
            sent = self._window(full, asking=False)
            try:
                result = await self.loop.arun(
                    self.instructions, None, history=sent, cancel=cancel, unsent=_left_out(full, sent)
                )
            except AgentCancelled as cancelled:
                cancelled.result = self._keep(full, sent, cancelled.result)
                raise
            except Exception as failure:
                self._keep_cut_short(full, sent, failure)
                raise
            return self._keep(full, sent, result)

    def _keep_cut_short(self, full: list[BaseMessage], sent: list[BaseMessage], failure: BaseException) -> None:
        """Keep what a run an outage ended had done, its last message marked `CUT_SHORT`: the calls that finished
        stay in the history (and in the next save), so nobody asks for them again."""
        so_far = history_so_far(failure)
        if so_far is None or len(so_far) <= len(sent):
            return
        *head, last = so_far
        marked = last.model_copy(update={"additional_kwargs": {**last.additional_kwargs, CUT_SHORT: True}})
        added = [*head, marked][len(sent) :] if sent else [*head, marked]
        with self._state:
            self._messages = (full if sent else []) + added
        log.warning("an outage cut the turn short: %d message(s) of it kept, marked unfinished", len(added))

    def _window(self, messages: list[BaseMessage], *, asking: bool = True) -> list[BaseMessage]:
        """What the model is sent before this question: the system message, the summary, and the last
        `keep_turns - 1` user turns (the question about to be asked is the Nth; not `asking`: the last turn, cut
        short, is the Nth). A cut made only where a user turn starts never separates a reply with tool calls from
        its results."""
        if self.keep_turns is None:
            return messages
        starts = [i for i, message in enumerate(messages) if is_user_turn(message)]
        window = self.keep_turns - 1 if asking else self.keep_turns
        if len(starts) <= window:
            return messages
        cut = starts[len(starts) - window] if window > 0 else len(messages)
        head = [m for m in messages[:cut] if isinstance(m, SystemMessage) or is_summary(m)]
        return head + messages[cut:]

    def _keep(self, full: list[BaseMessage], sent: list[BaseMessage], result: AgentResult) -> AgentResult:
        """Splice what the run added (the question, the replies, the results) onto the whole history."""
        added = result.messages[len(sent) :] if sent else result.messages
        if not sent:
            full = []  # the loop began the history itself, system message first
        with self._state:
            self._messages = full + added
        return dataclasses.replace(result, messages=list(self._messages))

    async def _fold_old_turns(self) -> None:
        """Fold the turns that will fall out of this ask's window into the summary (or into a first one).

        The summary is written by the loop's model, without tools, on a budget of its own: its tokens go to
        `summary_tokens`, not to the question's. A reply with no text folds nothing (the window still bounds the
        prompt); a reply too long is cut (`clip_summary`).
        """
        assert self.keep_turns is not None
        fold = plan_fold(self._messages, self.keep_turns)
        if fold is None:
            return
        text, tokens = await write_summary(self.loop.model, fold, self.loop.limits.time_left(RunUsage()))
        self.summary_tokens += tokens
        if not text:
            return
        with self._state:
            self._messages = [*fold.system, summary_message(text), *fold.kept]
            self._saved = None  # messages left the middle of the list: the file is rewritten at the next save
        log.info(
            "folded %d message(s) into the summary (%d characters, %d tokens; %d summary tokens in this session)",
            len(fold.folded), len(text), tokens, self.summary_tokens,
        )  # fmt: skip

    @contextlib.asynccontextmanager
    async def _one_turn_at_a_time(self) -> AsyncIterator[None]:
        # Polled, so that waiting never blocks an event loop and a cancel while waiting simply ends the wait.
        while not self._turn.acquire(blocking=False):
            await asyncio.sleep(0.005)
        try:
            yield
        finally:
            self._turn.release()

    # --- time travel ---------------------------------------------------------------------------------------------

    def rewind(self, turns: int = 1) -> Rewound:
        """`arewind` for sync callers. Inside a running event loop, await `arewind` instead."""
        return run_blocking(lambda: self.arewind(turns), instead="Session.arewind(...)")

    async def arewind(self, turns: int = 1) -> Rewound:
        """Go back to before the last `turns` user turns: the conversation continues from there.

        Only the conversation goes back, not the world: a book a forgotten turn added is still in the cart, an
        order it placed is still placed (the store has no history to rewind). A turn in progress is waited for,
        as `aask` waits. If the session has a file (it was loaded or saved), the file is rewritten to match, with
        the same revision check as `save`; if that fails, nothing is rewound. Turns already folded into the
        summary cannot be rewound.
        """
        async with self._one_turn_at_a_time():
            starts = [i for i, message in enumerate(self._messages) if is_user_turn(message)]
            if not _is_count(turns) or not 1 <= turns <= len(starts):
                raise ValueError(f"cannot rewind {turns} turn(s): the history holds {len(starts)} user turn(s)")
            before, cut = self._messages, starts[-turns]
            kept = forgetting_calls(before[:cut], before)
            with self._state:
                self._messages = kept
                saved = self._saved
                if saved is not None and (saved > cut or kept[:1] != before[:1]):
                    self._saved = None  # the file holds messages that are gone or changed: rewrite it
            if self._path is not None or self._thread is not None:
                try:
                    if self._path is not None:
                        self.save(self._path)
                    else:
                        assert self._thread is not None
                        await self.asave_postgres(*self._thread)
                except BaseException:
                    with self._state:
                        self._messages, self._saved = before, saved
                    raise
        rewound = Rewound(turns=turns, messages=len(before) - cut)
        log.info(
            "rewound %d turn(s): %d message(s) dropped, %d kept%s; the store is unchanged",
            turns, rewound.messages, cut, "" if self._path is None and self._thread is None else ", saved again",
        )  # fmt: skip
        return rewound

    # --- saving and loading --------------------------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Write the conversation to `path`: append the messages added since the last save, or write it whole.

        The file is JSON Lines: a header, then one line per save with the messages it added, so a save costs the
        same at turn 200 as at turn 2. It is written whole (a temp file, then `os.replace`) the first time, after
        a rewind or a summary, and when it is another path. A crash mid-append leaves a torn last line, which
        `load` ignores and the next save removes. Raises `SessionConflict`, writing nothing, when the file was
        saved by another session (another process) since this one loaded or last saved it.
        """
        path = Path(path)
        with self._state, _file_lock(path):
            on_disk = _read_revision(path)
            if on_disk != self._revision:
                raise SessionConflict(
                    f"{path} was saved by another session since this one read it (revision {on_disk}, this "
                    f"session has {self._revision}); load it again to continue the conversation"
                )
            revision, messages = self._revision + 1, self._messages
            appending = self._saved is not None and self._path is not None and self._path.resolve() == path.resolve()
            if appending:
                assert self._saved is not None
                _append_line(path, _record(revision, messages[self._saved :]))
            else:
                header = {
                    "format": FORMAT,
                    "revision": revision,
                    "customer": self.customer_id,
                    "instructions": self.instructions,
                }
                _write_atomically(path, _line(header) + _record(revision, messages))
            self._revision, self._path, self._thread, self._saved = revision, path, None, len(messages)
        log.info(
            "saved session (%d messages, revision %d, %s) to %s",
            len(messages), revision, "appended" if appending else "written whole", path,
        )  # fmt: skip

    @classmethod
    def load(
        cls,
        path: str | Path,
        loop: AgentLoop,
        *,
        customer_id: str | None = None,
        keep_turns: int | None = None,
        summarize: bool = False,
    ) -> Session:
        """A session continuing the conversation saved at `path`, run by `loop` with this history policy.

        With `customer_id`, a conversation saved for another customer is refused (`CustomerMismatch`): it holds
        that customer's name, address and cart, and must not be shown to anyone else. A torn last line (a crash
        mid-save) is ignored; any other damage is a `ValueError`.
        """
        path = Path(path)
        data = path.read_bytes()
        header, records, complete = _read_lines(path, data)
        if header is None:
            document = _read_document(path, data)
            header, records, complete = document, [document], True
        owner = header.get("customer")
        if customer_id is not None and owner is not None and owner != customer_id:
            raise CustomerMismatch(f"{path} is the conversation of customer {owner!r}, not of {customer_id!r}")
        try:
            instructions = str(header["instructions"])
            messages = [m for record in records for m in messages_from_dict(record["messages"])]
            revision = int(records[-1].get("revision", 0)) if records else int(header.get("revision", 0))
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path} is a damaged saved session ({type(exc).__name__}: {exc})") from None
        if not complete:
            log.warning("%s ends with a torn line (a save cut short); it is ignored", path)
        session = cls(
            loop, instructions, messages, customer_id=owner or customer_id, keep_turns=keep_turns, summarize=summarize
        )
        session._revision, session._path = revision, path
        # Appending goes on only to a file this version wrote; an older one is rewritten whole at the next save.
        session._saved = len(messages) if header.get("format") == FORMAT else None
        return session

    # --- Postgres ------------------------------------------------------------------------------------------------

    def save_postgres(self, url: str, thread_id: str) -> None:
        """`asave_postgres` for sync callers."""
        run_blocking(lambda: self.asave_postgres(url, thread_id), instead="Session.asave_postgres(...)")

    async def asave_postgres(self, url: str, thread_id: str) -> None:
        """Store the conversation as `thread_id` in the Postgres database at `url` (`handwritten.postgres`): the
        messages added since the last save to that thread, or all of them (after a rewind or a summary, or the
        first time), in one transaction. Raises `SessionConflict`, writing nothing, when another session saved
        the thread since this one loaded or last saved it, as `save` does for a file."""
        from handwritten import postgres

        with self._state:  # a consistent copy; the write itself runs without the lock, on the event loop
            messages, revision = list(self._messages), self._revision
            appending = self._thread == (url, thread_id) and self._saved is not None
            start = self._saved if appending and self._saved is not None else 0
        saved = await postgres.write(
            url,
            thread_id,
            read_revision=revision,
            customer=self.customer_id,
            instructions=self.instructions,
            messages=messages_to_dict(messages),
            start=start,
        )
        with self._state:
            self._revision, self._path, self._thread, self._saved = saved, None, (url, thread_id), len(messages)
        log.info("saved session (%d messages, revision %d, from message %d) to thread %r", len(messages), saved,
                 start, thread_id)  # fmt: skip

    @classmethod
    def load_postgres(
        cls,
        url: str,
        thread_id: str,
        loop: AgentLoop,
        *,
        customer_id: str | None = None,
        keep_turns: int | None = None,
        summarize: bool = False,
    ) -> Session:
        """`aload_postgres` for sync callers."""
        return run_blocking(
            lambda: cls.aload_postgres(
                url, thread_id, loop, customer_id=customer_id, keep_turns=keep_turns, summarize=summarize
            ),
            instead="Session.aload_postgres(...)",
        )

    @classmethod
    async def aload_postgres(
        cls,
        url: str,
        thread_id: str,
        loop: AgentLoop,
        *,
        customer_id: str | None = None,
        keep_turns: int | None = None,
        summarize: bool = False,
    ) -> Session:
        """A session continuing the conversation stored as `thread_id` at `url`; `LookupError` when there is none
        (start a new `Session` and `save_postgres` it). A conversation of another customer is refused
        (`CustomerMismatch`), and a damaged one is a `ValueError`, as for `load`."""
        from handwritten import postgres

        stored = await postgres.read(url, thread_id)
        if stored is None:
            raise LookupError(f"no conversation {thread_id!r} is stored in that database")
        if customer_id is not None and stored.customer is not None and stored.customer != customer_id:
            raise CustomerMismatch(
                f"thread {thread_id!r} is the conversation of customer {stored.customer!r}, not of {customer_id!r}"
            )
        try:
            messages = messages_from_dict(stored.messages)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"thread {thread_id!r} is a damaged saved session ({type(exc).__name__}: {exc})") from None
        session = cls(
            loop,
            stored.instructions,
            messages,
            customer_id=stored.customer or customer_id,
            keep_turns=keep_turns,
            summarize=summarize,
        )
        session._revision, session._thread, session._saved = stored.revision, (url, thread_id), len(messages)
        return session


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # True is an int, but not a number of turns


def _left_out(full: list[BaseMessage], sent: list[BaseMessage]) -> list[BaseMessage]:
    """The messages of `full` the window leaves out (the loop still keeps their tool-call ids taken)."""
    if len(sent) == len(full):
        return []
    in_window = {id(message) for message in sent}
    return [message for message in full if id(message) not in in_window]


# --- the file --------------------------------------------------------------------------------------------------------


def _line(data: dict[str, Any]) -> bytes:
    # ensure_ascii: a reply cut off mid-emoji holds a lone surrogate, which UTF-8 cannot encode but a JSON escape
    # can, so such a conversation still saves (and loads back unchanged). It also keeps every line one line.
    return json.dumps(data, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"


def _record(revision: int, messages: Sequence[BaseMessage]) -> bytes:
    return _line({"revision": revision, "messages": messages_to_dict(list(messages))})


def _read_lines(path: Path, data: bytes) -> tuple[dict[str, Any] | None, list[dict[str, Any]], bool]:
    """A version-3 file's header, its records, and whether its last line was whole; (None, [], True) when the file
    is no version-3 file (an older version, or something else: `_read_document` says which)."""
    first, newline, rest = data.partition(b"\n")
    header = _json_or_none(first) if newline else None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        return None, [], True
    *lines, torn = rest.split(b"\n")
    records: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=2):
        record = _json_or_none(line)
        if not isinstance(record, dict):
            raise ValueError(f"{path} is a damaged saved session (line {number} is not a JSON object)")
        records.append(record)
    return header, records, not torn


def _read_document(path: Path, data: bytes) -> dict[str, Any]:
    """A version 1 or 2 file: one JSON document."""
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not a saved session (not JSON: {exc})") from None
    if not isinstance(document, dict) or document.get("format") not in READABLE_FORMATS:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise ValueError(f"{path} is not a saved session (format {found!r}, expected {FORMAT!r})")
    return document


def _json_or_none(line: bytes) -> Any:
    try:
        return json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None


def _read_revision(path: Path) -> int:
    """The revision of the file at `path` (0: no file), read from its last whole line, without reading it all."""
    try:
        file = path.open("rb")
    except FileNotFoundError:
        return 0
    with file:
        header = _json_or_none(file.readline())
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            file.seek(0)
            document = _json_or_none(file.read())  # an older version: one document, read once before it is replaced
            return int(document.get("revision", 0)) if isinstance(document, dict) else 0
        last = _json_or_none(_last_whole_line(file)[0])
        return int(last.get("revision", 0)) if isinstance(last, dict) else 0


def _last_whole_line(file: BinaryIO) -> tuple[bytes, int]:
    """The last line that ends with a newline, and the offset just after it: read backwards, in blocks."""
    end = file.seek(0, os.SEEK_END)
    tail, position, block = b"", end, 1 << 12
    while True:
        block *= 2  # doubling, so a long last line (a file written whole) is still read in linear time
        step = min(block, position)
        position -= step
        file.seek(position)
        tail = file.read(step) + tail
        last_newline = tail.rfind(b"\n")
        if last_newline >= 0:
            start = tail.rfind(b"\n", 0, last_newline) + 1
            if start > 0 or position == 0:
                return tail[start:last_newline], position + last_newline + 1
        if position == 0:
            return b"", 0


def _append_line(path: Path, line: bytes) -> None:
    with path.open("r+b") as file:
        _, whole = _last_whole_line(file)
        file.truncate(whole)  # a torn line left by a crash mid-append, which load ignores anyway
        file.seek(whole)
        file.write(line)
        file.flush()
        os.fsync(file.fileno())


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


def _write_atomically(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise

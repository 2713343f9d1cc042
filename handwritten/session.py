"""A conversation over an `AgentLoop`: the history kept between questions, trimmed, rewound and saved.

Each `ask` runs the loop with the earlier turns as history and fresh budgets, one turn at a time, for the
customer the conversation belongs to; `keep_turns` and `summarize` are the history policy of
`shared_tools.history`. Where it is kept is a store's concern: a JSON Lines file (`handwritten.storage`) or
Postgres (`handwritten.postgres`), both refusing to overwrite a save made by another process.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import uuid
from pathlib import Path
from typing import Unpack

from langchain_core.messages import (
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
    messages_to_dict,
)

from handwritten import storage
from handwritten.loop import AgentCancelled, AgentLoop, history_so_far
from shared_tools.conversation import HistoryPolicy, OneTurnAtATime, PolicyKeywords, check_owner
from shared_tools.history import (
    Rewound,
    among_other_conversations,
    count_turns,
    forgetting_calls,
    is_summary,
    is_user_turn,
    plan_fold,
    summary_message,
    write_summary,
)
from shared_tools.results import AgentResult, RunUsage
from shared_tools.sync import run_blocking

log = logging.getLogger(__name__)

CUT_SHORT = "cut_short"
"""`additional_kwargs` key, True on the last message of a turn an outage cut short (`Session.unfinished`): saved
with it, so another process knows to finish that turn first."""


def check_cut_short_mark(messages: list[BaseMessage], where: str) -> None:
    """Refuse (`ValueError`) a last message marked `CUT_SHORT` that no run can go on from: a save marks only a
    question or a tool result (`history_so_far` answers the open calls). Marks earlier on are of turns since
    finished."""
    last = messages[-1] if messages else None
    marked = last is not None and last.additional_kwargs.get(CUT_SHORT) is True
    if marked and not isinstance(last, HumanMessage | ToolMessage):
        raise ValueError(
            f"{where} is a damaged saved session (its last message, a {type(last).__name__}, is marked cut "
            "short, and no turn can go on from it)"
        )


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
        conversation_id: str | None = None,
    ) -> None:
        """`customer_id` records whose conversation this is (see `load`); the loop's tools must act for them.
        `conversation_id` ties its turns' spans together (a Postgres thread's id; else a new one per session).

        `keep_turns=N` sends the model only the system message, the summary if any and the last N user turns
        (the whole history is still kept and saved); `summarize=True` folds the turns that fall out of that
        window into one summary message written by the loop's model (`shared_tools.history`).
        """
        HistoryPolicy(keep_turns, summarize)  # refuses a window of no turns, and a summary without a window
        self.loop = loop
        self.instructions = instructions
        self.customer_id = customer_id
        self.keep_turns = keep_turns
        self.summarize = summarize
        self.conversation_id = conversation_id or f"session-{uuid.uuid4().hex[:12]}"
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
        self._turn = OneTurnAtATime()
        # A threading lock, not an asyncio one: sync `ask`s from two threads each run their own event loop.
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
        async with self._turn.held():
            if self.summarize and not (cancel is not None and cancel.is_set()):
                await self._fold_old_turns()
            self._mark_among_others()
            full = self._messages
            sent = self._window(full)
            try:
                unsent = _left_out(full, sent)
                result = await self.loop.arun(
                    self.instructions,
                    question,
                    history=sent or None,
                    cancel=cancel,
                    unsent=unsent,
                    conversation_id=self.conversation_id,
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
        async with self._turn.held():
            if not self.unfinished:
                return None
            self._mark_among_others()
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

    def _mark_among_others(self) -> None:
        """Begin the history with a system message marked as one conversation among the customer's others (a
        provider's call_0 here is not their call_0: `among_other_conversations`)."""
        marked = among_other_conversations(self._messages, self.instructions)
        if marked[0] is not (self._messages[0] if self._messages else None):
            with self._state:
                self._messages = marked
                self._saved = None  # the first message changed: the next save rewrites the stored conversation

    def _keep(self, full: list[BaseMessage], sent: list[BaseMessage], result: AgentResult) -> AgentResult:
        """Splice what the run added (the question, the replies, the results) onto the whole history, and what it
        replaced in the window it was sent (a result the stale-read guard marked out of date)."""
        added = result.messages[len(sent) :] if sent else result.messages
        if not sent:
            full = []  # the loop began the history itself, system message first
        replaced = {id(was): now for was, now in zip(sent, result.messages, strict=False) if now is not was}
        with self._state:
            self._messages = [replaced.get(id(message), message) for message in full] + added
            if replaced:
                self._saved = None  # an earlier message changed: the next save rewrites the stored conversation
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
            len(fold.folded),
            len(text),
            tokens,
            self.summary_tokens,
        )

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
        async with self._turn.held():
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
            turns,
            rewound.messages,
            cut,
            "" if self._path is None and self._thread is None else ", saved again",
        )
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
        with self._state:
            messages = self._messages
            appending = self._saved is not None and self._path is not None and self._path.resolve() == path.resolve()
            revision = storage.write(
                path,
                read_revision=self._revision,
                customer=self.customer_id,
                instructions=self.instructions,
                messages=messages,
                start=self._saved if appending and self._saved is not None else 0,
            )
            self._revision, self._path, self._thread, self._saved = revision, path, None, len(messages)
        log.info(
            "saved session (%d messages, revision %d, %s) to %s",
            len(messages),
            revision,
            "appended" if appending else "written whole",
            path,
        )

    @classmethod
    def load(
        cls,
        path: str | Path,
        loop: AgentLoop,
        *,
        customer_id: str | None = None,
        **policy: Unpack[PolicyKeywords],
    ) -> Session:
        """A session continuing the conversation saved at `path`, run by `loop` with the history `policy`.

        With `customer_id`, a conversation saved for another customer is refused (`CustomerMismatch`): it holds
        that customer's name, address and cart, and must not be shown to anyone else. A torn last line (a crash
        mid-save) is ignored; any other damage is a `ValueError`.
        """
        path = Path(path)
        stored = storage.read(path)
        owner = stored.customer
        check_owner(owner, customer_id, str(path))
        try:
            messages = messages_from_dict(stored.messages)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path} is a damaged saved session ({type(exc).__name__}: {exc})") from None
        check_cut_short_mark(messages, str(path))
        session = cls(
            loop,
            stored.instructions,
            messages,
            customer_id=owner or customer_id,
            **policy,
        )
        session._revision, session._path, session._saved = stored.revision, path, len(messages)
        return session

    # --- Postgres ------------------------------------------------------------------------------------------------

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
        log.info(
            "saved session (%d messages, revision %d, from message %d) to thread %r",
            len(messages),
            saved,
            start,
            thread_id,
        )

    @classmethod
    async def aload_postgres(
        cls,
        url: str,
        thread_id: str,
        loop: AgentLoop,
        *,
        customer_id: str | None = None,
        **policy: Unpack[PolicyKeywords],
    ) -> Session:
        """A session continuing the conversation stored as `thread_id` at `url`; `LookupError` when there is none
        (start a new `Session` and `asave_postgres` it). A conversation of another customer is refused
        (`CustomerMismatch`), and a damaged one is a `ValueError`, as for `load`."""
        from handwritten import postgres

        stored = await postgres.read(url, thread_id)
        if stored is None:
            raise LookupError(f"no conversation {thread_id!r} is stored in that database")
        check_owner(stored.customer, customer_id, f"thread {thread_id!r}")
        try:
            messages = messages_from_dict(stored.messages)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"thread {thread_id!r} is a damaged saved session ({type(exc).__name__}: {exc})") from None
        check_cut_short_mark(messages, f"thread {thread_id!r}")
        session = cls(
            loop,
            stored.instructions,
            messages,
            customer_id=stored.customer or customer_id,
            conversation_id=thread_id,
            **policy,
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

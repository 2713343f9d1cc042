"""`KeptSession`: the hand-written `Session` as a `Conversation` that saves itself after every turn and rewind.

Kept in memory, in a JSON Lines file (`handwritten.storage`), or in a Postgres thread (`handwritten.postgres`):
there every turn is load, ask, save under the thread's turn lock, so any process may take the next turn of a
conversation another process answered, and two turns at once take turns instead of one losing its save. A turn
that an outage, a cancel or a Ctrl-C cut short is saved as far as it got, so its history tells the truth.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Unpack

from langchain_core.messages import BaseMessage, messages_to_dict

from handwritten.loop import AgentCancelled, AgentLoop
from handwritten.session import Session
from handwritten.storage import SessionConflict
from shared_tools.bookstore.store import is_postgres_url
from shared_tools.conversation import (
    ConversationNotSaved,
    HistoryPolicy,
    Opening,
    beside,
    check_thread_name,
    despite_cancel,
    facts_of,
)
from shared_tools.history import Rewound, Turn, turns_of
from shared_tools.results import AgentResult
from shared_tools.sync import run_blocking

log = logging.getLogger(__name__)


class KeptSession:
    """A `Session` and where it is kept: nowhere (`path` and `url` None), the file `path`, or the Postgres
    thread `thread_id` at `url`. `aopen` starts or resumes it; the calls are `Conversation`'s."""

    def __init__(
        self,
        session: Session,
        *,
        path: Path | None = None,
        url: str | None = None,
        thread_id: str | None = None,
        customer_id: str | None = None,
    ) -> None:
        assert url is None or thread_id is not None, "a Postgres session is named by its thread"
        self.session = session
        self.path = path
        self.url = url
        self.thread_id = thread_id
        self.customer_id = customer_id
        """Whose conversation the caller asked for: a Postgres reload before each turn checks it again."""

    async def aopen(self, *, resume: bool) -> None:
        """Read the conversation as it is kept (`resume`), or start it afresh: a demo re-run with the same
        --session-db replaces the old one, as a graph's thread is deleted (saving over it would be refused)."""
        if self.url is not None and self.thread_id is not None:
            if resume:
                latest = await aload_thread(self.url, self.thread_id, self.session.loop, self.customer_id, self.policy)
                if latest is not None:
                    self.session = latest
            else:
                from handwritten import postgres

                await postgres.delete(self.url, self.thread_id)
        elif self.path is not None and resume and self.path.exists():
            self.session = load_file(self.path, self.session.loop, self.customer_id, self.policy)
        elif self.path is not None:
            self.path.unlink(missing_ok=True)

    @property
    def policy(self) -> HistoryPolicy:
        return HistoryPolicy(self.session.keep_turns, self.session.summarize)

    # --- the sync drivers ---------------------------------------------------------------------------------------

    def ask(self, question: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """`aask` for sync callers: a Ctrl-C cancels the turn, which is saved as far as it got before the
        KeyboardInterrupt is raised."""
        return run_blocking(lambda: self.aask(question, cancel=cancel), instead="KeptSession.aask(...)")

    def resume(self, approved: Any, *, cancel: threading.Event | None = None) -> AgentResult:
        return run_blocking(lambda: self.aresume(approved, cancel=cancel), instead="KeptSession.aresume(...)")

    def continue_unfinished(self, *, cancel: threading.Event | None = None) -> AgentResult | None:
        """Finish a turn an outage cut short (`Session.continue_unfinished`), and save it; None when there is none."""
        return run_blocking(
            lambda: self.acontinue_unfinished(cancel=cancel), instead="KeptSession.acontinue_unfinished()"
        )

    def rewind(self, turns: int = 1) -> Rewound:
        """Cut the last `turns` turns off the list, and off the saved file (or row) too."""
        return run_blocking(lambda: self.arewind(turns), instead="KeptSession.arewind(...)")

    # --- turns, async: saved under the turn lock -----------------------------------------------------------------

    async def aask(self, question: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """One turn, saved where the conversation is kept; a turn the cancel event ended is saved and returned as
        its CANCELLED result, and one a task cancel cut is saved before `AgentCancelled` (its `.result`) goes on."""
        result = await self._aturn(lambda: self.session.aask(question, cancel=cancel), asking=True)
        assert result is not None
        return result

    async def acontinue_unfinished(self, *, cancel: threading.Event | None = None) -> AgentResult | None:
        return await self._aturn(lambda: self.session.acontinue_unfinished(cancel=cancel))

    async def aresume(self, approved: Any, *, cancel: threading.Event | None = None) -> AgentResult:
        raise RuntimeError("the hand-written loop asks its approve callback during the run: it never pauses")

    async def arewind(self, turns: int = 1) -> Rewound:
        async with self._turn():
            rewound: Rewound = await self.session.arewind(turns)
            await despite_cancel(self._asave())
        return rewound

    async def amessages(self) -> list[BaseMessage]:
        return self.session.messages

    async def apending(self) -> list[dict[str, Any]]:
        return []  # the loop asks during the run: a conversation at rest waits for nobody

    async def _aturn(
        self, run: Callable[[], Awaitable[AgentResult | None]], *, asking: bool = False
    ) -> AgentResult | None:
        """`run()` under the turn lock, saved where the conversation is kept; a turn a cancel or an outage cut
        short is saved as far as it got. A question's answer a file could not keep is `ConversationNotSaved`."""
        result: AgentResult | None = None
        try:
            async with self._turn():
                try:
                    result = await run()
                except AgentCancelled as cancelled:
                    # Kept as far as it got, and the cancel goes on up: a Ctrl-C in `chat` must end the program.
                    await self._asave_turn(cancelled.result, asking)
                    raise
                except Exception:
                    await self._asave_cut_short()  # an outage: what the turn did is saved, marked unfinished
                    raise
                if result is not None:
                    await self._asave_turn(result, asking)
        except asyncio.CancelledError:
            # A task cancel that lands after the loop stopped on the cancel event (the page cancels both ways)
            # hits the save or the lock's release: the turn is saved, so its result stands.
            if result is None:
                raise
        return result

    async def _asave_turn(self, result: AgentResult, asking: bool) -> None:
        try:
            await despite_cancel(self._asave())
        except SessionConflict as exc:
            if not asking or self.url is not None:
                raise
            reason = f"this turn was not saved and nothing was overwritten: {exc}"
            raise ConversationNotSaved(result, reason) from exc

    @asynccontextmanager
    async def _turn(self) -> AsyncIterator[None]:
        """Postgres: the thread's turn lock, and the conversation as last saved by whichever process saved it."""
        if self.url is None or self.thread_id is None:
            yield
            return
        from handwritten import postgres

        async with postgres.turn(self.url, self.thread_id):
            latest = await aload_thread(self.url, self.thread_id, self.session.loop, self.customer_id, self.policy)
            if latest is not None:
                self.session = latest
            yield

    async def _asave(self) -> None:
        if self.url is not None and self.thread_id is not None:
            await self.session.asave_postgres(self.url, self.thread_id)
        elif self.path is not None:
            self.session.save(self.path)  # a small local file, written at once: no await for a cancel to land on

    async def _asave_cut_short(self) -> None:
        """`_save_cut_short`, awaited (Postgres)."""
        if self.session.unfinished:
            try:
                await despite_cancel(self._asave())
            except Exception:
                log.exception("the turn an outage cut short could not be saved")

    # --- what it holds -------------------------------------------------------------------------------------------

    async def aturns(self) -> list[Turn]:
        return turns_of(self.session.messages)

    async def afacts(self) -> dict[str, Any]:
        messages = self.session.messages
        if self.path is not None and self.path.exists():
            stored = self.path.stat().st_size
        else:
            # What a save would write: the compact JSON of the list (a Postgres row holds it as UTF-8).
            ascii_only = self.url is None
            text = json.dumps(messages_to_dict(messages), separators=(",", ":"), ensure_ascii=ascii_only)
            stored = len(text.encode())
        return facts_of(messages, stored, self.url or self.path)

    def close(self) -> None:
        pass


def load_file(path: Path, loop: AgentLoop | None, customer_id: str | None, policy: HistoryPolicy) -> Session:
    """The session saved at `path`; ValueError (`CustomerMismatch` among them) for one that cannot be resumed."""
    try:
        return Session.load(path, loop, customer_id=customer_id, **policy.kwargs())  # type: ignore[arg-type]
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} cannot be read as a saved session ({exc})") from None
    except (AttributeError, IndexError, KeyError, TypeError) as exc:  # a shape Session.load did not foresee
        raise ValueError(f"{path} is a damaged saved session ({type(exc).__name__}: {exc})") from None


async def aload_thread(
    url: str, thread_id: str, loop: AgentLoop | None, customer_id: str | None, policy: HistoryPolicy
) -> Session | None:
    try:
        return await Session.aload_postgres(url, thread_id, loop, customer_id=customer_id, **policy.kwargs())  # type: ignore[arg-type]
    except LookupError:
        return None


async def aopen_conversation(
    loop: AgentLoop,
    instructions: str,
    thread_id: str,
    where: Path | str | None,
    *,
    resume: bool,
    **opening: Unpack[Opening],
) -> KeptSession:
    """The conversation `thread_id`: in memory (`where` None), in a JSON file beside the session database
    `where`, or in the Postgres database at `where`. `approve` and `storage` are not this session's: the loop
    was given its own approval callback when it was built, and a JSON file has no storage options."""
    policy, customer_id = opening.get("policy") or HistoryPolicy(), opening.get("customer_id")
    session = Session(loop, instructions, customer_id=customer_id, **policy.kwargs())
    if is_postgres_url(where):
        check_thread_name(thread_id)
        kept = KeptSession(session, url=str(where), thread_id=thread_id, customer_id=customer_id)
    else:
        path = None if where is None else beside(Path(where), thread_id, ".json")
        kept = KeptSession(session, path=path, customer_id=customer_id)
    await kept.aopen(resume=resume)
    return kept


async def acheck_saved(where: Path | str, thread_id: str, customer_id: str | None) -> None:
    """Raise ValueError (`CustomerMismatch` among them) when the conversation `thread_id` kept at `where` cannot
    be resumed: a damaged or wrong-shape file, or another customer's conversation. Reads, never writes."""
    if is_postgres_url(where):
        await aload_thread(str(where), thread_id, None, customer_id, HistoryPolicy())
        return
    path = beside(Path(where), thread_id, ".json")
    if path.exists():
        load_file(path, None, customer_id, HistoryPolicy())

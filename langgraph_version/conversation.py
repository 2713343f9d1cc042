"""`GraphConversation`: a checkpointer thread as a `Conversation`, in memory, in a SQLite file or in Postgres:
`GraphSession` for our guarded graph, `CheckpointThread` for the framework-only contenders.

`ask` answers each approval pause through `approve` (no one to ask: refused) and resumes, so it returns only
when the turn is over, as the hand-written loop's does; `aask` comes back at the pause, for the page to answer.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable
from contextlib import AbstractAsyncContextManager, nullcontext
from pathlib import Path
from typing import Any, Unpack

from langchain_core.messages import AIMessage, BaseMessage

from langgraph_version.agent import GraphAgent
from langgraph_version.prebuilt.thread import CheckpointThread, FrameworkAgent
from langgraph_version.session import GraphSession
from langgraph_version.thread_storage import thread_storage
from shared_tools.bookstore.store import is_postgres_url
from shared_tools.conversation import (
    HistoryPolicy,
    NoRewind,
    Opening,
    decide_each,
    resume_until_answered,
    resume_with,
    shown_target,
)
from shared_tools.history import Rewound, Turn, count_turns, turns_of
from shared_tools.results import AgentResult, Approve
from shared_tools.sync import run_blocking


class GraphConversation:
    """A `GraphSession` or a `CheckpointThread` (`session`), kept at `path` (None: in memory)."""

    def __init__(
        self, session: GraphSession | CheckpointThread, path: Path | str | None, approve: Approve | None = None
    ) -> None:
        self.session: Any = session
        self.path = path
        self.approve = approve
        self.thread_id = session.thread_id

    async def aopen(self, *, resume: bool) -> None:
        """A fresh thread (not `resume`) in a file or a database starts from scratch, as a demo re-run does."""
        if self.path is not None and not resume:
            await self.session.adelete()

    def _answered(self, result: AgentResult) -> AgentResult:
        return resume_until_answered(self, result, self.approve)[0]

    # --- the sync drivers: a turn to its end, each pause answered through `approve` ----------------------------

    def ask(self, question: str, *, cancel: threading.Event | None = None) -> AgentResult:
        result = run_blocking(lambda: self.aask(question, cancel=cancel), instead="GraphConversation.aask(...)")
        return self._answered(result)

    def resume(self, approved: Any, *, cancel: threading.Event | None = None) -> AgentResult:
        return run_blocking(lambda: self.aresume(approved, cancel=cancel), instead="GraphConversation.aresume(...)")

    def continue_unfinished(self, *, cancel: threading.Event | None = None) -> AgentResult | None:
        """A pause nobody answered (the process ended at the approval prompt) is asked again, then finished;
        a turn a crash or an outage cut short is finished from its last checkpoint."""
        pending = run_blocking(self.apending, instead="GraphConversation.apending()")
        if pending:
            return self._answered(resume_with(self, decide_each(pending, self.approve)))
        result = run_blocking(
            lambda: self.acontinue_unfinished(cancel=cancel), instead="GraphConversation.acontinue_unfinished()"
        )
        return None if result is None else self._answered(result)

    def rewind(self, turns: int = 1) -> Rewound:
        """Fork the thread from the checkpoint before the last `turns` turns; the old branch stays in its history."""
        return run_blocking(lambda: self.arewind(turns), instead="GraphConversation.arewind(...)")

    # --- time travel -------------------------------------------------------------------------------------------

    async def areplay(self, checkpoint_id: str) -> AgentResult:
        """Run the thread again from an earlier checkpoint (what is after it runs again: tools included)."""
        result: AgentResult = await self.session.areplay(checkpoint_id)
        return result

    async def acheckpoint_before_tool(self, tool: str) -> str:
        """The id of the last checkpoint whose next step runs the tools node on a reply that calls `tool`."""
        for snapshot in await self.session.history():  # newest first
            messages = snapshot.values.get("messages") or []
            last = messages[-1] if messages else None
            if (
                "tools" in snapshot.next
                and isinstance(last, AIMessage)
                and any(c["name"] == tool for c in last.tool_calls)
            ):
                return str(snapshot.config["configurable"]["checkpoint_id"])
        raise LookupError(f"thread {self.thread_id!r} has no checkpoint before a {tool} call")

    # --- the page's calls: a pause comes back as AWAITING_APPROVAL ---------------------------------------------

    def _call(self, method: str, *given: Any, cancel: threading.Event | None) -> Awaitable[Any]:
        # GraphSession takes the cooperative cancel event; the frameworks' CheckpointThread only a task cancel.
        call = getattr(self.session, method)
        return call(*given, cancel=cancel) if takes_cancel_event(self.session) else call(*given)

    async def aask(self, question: str, *, cancel: threading.Event | None = None) -> AgentResult:
        result: AgentResult = await self._call("aask", question, cancel=cancel)
        return result

    async def aresume(self, approved: Any, *, cancel: threading.Event | None = None) -> AgentResult:
        result: AgentResult = await self._call("aresume", approved, cancel=cancel)
        return result

    async def acontinue_unfinished(self, *, cancel: threading.Event | None = None) -> AgentResult | None:
        result: AgentResult | None = await self._call("acontinue_unfinished", cancel=cancel)
        return result

    async def arewind(self, turns: int = 1) -> Rewound:
        if not hasattr(self.session, "arewind"):
            raise NoRewind(f"this session ({type(self.session).__name__}) has no rewind")
        rewound: Rewound = await self.session.arewind(turns)
        return rewound

    async def amessages(self) -> list[BaseMessage]:
        return list(await self.session.messages())

    async def apending(self) -> list[dict[str, Any]]:
        return list(await self.session.pending())

    def answering(self) -> AbstractAsyncContextManager[None]:
        """Hold the pause while a person decides it (`GraphSession.answering`; a framework's thread: nothing)."""
        return self.session.answering() if isinstance(self.session, GraphSession) else nullcontext()

    # --- what it holds -----------------------------------------------------------------------------------------

    async def aturns(self) -> list[Turn]:
        """The user turns, with the checkpoint each started from (`GraphSession.turn_history`)."""
        turn_history = getattr(self.session, "turn_history", None)
        if turn_history is None:  # a framework-only thread: its questions, without checkpoint ids
            return turns_of(await self.session.messages())
        turns: list[Turn] = await turn_history()
        return turns

    async def afacts(self) -> dict[str, Any]:
        """Messages, user turns, checkpoints and stored bytes of the thread: read from the checkpointer's own
        storage (one count, one sum), never by walking the checkpoint history, which loads every checkpoint."""
        messages = await self.session.messages()
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


def takes_cancel_event(session: Any) -> bool:
    """Whether `session`'s calls take the cooperative cancel event: our graph's `GraphSession` does; the
    frameworks' `CheckpointThread` takes only a task cancel."""
    return isinstance(session, GraphSession)


async def aopen_conversation(
    agent: GraphAgent | FrameworkAgent,
    instructions: str,
    thread_id: str,
    where: Path | str | None,
    *,
    resume: bool,
    **opening: Unpack[Opening],
) -> GraphConversation:
    """The thread `thread_id`: in memory (`where` None), in the SQLite file `where`, or in the Postgres database
    at `where`. `policy` is our graph's history policy (the frameworks' threads have none); `storage`, keyword
    arguments of `GraphSession.sqlite` (its checkpoint storage options), for a SQLite thread of our graph. A
    fresh thread (not `resume`) in a file or a database starts from scratch (`aopen`)."""
    customer_id, storage = opening.get("customer_id"), opening.get("storage")
    given = (opening.get("policy") or HistoryPolicy()).kwargs()
    session: GraphSession | CheckpointThread
    if not isinstance(agent, GraphAgent):
        if given:
            raise ValueError(f"{type(agent).__name__} has no history policy: keep_turns and summarize are ours")
        session = CheckpointThread(agent, instructions, thread_id, where, customer_id=customer_id)
    elif where is None:
        session = GraphSession(agent, instructions, thread_id=thread_id, customer_id=customer_id, **given)
    elif is_postgres_url(where):
        session = GraphSession.postgres(
            agent, instructions, url=str(where), thread_id=thread_id, customer_id=customer_id, **given
        )
    else:
        session = GraphSession.sqlite(
            agent,
            instructions,
            path=str(where),
            thread_id=thread_id,
            customer_id=customer_id,
            **given,
            **(storage or {}),
        )
    conversation = GraphConversation(session, where, opening.get("approve"))
    await conversation.aopen(resume=resume)
    return conversation


async def acheck_saved(where: Path | str, thread_id: str, customer_id: str | None) -> None:
    """Nothing to read ahead: a thread's customer is checked by its session itself, on the first read of the
    thread, before anything runs or is shown."""

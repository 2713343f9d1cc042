"""`GraphSession`: a multi-turn conversation kept in a LangGraph checkpointer thread, in memory or in SQLite.

The seed's `AgentSession` keeps a conversation's messages between `RunAsync` calls; here the checkpointer
does that. A session runs the agent's graph with its own checkpointer (`InMemorySaver` by default, a SQLite
file for `GraphSession.sqlite`) on one `thread_id`, so the graph loads the earlier turns before each `ask`
and saves a checkpoint after every superstep. The system message is written once, with the first turn; each
`ask` starts the per-run counters afresh, so budgets are per question, not per conversation. A run that
paused for approval (`StopReason.AWAITING_APPROVAL`) is answered with `resume`, and a run a crash cut short
is finished with `continue_unfinished`; both work from a new process on the same SQLite thread, because
everything they need is in the checkpoints. Every method is written once, async (`aask`, `apending`, ...);
the sync ones (`ask`, `pending`, ...) are thin drivers over them, each on an event loop of its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, Literal, TypeVar

import aiosqlite
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, StateSnapshot

from langgraph_version.agent import GraphAgent, opening
from langgraph_version.run import Durability
from shared_tools.results import AgentResult
from shared_tools.sync import run_blocking

T = TypeVar("T")


class SqliteCheckpoints:
    """A SQLite file of checkpoints, opened with LangGraph's `AsyncSqliteSaver` for one call at a time.

    An `AsyncSqliteSaver` belongs to the event loop it was made on, and every sync call of a session runs on a
    fresh event loop (`run_blocking`), so each call opens the file on its own loop and closes it before it
    returns. aiosqlite runs a connection's statements in order and closes it after the last one, so a call's
    checkpoints are all written when it returns: nothing is ever left pending, and nothing is left open.

    `synchronous` is SQLite's ``PRAGMA synchronous``, NORMAL by default: the saver puts the file in WAL mode,
    where NORMAL still keeps every committed checkpoint through a killed process (the crash test SIGKILLs one)
    and only a power cut or OS crash can lose the last few, while SQLite's own default, FULL, adds an fsync
    per checkpoint (benchmarks/overhead.py measures both).
    """

    def __init__(self, path: str, *, synchronous: Literal["OFF", "NORMAL", "FULL", "EXTRA"] = "NORMAL") -> None:
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, got {synchronous!r}")
        self.path = path
        self.synchronous = synchronous

    @asynccontextmanager
    async def open(self) -> AsyncIterator[AsyncSqliteSaver]:
        async with aiosqlite.connect(self.path) as connection:
            await connection.execute(f"PRAGMA synchronous={self.synchronous}")
            saver = AsyncSqliteSaver(connection)
            await saver.setup()  # most methods do this on first use, but not `adelete_thread` on a new file
            yield saver


class GraphSession:
    """One conversation: `ask` as often as you like; the thread remembers every turn."""

    def __init__(
        self,
        agent: GraphAgent,
        instructions: str,
        thread_id: str = "t1",
        *,
        checkpointer: BaseCheckpointSaver | SqliteCheckpoints | None = None,
        durability: Durability | None = None,
    ) -> None:
        """`durability` is LangGraph's write policy for every run: ``"sync"`` writes each checkpoint before the
        next superstep starts, ``"async"`` (LangGraph's default) while the next superstep runs, ``"exit"`` only
        when the run ends (fastest; a crash loses the whole turn)."""
        self.agent = agent
        self.instructions = instructions
        self.thread_id = thread_id
        self.durability = durability
        self.checkpointer = checkpointer if checkpointer is not None else InMemorySaver()
        self.config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        self._closed = False
        if isinstance(self.checkpointer, SqliteCheckpoints):
            self._graph = agent.graph  # given the saver of each call in `_graph_here`
        else:
            self._graph = agent.builder.compile(checkpointer=self.checkpointer)

    @classmethod
    def sqlite(
        cls,
        agent: GraphAgent,
        instructions: str,
        *,
        path: str,
        thread_id: str = "t1",
        durability: Durability | None = "sync",
    ) -> GraphSession:
        """A session whose thread lives in the SQLite file at `path` (see `SqliteCheckpoints`).

        The default durability is ``"sync"``, because a file is kept to survive a crash: each superstep's
        checkpoint is on disk before the next superstep starts, so the model's reply, with the tool-call ids it
        chose, is saved before any of its tools run. After a crash, `continue_unfinished` re-runs at most the
        interrupted node with those same ids, and the store's request-id check turns a repeated add_to_cart into
        a no-op. With ``"async"`` the reply's checkpoint may still be in flight when the process dies, so the
        model would be asked again and choose new ids (a real model does), and with ``"exit"`` the whole
        unfinished turn is lost. The price is one awaited write per superstep.
        """
        return cls(agent, instructions, thread_id, checkpointer=SqliteCheckpoints(path), durability=durability)

    @asynccontextmanager
    async def _graph_here(self) -> AsyncIterator[CompiledStateGraph]:
        """The session's graph with a checkpointer that works on the running event loop."""
        if not isinstance(self.checkpointer, SqliteCheckpoints):
            yield self._graph
            return
        if self._closed:
            raise RuntimeError(f"the session on {self.checkpointer.path!r} is closed")
        async with self.checkpointer.open() as saver:
            yield self._graph.copy(update={"checkpointer": saver})

    def _blocking(self, make: Callable[[], Coroutine[Any, Any, T]], instead: str) -> T:
        return run_blocking(make, instead=f"GraphSession.{instead}")

    # --- turns -------------------------------------------------------------------------------------------------

    def ask(self, text: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """`aask` for sync callers. Inside a running event loop, await `aask` instead."""
        return self._blocking(lambda: self.aask(text, cancel=cancel), "aask(...)")

    async def aask(self, text: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """One user turn; the model sees every earlier turn of this thread."""
        async with self._graph_here() as graph:
            snapshot = await graph.aget_state(self.config)
            self._refuse_while_paused(snapshot)
            new_messages = [HumanMessage(text)] if snapshot.values.get("messages") else opening(self.instructions, text)
            return await self.agent.adrive(graph, new_messages, self.config, cancel=cancel, durability=self.durability)

    def resume(self, approved: bool, *, cancel: threading.Event | None = None) -> AgentResult:
        """`aresume` for sync callers."""
        return self._blocking(lambda: self.aresume(approved, cancel=cancel), "aresume(...)")

    async def aresume(self, approved: bool, *, cancel: threading.Event | None = None) -> AgentResult:
        """Answer the request the run paused on (`pending`) and let the run go on from where it stopped.

        LangGraph runs the paused tools node again from its start with ``Command(resume=approved)`` as the
        answer of its `interrupt()`; the run's counters go on from the checkpoint, and the time budget starts
        again, because the time a human took to answer is not the agent's time. The result's trace holds what
        ran after the resume, including the calls of the paused round that ran again.
        """
        async with self._graph_here() as graph:
            if not (await graph.aget_state(self.config)).interrupts:
                raise RuntimeError(f"thread {self.thread_id!r} is not waiting for an approval")
            command = Command(resume=approved, update={"started_at": time.monotonic()})
            return await self.agent.adrive(graph, command, self.config, cancel=cancel, durability=self.durability)

    def continue_unfinished(self, *, cancel: threading.Event | None = None) -> AgentResult | None:
        """`acontinue_unfinished` for sync callers."""
        return self._blocking(lambda: self.acontinue_unfinished(cancel=cancel), "acontinue_unfinished(...)")

    async def acontinue_unfinished(self, *, cancel: threading.Event | None = None) -> AgentResult | None:
        """Finish a turn a crash cut short, from its last checkpoint; None when there is nothing to finish.

        The graph re-runs the node that was running when the process died, with the state saved before it (the
        same reply and tool-call ids), and goes on from there. Re-asking the question instead would add a second
        copy of the question to the history and let the model choose new calls.
        """
        async with self._graph_here() as graph:
            if not _unfinished(await graph.aget_state(self.config)):
                return None
            command = Command(update={"started_at": time.monotonic()})
            return await self.agent.adrive(graph, command, self.config, cancel=cancel, durability=self.durability)

    def _refuse_while_paused(self, snapshot: StateSnapshot) -> None:
        # A new question now would leave the paused call without a result, and a reply with an unanswered
        # tool call is a history no provider accepts.
        if snapshot.interrupts:
            raise RuntimeError(f"thread {self.thread_id!r} is waiting for an approval; call resume() first")
        # Likewise after a crash or a model outage: the last question is stored but unanswered.
        if snapshot.next:
            raise RuntimeError(
                f"thread {self.thread_id!r} has an unfinished turn (the last run stopped part-way); "
                "call continue_unfinished() first"
            )

    # --- the thread ------------------------------------------------------------------------------------------------

    @property
    def pending(self) -> list[dict[str, Any]]:
        """The approval requests the thread is paused on (``{"tool_call", "reason"}`` each); empty when none."""
        return self._blocking(self.apending, "apending()")

    async def apending(self) -> list[dict[str, Any]]:
        async with self._graph_here() as graph:
            return [pause.value for pause in (await graph.aget_state(self.config)).interrupts]

    @property
    def unfinished(self) -> bool:
        """True when the last turn stopped part-way, not paused for approval: the process died, or something
        raised out of the graph (a model outage), after the last saved checkpoint."""
        return self._blocking(self.aunfinished, "aunfinished()")

    async def aunfinished(self) -> bool:
        async with self._graph_here() as graph:
            return _unfinished(await graph.aget_state(self.config))

    @property
    def messages(self) -> list[BaseMessage]:
        """The thread's whole history, system message first."""
        return self._blocking(self.amessages, "amessages()")

    async def amessages(self) -> list[BaseMessage]:
        async with self._graph_here() as graph:
            return list((await graph.aget_state(self.config)).values.get("messages", []))

    def history(self) -> list[StateSnapshot]:
        """The thread's checkpoints, newest first: one for each turn's input and one per superstep."""
        return self._blocking(self.ahistory, "ahistory()")

    async def ahistory(self) -> list[StateSnapshot]:
        async with self._graph_here() as graph:
            return [snapshot async for snapshot in graph.aget_state_history(self.config)]

    def delete(self) -> None:
        """Forget this thread: every checkpoint and pending write of it is removed."""
        self._blocking(self.adelete, "adelete()")

    async def adelete(self) -> None:
        async with self._graph_here() as graph:
            assert graph.checkpointer is not None
            await graph.checkpointer.adelete_thread(self.thread_id)

    # --- closing ---------------------------------------------------------------------------------------------------

    def close(self) -> None:
        """End the session: a SQLite session refuses further calls. Every call has already closed its own
        connection, after its last write, so there is nothing to wait for; in-memory sessions stay usable."""
        self._closed = True

    async def aclose(self) -> None:
        self.close()

    def __enter__(self) -> GraphSession:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> GraphSession:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def _unfinished(snapshot: StateSnapshot) -> bool:
    return bool(snapshot.next) and not snapshot.interrupts

"""`GraphSession`: a multi-turn conversation kept in a LangGraph checkpointer thread.

The seed's `AgentSession` keeps a conversation's messages between `RunAsync` calls; here the
checkpointer does that. A session compiles the agent's graph with its own checkpointer
(`InMemorySaver` by default, `SqliteSaver` for `GraphSession.sqlite`) and always runs on one
`thread_id`, so the graph loads the earlier turns before each `ask` and saves a checkpoint after
every superstep. The system message is written once, with the first turn. Each `ask` starts the
per-run counters afresh (see `state.fresh_counters`), so budgets are per question, not per
conversation. `durability` is LangGraph's write policy, passed to every stream: ``"sync"`` writes
each checkpoint before the next superstep starts, ``"async"`` (LangGraph's default) writes them
while the next superstep runs, ``"exit"`` writes only when the run ends (fastest; a crash loses
the whole turn). A run that paused for approval (`StopReason.AWAITING_APPROVAL`) is answered with
`resume`, and a run a crash cut short is finished with `continue_unfinished`; both work from a new
process on the same SQLite thread, because everything they need is in the checkpoints.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from types import TracebackType
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command, StateSnapshot

from langgraph_version.agent import Durability, GraphAgent
from shared_tools.results import AgentResult


class GraphSession:
    """One conversation: `ask` as often as you like; the thread remembers every turn."""

    def __init__(
        self,
        agent: GraphAgent,
        instructions: str,
        thread_id: str = "t1",
        *,
        checkpointer: BaseCheckpointSaver | None = None,
        durability: Durability | None = None,
    ) -> None:
        self.agent = agent
        self.instructions = instructions
        self.thread_id = thread_id
        self.durability = durability
        self.checkpointer = checkpointer if checkpointer is not None else InMemorySaver()
        self.graph = agent.builder.compile(checkpointer=self.checkpointer)
        self.config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        self._connection: sqlite3.Connection | None = None

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
        """A session whose thread lives in the SQLite file at `path`; close it (or use `with`) when done.

        `SqliteSaver` is synchronous: use `ask`, not `aask` (LangGraph's `AsyncSqliteSaver` is the async one).
        The default durability is ``"sync"``, because a file is kept to survive a crash: each superstep's
        checkpoint is on disk before the next superstep starts, so the model's reply, with the tool-call ids
        it chose, is saved before any of its tools run. After a crash, `continue_unfinished` re-runs at most
        the interrupted node with those same ids, and the store's request-id check turns a repeated
        add_to_cart into a no-op. With ``"async"`` the reply's checkpoint may still be in flight when the
        process dies, so the model would be asked again and choose new ids (a real model does), and with
        ``"exit"`` the whole unfinished turn is lost. The price is one blocking write per superstep.

        The connection runs with ``PRAGMA synchronous=NORMAL``: SqliteSaver puts the file in WAL mode, where
        NORMAL still keeps every committed checkpoint through a killed process (the crash test SIGKILLs one)
        and only a power cut or OS crash can lose the last few; the default FULL adds an fsync per checkpoint,
        which made a seed job 2.1x the in-memory session instead of 1.26x (benchmarks/overhead.py).
        """
        # LangGraph may write checkpoints from a worker thread; SqliteSaver serialises access with its own lock.
        connection = sqlite3.connect(path, check_same_thread=False)
        connection.execute("PRAGMA synchronous=NORMAL")
        session = cls(agent, instructions, thread_id, checkpointer=SqliteSaver(connection), durability=durability)
        session._connection = connection
        return session

    def ask(self, text: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """One user turn; the model sees every earlier turn of this thread."""
        snapshot = self.graph.get_state(self.config)
        self._refuse_while_paused(snapshot)
        opening = self._opening(snapshot.values, text)
        return self.agent.drive(self.graph, opening, self.config, cancel=cancel, durability=self.durability)

    @property
    def pending(self) -> list[dict[str, Any]]:
        """The approval requests the thread is paused on (``{"tool_call", "reason"}`` each); empty when none."""
        return [pause.value for pause in self.graph.get_state(self.config).interrupts]

    def resume(self, approved: bool, *, cancel: threading.Event | None = None) -> AgentResult:
        """Answer the request the run paused on (`pending`) and let the run go on from where it stopped.

        LangGraph runs the paused tools node again from its start with ``Command(resume=approved)`` as the
        answer of its `interrupt()`; the run's counters go on from the checkpoint, and the time budget
        starts again, because the time a human took to answer is not the agent's time. The result's trace
        holds what ran after the resume, including the calls of the paused round that ran again.
        """
        command = self._resume(approved)
        return self.agent.drive(self.graph, command, self.config, cancel=cancel, durability=self.durability)

    async def aresume(self, approved: bool, *, cancel: threading.Event | None = None) -> AgentResult:
        """`resume` on the async path."""
        command = self._resume(approved)
        return await self.agent.adrive(self.graph, command, self.config, cancel=cancel, durability=self.durability)

    def _resume(self, approved: bool) -> Command:
        if not self.pending:
            raise RuntimeError(f"thread {self.thread_id!r} is not waiting for an approval")
        return Command(resume=approved, update={"started_at": time.monotonic()})

    @property
    def unfinished(self) -> bool:
        """True when the last turn stopped part-way, not paused for approval: the process died, or something
        raised out of the graph (a model outage), after the last saved checkpoint."""
        snapshot = self.graph.get_state(self.config)
        return bool(snapshot.next) and not snapshot.interrupts

    def continue_unfinished(self, *, cancel: threading.Event | None = None) -> AgentResult | None:
        """Finish a turn a crash cut short, from its last checkpoint; None when there is nothing to finish.

        The graph re-runs the node that was running when the process died, with the state saved before it
        (the same reply and tool-call ids), and goes on from there. Re-asking the question instead would
        add a second copy of the question to the history and let the model choose new calls.
        """
        if not self.unfinished:
            return None
        command = Command(update={"started_at": time.monotonic()})
        return self.agent.drive(self.graph, command, self.config, cancel=cancel, durability=self.durability)

    async def aask(self, text: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """`ask` on the async path (needs an async-capable checkpointer, e.g. the default InMemorySaver)."""
        snapshot = await self.graph.aget_state(self.config)
        self._refuse_while_paused(snapshot)
        opening = self._opening(snapshot.values, text)
        return await self.agent.adrive(self.graph, opening, self.config, cancel=cancel, durability=self.durability)

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

    def _opening(self, values: dict[str, Any], text: str) -> list[BaseMessage]:
        if values.get("messages"):
            return [HumanMessage(text)]
        return [SystemMessage(self.instructions), HumanMessage(text)]

    @property
    def messages(self) -> list[BaseMessage]:
        """The thread's whole history, system message first."""
        return list(self.graph.get_state(self.config).values.get("messages", []))

    def history(self) -> list[StateSnapshot]:
        """The thread's checkpoints, newest first: one for each turn's input and one per superstep."""
        return list(self.graph.get_state_history(self.config))

    def delete(self) -> None:
        """Forget this thread: every checkpoint and pending write of it is removed."""
        self.checkpointer.delete_thread(self.thread_id)

    def close(self) -> None:
        """Close the SQLite connection of a `GraphSession.sqlite`; a no-op for in-memory sessions."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def __enter__(self) -> GraphSession:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

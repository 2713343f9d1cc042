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
the whole turn).
"""

from __future__ import annotations

import sqlite3
import threading
from types import TracebackType
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import StateSnapshot

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
        durability: Durability | None = None,
    ) -> GraphSession:
        """A session whose thread lives in the SQLite file at `path`; close it (or use `with`) when done.

        `SqliteSaver` is synchronous: use `ask`, not `aask` (LangGraph's `AsyncSqliteSaver` is the async one).
        """
        # LangGraph may write checkpoints from a worker thread; SqliteSaver serialises access with its own lock.
        connection = sqlite3.connect(path, check_same_thread=False)
        session = cls(agent, instructions, thread_id, checkpointer=SqliteSaver(connection), durability=durability)
        session._connection = connection
        return session

    def ask(self, text: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """One user turn; the model sees every earlier turn of this thread."""
        opening = self._opening(self.graph.get_state(self.config).values, text)
        return self.agent.drive(self.graph, opening, self.config, cancel=cancel, durability=self.durability)

    async def aask(self, text: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """`ask` on the async path (needs an async-capable checkpointer, e.g. the default InMemorySaver)."""
        opening = self._opening((await self.graph.aget_state(self.config)).values, text)
        return await self.agent.adrive(self.graph, opening, self.config, cancel=cancel, durability=self.durability)

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

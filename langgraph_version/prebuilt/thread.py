"""A framework-only contender's graph on one checkpointer thread: LangGraph's own memory, for a conversation.

`CheckpointThread` runs `DefaultsGraphAgent` or `CreateAgentContender` turn by turn on an `InMemorySaver`, a
SQLite file or Postgres, with the methods of `GraphSession` a conversation uses; the customer check and the
turn lock are the ones `GraphSession` uses (`langgraph_version.session`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.constants import END

from langgraph_version.checkpoints import SqliteCheckpoints
from langgraph_version.postgres import PostgresCheckpoints
from langgraph_version.prebuilt.create_agent import approval_requests
from langgraph_version.serde import CheckpointSerializer
from shared_tools import guards
from shared_tools.bookstore.store import is_postgres_url
from shared_tools.conversation import check_owner
from shared_tools.results import AgentResult, TraceEvent
from shared_tools.sync import run_blocking

log = logging.getLogger(__name__)

TOOLS = "tools"
"""The tool node's name in both framework graphs (`ToolNode` in the defaults graph and in `create_agent`)."""


class FrameworkAgent(Protocol):
    """What `CheckpointThread` needs of a framework-only contender (`DefaultsGraphAgent`, `CreateAgentContender`)."""

    def graph_for(self, instructions: str) -> Any: ...
    def turn_input(self, instructions: str, text: str, *, first: bool) -> dict[str, Any]: ...
    def history(self, instructions: str, messages: Sequence[Any]) -> list[Any]: ...
    async def adrive(
        self, graph: Any, graph_input: Any, config: Any, instructions: str, *, earlier: Sequence[TraceEvent] = ()
    ) -> AgentResult: ...


class CheckpointThread:
    """A framework-only contender's compiled graph on one checkpointer thread: LangGraph's own memory, nothing more.

    In memory (`InMemorySaver`) or in a SQLite file (`langgraph_version.checkpoints.SqliteCheckpoints`, which opens
    LangGraph's `SqliteSaver` for one call at a time, as `GraphSession.sqlite` does). Each `ask` sends only
    the new question; the checkpointer loads the earlier turns. It has the `GraphSession` methods a
    conversation uses (`ask`, `resume`, `continue_unfinished`, and to await: `pending`, `messages`, `history`,
    `adelete`; `close`), and only what the frameworks give: budgets and counts are per run, from the trace; a pause is
    whatever the graph raised (`HumanInTheLoopMiddleware`'s, answered with the agent's `resume_input`); the
    customer is kept in the checkpoints' metadata, since the framework's state has no field for it, and a
    thread of another customer is refused (`CustomerMismatch`). One turn at a time is ours too: for a SQLite
    thread the same `turn_locks` row as `GraphSession` (`SqliteCheckpoints.turn`); in memory, one caller.
    """

    def __init__(
        self,
        agent: FrameworkAgent,
        instructions: str,
        thread_id: str,
        path: Path | str | None = None,
        *,
        customer_id: str | None = None,
        turn_timeout: float = 30.0,
    ) -> None:
        """`path`: None (in memory), a SQLite file, or a Postgres URL (`PostgresCheckpoints`)."""
        self.agent = agent
        self.instructions = instructions
        self.thread_id = thread_id
        self.customer_id = customer_id
        self.turn_timeout = turn_timeout
        self.config: dict[str, Any] = {"configurable": {"thread_id": thread_id}}
        if customer_id is not None:
            self.config["metadata"] = {"customer": customer_id}
        graph = agent.graph_for(instructions)
        self.checkpoints: SqliteCheckpoints | PostgresCheckpoints | None = None
        """Where the checkpoints are kept (None: in memory): both open a saver per call and hold a thread's turn
        across processes."""
        if path is not None:
            self.checkpoints = PostgresCheckpoints(str(path)) if is_postgres_url(path) else SqliteCheckpoints(str(path))
        if self.checkpoints is None:
            graph = graph.copy(update={"checkpointer": InMemorySaver(serde=CheckpointSerializer())})
        self._graph = graph
        self._earlier: list[TraceEvent] = []
        """The trace of the current run's stretches so far (a paused run goes on after `resume`)."""
        self._closed = False

    # --- the graph of one call ---------------------------------------------------------------------------------

    @asynccontextmanager
    async def _graph_here(self, *, turn: bool = False) -> AsyncIterator[Any]:
        if self._closed and self.checkpoints is not None:
            raise RuntimeError("the conversation is closed")
        if self.checkpoints is None:
            yield self._graph
            return
        if turn:
            # The saver first: on Postgres its first use creates the tables with CREATE INDEX CONCURRENTLY, which
            # waits for every open transaction, the turn lock's own included, so taking the turn first hangs.
            async with self.checkpoints.open() as saver, self.checkpoints.turn(self.thread_id, wait=self.turn_timeout):
                yield self._graph.copy(update={"checkpointer": saver})
        else:
            async with self.checkpoints.open() as saver:
                yield self._graph.copy(update={"checkpointer": saver})

    async def _snapshot(self, graph: Any) -> Any:
        snapshot = await graph.aget_state(self.config)
        check_owner((snapshot.metadata or {}).get("customer"), self.customer_id, f"thread {self.thread_id!r}")
        return snapshot

    async def _drive(self, graph: Any, graph_input: Any) -> AgentResult:
        try:
            result = await self.agent.adrive(graph, graph_input, self.config, self.instructions, earlier=self._earlier)
        except asyncio.CancelledError:
            await close_cancelled_turn(graph, self.config)
            raise  # never swallowed: the caller cancelled us
        self._earlier = [*self._earlier, *result.trace]
        return result

    # --- turns -------------------------------------------------------------------------------------------------

    def ask(self, text: str) -> AgentResult:
        return run_blocking(lambda: self.aask(text), instead="CheckpointThread.aask(...)")

    async def aask(self, text: str) -> AgentResult:
        async with self._graph_here(turn=True) as graph:
            snapshot = await self._snapshot(graph)
            if snapshot.interrupts:
                raise RuntimeError(f"thread {self.thread_id!r} is waiting for an approval; call resume() first")
            if snapshot.next:
                raise RuntimeError(f"thread {self.thread_id!r} has an unfinished turn; call continue_unfinished()")
            first = not snapshot.values.get("messages")
            self._earlier = []
            return await self._drive(graph, self.agent.turn_input(self.instructions, text, first=first))

    def resume(self, approved: bool | Sequence[bool]) -> AgentResult:
        return run_blocking(lambda: self.aresume(approved), instead="CheckpointThread.aresume(...)")

    async def aresume(self, approved: bool | Sequence[bool]) -> AgentResult:
        """Answer the requests of the pause (`pending`, in order): one yes or no for all of them, or one answer
        per request, in the format the graph's pause expects."""
        resume_input = getattr(self.agent, "resume_input", None)
        async with self._graph_here(turn=True) as graph:
            snapshot = await self._snapshot(graph)
            if not snapshot.interrupts or resume_input is None:
                raise RuntimeError(f"thread {self.thread_id!r} is not waiting for an approval")
            requests = _requests_of(snapshot)
            return await self._drive(graph, resume_input(requests, approved))

    def continue_unfinished(self) -> AgentResult | None:
        return run_blocking(self.acontinue_unfinished, instead="CheckpointThread.acontinue_unfinished()")

    async def acontinue_unfinished(self) -> AgentResult | None:
        """Finish a turn a crash or an outage cut short, from its last checkpoint; None when there is none."""
        async with self._graph_here(turn=True) as graph:
            snapshot = await self._snapshot(graph)
            if not snapshot.next or snapshot.interrupts:
                return None
            return await self._drive(graph, None)

    # --- the thread --------------------------------------------------------------------------------------------

    async def pending(self) -> list[dict[str, Any]]:
        """The approval requests the thread is paused on (``{"tool_call", "reason"}`` each); empty when none."""
        async with self._graph_here() as graph:
            snapshot = await self._snapshot(graph)
            return _requests_of(snapshot) if snapshot.interrupts else []

    async def messages(self) -> list[Any]:
        """The thread's whole history as the model sees it, system message first."""
        async with self._graph_here() as graph:
            messages = (await self._snapshot(graph)).values.get("messages", [])
            return self.agent.history(self.instructions, messages) if messages else []

    async def history(self) -> list[Any]:
        """The thread's checkpoints, newest first."""
        async with self._graph_here() as graph:
            await self._snapshot(graph)
            return [snapshot async for snapshot in graph.aget_state_history(self.config)]

    async def adelete(self) -> None:
        """Forget this thread: every checkpoint and pending write of it is removed."""
        async with self._graph_here(turn=True) as graph:
            await self._snapshot(graph)
            await graph.checkpointer.adelete_thread(self.thread_id)

    def close(self) -> None:
        self._closed = True


async def close_cancelled_turn(graph: Any, config: Any) -> None:
    """End a turn a task cancel cut off, so that the next question starts a new turn instead of running it again.

    LangGraph leaves the thread at the checkpoint before the node it cancelled, so going on would run that node
    again: the model asked anew, or the tools the person stopped run after all. `update_state(None, as_node=END)`
    is LangGraph's own way to end a run: it keeps what finished tasks wrote and schedules nothing. A call of the
    last reply still without a result is then answered as the hand-written loop answers it ("cancelled while it
    was running: it may have completed"), so the history stays one a provider accepts. A pause for approval is
    left as it is: it still waits for its answer.
    """
    snapshot = await graph.aget_state(config)
    if not snapshot.next or snapshot.interrupts:
        return
    config = await graph.aupdate_state(config, None, as_node=END)
    messages = (await graph.aget_state(config)).values.get("messages", [])
    open_calls = _unanswered(messages)
    if open_calls and TOOLS in graph.nodes:
        text = guards.CANCELLED_WHILE_RUNNING_TEXT if TOOLS in snapshot.next else guards.CANCELLED_CALL_TEXT
        answers = [guards.tool_result(call, text, is_error=True) for call in open_calls]
        config = await graph.aupdate_state(config, {"messages": answers}, as_node=TOOLS)
        await graph.aupdate_state(config, None, as_node=END)  # writing as the tools node scheduled the model
    log.info("turn cancelled in its %s node; the thread records it as ended", "/".join(snapshot.next))


def _unanswered(messages: Sequence[Any]) -> list[Any]:
    """The tool calls of the last model reply that no tool message after it answers."""
    for at in range(len(messages) - 1, -1, -1):
        if isinstance(messages[at], AIMessage):
            answered = {m.tool_call_id for m in messages[at + 1 :] if isinstance(m, ToolMessage)}
            return [call for call in messages[at].tool_calls if call["id"] not in answered]
    return []


def _requests_of(snapshot: Any) -> list[dict[str, Any]]:
    """The pause's requests as ``{"tool_call", "reason"}`` (create_agent's `HITLRequest`s translated)."""
    values = [pause.value for pause in snapshot.interrupts]
    if all(isinstance(v, dict) and "action_requests" in v for v in values):
        return approval_requests(values, snapshot.values.get("messages", []))
    return values

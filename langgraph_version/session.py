"""`GraphSession`: a conversation over a `GraphAgent`, kept in a LangGraph checkpointer thread.

Each `ask` runs the graph on one thread with fresh per-run budgets, one turn at a time, for the customer the
thread belongs to; `resume` answers an approval pause, `continue_unfinished` finishes a turn a crash cut
short, `rewind` and `replay` travel in time. Where the checkpoints are is a store's concern: in memory,
`langgraph_version.checkpoints` (SQLite) or `langgraph_version.postgres`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from types import TracebackType
from typing import Any, TypedDict, Unpack

from langchain_core.messages import BaseMessage, HumanMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, StateSnapshot

from langgraph_version.agent import GraphAgent, opening
from langgraph_version.checkpoints import SqliteCheckpoints, Storage, messages_channel, prune_sqlite
from langgraph_version.graph import CHECK, ERRORS, MODEL, TOOLS
from langgraph_version.postgres import PostgresCheckpoints, prune_postgres
from langgraph_version.run import Durability
from langgraph_version.serde import CheckpointSerializer
from shared_tools.conversation import HistoryPolicy, check_owner, turn_of
from shared_tools.history import (
    Rewound,
    Turn,
    among_other_conversations,
    count_turns,
    forgetting_calls,
    is_user_turn,
    plan_fold,
    summary_message,
    write_summary,
)
from shared_tools.results import AgentResult, RunUsage, StopReason
from shared_tools.sync import run_blocking

log = logging.getLogger(__name__)

TURN_FROM = "turn_from"
"""`additional_kwargs` key of a question: the id of the checkpoint its turn started from (None: the first turn).
Chat models send a user message's content, not its `additional_kwargs`, so the model never sees it."""


class TurnNotOver(RuntimeError):
    """The thread's last turn is not over: it waits for an approval (`awaiting_approval`: answer it with `resume`,
    here or in the process that asked) or stopped part-way (`continue_unfinished`); no question or rewind until
    then."""

    def __init__(self, message: str, *, awaiting_approval: bool) -> None:
        super().__init__(message)
        self.awaiting_approval = awaiting_approval


class NotPaused(RuntimeError):
    """`resume` on a thread that waits for no approval: nothing was asked, or another process answered it first."""


class SessionOptions(TypedDict, total=False):
    """`GraphSession`'s own keywords, as `sqlite` and `postgres` pass them on (see `GraphSession.__init__`)."""

    thread_id: str
    durability: Durability | None
    customer_id: str | None
    turn_timeout: float
    keep_turns: int | None
    summarize: bool
    storage: Storage
    prune_turns: int | None


class GraphSession:
    """One conversation: `ask` as often as you like; the thread remembers every turn."""

    def __init__(
        self,
        agent: GraphAgent,
        instructions: str,
        thread_id: str = "t1",
        *,
        checkpointer: BaseCheckpointSaver | SqliteCheckpoints | PostgresCheckpoints | None = None,
        durability: Durability | None = None,
        customer_id: str | None = None,
        turn_timeout: float = 30.0,
        keep_turns: int | None = None,
        summarize: bool = False,
        storage: Storage = "delta",
        prune_turns: int | None = None,
    ) -> None:
        """`durability` is LangGraph's write policy for every run: ``"sync"`` writes each checkpoint before the
        next superstep starts, ``"async"`` (LangGraph's default) while the next superstep runs, ``"exit"`` only
        when the run ends (fastest; a crash loses the whole turn).

        `customer_id` is whose conversation this is: the first turn records it in the thread, and a thread
        recorded for another customer is refused (`CustomerMismatch`) before anything runs or is shown. Without
        it nothing is checked (a thread nobody claimed is claimed by the first session with a customer to ask).

        `turn_timeout` is how long a turn waits for another process's turn on the same SQLite thread before it
        gives up with `ConcurrentTurn`; in this process a turn waits for the one before it however long it takes.

        The history policy (`shared_tools.history`, the same meaning as on `handwritten.Session`): `keep_turns=N`
        sends the model the system message, the summary if any, and the last N user turns; the thread still
        stores everything. `summarize=True` (it needs `keep_turns`) folds, at the start of each ask, the turns
        that would fall out of the window into one summary message, written by the agent's model without tools;
        `summary_tokens` adds up what that cost.

        `storage` is how `messages` is checkpointed: "delta" (a `DeltaChannel`, BETA in langgraph 1.2: each
        checkpoint stores what was added, with a full copy every 100 updates, so a 200-turn SQLite thread is ~5 MB
        instead of ~170 MB; a read replays up to 100 writes) or "full" (LangGraph's default: the whole list in
        every checkpoint, storage grows with turns squared). A thread keeps the storage it was written with: a
        delta thread opened with "full" is refused. `prune_turns=N` ("full" on SQLite only) deletes, after each
        ask, every checkpoint older than the one the Nth-last turn started from: the storage stays bounded, and
        time travel (`rewind`, `replay`) reaches only the last N turns. Delta threads cannot be pruned this way,
        because their checkpoints are rebuilt from their ancestors' writes.
        """
        HistoryPolicy(keep_turns, summarize)  # refuses a window of no turns, and a summary without a window
        _check_storage(storage, prune_turns, checkpointer)
        self.keep_turns = keep_turns
        self.summarize = summarize
        self.storage: Storage = storage
        self.prune_turns = prune_turns
        self.summary_tokens = 0
        """Tokens the model spent writing summaries, in this session object."""
        self.agent = agent
        self.instructions = instructions
        self.thread_id = thread_id
        self.durability = durability
        self.customer_id = customer_id
        self.turn_timeout = turn_timeout
        self.checkpointer = checkpointer if checkpointer is not None else InMemorySaver(serde=CheckpointSerializer())
        self.config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        self._closed = False
        self._graph, where = self._graph_and_place()
        self._turn_lock = turn_of((*where, thread_id))

    def _graph_and_place(self) -> tuple[CompiledStateGraph, tuple[Any, ...]]:
        """The session's graph, and where its thread is kept (the key of the thread's turn in this process)."""
        if isinstance(self.checkpointer, SqliteCheckpoints):
            # The agent's graph, given the saver of each call in `_graph_here`.
            return self.agent.graph, ("sqlite", os.path.realpath(self.checkpointer.path))
        if isinstance(self.checkpointer, PostgresCheckpoints):
            return self.agent.graph, ("postgres", self.checkpointer.url)
        graph = self._stored(self.agent.builder.compile(checkpointer=self.checkpointer))
        return graph, ("saver", id(self.checkpointer))

    @classmethod
    def sqlite(
        cls, agent: GraphAgent, instructions: str, *, path: str, **options: Unpack[SessionOptions]
    ) -> GraphSession:
        """A session whose thread lives in the SQLite file at `path` (see `SqliteCheckpoints`); `options` are
        `GraphSession`'s own.

        The default durability is ``"sync"``, because a file is kept to survive a crash: each superstep's
        checkpoint is on disk before the next superstep starts, so the model's reply, with the tool-call ids it
        chose, is saved before any of its tools run. After a crash, `continue_unfinished` re-runs at most the
        interrupted node with those same ids, and the store's request-id check turns a repeated add_to_cart into
        a no-op. With ``"async"`` the reply's checkpoint may still be in flight when the process dies, so the
        model would be asked again and choose new ids (a real model does), and with ``"exit"`` the whole
        unfinished turn is lost. The price is one awaited write per superstep.
        """
        options.setdefault("durability", "sync")
        return cls(agent, instructions, checkpointer=SqliteCheckpoints(path), **options)

    @classmethod
    def postgres(
        cls, agent: GraphAgent, instructions: str, *, url: str, pool: Any = None, **options: Unpack[SessionOptions]
    ) -> GraphSession:
        """A session whose thread lives in the Postgres database at `url` (see `PostgresCheckpoints`), shared by
        every process and machine that opens the same thread: any of them can take any turn, one at a time.

        Durability ``"sync"`` by default, for the reason given on `sqlite`. `pool`: an open psycopg pool on the
        event loop every call runs on (`postgres_pool`); without one each call opens its own connections.

        `prune_turns=N` (with storage="full") is LangGraph's own ``aprune([thread], strategy="keep_latest")``,
        run after a turn once the thread holds the checkpoints of N turns: storage stays bounded by N turns, and
        time travel reaches back to the last prune (0 to N-1 turns), not a steady N as on SQLite, because
        keep_latest keeps only the head. LangGraph refuses to keep_latest a DeltaChannel thread
        (NotImplementedError), which is why delta threads, already small, are not pruned.
        """
        options.setdefault("durability", "sync")
        return cls(agent, instructions, checkpointer=PostgresCheckpoints(url, pool=pool), **options)

    def _stored(self, graph: CompiledStateGraph, **update: Any) -> CompiledStateGraph:
        """`graph` with `update` and the channel for `messages` that `storage` asks for."""
        update["channels"] = {**graph.channels, "messages": messages_channel(self.storage)}
        return graph.copy(update=update)

    @asynccontextmanager
    async def _graph_here(self) -> AsyncIterator[CompiledStateGraph]:
        """The session's graph with a checkpointer that works on the running event loop."""
        if not isinstance(self.checkpointer, SqliteCheckpoints | PostgresCheckpoints):
            yield self._graph
            return
        self._refuse_when_closed()
        async with self.checkpointer.open() as saver:
            yield self._stored(self._graph, checkpointer=saver)

    @asynccontextmanager
    async def _turn(self) -> AsyncIterator[CompiledStateGraph]:
        """`_graph_here`, for a call that writes to the thread: one at a time per thread (across processes too,
        for a SQLite thread).

        Two turns at once would each run from the same checkpoint, and the thread would go on from whichever
        wrote last: the other question and its answer would drop out of the conversation.
        """
        self._refuse_when_closed()
        async with self._turn_lock.held():
            if isinstance(self.checkpointer, SqliteCheckpoints | PostgresCheckpoints):
                async with self.checkpointer.turn(self.thread_id, wait=self.turn_timeout), self._graph_here() as graph:
                    yield graph
            else:
                async with self._graph_here() as graph:
                    yield graph

    async def _snapshot(self, graph: CompiledStateGraph) -> StateSnapshot:
        """The thread's latest state, once it is known to be this session's customer's (`CustomerMismatch`)."""
        snapshot = await graph.aget_state(self.config)
        check_owner(snapshot.values.get("customer"), self.customer_id, f"thread {self.thread_id!r}")
        return snapshot

    def _refuse_when_closed(self) -> None:
        if self._closed and isinstance(self.checkpointer, SqliteCheckpoints):
            raise RuntimeError(f"the session on {self.checkpointer.path!r} is closed")
        if self._closed and isinstance(self.checkpointer, PostgresCheckpoints):
            raise RuntimeError(f"the session on {self.checkpointer!r} is closed")

    # --- turns -------------------------------------------------------------------------------------------------

    def ask(self, text: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """`aask` for sync callers. Inside a running event loop, await `aask` instead."""
        return run_blocking(lambda: self.aask(text, cancel=cancel), instead="GraphSession.aask(...)")

    async def aask(self, text: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """One user turn; the model sees every earlier turn of this thread (or the window `keep_turns` sets). A
        second `aask` (another task, another thread, another process) waits for this one, so neither question
        nor answer is lost.

        The thread is read once, as a checkpoint tuple (no messages are rebuilt: `_head`); the graph reads it
        again as it starts, which nothing here can spare it. The question records the checkpoint the turn
        starts from (`TURN_FROM`), which is where `rewind` goes back to and what `turn_history` lists.
        """
        async with self._turn() as graph:
            head = await self._head(graph)
            if self.summarize and head is not None:
                head = await self._fold(graph) or head
            started_from = None if head is None else head.config["configurable"]["checkpoint_id"]
            question = HumanMessage(text, additional_kwargs={TURN_FROM: started_from})
            has_messages = head is not None and "messages" in head.checkpoint["channel_versions"]
            # A new thread's system message is marked as one conversation among the customer's others: its
            # provider's call_0 is not theirs (`among_other_conversations`).
            begun = among_other_conversations(opening(self.instructions, text)[:-1], self.instructions)
            new_messages = [question] if has_messages else [*begun, question]
            result = await self.agent.adrive(
                graph,
                new_messages,
                self.config,
                cancel=cancel,
                durability=self.durability,
                customer=self.customer_id,
                keep_turns=self.keep_turns,
            )
            if self.prune_turns is not None and result.stop_reason is not StopReason.AWAITING_APPROVAL:
                await self._prune(graph, result.messages)
            return result

    async def _head(self, graph: CompiledStateGraph) -> CheckpointTuple | None:
        """The thread's latest checkpoint, read without rebuilding its messages, once it is known to be this
        customer's and ready for a question (not paused for approval, not unfinished); None for a new thread.

        A checkpoint that holds a stop reason and no pending writes ended its run (every exit of the guarded
        graph writes its stop reason; a run that stopped part-way leaves pending writes, or a checkpoint whose
        counters were just reset). Anything else is read as a full state, which says exactly what is pending.
        """
        assert graph.checkpointer is not None
        head = await graph.checkpointer.aget_tuple(self.config)
        if head is None:
            return None
        values = head.checkpoint["channel_values"]
        check_owner(values.get("customer"), self.customer_id, f"thread {self.thread_id!r}")
        if self.storage == "full" and "messages" in head.checkpoint["channel_versions"] and "messages" not in values:
            raise ValueError(
                f"thread {self.thread_id!r} was written with storage='delta' (its checkpoints hold no messages); "
                "open it with storage='delta'"
            )
        if values.get("stop_reason") is None or head.pending_writes:
            self._refuse_while_paused(await self._snapshot(graph))
        return head

    async def _fold(self, graph: CompiledStateGraph) -> CheckpointTuple | None:
        """Fold the turns that the question about to be asked pushes out of the window into the summary
        message; the thread's new head, or None when nothing needed folding.

        `add_messages` can append a message or replace one where it stands, never insert one, and the summary
        must stand right after the system message. So the update is `REMOVE_ALL_MESSAGES` and then the new
        list (system, summary, the turns kept): one explicit write, as long as the window, instead of removing
        and re-adding every kept message one id at a time. It is written as the `check` node, whose router
        reads the stop reason of the turn that ended, so the thread stays finished.
        """
        assert self.keep_turns is not None
        messages = list((await self._snapshot(graph)).values.get("messages", []))
        fold = plan_fold(messages, self.keep_turns)
        if fold is None:
            return None
        text, tokens = await write_summary(self.agent.model, fold, self.agent.limits.time_left(RunUsage()))
        self.summary_tokens += tokens
        if not text:
            return None
        update = [RemoveMessage(id=REMOVE_ALL_MESSAGES), *fold.system, summary_message(text), *fold.kept]
        config = await graph.aupdate_state(self.config, {"messages": update}, as_node=CHECK)
        assert graph.checkpointer is not None
        return await graph.checkpointer.aget_tuple(config)

    async def _prune(self, graph: CompiledStateGraph, messages: list[BaseMessage]) -> None:
        """Delete the thread's checkpoints (and their writes) older than the one the `prune_turns`-th last turn
        started from, abandoned branches included, in one short transaction.

        SqliteSaver has no prune, so this is its two tables by hand. The kept checkpoints are found by walking
        from the head to that one by parent links; if the walk does not reach it (a rewind moved the thread
        elsewhere), nothing is deleted. The head and its pending writes are always kept, which is all a crash
        or an approval needs; the file does not shrink, but SQLite reuses the freed pages.
        """
        assert self.prune_turns is not None and graph.checkpointer is not None
        starts = [m.additional_kwargs.get(TURN_FROM) for m in messages if is_user_turn(m)]
        if isinstance(self.checkpointer, PostgresCheckpoints):
            last = [start for start in starts[-self.prune_turns :] if isinstance(start, str)]
            if len(last) == self.prune_turns:
                await prune_postgres(graph.checkpointer, self.thread_id, last)
            return
        if len(starts) <= self.prune_turns or not isinstance(oldest := starts[-self.prune_turns], str):
            return
        saver = graph.checkpointer
        assert isinstance(saver, SqliteSaver)
        prune_sqlite(saver, self.config, oldest)

    def resume(self, approved: bool, *, cancel: threading.Event | None = None) -> AgentResult:
        """`aresume` for sync callers."""
        return run_blocking(lambda: self.aresume(approved, cancel=cancel), instead="GraphSession.aresume(...)")

    async def aresume(self, approved: bool, *, cancel: threading.Event | None = None) -> AgentResult:
        """Answer the request the run paused on (`pending`) and let the run go on from where it stopped.

        LangGraph runs the paused tools node again from its start, and its `interrupt()` returns the answer,
        which names the call it answers (see `GuardedNodes.check_approval`); the run's counters go on from the
        checkpoint. The time a human took to answer is not the agent's time, so the run's clock is moved on by
        the time since that checkpoint was written (`_clock_after`); the time before the pause still counts. The
        result's trace holds what ran after the resume, including the calls of the paused round that ran again.
        """
        async with self._turn() as graph:
            snapshot = await self._snapshot(graph)
            if not snapshot.interrupts:
                raise NotPaused(f"thread {self.thread_id!r} is not waiting for an approval")
            [request] = [pause.value for pause in snapshot.interrupts]  # the graph asks one question at a time
            answer = {"tool_call_id": request["tool_call"]["id"], "approved": approved is True}
            return await self.agent.adrive(
                graph,
                Command(resume=answer),
                self.config,
                cancel=cancel,
                durability=self.durability,
                started_at=_clock_after(snapshot),
                keep_turns=self.keep_turns,
            )

    def continue_unfinished(self, *, cancel: threading.Event | None = None) -> AgentResult | None:
        """`acontinue_unfinished` for sync callers."""
        return run_blocking(
            lambda: self.acontinue_unfinished(cancel=cancel), instead="GraphSession.acontinue_unfinished(...)"
        )

    async def acontinue_unfinished(self, *, cancel: threading.Event | None = None) -> AgentResult | None:
        """Finish a turn a crash or a model outage cut short, from its last checkpoint; None when there is
        nothing to finish.

        The graph re-runs the node that was running when the process died, with the state saved before it (the
        same reply and tool-call ids), and goes on from there. Re-asking the question instead would add a second
        copy of the question to the history and let the model choose new calls. As for a resume, the time since
        the last checkpoint (the outage, the process down) is kept off the run's clock. It may be called as often
        as it takes (the model may still be down): it gives the graph no input at all, so a failed attempt leaves
        nothing behind on the checkpoint for the next one to trip over.
        """
        async with self._turn() as graph:
            snapshot = await self._snapshot(graph)
            if not _unfinished(snapshot):
                return None
            return await self.agent.adrive(
                graph,
                None,
                self.config,
                cancel=cancel,
                durability=self.durability,
                started_at=_clock_after(snapshot),
                keep_turns=self.keep_turns,
                count_stretch=True,
            )

    def _refuse_while_paused(self, snapshot: StateSnapshot) -> None:
        # A new question now would leave the paused call without a result, and a reply with an unanswered
        # tool call is a history no provider accepts.
        if snapshot.interrupts:
            raise TurnNotOver(
                f"thread {self.thread_id!r} is waiting for an approval; call resume() first", awaiting_approval=True
            )
        # Likewise after a crash or a model outage: the last question is stored but unanswered.
        if snapshot.next:
            raise TurnNotOver(
                f"thread {self.thread_id!r} has an unfinished turn (the last run stopped part-way); "
                "call continue_unfinished() first",
                awaiting_approval=False,
            )

    @asynccontextmanager
    async def answering(self) -> AsyncIterator[None]:
        """Hold the thread's pause while a person decides it, across processes: another session's `answering`
        meanwhile raises `ConcurrentTurn` at once, so no one else puts the same request to a person of their own.

        The checkpointer's turn lock under a key no thread name can take (``#`` is not allowed in one), not the
        turn itself: `resume` takes the turn while this is held. In memory there is no other process to keep out.
        """
        if isinstance(self.checkpointer, SqliteCheckpoints | PostgresCheckpoints):
            async with self.checkpointer.turn(f"{self.thread_id}#approval", wait=0):
                yield
        else:
            yield

    # --- the thread ------------------------------------------------------------------------------------------------

    async def pending(self) -> list[dict[str, Any]]:
        """The approval requests the thread is paused on (``{"tool_call", "reason"}`` each); empty when none."""
        async with self._graph_here() as graph:
            return [pause.value for pause in (await self._snapshot(graph)).interrupts]

    async def unfinished(self) -> bool:
        """True when the last turn stopped part-way, not paused for approval: the process died, or something
        raised out of the graph (a model outage), after the last saved checkpoint."""
        async with self._graph_here() as graph:
            return _unfinished(await self._snapshot(graph))

    async def messages(self) -> list[BaseMessage]:
        """The thread's whole history, system message first."""
        async with self._graph_here() as graph:
            return list((await self._snapshot(graph)).values.get("messages", []))

    async def history(self) -> list[StateSnapshot]:
        """The thread's checkpoints, newest first: one for each turn's input and one per superstep."""
        async with self._graph_here() as graph:
            await self._snapshot(graph)
            return [snapshot async for snapshot in graph.aget_state_history(self.config)]

    async def adelete(self) -> None:
        """Forget this thread: every checkpoint and pending write of it is removed."""
        async with self._turn() as graph:
            await self._snapshot(graph)
            assert graph.checkpointer is not None
            await graph.checkpointer.adelete_thread(self.thread_id)

    async def turns(self) -> int:
        """How many user turns the thread's current history holds (a summary is not one): one read of the
        current state, whatever the length of the checkpoint history."""
        async with self._graph_here() as graph:
            return count_turns((await self._snapshot(graph)).values.get("messages", []))

    async def turn_history(self) -> list[Turn]:
        """The turns of the current history, oldest first, each with the checkpoint it started from."""
        async with self._graph_here() as graph:
            messages = (await self._snapshot(graph)).values.get("messages", [])
        asked = [m for m in messages if is_user_turn(m)]
        return [Turn(n, m.text, m.additional_kwargs.get(TURN_FROM)) for n, m in enumerate(asked, start=1)]

    # --- time travel -----------------------------------------------------------------------------------------------

    def rewind(self, turns: int = 1) -> Rewound:
        """`arewind` for sync callers."""
        return run_blocking(lambda: self.arewind(turns), instead="GraphSession.arewind(...)")

    async def arewind(self, turns: int = 1) -> Rewound:
        """Go back to before the last `turns` questions; the next ask goes on from there.

        The LangGraph way: the checkpoint the N-th last turn started from (recorded in its question, so nothing
        walks the history to find it) is forked with ``aupdate_state(config, None, as_node="__copy__")``. The
        fork becomes the thread's head; the old branch stays in `history()` and can still be `replay`ed. Going
        back past the first turn leaves the system message alone (that turn started from no checkpoint).

        Only the conversation goes back, not the world: whatever a rewound turn's tools did (a book added to the
        cart) stays done, and the model no longer remembers doing it. Refused (RuntimeError) while the thread is
        paused for approval or unfinished; ValueError for fewer than 1 turn or more than the history holds, and
        for a turn whose checkpoint was pruned (`prune_turns`) or that was recorded without one.
        """
        async with self._turn() as graph:
            snapshot = await self._snapshot(graph)
            self._refuse_while_paused(snapshot)
            messages = list(snapshot.values.get("messages", []))
            questions = [m for m in messages if is_user_turn(m)]
            if isinstance(turns, bool) or not isinstance(turns, int) or not 1 <= turns <= len(questions):
                raise ValueError(f"cannot rewind {turns!r} turns: the conversation holds {len(questions)}")
            target = questions[-turns]
            if TURN_FROM not in target.additional_kwargs:
                raise ValueError(f"turn {target.text[:40]!r} was stored without the checkpoint it started from")
            started_from = target.additional_kwargs[TURN_FROM]
            if started_from is None:
                kept = forgetting_calls(messages[:1], messages)
                update = {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *kept]}
                config = await graph.aupdate_state(self.config, update, as_node=CHECK)
                return Rewound(turns, len(messages) - 1, config["configurable"]["checkpoint_id"])
            base = await graph.aget_state(self._at(started_from))
            if base.created_at is None:
                raise ValueError(f"the checkpoint turn {target.text[:40]!r} started from was pruned")
            kept = list(base.values.get("messages", []))
            remembered = forgetting_calls(kept, messages)
            if remembered[:1] == kept[:1]:
                config = await graph.aupdate_state(base.config, None, as_node="__copy__")
            else:  # the fork's system message is marked (it keeps its id, so add_messages replaces it in place)
                config = await graph.aupdate_state(base.config, {"messages": remembered[:1]}, as_node=CHECK)
            return Rewound(turns, len(messages) - len(kept), config["configurable"]["checkpoint_id"])

    async def areplay(self, checkpoint_id: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """Run the thread again from one of its earlier checkpoints (`history()`): LangGraph's replay,
        ``ainvoke(None, config_with_checkpoint_id)``, through `adrive`; the run forks there and becomes the head.

        The store is not replayed with it: a checkpoint before the tools node runs its add_to_cart again with the
        same call id, and the store's idempotency (`applied_requests`) is all that keeps the book from being added
        twice. The time between that checkpoint and now is kept off the run's clock, as for a resume. Refused
        like `rewind`; ValueError for a checkpoint the thread does not have, or one whose run had ended.
        """
        async with self._turn() as graph:
            head = await self._snapshot(graph)
            self._refuse_while_paused(head)
            base = await graph.aget_state(self._at(checkpoint_id))
            if base.created_at is None:
                raise ValueError(f"thread {self.thread_id!r} has no checkpoint {checkpoint_id!r}")
            check_owner(base.values.get("customer"), self.customer_id, f"checkpoint {checkpoint_id!r}")
            if not base.next:
                raise ValueError(f"checkpoint {checkpoint_id!r} ended its run: nothing to replay (rewind to it)")
            start = await self._forget_abandoned_calls(graph, base, list(head.values.get("messages", [])))
            return await self.agent.adrive(
                graph,
                None,
                start,
                cancel=cancel,
                durability=self.durability,
                started_at=_clock_after(base) if "started_at" in base.values else None,
                keep_turns=self.keep_turns,
                count_stretch=True,
            )

    async def _forget_abandoned_calls(
        self, graph: CompiledStateGraph, base: StateSnapshot, messages: list[BaseMessage]
    ) -> RunnableConfig:
        """Where a replay from `base` starts: `base` itself, or, when the branch it abandons (up to the head's
        `messages`) holds tool calls `base` does not, a fork of `base` whose system message is marked
        `FORGOT_CALLS`, as a rewind marks it (`forgetting_calls`): their ids stay taken in the store, and a
        provider numbering its calls call_0 again must get a new add, not "this call already ran". The fork is
        written as the node that wrote `base` would have, so the same node runs next."""
        kept = list(base.values.get("messages", []))
        remembered = forgetting_calls(kept, messages)
        if remembered[:1] == kept[:1]:
            return base.config
        as_node = _WROTE_BEFORE.get(base.next[0]) if len(base.next) == 1 else None
        if as_node is None:
            raise RuntimeError(f"cannot replay from a checkpoint that runs {base.next!r} next")
        config = await graph.aupdate_state(base.config, {"messages": remembered[:1]}, as_node=as_node)
        forked = await graph.aget_state(config)
        if forked.next != base.next:
            raise RuntimeError(f"the marked fork runs {forked.next!r} next, not {base.next!r}")
        return config

    def _at(self, checkpoint_id: str) -> RunnableConfig:
        if not isinstance(checkpoint_id, str) or not checkpoint_id:
            raise ValueError(f"a checkpoint id is a non-empty string, got {checkpoint_id!r}")
        return {"configurable": {"thread_id": self.thread_id, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}}

    # --- closing ---------------------------------------------------------------------------------------------------

    def close(self) -> None:
        """End the session: a SQLite session refuses further calls; in-memory sessions stay usable.

        There is nothing to wait for: every call closes its own connection after its last write, before it
        returns or raises, so when a `with` block is left, by an exception from `on_event` in the middle of a run
        included, no write is pending (tests/test_graph_sessions.py runs that many times in fresh processes).
        """
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


_WROTE_BEFORE = {MODEL: CHECK, TOOLS: MODEL, ERRORS: TOOLS, CHECK: ERRORS}
"""For each node a replay can start at, a node whose edges lead to it (`graph.build_guarded_graph`) while the run
goes on (no stop reason): the node a marked fork of the checkpoint is written as."""


def _check_storage(storage: Storage, prune_turns: int | None, checkpointer: object) -> None:
    """Refuse a storage GraphSession has none of, and a pruning that would empty a delta thread."""
    if storage not in ("delta", "full"):
        raise ValueError(f"storage must be 'delta' or 'full', got {storage!r}")
    if prune_turns is None:
        return
    if isinstance(prune_turns, bool) or not isinstance(prune_turns, int) or prune_turns < 1:
        raise ValueError(f"prune_turns must be at least 1, got {prune_turns!r}")
    if storage != "full" or not isinstance(checkpointer, SqliteCheckpoints | PostgresCheckpoints):
        raise ValueError(
            "prune_turns needs storage='full' in a SQLite file or Postgres: a delta checkpoint is rebuilt "
            "from its ancestors' writes, so deleting them would empty it"
        )


def _unfinished(snapshot: StateSnapshot) -> bool:
    return bool(snapshot.next) and not snapshot.interrupts


def _clock_after(snapshot: StateSnapshot) -> float:
    """Where the clock of a run that goes on from `snapshot` stands: its `started_at` moved on by the time since
    the checkpoint was written, which nobody spent on the run (a human deciding, a process down, an outage).

    The time before the checkpoint counts; so does the paused or failed node's partial run, but only once: it
    is run again from its start, and that run is on the clock. Both times are wall-clock, so this holds when
    the run goes on in another process (hosts are assumed to agree on the time; a negative gap counts as none).
    """
    written = datetime.fromisoformat(snapshot.created_at).timestamp() if snapshot.created_at else time.time()
    return snapshot.values["started_at"] + max(0.0, time.time() - written)

"""`GraphAgent`: the guarded graph behind the hand-written loop's contract, options in and `AgentResult` out.

`arun` streams the graph with fresh per-run counters and reads the stop reason and counts from the final state;
`run` is a thin sync driver. `adrive` is the one place a graph run becomes an `AgentResult` (sessions use it for
every turn, resume and continuation), and a cancel is written into the thread before it goes on.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Sequence
from typing import Any, Unpack

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command

from langgraph_version.graph import CHECK, ERRORS, MODEL, TOOLS, build_guarded_graph, recursion_limit_for
from langgraph_version.run import Durability, OpenCalls, RunRecorder
from langgraph_version.state import fresh_counters, stopped, usage_of
from shared_tools import telemetry
from shared_tools.results import AgentLimits, AgentOptions, AgentResult, OptionKeywords, StopReason, agent_options
from shared_tools.sync import run_blocking

log = logging.getLogger(__name__)

AGENT_NAME = "langgraph"
"""The agent's name on its spans (``invoke_agent langgraph``)."""


class GraphAgent:
    """The bookstore agent as a LangGraph graph, with the hand-written loop's contract."""

    def __init__(
        self,
        model: BaseChatModel,
        tools: Sequence[BaseTool],
        options: AgentOptions | AgentLimits | None = None,
        *,
        checkpointer: BaseCheckpointSaver | None = None,
        **keywords: Unpack[OptionKeywords],
    ) -> None:
        """With `options.needs_approval`, a call that needs a human's yes pauses the run (LangGraph's
        `interrupt()`, `StopReason.AWAITING_APPROVAL`); that needs a checkpointer to resume from: pass one, or
        run the agent in a `GraphSession` and answer with `GraphSession.resume`."""
        options = agent_options("GraphAgent", options, dict(keywords))
        self.model = model
        """The chat model the graph calls (a session also asks it for summaries)."""
        self.options = options
        self.limits = options.limits
        self.recursion_limit = recursion_limit_for(options.limits)
        self.builder: StateGraph = build_guarded_graph(model, tools, options)
        self.graph: CompiledStateGraph = self.builder.compile(checkpointer=checkpointer)

    def run(self, instructions: str, goal: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """`arun` for sync callers. Inside a running event loop, await `arun` instead."""
        return run_blocking(lambda: self.arun(instructions, goal, cancel=cancel), instead="GraphAgent.arun(...)")

    async def arun(self, instructions: str, goal: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """One task from an empty history; `cancel` stops it before the next model or tool call, and cancelling
        the task raises CancelledError as usual."""
        if self.options.needs_approval is not None and self.graph.checkpointer is None:
            # Without a checkpointer LangGraph still stops at interrupt(), but keeps nothing to resume from.
            raise ValueError(
                "needs_approval pauses the graph with interrupt(), which needs a checkpointer: "
                "pass checkpointer=... or run it in a GraphSession"
            )
        # With a checkpointer every run needs a thread; a one-off run gets a thread of its own.
        config: RunnableConfig = {}
        if self.graph.checkpointer is not None:
            config = {"configurable": {"thread_id": f"run-{uuid.uuid4()}"}}
        return await self.adrive(self.graph, opening(instructions, goal), config, cancel=cancel)

    async def adrive(
        self,
        graph: CompiledStateGraph,
        new_messages: list[BaseMessage] | Command | None,
        config: RunnableConfig,
        *,
        cancel: threading.Event | None = None,
        durability: Durability | None = None,
        started_at: float | None = None,
        customer: str | None = None,
        keep_turns: int | None = None,
        count_stretch: bool = False,
    ) -> AgentResult:
        """Run `graph` (this agent's, perhaps compiled with a session's checkpointer) to an `AgentResult`.

        `new_messages` are appended to whatever the thread holds, with the per-run counters reset (and the
        thread's `customer` recorded, when given), so a session's messages persist while its budgets start over
        with each question. A `Command` (the answer to an approval) or None (no new input) instead goes on with
        the thread's paused or unfinished run, counters and all: it is the same run, its clock moved on to
        `started_at` (`RunContext.started_at`); its budgets judge the whole run. With `count_stretch` the result
        counts only the calls made from the checkpoint on, the ones its trace shows (a replay forks a new branch
        there; a continuation's earlier lines went with the process that made them). `keep_turns` bounds what the
        model is sent (`RunContext.keep_turns`). The run's span (its nodes write the model and tool spans under it)
        carries the thread's id as its conversation id.
        """
        thread = (config.get("configurable") or {}).get("thread_id")
        provider = self.options.tracer_provider
        with telemetry.agent_run(AGENT_NAME, self.model, provider=provider, conversation_id=thread) as spans:
            result = await self._drive(
                graph,
                new_messages,
                config,
                cancel=cancel,
                durability=durability,
                started_at=started_at,
                customer=customer,
                keep_turns=keep_turns,
                count_stretch=count_stretch,
            )
            spans.finish(result)
        return result

    async def _drive(
        self,
        graph: CompiledStateGraph,
        new_messages: list[BaseMessage] | Command | None,
        config: RunnableConfig,
        *,
        cancel: threading.Event | None,
        durability: Durability | None,
        started_at: float | None,
        customer: str | None,
        keep_turns: int | None,
        count_stretch: bool,
    ) -> AgentResult:
        graph_input: dict[str, Any] | Command | None
        if isinstance(new_messages, list):
            graph_input = {"messages": new_messages, **fresh_counters()}
            if customer is not None:
                graph_input["customer"] = customer
        else:
            graph_input = new_messages
        before = None
        if count_stretch and not isinstance(graph_input, dict):
            earlier = (await graph.aget_state(config)).values
            before = usage_of(earlier) if "model_calls" in earlier else None
        run = RunRecorder(self.options.on_event, self.options.on_token)
        try:
            await run.stream(
                graph,
                graph_input,
                {**config, "recursion_limit": self.recursion_limit},
                cancel=cancel,
                durability=durability,
                started_at=started_at,
                keep_turns=keep_turns,
            )
        except asyncio.CancelledError:
            if graph.checkpointer is not None:
                await record_cancellation(graph, config, run.calls)
            raise  # never swallowed: the caller cancelled us
        # Every exit of the guarded graph writes its stop reason into state, except a pause for approval.
        reason = StopReason.AWAITING_APPROVAL if run.pending else StopReason(run.state["stop_reason"])
        usage = usage_of(run.state)
        return run.result(reason, usage if before is None else usage.since(before))


async def record_cancellation(graph: CompiledStateGraph, config: RunnableConfig, calls: OpenCalls) -> None:
    """End the thread's run, cut off by a task cancel, the way a cooperative cancel would have ended it.

    LangGraph drops the update of the node it cancelled and leaves the thread at the checkpoint before that
    node, so the thread would read as unfinished (or, for a resumed run, as still waiting for the answer it was
    given), and going on would run the node again: tools that already ran would run twice. Instead the node's
    outcome is written as if it had returned it: stop reason CANCELLED and, for the tools node, one answer per
    call of the round: the real result of a call that finished (it may have written), "cancelled while it was
    running" for a call cut off mid-run, "cancelled before it ran" for the rest, as the hand-written loop
    answers them. A run cancelled before its resumed tools node started is still waiting for its answer, and
    a run that had already ended is left as it was.
    """
    snapshot = await graph.aget_state(config)
    if len(snapshot.next) != 1 or snapshot.next[0] not in (MODEL, TOOLS, ERRORS, CHECK):
        return
    [node] = snapshot.next
    if snapshot.interrupts and not (node == TOOLS and calls.started):
        return
    update = stopped(StopReason.CANCELLED)
    if node == TOOLS:
        reply = snapshot.values["messages"][-1]
        update["messages"] = [calls.answer_for(call) for call in reply.tool_calls]
        update["tool_calls"] = snapshot.values["tool_calls"] + len(reply.tool_calls)
    await graph.aupdate_state(config, update, as_node=node)
    log.info("run cancelled in its %s node; the thread records it as cancelled", node)


def opening(instructions: str, goal: str) -> list[BaseMessage]:
    """The first messages of a conversation: the instructions, then the user's goal."""
    return [SystemMessage(instructions), HumanMessage(goal)]

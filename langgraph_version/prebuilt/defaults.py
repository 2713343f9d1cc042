"""The textbook agent graph as LangGraph ships it: a model node, the prebuilt `ToolNode` and `tools_condition`.

Nothing is added: a tool's exception propagates, unknown tools and bad arguments get `ToolNode`'s texts, and
only the recursion limit bounds the loop (`defaults_recursion_limit_for`, from `max_steps`). `DefaultsGraphAgent`
takes the same `AgentOptions` and returns an `AgentResult`; it has no approval gate. `graph_for`, `turn_input`
and `adrive` are what `prebuilt.thread.CheckpointThread` needs to run it turn by turn.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Unpack

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.errors import GraphRecursionError
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from langgraph_version.agent import opening
from langgraph_version.graph import MODEL, NO_STEP_LIMIT_RECURSION, TOOLS
from langgraph_version.prebuilt.reporting import emit_tool_result, final_stop_reason
from langgraph_version.run import (
    RunContext,
    RunRecorder,
    calls_this_run,
    emit,
    invoke_model,
    run_context,
)
from langgraph_version.tracing import framework_run
from shared_tools import guards
from shared_tools.replies import checked_reply
from shared_tools.results import (
    AgentLimits,
    AgentOptions,
    AgentResult,
    OptionKeywords,
    RunStopped,
    RunUsage,
    StopReason,
    TraceEvent,
    agent_options,
)
from shared_tools.sync import run_blocking

AGENT_NAME = "langgraph-defaults"
"""`gen_ai.agent.name` of this agent's spans (its contender name)."""
SUPERSTEPS_PER_ROUND = 2
"""model + tools: one round of the defaults graph."""


def defaults_recursion_limit_for(limits: AgentLimits) -> int:
    """The defaults graph's `recursion_limit`: max_steps model calls and their tools, then GraphRecursionError.

    A round is 2 supersteps (model, tools). A limit of 2 * max_steps runs max_steps model calls and their tools
    and then raises if the model still wants more, while a run that answers at model call max_steps
    (2 * max_steps - 1 supersteps, plus the input) still fits.
    """
    if limits.max_steps is None:
        return NO_STEP_LIMIT_RECURSION
    return SUPERSTEPS_PER_ROUND * limits.max_steps


def build_defaults_graph(model: BaseChatModel, tools: Sequence[BaseTool]) -> StateGraph:
    """model -> ToolNode -> model ..., until `tools_condition` sees a reply without tool calls."""
    bound: Runnable[LanguageModelInput, BaseMessage] = model.bind_tools(tools)

    async def call_model(state: MessagesState) -> dict[str, Any]:
        if run_context().cancelled:
            raise RunStopped(StopReason.CANCELLED)
        started, step = time.perf_counter(), calls_this_run(state["messages"]) + 1
        try:
            reply = await invoke_model(bound, state["messages"])
        except RunStopped:  # a cancel mid-stream: the call is on the trace, its half reply dropped
            emit(guards.model_cancelled_event(step, time.perf_counter() - started))
            raise
        if not isinstance(reply, AIMessage):
            raise TypeError(f"the chat model returned {type(reply).__name__}, expected an AIMessage")
        reply = checked_reply(reply)
        emit(guards.model_event(step, reply, time.perf_counter() - started))
        return {"messages": [reply]}

    graph = StateGraph(MessagesState, context_schema=RunContext)
    graph.add_node(MODEL, call_model)
    graph.add_node(TOOLS, ToolNode(tools, awrap_tool_call=_traced))
    graph.add_edge(START, MODEL)
    graph.add_conditional_edges(MODEL, tools_condition, {TOOLS: TOOLS, END: END})
    graph.add_edge(TOOLS, MODEL)
    return graph


async def _traced(
    request: ToolCallRequest, execute: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command]]
) -> ToolMessage | Command:
    """Timing only: whatever the tool raises propagates exactly as without the hook."""
    started = time.perf_counter()
    result = await execute(request)
    emit_tool_result(request, result, time.perf_counter() - started)
    return result


class DefaultsGraphAgent:
    """`build_defaults_graph` behind the shared contract: `run`/`arun` -> `AgentResult`.

    It applies `limits.max_steps` (as the recursion limit), `on_event` and `on_token`. LangGraph's defaults have no knob
    for the rest, so these options are *not applied*: `detailed_errors` (a tool exception is never turned
    into a result), `max_tool_result_chars` (results are never cut), `parallel_tools` (`ToolNode` always runs
    the calls of one reply concurrently), and the token, time, repeat and consecutive-error budgets of
    `AgentLimits`. `needs_approval` is refused here: there is no approval gate, and a safety rule must not be
    dropped silently.
    """

    def __init__(
        self,
        model: BaseChatModel,
        tools: Sequence[BaseTool],
        options: AgentOptions | AgentLimits | None = None,
        *,
        checkpointer: BaseCheckpointSaver | None = None,
        **keywords: Unpack[OptionKeywords],
    ) -> None:
        options = agent_options("DefaultsGraphAgent", options, dict(keywords))
        if options.needs_approval is not None:
            raise ValueError("needs_approval: LangGraph's defaults have no approval gate (GraphAgent has one)")
        self.model = model
        self.options = options
        self.limits = options.limits
        self.recursion_limit = defaults_recursion_limit_for(options.limits)
        self.builder: StateGraph = build_defaults_graph(model, tools)
        self.graph: CompiledStateGraph = self.builder.compile(checkpointer=checkpointer)

    def run(self, instructions: str, goal: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """`arun` for sync callers. Inside a running event loop, await `arun` instead."""
        return run_blocking(
            lambda: self.arun(instructions, goal, cancel=cancel), instead="DefaultsGraphAgent.arun(...)"
        )

    async def arun(self, instructions: str, goal: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """One task from an empty history; `cancel` stops it before the next model call."""
        config: RunnableConfig = {}
        if self.graph.checkpointer is not None:
            config["configurable"] = {"thread_id": f"run-{uuid.uuid4()}"}
        graph_input = self.turn_input(instructions, goal, first=True)
        return await self.adrive(self.graph, graph_input, config, instructions, cancel=cancel)

    # --- what a checkpointer thread needs (`prebuilt.thread.CheckpointThread`) -------------

    def graph_for(self, instructions: str) -> CompiledStateGraph:
        """The graph a checkpointer thread runs (it swaps in its own checkpointer); the instructions are state."""
        return self.graph

    def turn_input(self, instructions: str, text: str, *, first: bool) -> dict[str, Any]:
        """A turn's input: the system message and the question on a new thread, the question alone after that."""
        return {"messages": opening(instructions, text) if first else [HumanMessage(text)]}

    def history(self, instructions: str, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """A thread's messages; the system message is already in them."""
        return list(messages)

    async def adrive(
        self,
        graph: CompiledStateGraph,
        graph_input: dict[str, Any] | Command | None,
        config: RunnableConfig,
        instructions: str = "",
        *,
        earlier: Sequence[TraceEvent] = (),
        cancel: threading.Event | None = None,
    ) -> AgentResult:
        """Run `graph` (this agent's, or compiled with a thread's checkpointer) to an `AgentResult`.

        A dict input is a new turn; None goes on with a thread's unfinished run, and `earlier` is the trace of
        that run before it, so the counts are the whole run's. The recursion limit is per run, as LangGraph
        counts it.
        """
        with framework_run(AGENT_NAME, self.model, config, self.options.tracer_provider) as (spans, config):
            result = await self._drive(graph, graph_input, config, earlier=earlier, cancel=cancel)
            spans.finish(result)
        return result

    async def _drive(
        self,
        graph: CompiledStateGraph,
        graph_input: dict[str, Any] | Command | None,
        config: RunnableConfig,
        *,
        earlier: Sequence[TraceEvent],
        cancel: threading.Event | None,
    ) -> AgentResult:
        run = RunRecorder(self.options.on_event, self.options.on_token)
        try:
            await run.stream(graph, graph_input, {**config, "recursion_limit": self.recursion_limit}, cancel=cancel)
        except GraphRecursionError:  # LangGraph's only brake: the run is kept, as far as it got
            reason = StopReason.MAX_STEPS
        except RunStopped as stop:
            reason = stop.reason
        else:
            reason = final_stop_reason(run.messages)
        # The framework keeps no counters of its own: the counts are what the trace shows.
        return run.result(reason, RunUsage.of_trace([*earlier, *run.trace]))

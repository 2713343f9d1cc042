"""`GraphAgent`: runs one of the two graphs and turns what happened into an `AgentResult`.

This is the seam `handwritten.AgentLoop` has as `run`: the caller gives instructions and a goal and
gets the same `AgentResult` back. The agent streams the graph's state after each superstep
(``stream_mode="values"``), so a run that LangGraph aborts still has its partial history; the
nodes hand each trace line to the run's recorder (through LangGraph's run `context`), which logs
it and passes it on to `on_event` while the node is still running; and the stop reason is read
from the final state. In defaults mode
(``guards=False``) there is no such state: a `GraphRecursionError` becomes MAX_STEPS with the
partial history kept, and a tool's exception propagates, because that is what LangGraph does.
`recursion_limit_for` is the one place where "max_steps model calls" becomes LangGraph supersteps.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolCall
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.errors import GraphRecursionError
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command

from langgraph_version.graph import (
    SUPERSTEPS_PER_ROUND,
    GuardOptions,
    RunCancelled,
    build_defaults_graph,
    build_guarded_graph,
    classify_reply,
)
from langgraph_version.state import RunContext, fresh_counters
from shared_tools.results import AgentLimits, AgentResult, StopReason, TraceEvent

logger = logging.getLogger(__name__)

Durability = Literal["sync", "async", "exit"]

NO_STEP_LIMIT_RECURSION = 10_000
"""Supersteps allowed when `max_steps` is None: the order of LangGraph's own default (10007)."""

DEFAULTS_SUPERSTEPS_PER_ROUND = 2
"""model + tools: one round of the defaults graph."""


def recursion_limit_for(limits: AgentLimits, *, guards: bool = True) -> int:
    """The `recursion_limit` that lets exactly `limits.max_steps` model calls (and their tools) happen.

    LangGraph counts supersteps, one per node run here, and a run of N supersteps needs a limit of
    at least N + 1 (the input counts as one). Guarded: a run of max_steps rounds is 3 supersteps per
    round (model, tools, check) and ends normally in the last check, so 3 * max_steps + 1.
    Defaults: 2 supersteps per round (model, tools); a limit of 2 * max_steps runs max_steps model
    calls and their tools and then raises `GraphRecursionError` if the model still wants more, while
    a run that answers at model call max_steps (2 * max_steps - 1 supersteps) still fits.
    Without a step limit both get a large limit; the guarded model node then ends with MAX_STEPS
    through `RemainingSteps` before LangGraph would raise.
    """
    if limits.max_steps is None:
        return NO_STEP_LIMIT_RECURSION
    if guards:
        return SUPERSTEPS_PER_ROUND * limits.max_steps + 1
    return DEFAULTS_SUPERSTEPS_PER_ROUND * limits.max_steps


class GraphAgent:
    """The bookstore agent as a LangGraph graph, with the hand-written loop's contract."""

    def __init__(
        self,
        model: BaseChatModel,
        tools: Sequence[BaseTool],
        limits: AgentLimits | None = None,
        *,
        guards: bool = True,
        detailed_errors: bool = False,
        parallel_tools: bool = True,
        max_tool_result_chars: int | None = None,
        checkpointer: BaseCheckpointSaver | None = None,
        on_event: Callable[[TraceEvent], None] | None = None,
        needs_approval: Callable[[ToolCall], str | None] | None = None,
    ) -> None:
        """`needs_approval(call)` returns a reason when a call must be approved by a human first: the run
        then pauses with `StopReason.AWAITING_APPROVAL` (LangGraph's `interrupt()`), which needs a
        checkpointer; answer it with `GraphSession.resume`."""
        if needs_approval is not None and not guards:
            raise ValueError("needs_approval is a guard of the guarded graph; guards=False has no approval gate")
        self.limits = limits if limits is not None else AgentLimits()
        self.needs_approval = needs_approval
        self.guards = guards
        self.on_event = on_event
        self.recursion_limit = recursion_limit_for(self.limits, guards=guards)
        self.builder: StateGraph = (
            build_guarded_graph(
                model,
                tools,
                GuardOptions(
                    self.limits, detailed_errors, parallel_tools, max_tool_result_chars, needs_approval=needs_approval
                ),
            )
            if guards
            else build_defaults_graph(model, tools)
        )
        self.graph: CompiledStateGraph = self.builder.compile(checkpointer=checkpointer)

    def run(self, instructions: str, goal: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """One task from an empty history; `cancel` (a threading.Event) stops it between steps."""
        self._check_can_pause()
        return self.drive(self.graph, _opening(instructions, goal), self._one_off_config(), cancel=cancel)

    async def arun(self, instructions: str, goal: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """`run` on the async path; cancelling the task raises CancelledError as usual."""
        self._check_can_pause()
        return await self.adrive(self.graph, _opening(instructions, goal), self._one_off_config(), cancel=cancel)

    def _check_can_pause(self) -> None:
        # Without a checkpointer LangGraph still stops at interrupt(), but nothing is kept to resume from:
        # the paused call could never be answered.
        if self.needs_approval is not None and self.graph.checkpointer is None:
            raise ValueError(
                "needs_approval pauses the graph with interrupt(), which needs a checkpointer: "
                "pass checkpointer=... or run it in a GraphSession"
            )

    # -- the driver, shared with GraphSession ---------------------------------------------------

    def drive(
        self,
        graph: CompiledStateGraph,
        new_messages: list[BaseMessage] | Command,
        config: RunnableConfig,
        *,
        cancel: threading.Event | None = None,
        durability: Durability | None = None,
    ) -> AgentResult:
        """Stream `graph` from `new_messages` (appended to whatever the thread holds) to an AgentResult.

        A `Command` instead of messages continues the thread's paused or unfinished run (see `GraphSession`).
        """
        run = _RunRecord(self)
        try:
            for state in graph.stream(
                self._input(new_messages),
                self._config(config),
                context=RunContext(cancel, run.record),
                stream_mode="values",
                durability=durability,
            ):
                run.see(state)
        except GraphRecursionError:
            if self.guards:  # the guarded graph always leaves through END; hitting the limit is a bug
                raise
            return run.result(StopReason.MAX_STEPS)
        except RunCancelled:
            return run.result(StopReason.CANCELLED)
        return run.result()

    async def adrive(
        self,
        graph: CompiledStateGraph,
        new_messages: list[BaseMessage] | Command,
        config: RunnableConfig,
        *,
        cancel: threading.Event | None = None,
        durability: Durability | None = None,
    ) -> AgentResult:
        """`drive` on the async path."""
        run = _RunRecord(self)
        try:
            async for state in graph.astream(
                self._input(new_messages),
                self._config(config),
                context=RunContext(cancel, run.record),
                stream_mode="values",
                durability=durability,
            ):
                run.see(state)
        except GraphRecursionError:
            if self.guards:
                raise
            return run.result(StopReason.MAX_STEPS)
        except RunCancelled:
            return run.result(StopReason.CANCELLED)
        return run.result()

    def _input(self, new_messages: list[BaseMessage] | Command) -> dict[str, Any] | Command:
        if isinstance(new_messages, Command):
            return new_messages  # a resumed run keeps its counters: it is the same run
        # Counters are reset in the input of every run, so a session's messages persist but its
        # budgets start over with each ask.
        return {"messages": new_messages, **fresh_counters()} if self.guards else {"messages": new_messages}

    def _config(self, config: RunnableConfig) -> RunnableConfig:
        return {**config, "recursion_limit": self.recursion_limit}

    def _one_off_config(self) -> RunnableConfig:
        # With a checkpointer every invoke needs a thread; a one-off run gets a thread of its own.
        return {"configurable": {"thread_id": f"run-{uuid.uuid4()}"}} if self.graph.checkpointer else {}


class _RunRecord:
    """What one run has produced so far: the last full state and the trace lines."""

    def __init__(self, agent: GraphAgent) -> None:
        self.agent = agent
        self.state: dict[str, Any] = {}
        self.trace: list[TraceEvent] = []
        self.pending: list[dict[str, Any]] | None = None
        self._lock = threading.Lock()

    def see(self, chunk: dict[str, Any]) -> None:
        """One streamed state; the chunk of a paused run also carries LangGraph's `__interrupt__` entry."""
        if "__interrupt__" in chunk:
            self.pending = [pause.value for pause in chunk["__interrupt__"]]
            chunk = {k: v for k, v in chunk.items() if k != "__interrupt__"}
        self.state = chunk

    def record(self, event: TraceEvent) -> None:
        """Called from inside the nodes (from ToolNode's worker threads in defaults mode)."""
        with self._lock:
            self.trace.append(event)
        logger.info(
            "[step %d] %s %.3fs %s%s%s",
            event.step,
            event.name,
            event.duration_s,
            event.detail,
            f" [{event.tokens} tokens]" if event.is_model else "",
            " [error]" if event.is_error else "",
        )
        if self.agent.on_event is not None:
            self.agent.on_event(event)  # the caller's code: its exceptions are not ours to hide

    def result(self, forced: StopReason | None = None) -> AgentResult:
        messages: list[BaseMessage] = list(self.state.get("messages", []))
        model_events = [e for e in self.trace if e.is_model]
        if self.agent.guards:
            paused = StopReason.AWAITING_APPROVAL if self.pending else None
            reason = forced or paused or StopReason(self.state["stop_reason"])
            model_calls, tool_calls, tokens = (
                self.state["model_calls"],
                self.state["tool_calls"],
                self.state["tokens"],
            )
        else:
            reason = forced or _defaults_stop(messages)
            model_calls = len(model_events)
            tool_calls = len(self.trace) - model_calls
            tokens = sum(e.tokens for e in model_events)
        answer = messages[-1].text.strip() if reason is StopReason.DONE and messages else None
        return AgentResult(
            stop_reason=reason,
            answer=answer,
            steps=model_calls,
            tokens=tokens,
            model_calls=model_calls,
            tool_calls=tool_calls,
            trace=self.trace,
            messages=messages,
            pending=self.pending if reason is StopReason.AWAITING_APPROVAL else None,
        )


def _defaults_stop(messages: list[BaseMessage]) -> StopReason:
    """How a defaults-mode run that reached END ended: `tools_condition` only ends on a reply without tool calls."""
    last = messages[-1]
    assert isinstance(last, AIMessage), "tools_condition ends the graph only after a model reply"
    return classify_reply(last) or StopReason.DONE


def _opening(instructions: str, goal: str) -> list[BaseMessage]:
    return [SystemMessage(instructions), HumanMessage(goal)]


__all__ = ["GraphAgent", "recursion_limit_for"]

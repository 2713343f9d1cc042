"""The agent as two LangGraph graphs: the guarded port and the plain "LangGraph defaults" loop.

`build_guarded_graph` is the mirror image of `handwritten`'s loop: a `model` node (one model call,
the seed's "step"), a `tools` node (one tool round) and a `check` node (the budgets the seed checks
after each round), wired by two small routers. The framework gives us the state machine, message
merging (`add_messages`), checkpoints, live streaming and `RemainingSteps`; the guards themselves
(repeat rule, unknown tool, invalid arguments, hidden error details, truncation, token and time
budgets, error rounds) are ours, written with the same `shared_tools.guards` texts as the
hand-written loop.

Why the guarded tools node is our own function and not the prebuilt `ToolNode`: `ToolNode` lets a
`wrap_tool_call` hook see every call (unknown tools too, with ``request.tool is None``) and could
produce our texts, but it runs the hooks of one turn concurrently and without their position in
the turn, so "the third identical call is blocked" would depend on thread timing; a hook can only
return a message or a `Command` per call, so the repeat counts and the tool-call counter would need
custom reducers; and it has no switch for running a turn's calls one after another. Our own node
screens the calls in call order, then runs them (in parallel or not); it reads like `handwritten`'s
`run_tools` and stays deterministic. `build_defaults_graph` shows the prebuilt
`ToolNode` and `tools_condition` exactly as LangGraph ships them, so the difference is visible.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, NamedTuple

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolCall, ToolMessage
from langchain_core.runnables import Runnable, RunnableLambda
from langchain_core.runnables.config import ContextThreadPoolExecutor
from langchain_core.tools import BaseTool, ToolException
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import get_runtime
from langgraph.types import Command, interrupt

from langgraph_version.state import AgentState, RunContext, stopped
from shared_tools import guards
from shared_tools.results import AgentLimits, StopReason, TraceEvent
from shared_tools.steps import CallTools, FinalAnswer, InvalidResponse, classify

logger = logging.getLogger(__name__)

MODEL = "model"
TOOLS = "tools"  # also the name `tools_condition` returns, so both graphs can share it
CHECK = "check"

SUPERSTEPS_PER_ROUND = 3
"""model + tools + check: one round of the guarded graph, as counted against the recursion limit."""

BoundModel = Runnable[LanguageModelInput, BaseMessage]


class RunCancelled(Exception):
    """Raised by the defaults graph's model node: that graph has no state field to stop through."""


def classify_reply(reply: AIMessage) -> StopReason | None:
    """The typed step as graph state: None while the model asks for tools, else why the run ends."""
    match classify(reply):
        case CallTools():
            return None
        case FinalAnswer():
            return StopReason.DONE
        case InvalidResponse():
            return StopReason.INVALID_RESPONSE


def calls_this_run(messages: Sequence[AnyMessage]) -> int:
    """Model replies since the last user message: the step number in a history that spans several turns."""
    count = 0
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            break
        count += isinstance(message, AIMessage)
    return count



def run_context() -> RunContext:
    """This run's context; an empty one when someone streams `agent.graph` without passing `context=`."""
    return get_runtime(RunContext).context or RunContext()


def emit(event: TraceEvent, context: RunContext | None = None) -> None:
    """Hand a trace line to the run's callback now, inside the node, and to LangGraph's "custom" stream.

    Calling back from inside the node (not from the stream consumer, which runs concurrently with
    the node) is what makes "cancel from on_event" deterministic: the node's next check sees it.
    """
    context = context or run_context()
    if context.on_event is not None:
        context.on_event(event)
    get_stream_writer()(event)


def _model_event(step: int, reply: AIMessage, duration_s: float) -> TraceEvent:
    return TraceEvent(step, "model", duration_s, guards.model_detail(reply), guards.usage_tokens(reply))


# ---------------------------------------------------------------------------------------------
# The guarded graph
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GuardOptions:
    """How the guarded graph treats tools; the budgets live in `AgentLimits`."""

    limits: AgentLimits
    detailed_errors: bool = False
    parallel_tools: bool = True
    max_tool_result_chars: int | None = None
    needs_approval: Callable[[ToolCall], str | None] | None = None
    """A reason when a call must be approved by a human first; the tools node then pauses the graph."""


class _Answer(NamedTuple):
    """One tool call's result for the model, and its trace line."""

    message: ToolMessage
    event: TraceEvent


Admitted = BaseTool | str
"""What screening decided for a call: the tool to run, or the error text the model gets instead."""


class GuardedNodes:
    """The guarded graph's nodes. Each returns only the state keys it changes."""

    def __init__(self, model: BaseChatModel, tools: Sequence[BaseTool], options: GuardOptions) -> None:
        self.bound: BoundModel = model.bind_tools(tools)
        self.tools = {tool.name: tool for tool in tools}
        self.options = options
        self.limits = options.limits

    # -- model node ---------------------------------------------------------------------------

    def call_model(self, state: AgentState) -> dict[str, Any]:
        if (early := self._before_model(state)) is not None:
            return early
        started = time.perf_counter()
        try:
            reply = self._invoke_model(state["messages"], self._time_left(state))
        except _OutOfTime:
            return self._timed_out(state, time.perf_counter() - started)
        return self._after_model(state, reply, time.perf_counter() - started)

    async def acall_model(self, state: AgentState) -> dict[str, Any]:
        if (early := self._before_model(state)) is not None:
            return early
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self._time_left(state)) as deadline:
                reply = await self.bound.ainvoke(state["messages"])
        except TimeoutError:
            if not deadline.expired():
                raise  # the model's own timeout: an outage, not our budget
            return self._timed_out(state, time.perf_counter() - started)
        return self._after_model(state, reply, time.perf_counter() - started)

    def _before_model(self, state: AgentState) -> dict[str, Any] | None:
        """The reasons not to call the model at all; None means go ahead."""
        if run_context().cancelled:
            return stopped(StopReason.CANCELLED)
        # A round needs this superstep plus tools and check; without room LangGraph would raise
        # GraphRecursionError. recursion_limit_for() leaves room for max_steps rounds, so this only
        # ends runs without a step limit (or a caller's own smaller recursion_limit).
        if state["remaining_steps"] < SUPERSTEPS_PER_ROUND:
            return stopped(StopReason.MAX_STEPS)
        return None

    def _invoke_model(self, messages: list[AnyMessage], timeout: float | None) -> BaseMessage:
        """The model's reply, bounded by `timeout` seconds (the time budget's remainder)."""
        if timeout is None:
            return self.bound.invoke(messages)
        if timeout <= 0:
            raise _OutOfTime
        executor = ContextThreadPoolExecutor(max_workers=1)
        future = executor.submit(self.bound.invoke, messages)
        try:
            return future.result(timeout=timeout)
        except TimeoutError:
            if future.done():
                raise  # the model's own timeout: an outage, not our budget
            raise _OutOfTime from None
        finally:
            # A blocking call cannot be interrupted: after a timeout it finishes in the background
            # and its reply is dropped.
            executor.shutdown(wait=False)

    def _timed_out(self, state: AgentState, duration_s: float) -> dict[str, Any]:
        """The call counts as a step (it was made), with no reply and no tokens, as in `handwritten`."""
        step = state["model_calls"] + 1
        emit(TraceEvent(step, "model", duration_s, guards.MODEL_TIMED_OUT_DETAIL))
        return {"model_calls": step, **stopped(StopReason.TIME_BUDGET)}

    def _after_model(self, state: AgentState, reply: BaseMessage, duration_s: float) -> dict[str, Any]:
        if not isinstance(reply, AIMessage):
            raise TypeError(f"the chat model returned {type(reply).__name__}, expected an AIMessage")
        reply = guards.with_call_ids(reply)
        step = state["model_calls"] + 1
        emit(_model_event(step, reply, duration_s))
        update: dict[str, Any] = {
            "messages": [reply],
            "model_calls": step,
            "tokens": state["tokens"] + guards.usage_tokens(reply),
        }
        if (reason := classify_reply(reply)) is not None:
            if reason is StopReason.INVALID_RESPONSE:
                logger.warning("[step %d] invalid model response", step)
            update |= stopped(reason)
        return update

    def _time_left(self, state: AgentState) -> float | None:
        if self.limits.max_duration is None:
            return None
        return self.limits.max_duration - (time.monotonic() - state["started_at"])

    # -- tools node ---------------------------------------------------------------------------

    def run_tools(self, state: AgentState) -> dict[str, Any]:
        """Answer every call of the last reply with one ToolMessage, in call order."""
        context, step, calls, seen = run_context(), state["model_calls"], _requested(state), dict(state["seen_calls"])
        answers: list[_Answer] = []
        if self.options.parallel_tools and not context.cancelled:
            # Screening happens in call order before anything runs, so repeat counts never depend on timing.
            admitted = [self.admit(call, seen) for call in calls]
            with ContextThreadPoolExecutor(max_workers=len(calls)) as executor:
                answers = list(executor.map(partial(self.run_tool, step), calls, admitted))
            for answer in answers:
                emit(answer.event, context)
        elif not self.options.parallel_tools:
            for call in calls:
                if context.cancelled:
                    break
                answers.append(self.run_tool(step, call, self.admit(call, seen)))
                emit(answers[-1].event, context)  # live: on_event may set the cancel the next call checks
        return self._round_update(state, calls, answers, seen)

    async def arun_tools(self, state: AgentState) -> dict[str, Any]:
        """`run_tools` on the async path; parallel calls run as concurrent coroutines."""
        context, step, calls, seen = run_context(), state["model_calls"], _requested(state), dict(state["seen_calls"])
        answers: list[_Answer] = []
        if self.options.parallel_tools and not context.cancelled:
            admitted = [self.admit(call, seen) for call in calls]
            answers = list(await asyncio.gather(*map(partial(self.arun_tool, step), calls, admitted)))
            for answer in answers:
                emit(answer.event, context)
        elif not self.options.parallel_tools:
            for call in calls:
                if context.cancelled:
                    break
                answers.append(await self.arun_tool(step, call, self.admit(call, seen)))
                emit(answers[-1].event, context)
        return self._round_update(state, calls, answers, seen)

    def admit(self, call: ToolCall, seen: dict[str, int]) -> Admitted:
        """The tool to run for `call`, or the error text the model gets instead.

        `guards.screen` applies the shared checks in their fixed order (unknown tool, repeat rule, arguments),
        as in `handwritten`; the approval gate comes last, so a human is only asked about a call that would run.
        """
        verdict = guards.screen(call, self.tools, seen, self.limits)
        return verdict if isinstance(verdict, str) else self.check_approval(call) or verdict

    def check_approval(self, call: ToolCall) -> str | None:
        """The refusal text when `call` needs approval and is not approved; None when it may run.

        `interrupt()` pauses the graph here (the checkpointer keeps the thread), and the caller answers
        later, maybe from another process, with ``Command(resume=True|False)``. LangGraph then runs this
        node again from its start: calls screened before this one are screened again (same state, same
        counts), and in sequential mode the calls before this one run a second time. That re-run is why
        add_to_cart is idempotent (the store dedupes by tool-call id). In parallel mode every call is
        screened before any runs, so nothing runs before the pause.
        """
        needs_approval = self.options.needs_approval
        if needs_approval is None or (reason := needs_approval(call)) is None:
            return None
        request = {"tool_call": {"id": call["id"], "name": call["name"], "args": call["args"]}, "reason": reason}
        approved = interrupt(request) is True  # only an explicit yes approves
        logger.info("approval for %s (%s): %s", call["name"], reason, "yes" if approved else "no")
        return None if approved else guards.approval_rejected(call["name"], reason)

    def run_tool(self, step: int, call: ToolCall, admitted: Admitted) -> _Answer:
        started = time.perf_counter()
        if isinstance(admitted, str):
            return self._answer(step, call, admitted, True, started)
        try:
            # A ToolCall in, a ToolMessage out: LangChain fills InjectedToolCallId arguments from call["id"].
            output = admitted.invoke({**call, "type": "tool_call"})
        except Exception as exc:  # a tool failure is a result for the model; BaseException (cancel) is not
            return self._answer(step, call, self._failure_text(call, exc), True, started)
        return self._answer(step, call, *guards.output_text(output), started)

    async def arun_tool(self, step: int, call: ToolCall, admitted: Admitted) -> _Answer:
        started = time.perf_counter()
        if isinstance(admitted, str):
            return self._answer(step, call, admitted, True, started)
        try:
            output = await admitted.ainvoke({**call, "type": "tool_call"})
        except Exception as exc:
            return self._answer(step, call, self._failure_text(call, exc), True, started)
        return self._answer(step, call, *guards.output_text(output), started)

    def _failure_text(self, call: ToolCall, exc: Exception) -> str:
        # A ToolException is the tool talking to the model; anything else is a bug or an outage.
        level = logging.INFO if isinstance(exc, ToolException) else logging.WARNING
        text = guards.tool_failure_text(call["name"], exc, detailed=self.options.detailed_errors)
        # The log gets what the model gets: the exception's own text may hold a secret (a connection string).
        logger.log(level, "tool %s raised %s: %s", call["name"], type(exc).__name__, text)
        return text

    def _answer(self, step: int, call: ToolCall, text: str, is_error: bool, started: float) -> _Answer:
        text = guards.truncate(text, self.options.max_tool_result_chars)
        detail = guards.tool_detail(call["args"], text)
        event = TraceEvent(step, call["name"], time.perf_counter() - started, detail, is_error=is_error)
        return _Answer(guards.tool_result(call, text, is_error=is_error), event)

    def _round_update(
        self,
        state: AgentState,
        calls: list[ToolCall],
        answers: list[_Answer],
        seen: dict[str, int],
    ) -> dict[str, Any]:
        messages = [answer.message for answer in answers]
        # Calls a cancel stopped still get a result: a reply with unanswered calls is a broken history.
        unanswered = calls[len(answers) :]
        messages += [guards.tool_result(call, guards.CANCELLED_CALL_TEXT, is_error=True) for call in unanswered]
        update: dict[str, Any] = {
            "messages": messages,
            "tool_calls": state["tool_calls"] + len(calls),
            "seen_calls": seen,
        }
        if len(answers) < len(calls):
            update |= stopped(StopReason.CANCELLED)
        return update

    # -- check node ---------------------------------------------------------------------------

    def check_budgets(self, state: AgentState) -> dict[str, Any]:
        """After a tool round, in the hand-written loop's order: error rounds, tokens, time, steps."""
        if state["stop_reason"] is not None:  # the tools node saw a cancel
            return {}
        round_had_error = any(m.status == "error" for m in _last_round(state["messages"]))
        error_rounds = state["consecutive_error_rounds"] + 1 if round_had_error else 0
        update: dict[str, Any] = {"consecutive_error_rounds": error_rounds}
        elapsed = time.monotonic() - state["started_at"]
        max_steps = self.limits.max_steps
        if self.limits.exceeded_errors(error_rounds):
            update |= stopped(StopReason.TOO_MANY_ERRORS)
        elif self.limits.exceeded_tokens(state["tokens"]):
            update |= stopped(StopReason.TOKEN_BUDGET)
        elif self.limits.exceeded_duration(elapsed):
            update |= stopped(StopReason.TIME_BUDGET)
        elif max_steps is not None and state["model_calls"] >= max_steps:
            update |= stopped(StopReason.MAX_STEPS)
        return update


class _OutOfTime(Exception):
    """The time budget ran out while waiting for the model."""


def _requested(state: AgentState) -> list[ToolCall]:
    reply = state["messages"][-1]
    assert isinstance(reply, AIMessage), "the tools node runs only after a reply with tool calls"
    return list(reply.tool_calls)


def _last_round(messages: Sequence[AnyMessage]) -> list[ToolMessage]:
    """The ToolMessages after the last model reply."""
    round_: list[ToolMessage] = []
    for message in reversed(messages):
        if not isinstance(message, ToolMessage):
            break
        round_.append(message)
    return round_


def route_after_model(state: AgentState) -> Literal["tools", "__end__"]:
    """Run the requested tools unless the model node decided to stop."""
    return END if state["stop_reason"] is not None else TOOLS


def route_after_check(state: AgentState) -> Literal["model", "__end__"]:
    """Ask the model again unless a budget (or a cancel) ended the run."""
    return END if state["stop_reason"] is not None else MODEL


def build_guarded_graph(model: BaseChatModel, tools: Sequence[BaseTool], options: GuardOptions) -> StateGraph:
    """model -> tools -> check -> model ..., every exit decided by a state field."""
    nodes = GuardedNodes(model, tools, options)
    graph = StateGraph(AgentState, context_schema=RunContext)
    # RunnableLambda pairs each node's sync and async version, so one graph serves run() and arun().
    graph.add_node(MODEL, RunnableLambda(nodes.call_model, afunc=nodes.acall_model, name=MODEL))
    graph.add_node(TOOLS, RunnableLambda(nodes.run_tools, afunc=nodes.arun_tools, name=TOOLS))
    graph.add_node(CHECK, nodes.check_budgets)
    graph.add_edge(START, MODEL)
    graph.add_conditional_edges(MODEL, route_after_model, {TOOLS: TOOLS, END: END})
    graph.add_edge(TOOLS, CHECK)
    graph.add_conditional_edges(CHECK, route_after_check, {MODEL: MODEL, END: END})
    return graph


# ---------------------------------------------------------------------------------------------
# The defaults graph: what LangGraph gives you out of the box
# ---------------------------------------------------------------------------------------------


def build_defaults_graph(model: BaseChatModel, tools: Sequence[BaseTool]) -> StateGraph:
    """The textbook loop: a model node, the prebuilt `ToolNode` with its default error handling,
    `tools_condition`. Only the recursion limit (set per run) bounds it.

    The `ToolNode` gets a timing hook that re-raises whatever the tool raised, so its default
    behaviour is unchanged: tool exceptions propagate, unknown tools and bad arguments get
    LangGraph's own texts. The model node honours a cancel event by raising `RunCancelled`,
    because this graph's state holds nothing but messages.
    """
    bound: BoundModel = model.bind_tools(tools)

    def call_model(state: MessagesState) -> dict[str, Any]:
        _raise_if_cancelled()
        started = time.perf_counter()
        reply = bound.invoke(state["messages"])
        return _defaults_reply(state, reply, time.perf_counter() - started)

    async def acall_model(state: MessagesState) -> dict[str, Any]:
        _raise_if_cancelled()
        started = time.perf_counter()
        reply = await bound.ainvoke(state["messages"])
        return _defaults_reply(state, reply, time.perf_counter() - started)

    graph = StateGraph(MessagesState, context_schema=RunContext)
    graph.add_node(MODEL, RunnableLambda(call_model, afunc=acall_model, name=MODEL))
    graph.add_node(TOOLS, ToolNode(tools, wrap_tool_call=_timed_tool_call, awrap_tool_call=_atimed_tool_call))
    graph.add_edge(START, MODEL)
    graph.add_conditional_edges(MODEL, tools_condition, {TOOLS: TOOLS, END: END})
    graph.add_edge(TOOLS, MODEL)
    return graph


def _raise_if_cancelled() -> None:
    if run_context().cancelled:
        raise RunCancelled


def _defaults_reply(state: MessagesState, reply: BaseMessage, duration_s: float) -> dict[str, Any]:
    if not isinstance(reply, AIMessage):
        raise TypeError(f"the chat model returned {type(reply).__name__}, expected an AIMessage")
    emit(_model_event(calls_this_run(state["messages"]) + 1, reply, duration_s))
    return {"messages": [reply]}


ToolResult = ToolMessage | Command


def _timed_tool_call(request: ToolCallRequest, execute: Callable[[ToolCallRequest], ToolResult]) -> ToolResult:
    started = time.perf_counter()
    result = execute(request)  # exceptions propagate exactly as without the hook
    _emit_tool_event(request, result, time.perf_counter() - started)
    return result


async def _atimed_tool_call(
    request: ToolCallRequest, execute: Callable[[ToolCallRequest], Awaitable[ToolResult]]
) -> ToolResult:
    started = time.perf_counter()
    result = await execute(request)
    _emit_tool_event(request, result, time.perf_counter() - started)
    return result


def _emit_tool_event(request: ToolCallRequest, result: ToolResult, duration_s: float) -> None:
    call = request.tool_call
    text = result.text if isinstance(result, ToolMessage) else repr(result)
    is_error = isinstance(result, ToolMessage) and result.status == "error"
    step = calls_this_run(request.state["messages"])
    event = TraceEvent(step, call["name"], duration_s, guards.tool_detail(call["args"], text), is_error=is_error)
    # ToolNode runs a turn's calls in worker threads; the request's runtime is this run's, whatever the thread.
    context = request.runtime.context or RunContext()
    if context.on_event is not None:
        context.on_event(event)
    request.runtime.stream_writer(event)

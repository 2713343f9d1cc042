"""The guarded graph: the hand-written loop's guards as LangGraph nodes, state and routers.

A round is `model` (one model call) and `tools` (one tool round), through `errors` after an error result, ending
in `check` (the shared budget rule and the recursion limit). Every exit is a `stop_reason` in state read by a small
pure router, so LangGraph's picture of the graph is the whole control flow. LangGraph gives the state machine,
checkpoints and `interrupt()`; the guards are ours, with the hand-written loop's texts.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, ToolCall, ToolMessage
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from langgraph_version.history import visible_history
from langgraph_version.run import (
    MODEL_NODE,
    OpenCalls,
    RunContext,
    emit,
    invoke_model,
    run_context,
    stop_reason_for,
)
from langgraph_version.state import AgentState, stopped, usage_of
from shared_tools import guards, telemetry
from shared_tools.replies import checked_reply
from shared_tools.results import AgentLimits, AgentOptions, Guard, RunStopped, StopReason, TraceEvent

log = logging.getLogger(__name__)

MODEL = MODEL_NODE
TOOLS = "tools"
ERRORS = "errors"
CHECK = "check"

SUPERSTEPS_PER_ROUND = 4
"""model + tools + errors + check: the longest round, as counted against the recursion limit."""

NO_STEP_LIMIT_RECURSION = 10_000
"""Supersteps allowed when `max_steps` is None: the order of LangGraph's own default (10007)."""


def recursion_limit_for(limits: AgentLimits) -> int:
    """The guarded graph's `recursion_limit`: room for `limits.max_steps` rounds of the longest kind.

    LangGraph counts supersteps, one per node run here, and a run of N supersteps needs a limit of N + 1 (the
    input counts as one). max_steps error rounds are 4 supersteps each and the last one ends in its `check`,
    so 4 * max_steps + 1; a clean round is one superstep shorter and fits with room to spare. Without a step
    limit the graph gets a large limit, and `check` ends the run (MAX_STEPS) once another round would not fit.
    """
    if limits.max_steps is None:
        return NO_STEP_LIMIT_RECURSION
    return SUPERSTEPS_PER_ROUND * limits.max_steps + 1


# --- the graph -------------------------------------------------------------------------------------------------


def build_guarded_graph(model: BaseChatModel, tools: Sequence[BaseTool], options: AgentOptions) -> StateGraph:
    """model -> tools -> [errors ->] check -> model ..., every exit decided by `stop_reason` in state."""
    nodes = GuardedNodes(model, tools, options)
    graph = StateGraph(AgentState, context_schema=RunContext)
    graph.add_node(MODEL, on_the_run_clock(nodes.call_model))
    graph.add_node(TOOLS, on_the_run_clock(nodes.run_tools))
    graph.add_node(ERRORS, on_the_run_clock(nodes.count_error_round))
    graph.add_node(CHECK, on_the_run_clock(nodes.check_budgets))
    graph.add_edge(START, MODEL)
    graph.add_conditional_edges(MODEL, route_after_model, {TOOLS: TOOLS, END: END})
    graph.add_conditional_edges(TOOLS, route_after_tools, {ERRORS: ERRORS, CHECK: CHECK, END: END})
    graph.add_conditional_edges(ERRORS, route_after_errors, {CHECK: CHECK, END: END})
    graph.add_conditional_edges(CHECK, route_after_check, {MODEL: MODEL, END: END})
    return graph


async def route_after_model(state: AgentState) -> Literal["tools", "__end__"]:
    """Run the requested tools unless the reply (or a cancel, or the time budget) ended the run."""
    return END if state["stop_reason"] is not None else TOOLS


async def route_after_tools(state: AgentState) -> Literal["errors", "check", "__end__"]:
    """A cancel ends the run here; a round with an error result is counted in `errors`; a clean one is checked."""
    if state["stop_reason"] is not None:
        return END
    return ERRORS if round_had_error(state["messages"]) else CHECK


async def route_after_errors(state: AgentState) -> Literal["check", "__end__"]:
    return END if state["stop_reason"] is not None else CHECK


async def route_after_check(state: AgentState) -> Literal["model", "__end__"]:
    return END if state["stop_reason"] is not None else MODEL


def round_had_error(messages: Sequence[AnyMessage]) -> bool:
    """Whether any result of the last tool round (the ToolMessages after the last reply) is an error."""
    for message in reversed(messages):
        if not isinstance(message, ToolMessage):
            return False
        if message.status == "error":
            return True
    return False


Node = Callable[[AgentState], Awaitable[dict[str, Any]]]


def on_the_run_clock(node: Node) -> Node:
    """`node`, run on the clock of a resumed or continued run (`RunContext.started_at`), which it saves.

    The time a human takes to answer an approval, or a thread lies unfinished after a crash or an outage, is
    not the agent's time; the session works out how long that was and passes the moved clock in the run's
    context. Only a node may write it to state: a `Command(update=...)` is stored on the paused checkpoint and
    applied again with every later resume of it, and a second value for one key in one step is an error. The
    clock only moves on, so the first node of the run saves it and the later ones find nothing to do; a node
    that pauses again saves nothing, and the next resume moves the clock from the same checkpoint.
    """

    @functools.wraps(node)
    async def timed(state: AgentState) -> dict[str, Any]:
        started_at = run_context().started_at
        if started_at is None or started_at <= state["started_at"]:
            return await node(state)
        return {"started_at": started_at, **await node({**state, "started_at": started_at})}

    return timed


# --- the nodes -------------------------------------------------------------------------------------------------


class GuardedNodes:
    """The guarded graph's nodes. Each returns only the state keys it changes. The model and tools nodes write
    the run's chat and tool spans (`shared_tools.telemetry.current_run`, opened by `GraphAgent.adrive`).

    Why the tools node is our own and not the prebuilt `ToolNode`: a `wrap_tool_call` hook sees every call,
    but `ToolNode` runs the hooks of one turn concurrently and without their position in the turn, so "the
    third identical call is blocked" would depend on timing; a hook returns one message or `Command` per call,
    so the repeat counts and the tool-call counter would need custom reducers; and it cannot run a turn's calls
    one after another. Our node screens the calls in call order, then runs them (concurrently or not), like
    the loop.
    """

    def __init__(self, model: BaseChatModel, tools: Sequence[BaseTool], options: AgentOptions) -> None:
        self.model = model
        self.bound: Runnable[LanguageModelInput, BaseMessage] = model.bind_tools(tools)
        self.tools = {tool.name: tool for tool in tools}
        self.options = options
        self.limits = options.limits

    async def call_model(self, state: AgentState) -> dict[str, Any]:
        """One model call; its reply is in state (tool calls included) before any tool runs.

        The reply may use at most what is left of the token budget (`guards.reply_cap`), so a reply that never
        ends is cut there; the time budget bounds the wait for it. Results whose data changed since they read it
        are marked stale first (`mark_stale_readings`), and the marked copies go into state with the reply.
        """
        if run_context().cancelled:
            return stopped(StopReason.CANCELLED)
        step = state["model_calls"] + 1
        history = visible_history(state["messages"], run_context().keep_turns)
        marked = await self.mark_stale_readings(history)
        started = time.perf_counter()
        cap, budget_capped = guards.reply_cap(self.model, self.limits, usage_of(state))
        # Left open by an exception that is not ours (the run's span ends it with that exception's type).
        chat = telemetry.current_run().chat(step, history)
        try:
            # A model stuck for an hour must not hold the run. With on_token the run streams in "messages" mode,
            # and that alone makes this ainvoke stream.
            async with asyncio.timeout(self.limits.time_left(usage_of(state))) as deadline:
                reply = await invoke_model(self.bound, history, cap)
        except TimeoutError:
            if not deadline.expired():
                raise  # the model's own timeout: an outage, not our budget
            # The call was made, so it counts as a step, with no reply and no tokens, as in the loop.
            emit(guards.model_timeout_event(step, time.perf_counter() - started))
            chat.stopped(StopReason.TIME_BUDGET, Guard.MODEL_TIMEOUT)
            return {"messages": marked, "model_calls": step, **stopped(StopReason.TIME_BUDGET)}
        except RunStopped as stop:  # a cancel mid-stream (`invoke_model`): a step, its half reply dropped
            emit(guards.model_cancelled_event(step, time.perf_counter() - started))
            chat.stopped(stop.reason, Guard.MODEL_CANCELLED)
            return {"messages": marked, "model_calls": step, **stopped(stop.reason)}
        if not isinstance(reply, AIMessage):
            raise TypeError(f"the chat model returned {type(reply).__name__}, expected an AIMessage")
        reply = guards.with_call_ids(guards.without_cut_calls(checked_reply(reply)), state["messages"])
        event = guards.model_event(
            step, reply, time.perf_counter() - started, budget_capped=budget_capped, stale_read=bool(marked)
        )
        chat.replied(reply, event.guard)
        emit(event)
        update: dict[str, Any] = {
            "messages": [*marked, reply],
            "model_calls": step,
            "tokens": state["tokens"] + guards.usage_tokens(reply),
        }
        if (reason := stop_reason_for(reply)) is not None:
            if reason is StopReason.INVALID_RESPONSE:
                log.warning("[step %d] invalid model response", step)
                reason = self.limits.unusable_reply_reason(usage_of({**state, **update}))
            update |= stopped(reason)
        return update

    async def mark_stale_readings(self, history: list[AnyMessage]) -> list[AnyMessage]:
        """The stale-read guard: each result of `history` whose data has changed since it was read, replaced by
        its marked copy (`guards.stale_readings`); the copies are returned for state, where `add_messages`
        replaces the originals by id, so every later call is sent them marked too."""
        if not self.options.stale_reads:
            return []
        marked = await guards.stale_readings(history, self.tools)
        for index, message in marked.items():
            history[index] = message
        return list(marked.values())

    async def run_tools(self, state: AgentState) -> dict[str, Any]:
        """Answer every call of the last reply with one ToolMessage, in call order (`run_round`).

        Each answer is also kept in the run's `OpenCalls` as soon as it is known, with the calls whose tool is
        running: when the run's task is cancelled mid-round, LangGraph drops this node's update, and the agent
        writes the round from there instead (`GraphAgent.adrive`).
        """
        reply = state["messages"][-1]
        assert isinstance(reply, AIMessage), "the tools node runs only after a reply with tool calls"
        calls, seen = reply.tool_calls, dict(state["seen_calls"])
        open_calls = run_context().calls or OpenCalls()
        open_calls.start_round()
        try:
            answers = await self.run_round(state, calls, seen, open_calls)
            reason = StopReason.CANCELLED if len(answers) < len(calls) else None
        except RunStopped as stop:  # the time budget ran out (`within_time_budget` answered what it cut off)
            reason = stop.reason
        # Calls a cancel stopped still get a result: a reply with unanswered calls is a broken history.
        results = [open_calls.answer_for(call) for call in calls]
        update: dict[str, Any] = {
            "messages": results,
            "tool_calls": state["tool_calls"] + len(calls),
            "seen_calls": seen,
        }
        if reason is not None:
            update |= stopped(reason)
        elif not any(message.status == "error" for message in results):
            update["consecutive_error_rounds"] = 0
        return update

    async def run_round(
        self, state: AgentState, calls: Sequence[ToolCall], seen: dict[str, int], open_calls: OpenCalls
    ) -> list[tuple[ToolMessage, TraceEvent]]:
        """The answers of the calls that ran or were refused, in call order; fewer than `calls` after a cancel.

        As in the loop's `run_tools`: guard decisions (`admit`) are made in call order, before a call runs, so
        repeat counts never depend on timing, and the tools run `within_time_budget`, as the model call does.
        """
        step = state["model_calls"]
        admitted: list[ToolCall] = []  # the calls of this reply let through so far, for the approval rule
        decisions: dict[str, bool] = {}  # the human's answers read so far in this node run, by call id
        if self.options.parallel_tools:
            if run_context().cancelled:
                return []
            verdicts = [(call, self.admit(call, seen, admitted, decisions)) for call in calls]
            async with self.within_time_budget(state, calls, open_calls):
                tasks = [
                    asyncio.ensure_future(self.run_tool(step, call, verdict, open_calls)) for call, verdict in verdicts
                ]
                try:
                    await asyncio.gather(*tasks)
                finally:
                    # Also when the round is cut short: a call that finished (and may have written) keeps its real
                    # result, on the trace too; the others are answered by `within_time_budget` or `answer_for`.
                    answers = [task.result() for task in tasks if task.done() and not task.cancelled()]
                    for _, event in answers:
                        emit(event)
            return answers
        answers = []
        for call in calls:
            if run_context().cancelled:
                break
            verdict = self.admit(call, seen, admitted, decisions)
            async with self.within_time_budget(state, calls, open_calls):
                answers.append(await self.run_tool(step, call, verdict, open_calls))
            emit(answers[-1][1])  # live: on_event may set the cancel that the next call checks
        return answers

    @contextlib.asynccontextmanager
    async def within_time_budget(
        self, state: AgentState, calls: Sequence[ToolCall], open_calls: OpenCalls
    ) -> AsyncIterator[None]:
        """Run tools bounded by what is left of the time budget. When it runs out, every call of `calls` not
        answered in `open_calls` is answered (`guards.tool_cut_answer`: a tool cut off mid-run may have completed,
        since its worker thread cannot be stopped) and the run stops (`RunStopped`, caught in `run_tools`)."""
        step, started = state["model_calls"], time.perf_counter()
        try:
            async with asyncio.timeout(self.limits.time_left(usage_of(state))) as deadline:
                yield
        except TimeoutError:
            if not deadline.expired():
                raise
            for call in (c for c in calls if c["id"] not in open_calls.answers):
                running, waited = call["id"] in open_calls.running, time.perf_counter() - started
                message, event = guards.tool_cut_answer(step, call, running=running, duration_s=waited)
                telemetry.current_run().cut(
                    call, step, message.text, reason=StopReason.TIME_BUDGET, guard=Guard.TOOL_TIMEOUT, duration_s=waited
                )
                open_calls.answers[call["id"]] = message
                emit(event)
            raise RunStopped(StopReason.TIME_BUDGET) from None

    def admit(
        self, call: ToolCall, seen: dict[str, int], admitted: list[ToolCall], decisions: dict[str, bool]
    ) -> BaseTool | guards.Refusal:
        """The tool to run for `call`, or the refusal the model gets instead; `admitted` collects the calls let
        through. `guards.screen` first (unknown tool, repeat rule, arguments), as in the loop; the approval gate
        comes last, so a human is only asked about a call that would really run."""
        verdict = guards.screen(call, self.tools, seen, self.limits)
        if isinstance(verdict, guards.Refusal):
            return verdict
        if refusal := self.check_approval(call, admitted, decisions):
            return refusal
        admitted.append(call)
        return verdict

    def check_approval(
        self, call: ToolCall, earlier: Sequence[ToolCall], decisions: dict[str, bool]
    ) -> guards.Refusal | None:
        """The refusal when `call` needs approval and is not approved; None when it may run.

        `interrupt()` pauses the graph here (the checkpointer keeps the thread), and the caller answers later,
        maybe from another process, with ``Command(resume={"tool_call_id": ..., "approved": True|False})``.
        LangGraph then runs this node again from its start: calls screened before this one are screened again
        (same state, same counts), and in sequential mode the calls before this one run a second time. That
        re-run is why add_to_cart is idempotent (the store dedupes by tool-call id). In parallel mode every call
        is screened before any runs, so nothing runs before the pause.

        The re-run gets the answers given so far in the order its `interrupt()` calls come, not by question. The
        order can change between runs: an add approved and run before the second pause is a replay the next time,
        which the rule waves through without asking, and every later answer would move up one place (a "no" to
        the second add read as the "yes" to the first). So each answer names its call, and `interrupt()` is
        called until this call's answer turns up, or it pauses the run to ask for it; answers to other calls
        read on the way are kept in `decisions` for them.
        """
        needs_approval = self.options.needs_approval
        if needs_approval is None or (reason := needs_approval(call, earlier)) is None:
            return None
        request = {"tool_call": {"id": call["id"], "name": call["name"], "args": call["args"]}, "reason": reason}
        while call["id"] not in decisions:
            answer = interrupt(request)  # the next answer given to this node, or a pause that asks about `call`
            if isinstance(answer, dict):
                decisions[str(answer.get("tool_call_id"))] = answer.get("approved") is True
            else:  # a bare yes or no, as LangGraph's own examples resume: the answer to the question just asked
                decisions[call["id"]] = answer is True
        approved = decisions[call["id"]]  # only an explicit yes approves
        log.info("approval for %s (%s): %s", call["name"], reason, "yes" if approved else "no")
        return None if approved else guards.approval_refusal(call["name"], reason)

    async def run_tool(
        self, step: int, call: ToolCall, verdict: BaseTool | guards.Refusal, open_calls: OpenCalls
    ) -> tuple[ToolMessage, TraceEvent]:
        """Run one admitted call (or pass on its refusal): its ToolMessage and its trace line, also kept in
        `open_calls` (the call is there as running while its tool runs). A tool cut off mid-run leaves its span
        open for the stop that cut it to end (`within_time_budget`, or the run's span on a cancel)."""
        started = time.perf_counter()
        span = telemetry.current_run().tool(call, step)
        artifact = None
        if isinstance(verdict, guards.Refusal):
            text, is_error, guard = verdict.text, True, verdict.guard
        else:
            open_calls.running.add(call["id"])
            outcome = await guards.execute(verdict, call, detailed_errors=self.options.detailed_errors)
            text, is_error, guard, artifact = outcome.text, outcome.is_error, outcome.guard, outcome.artifact
        message, event = guards.tool_answer(
            step,
            call,
            text,
            time.perf_counter() - started,
            is_error=is_error,
            guard=guard,
            max_chars=self.options.max_tool_result_chars,
            artifact=artifact,
        )
        span.answered(message.text, is_error=event.is_error, guard=event.guard)
        open_calls.running.discard(call["id"])
        open_calls.answers[call["id"]] = message
        return message, event

    async def count_error_round(self, state: AgentState) -> dict[str, Any]:
        """One more tool round in a row with an error result; too many of them end the run."""
        rounds = state["consecutive_error_rounds"] + 1
        update: dict[str, Any] = {"consecutive_error_rounds": rounds}
        if self.limits.too_many_errors(rounds):
            update |= stopped(StopReason.TOO_MANY_ERRORS)
        return update

    async def check_budgets(self, state: AgentState) -> dict[str, Any]:
        """After every round: the loop's budget rule, then room under the recursion limit for another round.

        A node that runs with no supersteps left makes LangGraph raise `GraphRecursionError` even when it ends
        the run, so another round starts only if all of its supersteps fit. `recursion_limit_for` leaves room
        for max_steps rounds, so this ends only runs without a step limit, or with a caller's smaller limit.
        """
        reason = self.limits.check(usage_of(state))
        if reason is None and state["remaining_steps"] <= SUPERSTEPS_PER_ROUND:
            reason = StopReason.MAX_STEPS
        return stopped(reason) if reason is not None else {}

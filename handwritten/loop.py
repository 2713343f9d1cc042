"""The hand-written agent loop: model call, typed step, tool round, budgets, repeated until something stops it.

`AgentLoop` is the Python port of the seed article's `AgentLoop` over any langchain-core chat model and any
list of LangChain tools. It owns the loop and therefore the stopping rules: a final answer, an invalid
reply, the step, token, time and consecutive-error budgets, and cancellation (a cooperative `cancel` event
or cancelling the task). Every reply is classified into one of three typed steps (`FinalAnswer`,
`CallTools`, `InvalidResponse`, as in seed 004); every tool call the model asks for gets exactly one
ToolMessage, with the guard texts from `shared_tools.guards` so both agents feed the model the same words.
There is one implementation, written async (`arun`); `run` only drives it with `asyncio.run`. Nothing here
knows about the bookstore.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolCall, ToolMessage
from langchain_core.tools import BaseTool, ToolException

from shared_tools.guards import (
    CANCELLED_CALL_TEXT,
    MODEL_TIMED_OUT_DETAIL,
    approval_rejected,
    model_detail,
    output_text,
    screen,
    tool_detail,
    tool_failure_text,
    tool_result,
    truncate,
    usage_tokens,
    with_call_ids,
)
from shared_tools.results import AgentLimits, AgentResult, StopReason, TraceEvent
from shared_tools.steps import CallTools, FinalAnswer, InvalidResponse, classify

log = logging.getLogger(__name__)

T = TypeVar("T")


# --- cancellation ----------------------------------------------------------------------------------------------


class AgentCancelled(asyncio.CancelledError):
    """The task running `arun` was cancelled. Still a `CancelledError`, so the cancellation is never swallowed;
    `.result` keeps what the run did (stop reason CANCELLED, partial trace, a history a session can continue)."""

    def __init__(self, result: AgentResult) -> None:
        super().__init__("agent run cancelled")
        self.result = result


class _Stop(Exception):
    """Ends a run from deep inside a step (the cancel hook, a model call out of time)."""

    def __init__(self, reason: StopReason) -> None:
        super().__init__(reason.value)
        self.reason = reason


def run_blocking(make: Callable[[], Coroutine[Any, Any, T]], *, instead: str) -> T:
    """Run a coroutine to completion from sync code, or say clearly which async method to await instead."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        box: list[T] = []

        async def main() -> None:
            # The main task's own result stays None on purpose: while asyncio.run puts the SIGINT handler back it
            # reprs the finished task twice (signal.getsignal's enum lookup fails and formats the value), and the
            # repr of a whole AgentResult with its messages took ~0.6 ms, a tenth of a scripted job
            # (benchmarks/overhead.py).
            box.append(await make())

        loop = _new_event_loop()
        with asyncio.Runner(loop_factory=lambda: loop) as runner:  # the Runner closes the loop
            runner.run(main())
        return box[0]
    # asyncio.run would fail here anyway, with a message that doesn't say what to do.
    raise RuntimeError(f"called from inside a running event loop; use `await {instead}` instead")


def _new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop, built with Ctrl-C held back for the moment it takes.

    A KeyboardInterrupt that lands while an event loop is being constructed leaves a half-made loop whose
    `__del__` prints a traceback at exit; held back, the Ctrl-C arrives right after, as an ordinary
    KeyboardInterrupt (found by sending SIGINT to `python compare.py` at random moments).
    """
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        return asyncio.new_event_loop()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        return asyncio.new_event_loop()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


# --- one run's state -------------------------------------------------------------------------------------------


@dataclass
class _Run:
    """Everything one run accumulates. A fresh one per `arun` is what makes every budget per run."""

    history: list[BaseMessage]
    cancel: threading.Event | None
    started: float = field(default_factory=time.monotonic)
    steps: int = 0
    tokens: int = 0
    tool_calls: int = 0
    error_rounds: int = 0
    seen: dict[str, int] = field(default_factory=dict)
    trace: list[TraceEvent] = field(default_factory=list)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def check_cancel(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise _Stop(StopReason.CANCELLED)

    def result(self, reason: StopReason, answer: str | None = None) -> AgentResult:
        answer_open_calls(self.history)
        log.info(
            "stop: %s after %d step(s), %d tool call(s), %d tokens", reason, self.steps, self.tool_calls, self.tokens
        )
        return AgentResult(
            stop_reason=reason,
            answer=answer,
            steps=self.steps,
            tokens=self.tokens,
            model_calls=self.steps,
            tool_calls=self.tool_calls,
            trace=list(self.trace),
            messages=list(self.history),
        )


def answer_open_calls(history: list[BaseMessage]) -> None:
    """Give every unanswered call of the last AIMessage an error result; providers reject a dangling call.

    Only a cancellation leaves calls unanswered. The text says "before it ran", which is true for a call the
    loop never started; a sync tool already running in a worker thread cannot be stopped and may still finish.
    """
    for i in range(len(history) - 1, -1, -1):
        reply = history[i]
        if isinstance(reply, AIMessage):
            answered = {m.tool_call_id for m in history[i + 1 :] if isinstance(m, ToolMessage)}
            open_calls = [call for call in reply.tool_calls if call["id"] not in answered]
            history.extend(tool_result(call, CANCELLED_CALL_TEXT, is_error=True) for call in open_calls)
            return


def _describe(event: TraceEvent) -> str:
    tokens = f" [{event.tokens} tokens]" if event.is_model else ""
    error = " [error]" if event.is_error else ""
    return f"[step {event.step}] {event.name:<16} {event.duration_s:7.3f}s  {event.detail}{tokens}{error}"


# --- the loop --------------------------------------------------------------------------------------------------


class AgentLoop:
    """A tool-calling agent loop over any langchain-core chat model with `bind_tools`."""

    def __init__(
        self,
        model: BaseChatModel,
        tools: Sequence[BaseTool],
        limits: AgentLimits = AgentLimits(),  # noqa: B008 - frozen, so one shared default is safe
        *,
        detailed_errors: bool = False,
        parallel_tools: bool = False,
        max_tool_result_chars: int | None = None,
        on_event: Callable[[TraceEvent], None] | None = None,
        needs_approval: Callable[[ToolCall], str | None] | None = None,
        approve: Callable[[ToolCall, str], bool] | None = None,
    ) -> None:
        """`needs_approval(call)` returns a reason when a call must be approved first (None: just run it);
        `approve(call, reason)` asks a human, synchronously. Without `approve`, every such call is refused."""
        self.tools = {tool.name: tool for tool in tools}
        if len(self.tools) != len(tools):
            raise ValueError("tool names must be unique: " + ", ".join(tool.name for tool in tools))
        self.limits = limits
        self.detailed_errors = detailed_errors
        self.parallel_tools = parallel_tools
        self.max_tool_result_chars = max_tool_result_chars
        self.on_event = on_event
        self.needs_approval = needs_approval
        self.approve = approve
        self._bound = model.bind_tools(list(tools))

    def run(
        self,
        instructions: str,
        goal: str,
        *,
        history: Sequence[BaseMessage] | None = None,
        cancel: threading.Event | None = None,
    ) -> AgentResult:
        """`arun` for sync callers. Inside a running event loop, await `arun` instead."""
        return run_blocking(
            lambda: self.arun(instructions, goal, history=history, cancel=cancel), instead="AgentLoop.arun(...)"
        )

    async def arun(
        self,
        instructions: str,
        goal: str,
        *,
        history: Sequence[BaseMessage] | None = None,
        cancel: threading.Event | None = None,
    ) -> AgentResult:
        """Work on `goal` until the model answers or a limit stops the run.

        `history` continues an earlier conversation (system message first; `instructions` is then unused);
        `cancel` is checked before every model call and every tool call.
        """
        run = _Run(self._start_history(instructions, goal, history), cancel)
        try:
            while self.limits.max_steps is None or run.steps < self.limits.max_steps:
                if (result := await self.step(run)) is not None:
                    return result
            return run.result(StopReason.MAX_STEPS)
        except _Stop as stop:
            return run.result(stop.reason)
        except asyncio.CancelledError:
            raise AgentCancelled(run.result(StopReason.CANCELLED)) from None

    async def step(self, run: _Run) -> AgentResult | None:
        """One model call and, if it asked for tools, one tool round. A result when the run ends here."""
        reply = await self.call_model(run)
        match classify(reply):
            case FinalAnswer(text):
                return run.result(StopReason.DONE, text)
            case InvalidResponse(reason):
                log.warning("[step %d] invalid model response: %s", run.steps, reason)
                return run.result(StopReason.INVALID_RESPONSE)
            case CallTools(calls):
                run.tool_calls += len(calls)
                any_error = await self.run_tools(run, calls)
                reason = self.over_budget(run, any_error)
                return run.result(reason) if reason else None

    # --- the seams of a step ---------------------------------------------------------------------------------

    async def call_model(self, run: _Run) -> AIMessage:
        """Send the whole history; append the reply (tool calls included) before any tool runs."""
        run.check_cancel()
        started = time.perf_counter()
        try:
            # The time budget also bounds the wait for a reply: a model stuck for an hour must not hold the run.
            async with asyncio.timeout(self._time_left(run)) as deadline:
                reply = await self._bound.ainvoke(run.history)
        except TimeoutError:
            if not deadline.expired():
                raise  # the model's own timeout: an outage, not our budget
            run.steps += 1
            self._emit(run, TraceEvent(run.steps, "model", time.perf_counter() - started, MODEL_TIMED_OUT_DETAIL))
            raise _Stop(StopReason.TIME_BUDGET) from None
        if not isinstance(reply, AIMessage):
            raise TypeError(f"the model returned {type(reply).__name__}, expected AIMessage")
        reply = with_call_ids(reply)
        run.steps += 1
        run.history.append(reply)
        tokens = usage_tokens(reply)
        run.tokens += tokens
        self._emit(run, TraceEvent(run.steps, "model", time.perf_counter() - started, model_detail(reply), tokens))
        return reply

    async def run_tools(self, run: _Run, calls: Sequence[ToolCall]) -> bool:
        """Answer every call with one ToolMessage, appended in call order. True when any answer is an error.

        Guard decisions (`admit`) are always made in call order, before anything runs, so the repeat count
        doesn't depend on which parallel call finishes first.
        """
        if self.parallel_tools:
            admitted = [(call, self.admit(run, call)) for call in calls]
            outcomes = await asyncio.gather(*(self.run_tool(run, call, verdict) for call, verdict in admitted))
            for outcome in outcomes:
                self._record(run, outcome)
        else:
            outcomes = []
            for call in calls:
                outcomes.append(await self.run_tool(run, call, self.admit(run, call)))
                self._record(run, outcomes[-1])  # live: on_event sees each call as soon as it is answered
        return any(message.status == "error" for message, _ in outcomes)

    def admit(self, run: _Run, call: ToolCall) -> BaseTool | str:
        """The tool to run for `call`, or the error text the model gets instead.

        `screen` applies the shared checks in their fixed order (unknown tool, repeat rule, arguments); the
        approval gate comes last, so a human is only asked about a call that would really run.
        """
        run.check_cancel()
        verdict = screen(call, self.tools, run.seen, self.limits)
        return verdict if isinstance(verdict, str) else self.check_approval(call) or verdict

    def check_approval(self, call: ToolCall) -> str | None:
        """The refusal text when `call` needs approval and does not get it; None when it may run."""
        if self.needs_approval is None or (reason := self.needs_approval(call)) is None:
            return None
        approved = self.approve is not None and self.approve(call, reason)
        log.info("approval for %s (%s): %s", call["name"], reason, "yes" if approved else "no")
        return None if approved else approval_rejected(call["name"], reason)

    async def run_tool(self, run: _Run, call: ToolCall, admitted: BaseTool | str) -> tuple[ToolMessage, TraceEvent]:
        """Run one admitted call (or pass on its guard error) and build its ToolMessage and trace event."""
        started = time.perf_counter()
        if isinstance(admitted, str):
            text, is_error = admitted, True
        else:
            text, is_error = await self._execute(admitted, call)
        text = truncate(text, self.max_tool_result_chars)
        event = TraceEvent(
            run.steps, call["name"], time.perf_counter() - started, tool_detail(call["args"], text), is_error=is_error
        )
        return tool_result(call, text, is_error=is_error), event

    async def _execute(self, tool: BaseTool, call: ToolCall) -> tuple[str, bool]:
        """The tool's result text and whether it is an error. Only `Exception`s become results: CancelledError
        and KeyboardInterrupt are BaseExceptions and propagate."""
        try:
            # A ToolCall dict in, a ToolMessage out: LangChain fills InjectedToolCallId arguments from call["id"].
            output = await tool.ainvoke({**call, "type": "tool_call"})
        except Exception as exc:
            text = tool_failure_text(call["name"], exc, detailed=self.detailed_errors)
            # A ToolException is the tool talking to the model; anything else is a bug or an outage. The log gets
            # what the model gets: the exception's own text may hold a secret (a connection string).
            level = logging.INFO if isinstance(exc, ToolException) else logging.WARNING
            log.log(level, "tool %s raised %s: %s", call["name"], type(exc).__name__, text)
            return text, True
        return output_text(output)

    def over_budget(self, run: _Run, any_error: bool) -> StopReason | None:
        """The budget checks after a tool round, in a fixed order: consecutive error rounds, tokens, time."""
        run.error_rounds = run.error_rounds + 1 if any_error else 0
        if self.limits.exceeded_errors(run.error_rounds):
            return StopReason.TOO_MANY_ERRORS
        if self.limits.exceeded_tokens(run.tokens):
            return StopReason.TOKEN_BUDGET
        if self.limits.exceeded_duration(run.elapsed):
            return StopReason.TIME_BUDGET
        return None

    # --- helpers ---------------------------------------------------------------------------------------------

    @staticmethod
    def _start_history(instructions: str, goal: str, history: Sequence[BaseMessage] | None) -> list[BaseMessage]:
        if not history:
            return [SystemMessage(instructions), HumanMessage(goal)]
        if not isinstance(history[0], SystemMessage):
            raise ValueError("history must start with the system message")
        return [*history, HumanMessage(goal)]

    def _time_left(self, run: _Run) -> float | None:
        if self.limits.max_duration is None:
            return None
        return self.limits.max_duration - run.elapsed

    def _record(self, run: _Run, outcome: tuple[ToolMessage, TraceEvent]) -> None:
        message, event = outcome
        run.history.append(message)
        self._emit(run, event)

    def _emit(self, run: _Run, event: TraceEvent) -> None:
        run.trace.append(event)
        log.info("%s", _describe(event))
        if self.on_event is not None:
            self.on_event(event)  # the caller's code: its exceptions are not ours to hide

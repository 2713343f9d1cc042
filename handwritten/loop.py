"""The hand-written agent loop: call the model, classify its reply, run the tools it asked for, check the budgets.

`AgentLoop` ports the article's .NET `AgentLoop` to any langchain-core chat model and LangChain tools. It owns
the stopping rules: an answer, an invalid reply, the budgets of `AgentLimits`, a cancel. Each reply becomes a typed
step (`shared_tools.steps`), every tool call gets one ToolMessage, and every stop is a `RunStopped` caught once in
`arun`. One implementation, async; `run` only drives it. Nothing here knows about the bookstore.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Unpack

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    message_chunk_to_message,
)
from langchain_core.tools import BaseTool

from shared_tools import guards, telemetry
from shared_tools.replies import checked_reply
from shared_tools.results import (
    AgentLimits,
    AgentOptions,
    AgentResult,
    Approve,
    AsyncApprove,
    Guard,
    OptionKeywords,
    RunStopped,
    RunUsage,
    StopReason,
    Token,
    TraceEvent,
    agent_options,
)
from shared_tools.steps import CallTools, FinalAnswer, InvalidResponse, classify
from shared_tools.sync import run_blocking

log = logging.getLogger(__name__)

AGENT_NAME = "handwritten"
"""The agent's name on its spans (``invoke_agent handwritten``)."""


class AgentLoop:
    """A tool-calling agent loop over any langchain-core chat model with `bind_tools`.

    It writes its own OpenTelemetry spans (`shared_tools.telemetry`): the run's around `arun`, a chat span in
    `call_model`, a tool span in `run_tool` (a guard's refusal included), and the cut in `within_time_budget`.
    """

    def __init__(
        self,
        model: BaseChatModel,
        tools: Sequence[BaseTool],
        options: AgentOptions | AgentLimits | None = None,
        *,
        approve: Approve | AsyncApprove | None = None,
        **keywords: Unpack[OptionKeywords],
    ) -> None:
        """`approve` is the human behind `options.needs_approval`, asked synchronously; without one, every call
        that needs approval is refused (the graph asks through `interrupt()` instead)."""
        options = agent_options("AgentLoop", options, dict(keywords))
        self.tools = {tool.name: tool for tool in tools}
        if len(self.tools) != len(tools):
            raise ValueError("tool names must be unique: " + ", ".join(tool.name for tool in tools))
        self.options = options
        self.limits = options.limits
        self.approve = approve
        self.model = model
        """The chat model the loop calls (a session also asks it for summaries)."""
        self._bound = model.bind_tools(list(tools))

    def run(
        self,
        instructions: str,
        goal: str | None,
        *,
        history: Sequence[BaseMessage] | None = None,
        cancel: threading.Event | None = None,
        unsent: Sequence[BaseMessage] = (),
        conversation_id: str | None = None,
    ) -> AgentResult:
        """`arun` for sync callers. Inside a running event loop, await `arun` instead."""
        return run_blocking(
            lambda: self.arun(
                instructions, goal, history=history, cancel=cancel, unsent=unsent, conversation_id=conversation_id
            ),
            instead="AgentLoop.arun(...)",
        )

    # --- the loop ----------------------------------------------------------------------------------------------

    async def arun(
        self,
        instructions: str,
        goal: str | None,
        *,
        history: Sequence[BaseMessage] | None = None,
        cancel: threading.Event | None = None,
        unsent: Sequence[BaseMessage] = (),
        conversation_id: str | None = None,
    ) -> AgentResult:
        """Work on `goal` until the model answers or something stops the run.

        `history` continues an earlier conversation (system message first; `instructions` is then unused); with
        `goal` None the run goes on with the turn `history` ends in, one an outage cut short (`history_so_far`);
        `cancel` is checked before every model call and every tool call. `unsent` are earlier messages of the
        conversation the model is not sent (a session's window leaves them out): their tool-call ids stay taken,
        so a provider that numbers its calls afresh cannot turn a new add into a replay of a forgotten one.
        `conversation_id` names the conversation a session's turn belongs to, on the run's span.
        """
        provider = self.options.tracer_provider
        with telemetry.agent_run(AGENT_NAME, self.model, provider=provider, conversation_id=conversation_id) as spans:
            run = _Run(_start_history(instructions, goal, history), cancel, unsent=unsent, spans=spans)
            try:
                while True:
                    await self.step(run)
            except RunStopped as stop:
                result = run.result(stop.reason, stop.answer)
            except asyncio.CancelledError:
                # Cancelling the task is not swallowed: it goes on as a CancelledError that carries what was done.
                cancelled = run.result(StopReason.CANCELLED)
                spans.finish(cancelled)
                raise AgentCancelled(cancelled) from None
            except Exception as failure:
                # An outage (a model call that failed) is not ours to hide: it goes on unchanged, carrying the
                # history as far as the run got, so a session keeps the calls that finished (an add that landed).
                answer_open_calls(run.history, run.running)
                with contextlib.suppress(AttributeError):  # an exception type that takes no attributes keeps nothing
                    setattr(failure, _HISTORY_SO_FAR, list(run.history))
                raise
            spans.finish(result)
            return result

    async def step(self, run: _Run) -> None:
        """One model call and, if it asked for tools, one tool round. Raises `RunStopped` when the run ends."""
        reply = await self.call_model(run)
        match classify(reply):
            case FinalAnswer(text):
                raise RunStopped(StopReason.DONE, text)
            case InvalidResponse(reason):
                log.warning("[step %d] invalid model response: %s", run.usage.model_calls, reason)
                raise RunStopped(self.limits.unusable_reply_reason(run.usage))
            case CallTools(calls):
                run.usage.tool_calls += len(calls)
                had_error = await self.run_tools(run, calls)
                run.usage.end_round(had_error)
                if reason := self.limits.check(run.usage):
                    raise RunStopped(reason)

    # --- the seams of a step -----------------------------------------------------------------------------------

    async def call_model(self, run: _Run) -> AIMessage:
        """Send the whole history; append the reply (tool calls included) before any tool runs.

        The reply may use at most what is left of the token budget (`guards.reply_cap`), so a reply that never
        ends is cut there; the time budget bounds the wait for it. Results whose data changed since they read it
        are marked stale first (`mark_stale_readings`).
        """
        run.check_cancel()
        stale_read = await self.mark_stale_readings(run)
        started = time.perf_counter()
        time_left = self.limits.time_left(run.usage)
        cap, budget_capped = guards.reply_cap(self.model, self.limits, run.usage)
        # Left open by an exception that is not ours (the run's span ends it with that exception's type).
        chat = run.spans.chat(run.usage.model_calls + 1, run.history)
        try:
            if time_left is None:
                reply = await self._ask(run, cap)
            else:
                # A model stuck for an hour must not hold the run.
                async with asyncio.timeout(time_left) as deadline:
                    reply = await self._ask(run, cap)
        except TimeoutError:
            if time_left is None or not deadline.expired():
                raise  # the model's own timeout: an outage, not our budget
            run.usage.model_calls += 1
            self._emit(run, guards.model_timeout_event(run.usage.model_calls, time.perf_counter() - started))
            chat.stopped(StopReason.TIME_BUDGET, Guard.MODEL_TIMEOUT)
            raise RunStopped(StopReason.TIME_BUDGET) from None
        except RunStopped:
            # A cancel mid-stream: the call was made, so it is a step, and the half reply is dropped, not kept.
            run.usage.model_calls += 1
            self._emit(run, guards.model_cancelled_event(run.usage.model_calls, time.perf_counter() - started))
            chat.stopped(StopReason.CANCELLED, Guard.MODEL_CANCELLED)
            raise
        if not isinstance(reply, AIMessage):
            raise TypeError(f"the model returned {type(reply).__name__}, expected AIMessage")
        reply = guards.with_call_ids(guards.without_cut_calls(checked_reply(reply)), [*run.unsent, *run.history])
        run.usage.model_calls += 1
        event = guards.model_event(
            run.usage.model_calls,
            reply,
            time.perf_counter() - started,
            budget_capped=budget_capped,
            stale_read=stale_read,
        )
        run.usage.tokens += event.tokens
        run.history.append(reply)
        chat.replied(reply, event.guard)
        self._emit(run, event)
        return reply

    async def mark_stale_readings(self, run: _Run) -> bool:
        """The stale-read guard: replace each result in the history whose data has changed since it was read
        with its marked copy (`guards.stale_readings`), so this call and every later one is sent it marked.
        True when it marked something, which the call's trace line says (`Guard.STALE_READ`)."""
        if not self.options.stale_reads:
            return False
        marked = await guards.stale_readings(run.history, self.tools)
        for index, message in marked.items():
            run.history[index] = message
        return bool(marked)

    def _ask(self, run: _Run, cap: dict[str, int]) -> Awaitable[BaseMessage]:
        """The model call: streamed when someone takes the tokens, else `ainvoke` (no chunks to merge: faster)."""
        on_token = self.options.on_token
        return self._bound.ainvoke(run.history, **cap) if on_token is None else self.stream_reply(run, on_token, cap)

    async def stream_reply(
        self, run: _Run, on_token: Callable[[Token], None], cap: dict[str, int] | None = None
    ) -> BaseMessage:
        """The reply, streamed: each piece to `on_token` as it arrives, the chunks merged as `ainvoke` merges them.

        Tool calls arrive as `tool_call_chunks` (name first, arguments in JSON fragments, calls told apart by
        index), which only the merge turns into tool calls, so nothing is judged before the last chunk. The
        cancel is checked after every chunk; the partial reply is then dropped (`RunStopped`).
        """
        step = run.usage.model_calls + 1
        chunks: list[BaseMessage] = []
        async for chunk in self._bound.astream(run.history, **(cap or {})):
            chunks.append(chunk)
            for token in Token.of_chunk(chunk, step):
                on_token(token)  # the caller's code: its exceptions are not ours to hide
            run.check_cancel()
        if len(chunks) == 1 and not isinstance(chunks[0], AIMessageChunk):
            return chunks[0]  # a model that cannot stream: langchain-core sends its whole reply as one piece
        if not chunks or not all(isinstance(chunk, AIMessageChunk) for chunk in chunks):
            raise TypeError(f"the model streamed {[type(chunk).__name__ for chunk in chunks[:3]]}, expected chunks")
        # One merge of all chunks, as langchain-core's own aggregation does: merging one chunk at a time would
        # re-parse every tool call's arguments on each chunk, quadratic in a long reply.
        first, *rest = chunks
        return message_chunk_to_message(first + rest if rest else first)  # type: ignore[operator]

    async def run_tools(self, run: _Run, calls: Sequence[ToolCall]) -> bool:
        """Answer every call with one ToolMessage, appended in call order. True when any answer is an error.

        Guard decisions (`admit`) are always made in call order, before a call runs, so the repeat count doesn't
        depend on which parallel call finishes first. The tools run `within_time_budget`, as the model call does.
        """
        admitted: list[ToolCall] = []  # the calls of this reply allowed to run so far, for the approval rule
        if self.options.parallel_tools:
            verdicts = [(call, await self.admit(run, call, admitted)) for call in calls]
            async with self.within_time_budget(run, calls):
                tasks = [asyncio.ensure_future(self.run_tool(run, call, verdict)) for call, verdict in verdicts]
                try:
                    await asyncio.gather(*tasks)
                finally:
                    # Also when the round is cut short: a call that finished (and may have written) keeps its real
                    # result; the others are answered by `within_time_budget` or `answer_open_calls`.
                    answers = [task.result() for task in tasks if task.done() and not task.cancelled()]
                    for answer in answers:
                        self._record(run, answer)
        else:
            answers = []
            for call in calls:
                verdict = await self.admit(run, call, admitted)  # a human's wait here is not the tools' time
                async with self.within_time_budget(run, calls):
                    answers.append(await self.run_tool(run, call, verdict))
                self._record(run, answers[-1])  # live: on_event sees each call as soon as it is answered
        return any(message.status == "error" for message, _ in answers)

    @contextlib.asynccontextmanager
    async def within_time_budget(self, run: _Run, calls: Sequence[ToolCall]) -> AsyncIterator[None]:
        """Run tools bounded by what is left of the time budget. When it runs out, every unanswered call of
        `calls` is answered (`guards.tool_cut_answer`: a tool cut off mid-run may have completed, since its worker
        thread cannot be stopped) and the run stops."""
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.limits.time_left(run.usage)) as deadline:
                yield
        except TimeoutError:
            if not deadline.expired():
                raise
            answered = {m.tool_call_id for m in run.history if isinstance(m, ToolMessage)}
            for call in (c for c in calls if c["id"] not in answered):
                running, waited = call["id"] in run.running, time.perf_counter() - started
                cut = guards.tool_cut_answer(run.usage.model_calls, call, running=running, duration_s=waited)
                run.spans.cut(
                    call,
                    run.usage.model_calls,
                    cut[0].text,
                    reason=StopReason.TIME_BUDGET,
                    guard=Guard.TOOL_TIMEOUT,
                    duration_s=waited,
                )
                self._record(run, cut)
            raise RunStopped(StopReason.TIME_BUDGET) from None

    async def admit(self, run: _Run, call: ToolCall, admitted: list[ToolCall]) -> BaseTool | guards.Refusal:
        """The tool to run for `call`, or the refusal the model gets instead; `admitted` collects the calls let through.

        `screen` applies the shared checks in their fixed order (unknown tool, repeat rule, arguments); the
        approval gate comes last, so a human is only asked about a call that would really run.
        """
        run.check_cancel()
        verdict = guards.screen(call, self.tools, run.seen, self.limits)
        if isinstance(verdict, guards.Refusal):
            return verdict
        if refusal := await self.check_approval(run, call, admitted):
            return refusal
        admitted.append(call)
        return verdict

    async def check_approval(self, run: _Run, call: ToolCall, earlier: Sequence[ToolCall]) -> guards.Refusal | None:
        """The refusal when `call` needs approval and does not get it; None when it may run. An `approve` that
        returns an awaitable (a prompt in the same event loop) is awaited.

        The time a human takes to decide is not the agent's time: the run's clock is moved on by the wait, as
        the graph's clock is when a paused run is resumed.
        """
        needs_approval = self.options.needs_approval
        if needs_approval is None or (reason := needs_approval(call, earlier)) is None:
            return None
        asked = time.monotonic()
        answer = self.approve is not None and self.approve(call, reason)
        approved = (await answer if inspect.isawaitable(answer) else answer) is True
        run.usage.started += time.monotonic() - asked
        log.info("approval for %s (%s): %s", call["name"], reason, "yes" if approved else "no")
        return None if approved else guards.approval_refusal(call["name"], reason)

    async def run_tool(
        self, run: _Run, call: ToolCall, verdict: BaseTool | guards.Refusal
    ) -> tuple[ToolMessage, TraceEvent]:
        """Run one admitted call (or pass on its refusal) and build its ToolMessage and trace line.

        Its span is ended here with what the model is given; a tool cut off mid-run leaves it open for the stop
        that cut it (`within_time_budget`, or the run's span on a cancel) to end."""
        started = time.perf_counter()
        span = run.spans.tool(call, run.usage.model_calls)
        artifact = None
        if isinstance(verdict, guards.Refusal):
            text, is_error, guard = verdict.text, True, verdict.guard
        else:
            run.running.add(call["id"])
            outcome = await guards.execute(verdict, call, detailed_errors=self.options.detailed_errors)
            text, is_error, guard, artifact = outcome.text, outcome.is_error, outcome.guard, outcome.artifact
        message, event = guards.tool_answer(
            run.usage.model_calls,
            call,
            text,
            time.perf_counter() - started,
            is_error=is_error,
            guard=guard,
            max_chars=self.options.max_tool_result_chars,
            artifact=artifact,
        )
        span.answered(message.text, is_error=event.is_error, guard=event.guard)
        return message, event

    # --- bookkeeping -------------------------------------------------------------------------------------------

    def _record(self, run: _Run, answer: tuple[ToolMessage, TraceEvent]) -> None:
        message, event = answer
        run.running.discard(message.tool_call_id)
        run.history.append(message)
        self._emit(run, event)

    def _emit(self, run: _Run, event: TraceEvent) -> None:
        run.trace.append(event)
        if log.isEnabledFor(logging.INFO):
            log.info("%s", event.line())
        if self.options.on_event is not None:
            self.options.on_event(event)  # the caller's code: its exceptions are not ours to hide


@dataclass
class _Run:
    """Everything one run accumulates. A fresh one per `arun` is what makes every budget per run."""

    history: list[BaseMessage]
    cancel: threading.Event | None
    unsent: Sequence[BaseMessage] = ()
    """Earlier messages the model is not sent; only their tool-call ids matter here."""
    usage: RunUsage = field(default_factory=RunUsage)
    seen: dict[str, int] = field(default_factory=dict)
    """How often each call (name and arguments, `guards.call_key`) was asked for in this run."""
    running: set[str] = field(default_factory=set)
    """Ids of calls whose tool has started and has not been answered yet."""
    trace: list[TraceEvent] = field(default_factory=list)
    spans: telemetry.RunSpans = telemetry.OFF
    """The run's OpenTelemetry spans (`telemetry.OFF` when nothing records)."""

    def check_cancel(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise RunStopped(StopReason.CANCELLED)

    def result(self, reason: StopReason, answer: str | None = None) -> AgentResult:
        answer_open_calls(self.history, self.running)
        usage = self.usage
        log.info(
            "stop: %s after %d step(s), %d tool call(s), %d tokens",
            reason,
            usage.model_calls,
            usage.tool_calls,
            usage.tokens,
        )
        return AgentResult.of_run(reason, usage, answer=answer, trace=list(self.trace), messages=list(self.history))


_HISTORY_SO_FAR = "agent_history_so_far"


def history_so_far(failure: BaseException) -> list[BaseMessage] | None:
    """The history a run had when `failure` (an outage, raised out of `arun`) ended it, its open calls answered;
    None for an exception that did not come out of a run."""
    history = getattr(failure, _HISTORY_SO_FAR, None)
    return history if isinstance(history, list) else None


class AgentCancelled(asyncio.CancelledError):
    """The task running `arun` was cancelled. Still a `CancelledError`, so the cancellation is never swallowed;
    `.result` keeps what the run did (stop reason CANCELLED, partial trace, a history a session can continue)."""

    def __init__(self, result: AgentResult) -> None:
        super().__init__("agent run cancelled")
        self.result = result


def answer_open_calls(history: list[BaseMessage], running: set[str]) -> None:
    """Give every unanswered call of the last AIMessage an error result; providers reject a dangling call.

    Only a cancellation leaves calls unanswered. A call that never started is told so; a call in `running` was
    cut off mid-run, and its write may still land (a worker thread cannot be stopped), so it says it may have
    completed: told "it did not run", a model would do it again.
    """
    for i in range(len(history) - 1, -1, -1):
        reply = history[i]
        if isinstance(reply, AIMessage):
            answered = {m.tool_call_id for m in history[i + 1 :] if isinstance(m, ToolMessage)}
            for call in reply.tool_calls:
                if call["id"] not in answered:
                    text = guards.CANCELLED_WHILE_RUNNING_TEXT if call["id"] in running else guards.CANCELLED_CALL_TEXT
                    history.append(guards.tool_result(call, text, is_error=True))
            return


def _start_history(instructions: str, goal: str | None, history: Sequence[BaseMessage] | None) -> list[BaseMessage]:
    if goal is None:  # go on with the turn `history` ends in (one an outage cut short)
        if not history or not isinstance(history[-1], HumanMessage | ToolMessage):
            raise ValueError("continuing needs a history that ends in a question or a tool result")
    elif not history:
        return [SystemMessage(instructions), HumanMessage(goal)]
    if not isinstance(history[0], SystemMessage):
        raise ValueError("history must start with the system message")
    return list(history) if goal is None else [*history, HumanMessage(goal)]

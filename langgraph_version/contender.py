"""The third contender: the same task on `langchain.agents.create_agent` and its built-in middleware.

This is what the framework offers natively, with no graph of our own: `ModelCallLimitMiddleware`
(``run_limit=max_steps``, ``exit_behavior="end"``) gives the step limit, and like our loops it lets
the last step's tool calls run before it ends the run; `ToolErrorMiddleware` with our
`guards.tool_failure_text` turns tool exceptions into results and hides their details, as
FunctionInvokingChatClient does; `ToolCallLimitMiddleware` caps the tool calls of a run (see
`tool_call_cap`). Unknown tools and bad arguments get the internal `ToolNode`'s own texts.

What it cannot express: a token budget, a time budget, the repeated-call rule (the tool-call limit
counts calls per tool name, not per name and arguments), a limit on consecutive error rounds,
truncating tool results, and cooperative cancellation. The stop reason is read from the
middleware's counters in the final state (`run_model_call_count`), never from the text of the
"limits exceeded" message it writes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import (
    AgentMiddleware,
    ModelCallLimitMiddleware,
    ModelRequest,
    ModelResponse,
    ToolCallLimitMiddleware,
    ToolErrorMiddleware,
)
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.config import get_stream_writer
from langgraph.errors import GraphRecursionError
from langgraph.types import Command

from langgraph_version.graph import calls_this_run, classify_reply
from shared_tools import guards
from shared_tools.results import AgentLimits, AgentResult, StopReason, TraceEvent

logger = logging.getLogger(__name__)

TOOL_CALLS_PER_STEP = 2


def tool_call_cap(limits: AgentLimits) -> int | None:
    """The contender's tool-call budget per run: two per allowed model call.

    Our loops have no such cap; they bound tools through the step limit and the repeat rule. The
    cap is the nearest native brake on side effects (a runaway parallel caller cannot fire fifty
    `add_to_cart` calls in one turn) while leaving the seed's path (4 calls in 5 steps) and
    two-call parallel turns untouched. Calls over the cap get an error result and the model may
    still answer ("continue"), which matches how our loops treat a refused call.
    """
    return None if limits.max_steps is None else TOOL_CALLS_PER_STEP * limits.max_steps


class TraceMiddleware(AgentMiddleware):
    """Timing instrumentation, not a guard: one TraceEvent per model call and per executed tool call."""

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> ModelResponse:
        started = time.perf_counter()
        response = handler(request)
        _emit_model(request, response, time.perf_counter() - started)
        return response

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        started = time.perf_counter()
        response = await handler(request)
        _emit_model(request, response, time.perf_counter() - started)
        return response

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolMessage | Command]
    ) -> ToolMessage | Command:
        started = time.perf_counter()
        result = handler(request)
        _emit_tool(request, result, time.perf_counter() - started)
        return result

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command]]
    ) -> ToolMessage | Command:
        started = time.perf_counter()
        result = await handler(request)
        _emit_tool(request, result, time.perf_counter() - started)
        return result


def _emit_model(request: ModelRequest, response: ModelResponse, duration_s: float) -> None:
    reply = next((m for m in response.result if isinstance(m, AIMessage)), None)
    if reply is not None:
        step = calls_this_run(request.messages) + 1
        get_stream_writer()(
            TraceEvent(step, "model", duration_s, guards.model_detail(reply), guards.usage_tokens(reply))
        )


def _emit_tool(request: ToolCallRequest, result: ToolMessage | Command, duration_s: float) -> None:
    call = request.tool_call
    text = result.text if isinstance(result, ToolMessage) else repr(result)
    is_error = isinstance(result, ToolMessage) and result.status == "error"
    step = calls_this_run(request.state["messages"])
    request.runtime.stream_writer(
        TraceEvent(step, call["name"], duration_s, guards.tool_detail(call["args"], text), is_error=is_error)
    )


class CreateAgentContender:
    """`run`/`arun` -> AgentResult, like GraphAgent, over a `create_agent` graph per instructions."""

    def __init__(
        self,
        model: BaseChatModel,
        tools: Sequence[BaseTool],
        limits: AgentLimits,
        *,
        detailed_errors: bool = False,
        on_event: Callable[[TraceEvent], None] | None = None,
    ) -> None:
        self.model = model
        self.tools = list(tools)
        self.limits = limits
        self.detailed_errors = detailed_errors
        self.on_event = on_event
        self._agents: dict[str, Any] = {}

    def agent_for(self, instructions: str) -> Any:
        """The compiled `create_agent` graph; the system prompt is fixed at build time, so one per instructions."""
        if instructions not in self._agents:
            self._agents[instructions] = create_agent(
                self.model, self.tools, system_prompt=instructions, middleware=self._middleware()
            )
        return self._agents[instructions]

    def _middleware(self) -> list[AgentMiddleware]:
        def on_error(exc: Exception, request: ToolCallRequest) -> str:
            return guards.tool_failure_text(request.tool_call["name"], exc, detailed=self.detailed_errors)

        middleware: list[AgentMiddleware] = []
        if self.limits.max_steps is not None:
            middleware.append(ModelCallLimitMiddleware(run_limit=self.limits.max_steps, exit_behavior="end"))
            middleware.append(ToolCallLimitMiddleware(run_limit=tool_call_cap(self.limits), exit_behavior="continue"))
        # Listed before the error middleware so it wraps it and times the text the model really gets.
        middleware += [TraceMiddleware(), ToolErrorMiddleware(on_error)]
        return middleware

    def run(self, instructions: str, goal: str) -> AgentResult:
        record = _Record(self.on_event)
        try:
            for mode, chunk in self.agent_for(instructions).stream(
                {"messages": [HumanMessage(goal)]}, stream_mode=["values", "custom"]
            ):
                record.take(mode, chunk)
        except GraphRecursionError:  # only without max_steps: create_agent's own limit of 9999 supersteps
            return record.result(instructions, StopReason.MAX_STEPS)
        return record.result(instructions)

    async def arun(self, instructions: str, goal: str) -> AgentResult:
        record = _Record(self.on_event)
        try:
            async for mode, chunk in self.agent_for(instructions).astream(
                {"messages": [HumanMessage(goal)]}, stream_mode=["values", "custom"]
            ):
                record.take(mode, chunk)
        except GraphRecursionError:
            return record.result(instructions, StopReason.MAX_STEPS)
        return record.result(instructions)


class _Record:
    def __init__(self, on_event: Callable[[TraceEvent], None] | None) -> None:
        self.on_event = on_event
        self.state: dict[str, Any] = {}
        self.trace: list[TraceEvent] = []

    def take(self, mode: str, chunk: Any) -> None:
        if mode == "values":
            self.state = chunk
        elif isinstance(chunk, TraceEvent):
            self.trace.append(chunk)
            logger.info("step %d %s %.1f ms %s", chunk.step, chunk.name, chunk.duration_s * 1000, chunk.detail)
            if self.on_event is not None:
                self.on_event(chunk)

    def result(self, instructions: str, forced: StopReason | None = None) -> AgentResult:
        messages: list[AnyMessage] = list(self.state.get("messages", []))
        replies = [m for m in messages if isinstance(m, AIMessage)]
        # The middleware's own counter when it is installed (max_steps set); otherwise our trace.
        model_calls = self.state.get("run_model_call_count", sum(e.is_model for e in self.trace))
        reason = forced or _stop_reason(messages, model_calls)
        return AgentResult(
            stop_reason=reason,
            answer=messages[-1].text if reason is StopReason.DONE else None,
            steps=model_calls,
            tokens=sum(guards.usage_tokens(m) for m in replies),
            model_calls=model_calls,
            tool_calls=sum(isinstance(m, ToolMessage) for m in messages),
            trace=self.trace,
            # create_agent keeps the system prompt out of state; put it back so histories compare.
            messages=[SystemMessage(instructions), *messages],
        )


def _stop_reason(messages: list[AnyMessage], model_calls: int) -> StopReason:
    """From the counters: an AIMessage the model did not write is ModelCallLimitMiddleware's "end"."""
    if calls_this_run(messages) > model_calls:
        return StopReason.MAX_STEPS
    last = messages[-1]
    assert isinstance(last, AIMessage), "create_agent ends only after a reply"
    return classify_reply(last) or StopReason.DONE


def create_agent_contender(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    limits: AgentLimits,
    *,
    detailed_errors: bool = False,
    on_event: Callable[[TraceEvent], None] | None = None,
) -> CreateAgentContender:
    """The create_agent contender with the same `run`/`arun` -> AgentResult interface as GraphAgent."""
    return CreateAgentContender(model, tools, limits, detailed_errors=detailed_errors, on_event=on_event)

"""The third contender: the same task on `langchain.agents.create_agent` and its built-in middleware.

This is what the framework offers natively, with no graph of our own: `ModelCallLimitMiddleware`
(``run_limit=max_steps``, ``exit_behavior="end"``) gives the step limit, and like our loops it lets the last
step's tool calls run before it ends the run; `ToolErrorMiddleware` with our `guards.tool_failure_text`
turns tool exceptions into results and hides their details (`detailed_errors`), as
FunctionInvokingChatClient does; `ToolCallLimitMiddleware` caps the tool calls of a run (see
`tool_call_cap`). Unknown tools and bad arguments get the internal `ToolNode`'s own texts. The counts come
from the trace (`RunUsage.of_trace`), and so does the stop reason: a last reply that no model call wrote is
the middleware's "limits exceeded" message, recognised by that count, never by its text. The agent is async
only; `run` is a thin sync driver over `arun`.
"""

from __future__ import annotations

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
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.errors import GraphBubbleUp, GraphRecursionError
from langgraph.types import Command

from langgraph_version.run import RunContext, RunRecord, calls_this_run, emit, emit_tool_result, final_stop_reason
from shared_tools import guards
from shared_tools.results import AgentLimits, AgentOptions, AgentResult, RunUsage, StopReason
from shared_tools.sync import run_blocking

TOOL_CALLS_PER_STEP = 2


def tool_call_cap(limits: AgentLimits) -> int | None:
    """The contender's tool-call budget per run: two per allowed model call.

    Our loops have no such cap; they bound tools through the step limit and the repeat rule. The cap is the
    nearest native brake on side effects (a runaway parallel caller cannot fire fifty `add_to_cart` calls in
    one turn) while leaving the seed's path (4 calls in 5 steps) and two-call parallel turns untouched. Calls
    over the cap get an error result and the model may still answer ("continue"), which matches how our
    loops treat a refused call.
    """
    return None if limits.max_steps is None else TOOL_CALLS_PER_STEP * limits.max_steps


class TraceMiddleware(AgentMiddleware):
    """Timing instrumentation, not a guard: one trace line per model call and per executed tool call.

    It sits inside `ToolErrorMiddleware` (see `_middleware`), so it sees a tool's exception before that is
    turned into a result: its line then carries the text the model will read and the guard that hid the
    details (`guards.tool_failure`, the same rule as `on_error`), and the exception goes on to the error
    middleware unchanged.
    """

    def __init__(self, detailed_errors: bool = False) -> None:
        super().__init__()
        self.detailed_errors = detailed_errors

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        started = time.perf_counter()
        response = await handler(request)
        reply = next((m for m in response.result if isinstance(m, AIMessage)), None)
        if reply is not None:
            step = calls_this_run(request.messages) + 1
            emit(guards.model_event(step, reply, time.perf_counter() - started))
        return response

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command]]
    ) -> ToolMessage | Command:
        started = time.perf_counter()
        try:
            result = await handler(request)
        except GraphBubbleUp:
            raise  # LangGraph's own control flow (an interrupt), not a tool failure
        except Exception as exc:
            call, duration = request.tool_call, time.perf_counter() - started
            text, guard = guards.tool_failure(call["name"], exc, detailed=self.detailed_errors)
            step = calls_this_run(request.state["messages"])
            emit(guards.tool_event(step, call, text, duration, is_error=True, guard=guard))
            raise
        emit_tool_result(request, result, time.perf_counter() - started)
        return result


class CreateAgentContender:
    """`run`/`arun` -> AgentResult, like GraphAgent, over a `create_agent` graph per instructions.

    It applies `limits.max_steps`, `detailed_errors` and `on_event`. What the middleware cannot express, so
    these options are *not applied*: the token, time, repeat and consecutive-error budgets (the tool-call
    limit counts calls per tool name, not per name and arguments), `max_tool_result_chars`, `parallel_tools`
    (its `ToolNode` always runs a reply's calls concurrently), and cooperative cancellation. `needs_approval`
    is refused here: no approval gate is wired into it.
    """

    def __init__(
        self,
        model: BaseChatModel,
        tools: Sequence[BaseTool],
        options: AgentOptions = AgentOptions(),  # noqa: B008 - frozen, so one shared default is safe
    ) -> None:
        if options.needs_approval is not None:
            raise ValueError("needs_approval: the create_agent contender has no approval gate wired in")
        self.model = model
        self.tools = list(tools)
        self.options = options
        self.limits = options.limits
        self._agents: dict[str, Any] = {}

    def agent_for(self, instructions: str) -> Any:
        """The compiled `create_agent` graph; the system prompt is fixed at build time, so one per instructions."""
        if instructions not in self._agents:
            self._agents[instructions] = create_agent(
                self.model,
                self.tools,
                system_prompt=instructions,
                middleware=self._middleware(),
                context_schema=RunContext,
            )
        return self._agents[instructions]

    def _middleware(self) -> list[AgentMiddleware]:
        def on_error(exc: Exception, request: ToolCallRequest) -> str:
            return guards.tool_failure_text(request.tool_call["name"], exc, detailed=self.options.detailed_errors)

        middleware: list[AgentMiddleware] = []
        if self.limits.max_steps is not None:
            middleware.append(ModelCallLimitMiddleware(run_limit=self.limits.max_steps, exit_behavior="end"))
            middleware.append(ToolCallLimitMiddleware(run_limit=tool_call_cap(self.limits), exit_behavior="continue"))
        # The first listed wraps the ones after it: the trace sits inside the error middleware, so it sees the
        # exception itself and can say which guard hid its details.
        middleware += [ToolErrorMiddleware(on_error), TraceMiddleware(self.options.detailed_errors)]
        return middleware

    def run(self, instructions: str, goal: str) -> AgentResult:
        """`arun` for sync callers. Inside a running event loop, await `arun` instead."""
        return run_blocking(lambda: self.arun(instructions, goal), instead="CreateAgentContender.arun(...)")

    async def arun(self, instructions: str, goal: str) -> AgentResult:
        run = RunRecord(self.options.on_event)
        try:
            await run.stream(self.agent_for(instructions), {"messages": [HumanMessage(goal)]}, {})
            out_of_supersteps = False
        except GraphRecursionError:  # only without max_steps: create_agent's own limit of 9999 supersteps
            out_of_supersteps = True
        usage = RunUsage.of_trace(run.trace)
        # A last reply that no model call wrote is ModelCallLimitMiddleware's "end".
        if out_of_supersteps or calls_this_run(run.messages) > usage.model_calls:
            reason = StopReason.MAX_STEPS
        else:
            reason = final_stop_reason(run.messages)
        # create_agent keeps the system prompt out of state; put it back so histories compare.
        return run.result(reason, usage, [SystemMessage(instructions), *run.messages])


def create_agent_contender(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    options: AgentOptions = AgentOptions(),  # noqa: B008 - frozen, so one shared default is safe
) -> CreateAgentContender:
    """The create_agent contender with the same `run`/`arun` -> AgentResult interface as GraphAgent."""
    return CreateAgentContender(model, tools, options)

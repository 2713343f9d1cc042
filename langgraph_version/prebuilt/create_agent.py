"""The same task on `langchain.agents.create_agent` and its built-in middleware, with no graph of our own.

`ModelCallLimitMiddleware` is the step limit, `ToolErrorMiddleware` turns tool exceptions into results,
`ToolCallLimitMiddleware` caps a run's calls (`tool_call_cap`), `HumanInTheLoopMiddleware` is the approval
gate (`approval_middleware`). Counts and the stop reason come from the trace, never from a message's text;
`graph_for`, `turn_input` and `adrive` are what `prebuilt.thread.CheckpointThread` needs.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Unpack

from langchain.agents import create_agent
from langchain.agents.middleware import (
    AgentMiddleware,
    HumanInTheLoopMiddleware,
    InterruptOnConfig,
    ModelCallLimitMiddleware,
    ModelRequest,
    ModelResponse,
    ToolCallLimitMiddleware,
    ToolErrorMiddleware,
)
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolCall, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.errors import GraphBubbleUp, GraphRecursionError
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command

from langgraph_version.prebuilt.reporting import emit_tool_result, final_stop_reason
from langgraph_version.run import RunContext, RunRecorder, calls_this_run, emit
from langgraph_version.tracing import framework_run
from shared_tools import guards, telemetry
from shared_tools.replies import checked_reply
from shared_tools.results import (
    AgentLimits,
    AgentOptions,
    AgentResult,
    Guard,
    NeedsApproval,
    OptionKeywords,
    RunUsage,
    StopReason,
    TraceEvent,
    agent_options,
)
from shared_tools.sync import run_blocking

AGENT_NAME = "create-agent"
"""`gen_ai.agent.name` of this agent's spans (its contender name)."""
TOOL_CALLS_PER_STEP = 2


def tool_call_cap(limits: AgentLimits) -> int | None:
    """The contender's tool-call budget per run: two per allowed model call.

    Our loops have no such cap; they bound tools through the step limit and the repeat rule. The cap is the
    nearest native brake on side effects (a runaway parallel caller cannot fire fifty `add_to_cart` calls in
    one turn) while leaving the article's path (4 calls in 5 steps) and two-call parallel turns untouched. Calls
    over the cap get an error result and the model may still answer ("continue"), which matches how our
    loops treat a refused call.
    """
    return None if limits.max_steps is None else TOOL_CALLS_PER_STEP * limits.max_steps


class TraceMiddleware(AgentMiddleware):
    """Timing instrumentation, not a guard: one trace line per model call and per executed tool call.

    It sits inside `ToolErrorMiddleware` (see `_middleware`), so it sees a tool's exception before that is
    turned into a result: its line then carries the text the model will read and the guard that hid the
    details (`guards.tool_failure`, the same rule as `on_error`), and the exception goes on to the error
    middleware unchanged. The one thing it changes is the reply, made safe to keep as every contender's is
    (`replies.checked_reply`: no lone surrogate, no call with arguments too deep or not an object).
    """

    def __init__(self, detailed_errors: bool = False) -> None:
        super().__init__()
        self.detailed_errors = detailed_errors

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        started = time.perf_counter()
        response = await handler(request)
        # The reply enters the conversation here, so here it is made safe to keep (`checked_reply`).
        response.result = [checked_reply(m) if isinstance(m, AIMessage) else m for m in response.result]
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


def earlier_calls(messages: Sequence[BaseMessage], call: ToolCall) -> list[ToolCall]:
    """The calls of the reply `call` belongs to that come before it: what `needs_approval` calls `earlier`."""
    reply = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    earlier: list[ToolCall] = []
    for other in reply.tool_calls if reply is not None else []:
        if other["id"] == call["id"]:
            break
        earlier.append(other)
    return earlier


def approval_middleware(needs_approval: NeedsApproval, tools: Sequence[BaseTool]) -> HumanInTheLoopMiddleware:
    """`needs_approval` as LangChain's own gate: `HumanInTheLoopMiddleware`, asking only where the rule says so.

    Every tool is listed in `interrupt_on`, with a `when` predicate that asks the rule (so a one-copy add of the
    customer's book runs without a question, as in our loops) and a description that is the rule's reason.
    The middleware runs in its default "batched" mode: after a model reply, one interrupt lists every call of
    that reply the rule flags (`HITLRequest`), before any of them runs, so `earlier` is the reply's calls
    before this one, none of them applied yet. It is answered with ``Command(resume={"decisions": [...]})``,
    one ``{"type": "approve"}`` or ``{"type": "reject", "message": reason}`` per listed call, in order (see
    `CreateAgentContender.resume_input`). A rejected call gets the middleware's own error result ("User
    rejected the tool call for `add_to_cart` with reason: ...") and never runs. The predicate runs again on
    resume, before the tools run, so it gives the same answer. The pause is LangGraph's `interrupt()`: the
    agent needs a checkpointer.
    """

    def when(request: ToolCallRequest) -> bool:
        call = request.tool_call
        return needs_approval(call, earlier_calls(request.state["messages"], call)) is not None

    def description(call: ToolCall, state: Any, runtime: Any) -> str:
        reason = needs_approval(call, earlier_calls(state["messages"], call))
        return reason or f"{call['name']} needs approval"

    config = InterruptOnConfig(allowed_decisions=["approve", "reject"], description=description, when=when)
    return HumanInTheLoopMiddleware(interrupt_on={tool.name: config for tool in tools})


HITL_DECISION = "hitl_interrupt_decision"
"""The `lc_source` HumanInTheLoopMiddleware marks the result it writes in place of a tool's with."""


class RefusalTraceMiddleware(AgentMiddleware):
    """Instrumentation, not a guard: a trace line for each call `HumanInTheLoopMiddleware` answered itself.

    A rejected call never reaches the `ToolNode` (the middleware writes its error result in `after_model`), so
    `TraceMiddleware` never sees it; this hook, before the next model call, finds those results after the last
    reply and records each as a refused tool call (`Guard.APPROVAL_REFUSED`), as our loops record theirs.
    """

    async def abefore_model(self, state: Any, runtime: Any) -> None:
        messages = state["messages"]
        at = next((i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], AIMessage)), None)
        if at is None:
            return
        calls = {c["id"]: c for c in messages[at].tool_calls}
        for message in messages[at + 1 :]:
            if not isinstance(message, ToolMessage) or message.additional_kwargs.get("lc_source") != HITL_DECISION:
                continue
            call = calls.get(message.tool_call_id)
            if call is None:
                continue
            rejected = message.status == "error"
            guard = Guard.APPROVAL_REFUSED if rejected else None
            step = calls_this_run(messages)
            emit(guards.tool_event(step, call, message.text, 0.0, is_error=rejected, guard=guard))
            telemetry.current_run().answered(call, step, message.text, is_error=rejected, guard=guard)


class CreateAgentContender:
    """`run`/`arun` -> AgentResult, like GraphAgent, over a `create_agent` graph per instructions.

    It applies `limits.max_steps`, `detailed_errors`, `on_event`, `on_token` (LangGraph's "messages" stream of
    its model node) and `needs_approval` (through
    `HumanInTheLoopMiddleware`, which pauses with `interrupt()`, so it needs a `checkpointer`; a checkpointer
    thread such as `prebuilt.thread.CheckpointThread` swaps in its own). What the middleware cannot express, so
    these options are *not applied*: the token, time, repeat and consecutive-error budgets (the tool-call
    limit counts calls per tool name, not per name and arguments), `max_tool_result_chars`, `parallel_tools`
    (its `ToolNode` always runs a reply's calls concurrently), and cooperative cancellation.
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
        options = agent_options("CreateAgentContender", options, dict(keywords))
        if options.needs_approval is not None and checkpointer is None:
            # Without a checkpointer LangGraph still stops at interrupt(), but keeps nothing to resume from.
            raise ValueError(
                "needs_approval: without a checkpointer create_agent has no approval gate "
                "(HumanInTheLoopMiddleware pauses with interrupt(), which needs one): pass checkpointer=..."
            )
        self.model = model
        self.tools = list(tools)
        self.options = options
        self.limits = options.limits
        self.checkpointer = checkpointer
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
                checkpointer=self.checkpointer,
            )
        return self._agents[instructions]

    def graph_for(self, instructions: str) -> CompiledStateGraph:
        """The graph a checkpointer thread runs (it swaps in its own checkpointer)."""
        graph: CompiledStateGraph = self.agent_for(instructions)
        return graph

    def _middleware(self) -> list[AgentMiddleware]:
        def on_error(exc: Exception, request: ToolCallRequest) -> str:
            return guards.tool_failure_text(request.tool_call["name"], exc, detailed=self.options.detailed_errors)

        middleware: list[AgentMiddleware] = []
        if self.options.needs_approval is not None:
            # First, so its tool wrapper sits outside the error middleware, as its documentation asks.
            middleware.append(approval_middleware(self.options.needs_approval, self.tools))
            middleware.append(RefusalTraceMiddleware())
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
        config: RunnableConfig = {}
        if self.checkpointer is not None:
            config = {"configurable": {"thread_id": f"run-{uuid.uuid4()}"}}
        graph = self.agent_for(instructions)
        return await self.adrive(graph, self.turn_input(instructions, goal, first=True), config, instructions)

    def turn_input(self, instructions: str, text: str, *, first: bool) -> dict[str, Any]:
        """A turn's input: only the question, since create_agent keeps the system prompt out of its state."""
        return {"messages": [HumanMessage(text)]}

    def history(self, instructions: str, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """A thread's messages as the model sees them: the system prompt put back, so histories compare."""
        return [SystemMessage(instructions), *messages]

    async def adrive(
        self,
        graph: CompiledStateGraph,
        graph_input: dict[str, Any] | Command | None,
        config: RunnableConfig,
        instructions: str,
        *,
        earlier: Sequence[TraceEvent] = (),
    ) -> AgentResult:
        """Run `graph` (perhaps with a thread's checkpointer) to an `AgentResult`.

        A dict input is a new turn; a `Command` (the answer to a pause) or None goes on with the thread's run,
        and `earlier` is the trace of that run's stretches before it, so the counts are the whole run's.
        """
        with framework_run(AGENT_NAME, self.model, config, self.options.tracer_provider) as (spans, config):
            result = await self._drive(graph, graph_input, config, instructions, earlier=earlier)
            spans.finish(result)
        return result

    async def _drive(
        self,
        graph: CompiledStateGraph,
        graph_input: dict[str, Any] | Command | None,
        config: RunnableConfig,
        instructions: str,
        *,
        earlier: Sequence[TraceEvent],
    ) -> AgentResult:
        run = RunRecorder(self.options.on_event, self.options.on_token)
        replied_before = 0
        """A resume or a continuation: the model replies of this turn already in the thread. A stretch cut short
        (an outage, a cancel, a restart) is in no `earlier` trace, so the limit's "end" is judged per stretch."""
        if not isinstance(graph_input, dict) and graph.checkpointer is not None:
            replied_before = calls_this_run((await graph.aget_state(config)).values.get("messages", []))
        try:
            await run.stream(graph, graph_input, config)
            out_of_supersteps = False
        except GraphRecursionError:  # only without max_steps: create_agent's own limit of 9999 supersteps
            out_of_supersteps = True
        usage = RunUsage.of_trace([*earlier, *run.trace])
        messages = self.history(instructions, run.messages)
        if run.pending:
            run.pending = approval_requests(run.pending, run.messages)
            return run.result(StopReason.AWAITING_APPROVAL, usage, messages)
        # A last reply that no model call wrote is ModelCallLimitMiddleware's "end".
        stretch_calls = sum(1 for event in run.trace if event.is_model)
        if out_of_supersteps or calls_this_run(run.messages) - replied_before > stretch_calls:
            reason = StopReason.MAX_STEPS
        else:
            reason = final_stop_reason(run.messages)
        return run.result(reason, usage, messages)

    @staticmethod
    def resume_input(requests: Sequence[dict[str, Any]], approved: bool | Sequence[bool]) -> Command:
        """The answer to a `HumanInTheLoopMiddleware` pause, in its format: one decision per listed call.

        `approved` is one answer per request, in order (one bool answers them all the same way); only a True
        approves, and a list that does not name every request is refused rather than guessed at."""
        answers = [approved] * len(requests) if isinstance(approved, bool) else list(approved)
        if len(answers) != len(requests):
            raise ValueError(f"the pause lists {len(requests)} requests; {len(answers)} answers were given")
        decisions = [
            {"type": "approve"} if yes is True else {"type": "reject", "message": request["reason"]}
            for request, yes in zip(requests, answers, strict=True)
        ]
        return Command(resume={"decisions": decisions})


def approval_requests(interrupts: Sequence[Any], messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """`HumanInTheLoopMiddleware`'s `HITLRequest`s as the shared ``{"tool_call", "reason"}`` requests.

    An action request names the tool and its arguments but not the call id; the call is found again in the
    reply that was paused on, in order.
    """
    reply = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    unmatched = list(reply.tool_calls) if reply is not None else []
    requests: list[dict[str, Any]] = []
    for value in interrupts:
        for action in value.get("action_requests", []):
            call = next((c for c in unmatched if c["name"] == action["name"] and c["args"] == action["args"]), None)
            if call is None:
                call = ToolCall(name=action["name"], args=action["args"], id=None)
            else:
                unmatched.remove(call)
            requests.append({"tool_call": call, "reason": action.get("description", "")})
    return requests


def create_agent_contender(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    options: AgentOptions | AgentLimits | None = None,
    *,
    checkpointer: BaseCheckpointSaver | None = None,
    **keywords: Unpack[OptionKeywords],
) -> CreateAgentContender:
    """The create_agent contender with the same `run`/`arun` -> AgentResult interface as GraphAgent."""
    return CreateAgentContender(model, tools, options, checkpointer=checkpointer, **keywords)

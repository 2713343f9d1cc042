"""One run of any of our LangGraph agents as its caller sees it: the trace it emits and the result it returns.

The three LangGraph contenders report alike: a node calls `emit`, which reaches the run's `RunRecorder` through
LangGraph's run `context` while the node still runs. The record keeps the latest full state and the tool round in
progress, so an aborted or cancelled run still tells what finished, and turns it into the shared `AgentResult`.
`stop_reason_for` is the one rule for how a reply ends a run; `invoke_model` is the model call a cancel can stop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolCall, ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
from langchain_core.runnables.config import merge_configs
from langgraph.config import get_stream_writer
from langgraph.pregel import Pregel
from langgraph.runtime import get_runtime
from langgraph.types import Command

from shared_tools import guards
from shared_tools.results import AgentResult, RunStopped, RunUsage, StopReason, Token, TraceEvent
from shared_tools.steps import CallTools, FinalAnswer, InvalidResponse, classify

log = logging.getLogger(__name__)

Durability = Literal["sync", "async", "exit"]
"""LangGraph's checkpoint write policy (see `GraphSession`)."""

MODEL_NODE = "model"
"""The node that calls the model, in all three graphs (`create_agent` names its own so too): the only node whose
streamed chunks are the reply."""


@dataclass
class OpenCalls:
    """The tool round in progress: the answers given so far and the calls whose tool is running.

    What `handwritten.loop` keeps in `_Run.running` and its history, for the graph: a node's answers reach the
    state only when the node returns, so a cancelled node would otherwise take the truth about its round with it.
    """

    answers: dict[str, ToolMessage] = field(default_factory=dict)
    running: set[str] = field(default_factory=set)
    started: bool = False
    """Whether a tool round started in this run (a resumed run re-runs the paused one)."""

    def start_round(self) -> None:
        self.answers.clear()
        self.running.clear()
        self.started = True

    def answer_for(self, call: ToolCall) -> ToolMessage:
        """The call's real answer if it has one; else what a cancel leaves it with (see `handwritten.loop`)."""
        if call["id"] in self.answers:
            return self.answers[call["id"]]
        text = guards.CANCELLED_WHILE_RUNNING_TEXT if call["id"] in self.running else guards.CANCELLED_CALL_TEXT
        return guards.tool_result(call, text, is_error=True)


@dataclass(frozen=True)
class RunContext:
    """Run-scoped inputs that are not state (nor may be checkpointed): LangGraph's `context=` of a run."""

    cancel: threading.Event | None = None
    record: Callable[[TraceEvent], None] | None = None
    """The run's `RunRecorder.record`."""
    calls: OpenCalls | None = None
    """The run's `RunRecorder.calls`."""
    started_at: float | None = None
    """Where the clock of a resumed or continued run stands: the saved `started_at` moved on by the time since
    the thread's last checkpoint was written (a human deciding, a process down, a model outage), which is not
    the agent's time. The first node of the run writes it into the state (see `graph.on_the_run_clock`).
    None for a new run."""
    keep_turns: int | None = None
    """Send the model only the system message and the last this-many user turns (`history.visible_history`);
    the thread still stores every message. None: the whole history."""
    streaming: bool = False
    """The run is streamed with ``"messages"`` (the caller gave `on_token`), so model calls stream."""

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()


def run_context() -> RunContext:
    """This run's context; an empty one when someone streams a graph without passing `context=`."""
    return get_runtime(RunContext).context or RunContext()


class _CancelWatcher(BaseCallbackHandler):
    """Cancels a streaming model call once the run's cancel is set; it sees every chunk as it arrives."""

    run_inline = True  # called in the model call's own task, chunk by chunk

    def __init__(self, cancel: threading.Event) -> None:
        self.cancel = cancel
        self.call: asyncio.Future[Any] | None = None
        self.cut = False

    def on_llm_new_token(self, token: str, **kwargs: Any) -> None:
        if self.cancel.is_set() and self.call is not None and not self.cut:
            self.cut = True
            self.call.cancel()  # lands at the call's next await: the wait for the next chunk


async def invoke_model(
    bound: Runnable[LanguageModelInput, BaseMessage], messages: Sequence[BaseMessage], cap: dict[str, int] | None = None
) -> BaseMessage:
    """`bound.ainvoke(messages)` from a model node. A run with `on_token` streams in "messages" mode, which alone
    makes this call stream; then a cancel set while the reply streams (from `on_token`, say) ends the call at
    its next chunk with `RunStopped(CANCELLED)`, and the half reply is dropped. LangGraph's messages stream
    delivers the chunks but cannot stop a call, so a callback that sees each chunk cancels it (a callback that
    raised would be logged by langchain-core as a failure of every such cancel). `cap` is the reply's
    `max_tokens` keyword (`guards.reply_cap`)."""
    context = run_context()
    cap = cap or {}
    if not context.streaming or context.cancel is None:
        return await bound.ainvoke(messages, **cap)
    watcher = _CancelWatcher(context.cancel)
    # Merged into the node's config, so LangGraph's own stream handler stays on the call.
    config = merge_configs(ensure_config(), {"callbacks": [watcher]})
    call = watcher.call = asyncio.ensure_future(bound.ainvoke(messages, config, **cap))
    try:
        return await call
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if watcher.cut and (task is None or not task.cancelling()):
            raise RunStopped(StopReason.CANCELLED) from None
        raise  # the node itself was cancelled (the time budget, the caller): not ours to turn into a stop


def emit(event: TraceEvent) -> None:
    """Hand a trace line to the run's record now, inside the node, and to LangGraph's "custom" stream."""
    context = run_context()
    if context.record is not None:
        context.record(event)
    get_stream_writer()(event)


def calls_this_run(messages: Sequence[AnyMessage]) -> int:
    """Model replies since the last user message: the step number in a history that spans several turns."""
    count = 0
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            break
        count += isinstance(message, AIMessage)
    return count


def stop_reason_for(reply: AIMessage) -> StopReason | None:
    """None while the model asks for tools, else why its reply ends the run."""
    match classify(reply):
        case CallTools():
            return None
        case FinalAnswer():
            return StopReason.DONE
        case InvalidResponse():
            return StopReason.INVALID_RESPONSE


class RunRecorder:
    """What one run has produced so far: the last full state, the trace lines, the approvals it paused on."""

    def __init__(
        self, on_event: Callable[[TraceEvent], None] | None, on_token: Callable[[Token], None] | None = None
    ) -> None:
        self.on_event = on_event
        self.on_token = on_token
        self.state: dict[str, Any] = {}
        self.trace: list[TraceEvent] = []
        self.pending: list[dict[str, Any]] | None = None
        self.calls = OpenCalls()

    async def stream(
        self,
        graph: Pregel,
        graph_input: dict[str, Any] | Command | None,
        config: RunnableConfig,
        *,
        cancel: threading.Event | None = None,
        durability: Durability | None = None,
        started_at: float | None = None,
        keep_turns: int | None = None,
    ) -> None:
        """Run `graph` to its end, keeping its state after every superstep. A None input goes on with the
        thread's unfinished run; `started_at` is where its clock stands (`RunContext.started_at`). With
        `on_token`, the model node's streamed chunks go to it as they arrive (``stream_mode="messages"``)."""
        streaming = self.on_token is not None
        context = RunContext(cancel, self.record, self.calls, started_at, keep_turns, streaming)
        async for item in graph.astream(
            graph_input,
            config,
            context=context,
            stream_mode=["values", "messages"] if streaming else "values",
            durability=durability,
        ):
            if streaming:
                mode, chunk = item
                if mode == "messages":
                    self.hand_on(*chunk, cancel=cancel)
                    continue
            else:
                chunk = item
            # The chunk of a paused run also carries LangGraph's `__interrupt__` entry: the approval requests.
            if "__interrupt__" in chunk:
                self.pending = [pause.value for pause in chunk["__interrupt__"]]
                chunk = {k: v for k, v in chunk.items() if k != "__interrupt__"}
            self.state = chunk

    def hand_on(self, message: BaseMessage, metadata: dict[str, Any], *, cancel: threading.Event | None) -> None:
        """Give `on_token` the pieces of a streamed chunk of the model node (a model that cannot stream sends
        its whole reply once); other nodes' messages (tool results) are not the reply. After a cancel nothing
        more is handed on: the node drops the cut reply at its next chunk."""
        if metadata.get("langgraph_node") != MODEL_NODE or not isinstance(message, AIMessage):
            return
        if cancel is not None and cancel.is_set():
            return
        assert self.on_token is not None
        for token in Token.of_chunk(message, self.step()):
            self.on_token(token)  # the caller's code: its exceptions are not ours to hide

    def step(self) -> int:
        """The model call being streamed, numbered as its trace line will be: the state before the model node
        is the last one streamed ("values" come after every superstep)."""
        calls = self.state.get("model_calls")
        if isinstance(calls, int):
            return calls + 1  # the guarded graph counts its calls in state
        return calls_this_run(self.state.get("messages", [])) + 1

    def record(self, event: TraceEvent) -> None:
        self.trace.append(event)
        if log.isEnabledFor(logging.INFO):
            log.info("%s", event.line())
        if self.on_event is not None:
            self.on_event(event)  # the caller's code: its exceptions are not ours to hide

    @property
    def messages(self) -> list[BaseMessage]:
        return list(self.state.get("messages", []))

    def result(self, reason: StopReason, usage: RunUsage, messages: list[BaseMessage] | None = None) -> AgentResult:
        """The `AgentResult` of this run; `messages` overrides the streamed history (create_agent's lacks the
        system message)."""
        messages = self.messages if messages is None else messages
        answer = messages[-1].text.strip() if reason is StopReason.DONE and messages else None
        pending = self.pending if reason is StopReason.AWAITING_APPROVAL else None
        return AgentResult.of_run(reason, usage, answer=answer, trace=self.trace, messages=messages, pending=pending)

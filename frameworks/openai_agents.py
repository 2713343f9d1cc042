"""The OpenAI Agents SDK (`openai-agents`) as a contender: its `Runner` runs the loop, its `max_turns` the step budget.

`LangChainModel` is an Agents SDK `Model` that asks any langchain-core chat model (given through `RunConfig`, tracing
off: nothing leaves the machine); `agents_tool` wraps one of our tools as a `FunctionTool` (the rule's calls behind
`needs_approval`, the time budget as its per-tool `timeout_seconds`); `OpenAIAgentsAgent.run` maps how the run
ended onto `StopReason`; `OpenAIAgentsConversation` keeps the conversation in the SDK's own `SQLiteSession`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolCall, convert_to_messages
from langchain_core.tools import BaseTool, ToolException
from langchain_core.utils.function_calling import convert_to_openai_tool

from shared_tools import guards
from shared_tools.adapters import BridgedAgent, CountedRun, answer_or_invalid
from shared_tools.contender import Approval, Capability, ContenderSpec
from shared_tools.conversation import KeptBeside, OneTurnAtATime, Opening, SyncDrivers, WholeTurns, check_owner
from shared_tools.history import Rewound
from shared_tools.results import (
    AgentOptions,
    AgentResult,
    Approve,
    Guard,
    RunStopped,
    StopReason,
)
from shared_tools.sync import run_blocking

if TYPE_CHECKING:  # the framework is imported where it is used: `--help` imports this file for its SPEC
    from agents import (
        Agent,
        FunctionTool,
        Model,
        ModelResponse,
        ModelSettings,
        RunContextWrapper,
        SQLiteSession,
        ToolExecutionConfig,
    )
    from agents.items import TResponseInputItem, TResponseOutputItem, TResponseStreamEvent
    from agents.tool import ToolContext
    from openai.types.responses import ResponseFunctionToolCall

log = logging.getLogger(__name__)

STOPPED_CALL_TEXT = "Not run: the run stopped (max_turns) before this call was answered."
"""The result a call gets that the SDK's stop left without one (a refused call the next turn never answered)."""

NOT_AVAILABLE: dict[str, str] = {
    "max_tokens": "the Agents SDK has no token budget: max_turns counts model calls only",
    "max_duration": "the Agents SDK has no run time budget: only each tool call is cut (FunctionTool.timeout_seconds)",
    "max_repeats": "the Agents SDK has no repeated-call check (reset_tool_choice only stops forced tool choice)",
    "max_consecutive_errors": "the Agents SDK does not count tool rounds with errors",
    "max_tool_result_chars": "the Agents SDK does not cut tool results for the model",
    "on_token": "this bridge calls the model whole (Runner.run, not run_streamed)",
}
"""Options the Agents SDK (or this bridge) cannot honour, and why (`OpenAIAgentsAgent.not_available`)."""


# --- the model seam ------------------------------------------------------------------------------------------


def to_langchain(instructions: str | None, items: str | Sequence[TResponseInputItem]) -> list[BaseMessage]:
    """The SDK's input items as langchain-core messages, through the SDK's own Chat Completions converter."""
    from agents.models.chatcmpl_converter import Converter

    head: list[BaseMessage] = [SystemMessage(instructions)] if instructions else []
    if not (isinstance(items, str) or items):
        return head
    messages: list[Any] = Converter.items_to_messages(items)
    for message in messages:
        for call in message.get("tool_calls") or []:
            # What the tool was given (`arguments`), so a call whose arguments do not parse stays a call that its
            # result answers, not a message LangChain cannot read.
            call["function"]["arguments"] = json.dumps(arguments(call["function"].get("arguments")))
    return [*head, *convert_to_messages(messages)]


UNPARSABLE = "<unparsable>"


def arguments(raw: Any) -> dict[str, Any]:
    """A call's arguments as the SDK hands them over (JSON text) read as an object; anything else is kept under
    `UNPARSABLE`, which no tool's schema accepts."""
    try:
        value = json.loads(raw) if isinstance(raw, str) and raw else (raw or {})
    except json.JSONDecodeError:
        value = None
    return value if isinstance(value, dict) else {UNPARSABLE: raw}


def close_open_calls(items: list[Any], text: str) -> list[dict[str, Any]]:
    """An output item for each function call in `items` that has none (a run a stop cut off between a reply and
    its results), so the history is one a model accepts."""
    answered = {i.get("call_id") for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"}
    return [
        {"type": "function_call_output", "call_id": i["call_id"], "output": text}
        for i in items
        if isinstance(i, dict) and i.get("type") == "function_call" and i.get("call_id") not in answered
    ]


def to_output(reply: AIMessage) -> list[TResponseOutputItem]:
    """A langchain-core reply as the SDK's output items: its text, then each call (an unparsable one as sent)."""
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText

    items: list[TResponseOutputItem] = []
    if reply.text:
        text = ResponseOutputText(text=reply.text, type="output_text", annotations=[], logprobs=[])
        items.append(
            ResponseOutputMessage(id="msg", type="message", role="assistant", status="completed", content=[text])
        )
    for call in reply.tool_calls:
        arguments = json.dumps(call["args"], ensure_ascii=False, separators=(",", ":"))
        items.append(_call_item(call["id"] or "", call["name"], arguments))
    for bad in reply.invalid_tool_calls:
        items.append(_call_item(bad["id"] or "", bad["name"] or "", bad["args"] or ""))
    return items


def _call_item(call_id: str, name: str, arguments: str) -> ResponseFunctionToolCall:
    from openai.types.responses import ResponseFunctionToolCall

    return ResponseFunctionToolCall(id=call_id, call_id=call_id, type="function_call", name=name, arguments=arguments)


@functools.cache
def _model_class() -> type[Model]:
    """`LangChainModel`, made when first needed: the SDK is imported only where it is used."""
    from agents import Model, ModelResponse, Usage

    class LangChainModel(Model):
        """An Agents SDK `Model` over any langchain-core chat model, our tools bound by their LangChain schemas."""

        def __init__(self, model: BaseChatModel, tools: dict[str, BaseTool], run: _Run) -> None:
            self.model = model
            self.tools = tools
            self.run = run

        async def get_response(
            self,
            system_instructions: str | None,
            input: str | list[TResponseInputItem],
            model_settings: ModelSettings,
            tools: list[Any],
            output_schema: Any,
            handoffs: list[Any],
            tracing: Any,
            *,
            previous_response_id: str | None = None,
            conversation_id: str | None = None,
            prompt: Any = None,
        ) -> ModelResponse:
            run = self.run
            run.seen = [*([] if isinstance(input, str) else input)]
            run.check_cancel()
            run.reconcile(input)
            history = to_langchain(system_instructions, input)
            bound = [self.tools[t.name] for t in tools if getattr(t, "name", None) in self.tools]
            started = time.perf_counter()
            reply = await (self.model.bind_tools(bound) if bound else self.model).ainvoke(history)
            if not isinstance(reply, AIMessage):
                raise TypeError(f"the model returned {type(reply).__name__}, not an AIMessage")
            reply = guards.with_call_ids(reply, history)
            run.model_called(reply, time.perf_counter() - started)
            usage = reply.usage_metadata or {}
            in_tokens = guards.token_count(usage.get("input_tokens"))
            out_tokens = guards.token_count(usage.get("output_tokens"))
            return ModelResponse(
                output=to_output(reply),
                usage=Usage(
                    requests=1, input_tokens=in_tokens, output_tokens=out_tokens, total_tokens=in_tokens + out_tokens
                ),
                response_id=None,
            )

        def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
            raise NotImplementedError("this bridge answers whole replies only (Runner.run)")

    return LangChainModel


# --- one run's bookkeeping ---------------------------------------------------------------------------------------


@dataclass
class _Run(CountedRun):
    """What one `OpenAIAgentsAgent.arun` saw: the trace, the counts, the calls and what was decided about them."""

    tools: dict[str, BaseTool]
    cancel: threading.Event | None
    refused: set[str] = field(default_factory=set)
    asked: dict[str, str] = field(default_factory=dict)
    admitted: dict[int, list[ToolCall]] = field(default_factory=dict)
    seen: list[Any] = field(default_factory=list)
    """The items of the last model call, with its reply: the history a stop that the SDK keeps nothing of ends on."""

    def check_cancel(self) -> None:
        """The SDK has no cancel for a run that is not streamed: ours ends it from the model or tool seam."""
        if self.cancel is not None and self.cancel.is_set():
            raise RunStopped(StopReason.CANCELLED)

    def reconcile(self, items: str | Sequence[TResponseInputItem], reason: StopReason | None = None) -> None:
        """A trace line for each result our tool did not write: a call the human refused, a call a stop
        (`reason`) left unanswered."""
        if isinstance(items, str):
            return
        for item in items:
            if not isinstance(item, dict) or item.get("type") != "function_call_output":
                continue
            call = self.calls.get(str(item.get("call_id")))
            if call is None or call["id"] in self.traced:
                continue
            if call["id"] in self.refused:
                guard: Guard | None = Guard.APPROVAL_REFUSED
            else:
                guard = Guard.CANCELLED if reason is StopReason.CANCELLED else None
            stopped = reason not in (None, StopReason.DONE)
            self.tool_line(call, str(item.get("output")), 0.0, is_error=guard is not None or stopped, guard=guard)


# --- the tool bridge -----------------------------------------------------------------------------------------


def agents_tool(tool: BaseTool, run: _Run) -> FunctionTool:
    """One of our tools as the SDK's `FunctionTool`, with LangChain's own schema for the model.

    Failures go back as the SDK's `function_tool` sends them: a `ToolException` (a refusal written for the model)
    as its text, arguments that do not fit the schema and any other exception as `default_tool_error_function`'s
    generic line (the exception's own text with `detailed_errors`). With a time budget, each call is cut at it
    by the SDK (`timeout_seconds`)."""
    from agents import FunctionTool
    from agents.tool import default_tool_error_function, default_tool_timeout_error_message

    schema = convert_to_openai_tool(tool)["function"]
    rule = run.options.needs_approval
    timeout = run.options.limits.max_duration

    async def invoke(ctx: ToolContext[Any], raw: str) -> str:
        call = ToolCall(name=tool.name, args=arguments(raw), id=ctx.tool_call_id, type="tool_call")
        args = call["args"]
        if run.cancel is not None and run.cancel.is_set():
            # Not run, and said so to the model: the next model call ends the run (a raise here would reach the
            # caller as the SDK's UserError around it).
            run.tool_line(call, guards.CANCELLED_CALL_TEXT, 0.0, is_error=True, guard=Guard.CANCELLED)
            return guards.CANCELLED_CALL_TEXT
        if guards.invalid_args_error(tool, args):
            text = default_tool_error_function(ctx, ValueError("invalid arguments"))
            run.tool_line(call, text, 0.0, is_error=True, guard=Guard.INVALID_ARGS)
            return text
        started = time.perf_counter()
        try:
            output = await tool.ainvoke({**call, "type": "tool_call"})
        except ToolException as exc:
            text = guards.tool_failure_text(tool.name, exc, detailed=run.options.detailed_errors)
            run.tool_line(call, text, time.perf_counter() - started, is_error=True, guard=None)
            return text
        except asyncio.CancelledError:
            seconds = time.perf_counter() - started
            if timeout is not None and seconds >= timeout * 0.99:  # the SDK's timeout, not a cancel of the run
                text = default_tool_timeout_error_message(tool_name=tool.name, timeout_seconds=timeout)
                run.tool_line(call, text, seconds, is_error=True, guard=Guard.TOOL_TIMEOUT)
            else:
                run.tool_line(call, guards.CANCELLED_WHILE_RUNNING_TEXT, seconds, is_error=True, guard=Guard.CANCELLED)
            raise
        except Exception as exc:
            text, guard = _failure(tool.name, exc, ctx, detailed=run.options.detailed_errors)
            log.warning("tool %s raised %s: %s", tool.name, type(exc).__name__, text)
            run.tool_line(call, text, time.perf_counter() - started, is_error=True, guard=guard)
            return text
        text, is_error = guards.output_text(output)
        run.tool_line(call, text, time.perf_counter() - started, is_error=is_error, guard=None)
        return text

    return FunctionTool(
        name=tool.name,
        description=schema.get("description", ""),
        params_json_schema=schema.get("parameters", {"type": "object", "properties": {}}),
        on_invoke_tool=invoke,
        strict_json_schema=False,
        needs_approval=_approval_check(tool, run) if rule is not None else False,
        timeout_seconds=timeout,
    )


def _approval_check(tool: BaseTool, run: _Run) -> Any:
    """The SDK's per-call `needs_approval`: our rule, given the calls of the same reply admitted before this one."""
    rule = run.options.needs_approval

    async def needs_approval(ctx: RunContextWrapper[Any], args: dict[str, Any], call_id: str) -> bool:
        call = ToolCall(name=tool.name, args=args, id=call_id, type="tool_call")
        earlier = run.admitted.setdefault(run.steps.get(call_id, run.usage.model_calls), [])
        reason = None if rule is None else rule(call, list(earlier))
        if reason is None:
            earlier.append(call)
            return False
        run.asked[call_id] = reason
        return True

    return needs_approval


def _failure(name: str, exc: Exception, ctx: ToolContext[Any], *, detailed: bool) -> tuple[str, Guard | None]:
    """What the model reads for a tool that raised: the SDK's generic line, or the exception with details on."""
    from agents.tool import default_tool_error_function

    if detailed:
        return guards.tool_failure_text(name, exc, detailed=True), None
    return default_tool_error_function(ctx, exc), Guard.ERROR_HIDDEN


# --- the contender -----------------------------------------------------------------------------------------------


class OpenAIAgentsAgent(BridgedAgent):
    """The bookstore agent on the Agents SDK's `Runner`, with the same `run`/`arun` -> `AgentResult` as the others.

    `approve` is the human behind `options.needs_approval`, asked at each of the SDK's interruptions; without one,
    every call the rule asks about is rejected (nobody is there to say yes)."""

    NOT_AVAILABLE = NOT_AVAILABLE

    def _execution(self) -> ToolExecutionConfig:
        """`parallel_tools` as the SDK's own setting: off, one function tool at a time, in the reply's order."""
        from agents import ToolExecutionConfig

        return ToolExecutionConfig(max_function_tool_concurrency=None if self.options.parallel_tools else 1)

    def run(self, instructions: str, goal: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """`arun` for sync callers. Inside a running event loop, await `arun` instead."""
        return run_blocking(lambda: self.arun(instructions, goal, cancel=cancel), instead="OpenAIAgentsAgent.arun(...)")

    async def arun(
        self,
        instructions: str,
        goal: str,
        *,
        session: SQLiteSession | None = None,
        cancel: threading.Event | None = None,
    ) -> AgentResult:
        """Work on `goal` until the SDK's run ends (`session` continues a conversation, which the SDK stores).

        Each interruption for approval is answered here (`RunState.approve`/`reject`) and the run goes on from its
        state, so `max_turns` holds across the answers. An exception the SDK raises (a model that called a tool
        it does not have, a tool's own) is raised again."""
        from agents import Agent, MaxTurnsExceeded, RunConfig, Runner

        run = _Run(self.options, self.tools, cancel)
        agent: Agent[Any] = Agent(
            name="bookstore", instructions=instructions, tools=[agents_tool(t, run) for t in self.tools.values()]
        )
        config = RunConfig(
            model=_model_class()(self.model, self.tools, run), tracing_disabled=True, tool_execution=self._execution()
        )
        turn: Any = goal
        answered: set[str] = set()
        reason, answer, items = StopReason.DONE, None, []
        while True:
            try:
                result = await Runner.run(
                    agent, turn, max_turns=self.options.limits.max_steps, run_config=config, session=session
                )
            except (MaxTurnsExceeded, RunStopped) as stop:
                reason = stop.reason if isinstance(stop, RunStopped) else StopReason.MAX_STEPS
                items = await self._stopped_items(stop, run, session, reason)
                break
            items = result.to_input_list()
            if not result.interruptions:
                reason, answer = answer_or_invalid(result.final_output)
                break
            state = result.to_state()
            for item in result.interruptions:
                self._answer(state, item, run, answered)
            turn = state
        if session is not None:
            items = await session.get_items()
        run.reconcile(items, reason)
        log.info("stop: %s after %d step(s), %d tool call(s)", reason, run.usage.model_calls, run.usage.tool_calls)
        return AgentResult.of_run(
            reason,
            run.usage,
            answer=answer if reason is StopReason.DONE else None,
            trace=list(run.trace),
            messages=to_langchain(instructions, items),
        )

    async def _stopped_items(
        self, stop: Exception, run: _Run, session: SQLiteSession | None, reason: StopReason
    ) -> list[Any]:
        """The history a stopped run leaves: the SDK's own record of it (`run_data`), else the last model call's
        items; each call the stop left without a result gets one, in the session too, so the next turn is valid."""
        data = getattr(stop, "run_data", None)
        if data is not None:
            done = [i.to_input_item() for i in data.new_items if getattr(i, "type", None) != "tool_approval_item"]
            items = [*([] if isinstance(data.input, str) else data.input), *done]
        else:
            items = list(run.seen)
        text = guards.CANCELLED_CALL_TEXT if reason is StopReason.CANCELLED else STOPPED_CALL_TEXT
        closing = close_open_calls(items, text)
        if session is not None:
            stored = await session.get_items()
            if missing := close_open_calls(stored, text):
                await session.add_items(missing)  # type: ignore[arg-type]
        return [*items, *closing]

    def _answer(self, state: Any, item: Any, run: _Run, answered: set[str]) -> None:
        """The human's yes or no to one interruption, asked once per call: a call asked again is refused."""
        raw = item.raw_item
        call_id = str(getattr(raw, "call_id", None) or (raw.get("call_id") if isinstance(raw, dict) else ""))
        call = run.calls.get(call_id) or ToolCall(name=item.tool_name or "", args={}, id=call_id)
        reason = run.asked.get(call_id, "the approval rule asked about it")
        yes = False
        if call_id not in answered and self.approve is not None:
            waited = time.monotonic()
            yes = self.approve(call, reason) is True
            run.usage.started += time.monotonic() - waited  # the human's time is not the agent's
        answered.add(call_id)
        log.info("approval for %s (%s): %s", call["name"], reason, "yes" if yes else "no")
        if yes:
            step = run.steps.get(call_id, run.usage.model_calls)
            run.admitted.setdefault(step, []).append(call)
            state.approve(item)
        else:
            run.refused.add(call_id)
            state.reject(item, rejection_message=guards.approval_rejected(call["name"], reason))


# --- the conversation: the SDK's SQLiteSession -------------------------------------------------------------------

NO_POSTGRES = "the Agents SDK session here is its SQLiteSession; its SQLAlchemy session is not wired in"
NO_WINDOW = "the Agents SDK session is sent whole here: no history window or summary is wired in"
_OWNERS = "CREATE TABLE IF NOT EXISTS agent_loop_compare_owner (session_id TEXT PRIMARY KEY, customer TEXT)"


KEPT = KeptBeside("openai-agents", ".openai-agents.db", NO_POSTGRES, NO_WINDOW)


class OpenAIAgentsConversation(SyncDrivers, WholeTurns):
    """A conversation on the SDK's `SQLiteSession` (in memory, or a SQLite file), bound to its customer."""

    def __init__(
        self,
        agent: OpenAIAgentsAgent,
        instructions: str,
        thread_id: str,
        *,
        path: Path | None = None,
        customer_id: str | None = None,
    ) -> None:
        from agents import SQLiteSession

        self.agent = agent
        self.instructions = instructions
        self.path = self.kept_in = path
        self.thread_id = thread_id
        if path is not None:
            _claim(path, thread_id, customer_id)
        self.session = SQLiteSession(thread_id, str(path) if path is not None else ":memory:")
        self._turn = OneTurnAtATime()

    async def aopen(self, *, resume: bool) -> None:
        if not resume:
            await self.session.clear_session()

    async def aask(self, question: str, *, cancel: threading.Event | None = None) -> AgentResult:
        async with self._turn.held():
            return await self.agent.arun(self.instructions, question, session=self.session, cancel=cancel)

    async def aresume(self, approved: Any, *, cancel: threading.Event | None = None) -> AgentResult:
        raise RuntimeError("an Agents SDK conversation never pauses here: its approvals are asked during the turn")

    async def arewind(self, turns: int = 1) -> Rewound:
        """Go back to before the last `turns` user turns (the cart keeps what they added)."""
        async with self._turn.held():
            items = await self.session.get_items()
            starts = [i for i, item in enumerate(items) if isinstance(item, dict) and item.get("role") == "user"]
            if isinstance(turns, bool) or not isinstance(turns, int) or not 1 <= turns <= len(starts):
                raise ValueError(f"cannot rewind {turns!r} turn(s): the history holds {len(starts)} user turn(s)")
            kept = items[: starts[-turns]]
            await self.session.clear_session()
            if kept:
                await self.session.add_items(kept)
            before, after = len(to_langchain(None, items)), len(to_langchain(None, kept))
            return Rewound(turns=turns, messages=before - after)

    async def amessages(self) -> list[BaseMessage]:
        return to_langchain(self.instructions, await self.session.get_items())

    def close(self) -> None:
        self.session.close()


def _claim(path: Path, thread_id: str, customer_id: str | None) -> None:
    """Bind the conversation `thread_id` in `path` to its customer on first use; `CustomerMismatch` for another."""
    with sqlite3.connect(path) as db:
        db.execute(_OWNERS)
        row = db.execute("SELECT customer FROM agent_loop_compare_owner WHERE session_id = ?", (thread_id,)).fetchone()
        check_owner(row[0] if row else None, customer_id, f"{path} conversation {thread_id!r}")
        if row is None and customer_id is not None:
            db.execute("INSERT INTO agent_loop_compare_owner VALUES (?, ?)", (thread_id, customer_id))
    db.close()


async def aopen_conversation(
    agent: OpenAIAgentsAgent,
    instructions: str,
    thread_id: str,
    where: Path | str | None,
    *,
    resume: bool,
    **opening: Unpack[Opening],
) -> OpenAIAgentsConversation:
    """The conversation `thread_id`, in memory (`where` None) or in a SQLite file beside the session database
    `where`; a fresh one (not `resume`) is cleared. Approvals are the agent's `approve`, asked during the turn."""
    path = KEPT.opened(where, thread_id, resume=resume, policy=opening.get("policy"))
    agent = agent.answered_by(opening.get("approve"))
    customer_id = opening.get("customer_id")
    conversation = OpenAIAgentsConversation(agent, instructions, thread_id, path=path, customer_id=customer_id)
    await conversation.aopen(resume=resume)
    return conversation


async def acheck_saved(where: Path | str, thread_id: str, customer_id: str | None) -> None:
    """Raise `CustomerMismatch` when the conversation `thread_id` beside `where` is another customer's, ValueError
    when its file is no SQLite database. Reads, never writes; a Postgres `where` is refused when it opens."""
    path = KEPT.saved(where, thread_id)
    if path is None or not path.exists():
        return
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            owner = None
            if "agent_loop_compare_owner" in tables:
                found = db.execute(
                    "SELECT customer FROM agent_loop_compare_owner WHERE session_id = ?", (thread_id,)
                ).fetchone()
                owner = found[0] if found else None
        db.close()
    except sqlite3.DatabaseError as exc:
        raise ValueError(f"{path} is not a saved Agents SDK session ({exc})") from None
    check_owner(owner, customer_id, f"{path} conversation {thread_id!r}")


# --- the declaration ---------------------------------------------------------------------------------------------


def build(model: Any, tools: list[Any], options: AgentOptions, approve: Approve | None) -> OpenAIAgentsAgent:
    """The SDK's run is interrupted for each call the rule names, answered from `approve` before it goes on (asked
    in the run). No token or run time budget, no repeat check: `OpenAIAgentsAgent.not_available` names them."""
    return OpenAIAgentsAgent(model, tools, options, approve=approve)


def _asked_through(answer: bool) -> str:
    verb = "approve" if answer else "reject"
    return (
        "FunctionTool.needs_approval for the call the rule named: Runner.run returned it in result.interruptions, "
        f"answered with RunState.{verb}(item) and Runner.run on the same state"
    )


SPEC = ContenderSpec(
    name="openai-agents",
    description="The OpenAI Agents SDK's Runner: its turn loop runs the tools, max_turns is the step limit, "
    "needs_approval interrupts for add_to_cart, its SQLiteSession keeps the conversation",
    requirement="openai-agents==0.24.0",
    build=build,
    order=7,
    approval=Approval.ASKS,
    capabilities=frozenset({Capability.REWIND, Capability.SEQUENTIAL_TOOLS}),
    guards={
        "step limit": "max_turns",
        "error hiding": "default_tool_error_function (function_tool's failure_error_function)",
        "approval gate": "FunctionTool.needs_approval, RunState.approve/reject",
    },
    lacks={
        Capability.REPLAY: "the SDK's SQLiteSession is a list of items, with no checkpoints to replay from",
        Capability.STREAMING: "this bridge runs Runner.run, whose model is asked whole (no run_streamed)",
        Capability.HISTORY_WINDOW: NO_WINDOW,
        Capability.SUMMARY: NO_WINDOW,
        Capability.STORAGE_OPTIONS: "the SDK's SQLiteSession takes a file and table names, no storage options",
    },
    conversation="frameworks.openai_agents",
    source_modules=("frameworks.openai_agents",),
    asked_through=_asked_through,
    owner="OpenAI Agents SDK",
    owns={
        "loop": "framework: Runner's turn loop",
        "tool invocation": "framework: FunctionTool, every call of a turn at once unless max_function_tool_concurrency",
        "error handling": "framework: function_tool's default_tool_error_function, a generic line; an unknown tool "
        "raises ModelBehaviorError",
        "step limit": "max_turns (default 10), raising MaxTurnsExceeded",
        "token budget": "nobody (Usage is counted, never checked)",
        "time budget": "per tool only (FunctionTool.timeout_seconds); a hung model call is yours to bound",
        "reply cap": "nobody (ModelSettings.max_tokens is fixed)",
        "repeat check": "nobody (reset_tool_choice only stops forced tool choice)",
        "session memory": "Session (SQLiteSession here)",
        "persistence": "SQLiteSession (a SQLite file), or the SQLAlchemy, Redis ... sessions",
        "stale reads": "you",
        "human approval": "needs_approval per tool or per call; RunState.approve/reject, then Runner.run(state)",
        "tracing (OTel spans)": "its own tracing (off here, tracing_disabled), no OpenTelemetry in the package",
    },
)

"""PydanticAI (`pydantic-ai-slim`) as a contender: its `Agent` runs the loop, `UsageLimits` and `timeout` the budgets.

`model_function` lets a `FunctionModel` call any langchain-core chat model; `pydantic_tool` wraps one of our tools
as a PydanticAI `Tool` (a `ToolException` becomes `ToolFailed`, bad arguments `ModelRetry`, a call the rule asks
about `ApprovalRequired`); `PydanticAIAgent.run` maps how the run ended onto `StopReason`; `PydanticAIConversation`
keeps the message history in a JSON file (`ModelMessagesTypeAdapter`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    InvalidToolCall,
    SystemMessage,
    ToolCall,
    ToolMessage,
)
from langchain_core.tools import BaseTool, ToolException
from langchain_core.utils.function_calling import convert_to_openai_tool

from shared_tools import guards
from shared_tools.adapters import BridgedAgent, CountedRun, answer_or_invalid
from shared_tools.atomic import write_atomically
from shared_tools.contender import Approval, Capability, ContenderSpec
from shared_tools.conversation import KeptBeside, OneTurnAtATime, Opening, SyncDrivers, WholeTurns, read_document
from shared_tools.history import Rewound, is_user_turn
from shared_tools.results import AgentOptions, AgentResult, Approve, Guard, StopReason
from shared_tools.sync import run_blocking

if TYPE_CHECKING:  # the framework is imported where it is used: `--help` imports this file for its SPEC
    from pydantic_ai import Agent, CancellationToken, RunContext, Tool
    from pydantic_ai.messages import (
        ModelMessage,
        ModelResponse,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolDenied
    from pydantic_ai.usage import UsageLimits

log = logging.getLogger(__name__)

NOT_AVAILABLE: dict[str, str] = {
    "max_repeats": "PydanticAI has no repeated-call check: the same call runs every time it is asked",
    "max_consecutive_errors": "PydanticAI counts retries per tool (retries=1), not tool rounds with errors",
    "max_tool_result_chars": "PydanticAI does not cut tool results for the model",
    "on_token": "this bridge calls the model whole (FunctionModel without a stream_function)",
}
"""Options PydanticAI (or this bridge) cannot honour, and why: `PydanticAIAgent.not_available` lists those asked."""


# --- the model seam: PydanticAI's messages to langchain-core and back -------------------------------------------------


def to_langchain(instructions: str | None, messages: Sequence[ModelMessage]) -> list[BaseMessage]:
    """PydanticAI's history as langchain-core messages, the instructions first as the system message."""
    from pydantic_ai.messages import ModelResponse, RetryPromptPart, SystemPromptPart, ToolReturnPart, UserPromptPart

    out: list[BaseMessage] = [SystemMessage(instructions)] if instructions else []
    for message in messages:
        if isinstance(message, ModelResponse):
            out.append(_reply_of(message))
            continue
        for part in message.parts:
            if isinstance(part, SystemPromptPart) and not instructions:
                out.append(SystemMessage(part.content))
            elif isinstance(part, UserPromptPart):
                out.append(HumanMessage(part.content if isinstance(part.content, str) else str(part.content)))
            elif isinstance(part, ToolReturnPart):
                failed = part.outcome in ("failed", "retried", "denied")
                text = part.model_response_str()
                out.append(_tool_message(part.tool_call_id, part.tool_name, text, failed))
            elif isinstance(part, RetryPromptPart):
                if part.tool_name:
                    out.append(_tool_message(part.tool_call_id, part.tool_name, part.model_response(), True))
                else:
                    out.append(HumanMessage(part.model_response()))
    return out


def _tool_message(call_id: str, name: str, text: str, failed: bool) -> ToolMessage:
    return ToolMessage(text, tool_call_id=call_id, name=name, status="error" if failed else "success")


def _reply_of(response: ModelResponse) -> AIMessage:
    from pydantic_ai.messages import TextPart, ThinkingPart, ToolCallPart

    text = "".join(p.content for p in response.parts if isinstance(p, TextPart))
    plan = "".join(p.content for p in response.parts if isinstance(p, ThinkingPart))
    calls: list[ToolCall] = []
    invalid: list[InvalidToolCall] = []
    for part in response.parts:
        if not isinstance(part, ToolCallPart):
            continue
        try:
            calls.append(ToolCall(name=part.tool_name, args=part.args_as_dict(), id=part.tool_call_id))
        except ValueError:
            raw = part.args if isinstance(part.args, str) else json.dumps(part.args)
            invalid.append(InvalidToolCall(name=part.tool_name, args=raw, id=part.tool_call_id, error="bad JSON"))
    kwargs = {"reasoning_content": plan} if plan else {}
    return AIMessage(text, tool_calls=calls, invalid_tool_calls=invalid, additional_kwargs=kwargs)


def to_response(reply: AIMessage, model_name: str) -> ModelResponse:
    """A langchain-core reply as PydanticAI's `ModelResponse`: plan, text, calls (unparsable ones as sent)."""
    from pydantic_ai.messages import ModelResponse, TextPart, ThinkingPart, ToolCallPart
    from pydantic_ai.usage import RequestUsage

    parts: list[Any] = []
    if plan := guards.plan_of(reply):
        parts.append(ThinkingPart(plan))
    if reply.text:
        parts.append(TextPart(reply.text))
    parts += [ToolCallPart(c["name"], c["args"], tool_call_id=c["id"]) for c in reply.tool_calls]
    for bad in reply.invalid_tool_calls:
        parts.append(ToolCallPart(bad["name"] or "", bad["args"] or "", tool_call_id=bad["id"] or ""))
    usage = reply.usage_metadata or {}
    return ModelResponse(
        parts=parts,
        usage=RequestUsage(
            input_tokens=guards.token_count(usage.get("input_tokens")),
            output_tokens=guards.token_count(usage.get("output_tokens")),
        ),
        model_name=model_name,
        finish_reason="length" if guards.was_cut(reply) else None,
    )


# --- one run's bookkeeping ---------------------------------------------------------------------------------------


@dataclass
class _Run(CountedRun):
    """What one `PydanticAIAgent.arun` saw: the trace, the counts, the calls and what was decided about them."""

    tools: dict[str, BaseTool]
    approve: Approve | None
    cancel: threading.Event | None
    refused: set[str] = field(default_factory=set)
    asked: dict[str, str] = field(default_factory=dict)
    answered: set[str] = field(default_factory=set)
    admitted: dict[int, list[ToolCall]] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    """Calls a cancel or the timeout cut off while they ran, and how long they had run."""
    token: CancellationToken | None = None
    """PydanticAI's cancellation of the run under way (single-use: one per `Agent.run`)."""

    def cancel_asked(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def check_cancel(self) -> None:
        """A cancel asked for through the event reaches PydanticAI as its own cancellation (`RunCancelled`): its
        token cancels the task driving the run, and this seam (a model or tool call) ends here, not run."""
        if self.cancel_asked() and self.token is not None:
            self.token.cancel()
            raise asyncio.CancelledError

    def reconcile(self, messages: Sequence[ModelMessage], reason: StopReason | None = None) -> None:
        """A trace line for each result PydanticAI wrote without running our tool to its end: an unknown tool,
        arguments the validator sent back, a call the human refused, a call the run's stop (`reason`) cut off."""
        from pydantic_ai.messages import ModelRequest, RetryPromptPart, ToolReturnPart

        if reason in (StopReason.TIME_BUDGET, StopReason.CANCELLED):
            timed_out = reason is StopReason.TIME_BUDGET
            for call_id, seconds in self.running.items():
                if call_id in self.calls and call_id not in self.traced:
                    text = guards.TOOL_CUT_RUNNING_TEXT if timed_out else guards.CANCELLED_WHILE_RUNNING_TEXT
                    guard = Guard.TOOL_TIMEOUT if timed_out else Guard.CANCELLED
                    self.tool_line(self.calls[call_id], text, seconds, is_error=True, guard=guard)
        for message in messages:
            if not isinstance(message, ModelRequest):
                continue
            for part in message.parts:
                if not isinstance(part, ToolReturnPart | RetryPromptPart) or not part.tool_call_id:
                    continue
                call = self.calls.get(part.tool_call_id)
                if call is None or call["id"] in self.traced:
                    continue
                if isinstance(part, ToolReturnPart) and part.outcome == "interrupted":
                    guard = Guard.TOOL_TIMEOUT if reason is StopReason.TIME_BUDGET else Guard.CANCELLED
                elif call["id"] in self.refused:
                    guard = Guard.APPROVAL_REFUSED
                elif call["name"] not in self.tools:
                    guard = Guard.UNKNOWN_TOOL
                else:
                    guard = Guard.INVALID_ARGS
                text = part.model_response_str() if isinstance(part, ToolReturnPart) else part.model_response()
                self.tool_line(call, text, 0.0, is_error=True, guard=guard)


# --- the tool bridge -----------------------------------------------------------------------------------------


def pydantic_tool(tool: BaseTool, run: _Run) -> Tool[Any]:
    """One of our tools as a PydanticAI `Tool`, with LangChain's own schema for the model."""
    from pydantic_ai import Tool
    from pydantic_ai.exceptions import ApprovalRequired, ModelRetry, ToolFailed
    from pydantic_core import SchemaValidator, core_schema

    schema = convert_to_openai_tool(tool)["function"]
    rule = run.options.needs_approval

    def validate(ctx: RunContext[Any], **args: Any) -> None:
        if problem := guards.invalid_args_error(tool, args):
            raise ModelRetry(problem)  # PydanticAI's own way back to the model, counted against the tool's retries

    async def invoke(ctx: RunContext[Any], **args: Any) -> str:
        call = ToolCall(name=tool.name, args=args, id=ctx.tool_call_id or "", type="tool_call")
        if run.cancel_asked():
            run.tool_line(call, guards.CANCELLED_CALL_TEXT, 0.0, is_error=True, guard=Guard.CANCELLED)
            run.check_cancel()
        step = run.steps.get(call["id"], run.usage.model_calls)
        earlier = run.admitted.setdefault(step, [])
        if rule is not None and not ctx.tool_call_approved and (reason := rule(call, list(earlier))) is not None:
            run.asked[call["id"]] = reason
            raise ApprovalRequired(metadata={"reason": reason})
        earlier.append(call)
        started = time.perf_counter()
        try:
            output = await tool.ainvoke({**call, "type": "tool_call"})
        except ToolException as exc:
            text = guards.tool_failure_text(tool.name, exc, detailed=run.options.detailed_errors)
            run.tool_line(call, text, time.perf_counter() - started, is_error=True, guard=None)
            raise ToolFailed(text) from exc
        except asyncio.CancelledError:
            run.running[call["id"]] = time.perf_counter() - started  # its line says why once the run says it
            raise
        except Exception as exc:
            # PydanticAI ends the run on any other exception: the line says so, the run raises it.
            text = f"raised {type(exc).__name__}: the run ended"
            run.tool_line(call, text, time.perf_counter() - started, is_error=True, guard=None)
            raise
        text, is_error = guards.output_text(output)
        run.tool_line(call, text, time.perf_counter() - started, is_error=is_error, guard=None)
        if is_error:
            raise ToolFailed(text)
        return text

    made = Tool.from_schema(
        invoke,
        name=tool.name,
        description=schema.get("description"),
        json_schema=schema.get("parameters", {"type": "object", "properties": {}}),
        takes_ctx=True,
        sequential=not run.options.parallel_tools,
        args_validator=validate,
    )
    # `from_schema` accepts any JSON as the arguments, then spreads them (`**args`) into `validate`: a list or a
    # number raised TypeError and ended the run. Arguments that are no object fail validation instead, which
    # PydanticAI answers to the model as a retry prompt it can read.
    made.function_schema.validator = SchemaValidator(core_schema.dict_schema())
    return made


def model_function(model: BaseChatModel, tools: dict[str, BaseTool], run: _Run) -> FunctionModel:
    """A `FunctionModel` that asks `model` (any langchain-core chat model) with our tools bound."""
    from pydantic_ai.models.function import FunctionModel

    async def call(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        run.check_cancel()
        run.reconcile(messages)
        history = to_langchain(info.instructions, messages)
        bound = [tools[d.name] for d in info.function_tools if d.name in tools]
        started = time.perf_counter()
        reply = await model.bind_tools(bound).ainvoke(history) if bound else await model.ainvoke(history)
        if not isinstance(reply, AIMessage):
            raise TypeError(f"the model returned {type(reply).__name__}, not an AIMessage")
        reply = guards.with_call_ids(reply, history)
        run.model_called(reply, time.perf_counter() - started)
        return to_response(reply, str(getattr(model, "model", None) or type(model).__name__))

    return FunctionModel(call, model_name="langchain")


# --- the contender -----------------------------------------------------------------------------------------------


class PydanticAIAgent(BridgedAgent):
    """The bookstore agent on PydanticAI's `Agent`, with the same `run`/`arun` -> `AgentResult` as the others.

    `approve` is the human behind `options.needs_approval`, asked during the run through PydanticAI's deferred
    tools; without one, every call the rule asks about is refused (nobody is there to say yes)."""

    NOT_AVAILABLE = NOT_AVAILABLE

    def usage_limits(self) -> UsageLimits:
        """Our step and token budgets as PydanticAI's own `UsageLimits` (None: no limit, also for its default 50)."""
        from pydantic_ai.usage import UsageLimits

        limits = self.options.limits
        return UsageLimits(request_limit=limits.max_steps, total_tokens_limit=limits.max_tokens)

    def run(self, instructions: str, goal: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """`arun` for sync callers. Inside a running event loop, await `arun` instead."""
        return run_blocking(lambda: self.arun(instructions, goal, cancel=cancel), instead="PydanticAIAgent.arun(...)")

    async def arun(
        self,
        instructions: str,
        goal: str,
        *,
        history: Sequence[ModelMessage] = (),
        cancel: threading.Event | None = None,
    ) -> AgentResult:
        return await self.arun_on(instructions, goal, list(history), cancel=cancel)

    async def arun_on(
        self, instructions: str, goal: str, messages: list[ModelMessage], *, cancel: threading.Event | None = None
    ) -> AgentResult:
        """Work on `goal` after the history `messages` until PydanticAI's run ends; `messages` becomes the history
        after it, also when the run raises (a conversation keeps the turn a cancel or an exception cut short).

        Each approval the run stops for (`DeferredToolRequests`) is answered here and the run goes on with
        PydanticAI's `deferred_tool_results`, its usage carried on, so the budgets hold across the answers. An
        exception PydanticAI raises (a tool's own, a model that broke its retries) is raised again."""
        from pydantic_ai import CancellationToken, capture_run_messages
        from pydantic_ai.exceptions import RunCancelled, UsageLimitExceeded
        from pydantic_ai.messages import repair_messages
        from pydantic_ai.tools import DeferredToolRequests
        from pydantic_ai.usage import RunUsage as PydanticUsage

        run = _Run(self.options, self.tools, self.approve, cancel)
        try:
            agent = self._agent(instructions, run)
        except BaseException:  # a cancel while PydanticAI is first imported: the question is still kept
            messages[:] = self._asked(messages, goal)
            raise
        prompt: str | None = goal
        deferred: DeferredToolResults | None = None
        spent = PydanticUsage()
        reason, answer = StopReason.DONE, None
        while True:
            run.token = CancellationToken()  # single-use: one per PydanticAI run
            left = self.options.limits.time_left(run.usage)
            with capture_run_messages() as captured:
                try:
                    result = await agent.run(
                        prompt,
                        message_history=messages,
                        deferred_tool_results=deferred,
                        usage_limits=self.usage_limits(),
                        usage=spent,
                        timeout=None if left is None else max(left, 0.001),
                        cancellation_token=run.token,
                    )
                except (UsageLimitExceeded, RunCancelled) as stop:
                    # PydanticAI's own repair answers the calls the stop left open ('interrupted'), so the
                    # history is one its next run accepts.
                    messages[:] = repair_messages(list(captured) or messages)
                    reason = self._stop_reason(stop, run)
                    break
                except BaseException:
                    messages[:] = repair_messages(list(captured) or self._asked(messages, prompt))
                    run.reconcile(messages)
                    raise
            messages[:] = result.all_messages()
            spent = result.usage
            output = result.output
            if not isinstance(output, DeferredToolRequests):
                reason, answer = answer_or_invalid(output)
                break
            deferred, prompt = self._answer(output, run), None
        run.reconcile(messages, reason)
        answer = answer if reason is StopReason.DONE else None
        return self._result(run, reason, answer, instructions, messages)

    def _agent(self, instructions: str, run: _Run) -> Agent[None, str | DeferredToolRequests]:
        """PydanticAI's `Agent` for one run: our model and tools through the bridges, approvals as deferred tools."""
        from pydantic_ai import Agent
        from pydantic_ai.tools import DeferredToolRequests

        return Agent(
            model_function(self.model, self.tools, run),
            instructions=instructions,
            tools=[pydantic_tool(tool, run) for tool in self.tools.values()],
            output_type=[str, DeferredToolRequests],
        )

    @staticmethod
    def _asked(messages: list[ModelMessage], prompt: str | None) -> list[ModelMessage]:
        """The history with the question of a run that raised before PydanticAI recorded it (none on a rerun)."""
        from pydantic_ai.messages import ModelRequest

        return messages if prompt is None else [*messages, ModelRequest.user_text_prompt(prompt)]

    def _stop_reason(self, stop: BaseException, run: _Run) -> StopReason:
        """Which of PydanticAI's stops ended the run, as our `StopReason` (a token limit read off the counts)."""
        from pydantic_ai.exceptions import RunCancelled, RunTimedOut

        if isinstance(stop, RunTimedOut):
            return StopReason.TIME_BUDGET
        if isinstance(stop, RunCancelled):
            return StopReason.CANCELLED
        max_tokens = self.options.limits.max_tokens
        over = max_tokens is not None and run.usage.tokens > max_tokens
        return StopReason.TOKEN_BUDGET if over else StopReason.MAX_STEPS

    def _answer(self, requests: DeferredToolRequests, run: _Run) -> DeferredToolResults:
        """The human's yes or no to each call PydanticAI deferred for approval, asked once per call, in order."""
        from pydantic_ai.tools import DeferredToolResults, ToolDenied

        approvals: dict[str, bool | ToolDenied] = {}
        for part in requests.approvals:
            call = run.calls.get(part.tool_call_id) or ToolCall(
                name=part.tool_name, args=part.args_as_dict(), id=part.tool_call_id
            )
            reason = run.asked.get(call["id"], "the approval rule asked about it")
            yes = False
            if call["id"] not in run.answered and self.approve is not None:
                waited = time.monotonic()
                yes = self.approve(call, reason) is True
                run.usage.started += time.monotonic() - waited  # the human's time is not the agent's
            run.answered.add(call["id"])
            if not yes:
                run.refused.add(call["id"])
            approvals[call["id"]] = True if yes else ToolDenied(guards.approval_rejected(call["name"], reason))
            log.info("approval for %s (%s): %s", call["name"], reason, "yes" if yes else "no")
        return DeferredToolResults(approvals=approvals)

    def _result(
        self, run: _Run, reason: StopReason, answer: str | None, instructions: str, messages: list[ModelMessage]
    ) -> AgentResult:
        log.info("stop: %s after %d step(s), %d tool call(s)", reason, run.usage.model_calls, run.usage.tool_calls)
        return AgentResult.of_run(
            reason, run.usage, answer=answer, trace=list(run.trace), messages=to_langchain(instructions, messages)
        )


# --- the conversation: PydanticAI's message history in a JSON file -----------------------------------------------

FORMAT = "agent-loop-compare/pydantic-ai-history/1"
NO_POSTGRES = "PydanticAI's history is kept in a JSON file (ModelMessagesTypeAdapter); there is no Postgres store here"
NO_WINDOW = "PydanticAI's history is sent whole here: no history window or summary is wired in"


KEPT = KeptBeside("pydantic-ai", ".pydantic-ai.json", NO_POSTGRES, NO_WINDOW)


class PydanticAIConversation(SyncDrivers, WholeTurns):
    """A conversation on PydanticAI's message history, in memory or in a JSON file written after every turn."""

    def __init__(
        self,
        agent: PydanticAIAgent,
        instructions: str,
        *,
        path: Path | None = None,
        customer_id: str | None = None,
    ) -> None:
        self.agent = agent
        self.instructions = instructions
        self.path = self.kept_in = path
        self.customer_id = customer_id
        self.history: list[ModelMessage] = []
        self._turn = OneTurnAtATime()
        if path is not None and path.exists():
            self.history = read_saved(path, customer_id)

    async def aopen(self, *, resume: bool) -> None:
        pass  # the file was read (or removed, for a fresh one) when the conversation was made

    async def aask(self, question: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """One turn on the history so far, with fresh budgets; saved when it ends (a cut one too)."""
        async with self._turn.held():
            history = list(self.history)
            try:
                result = await self.agent.arun_on(self.instructions, question, history, cancel=cancel)
            except BaseException:
                self._keep(history)  # what the raised run did (a cancel's cut turn too), then the raise
                raise
            self._keep(history)
            return result

    async def aresume(self, approved: Any, *, cancel: threading.Event | None = None) -> AgentResult:
        raise RuntimeError("a PydanticAI conversation never pauses: its approvals are asked during the turn")

    async def arewind(self, turns: int = 1) -> Rewound:
        """Go back to before the last `turns` user turns (the cart keeps what they added)."""
        async with self._turn.held():
            starts = [i for i, m in enumerate(self.history) if _starts_turn(m)]
            if isinstance(turns, bool) or not isinstance(turns, int) or not 1 <= turns <= len(starts):
                raise ValueError(f"cannot rewind {turns!r} turn(s): the history holds {len(starts)} user turn(s)")
            before = len(to_langchain(None, self.history))
            self._keep(self.history[: starts[-turns]])
            return Rewound(turns=turns, messages=before - len(to_langchain(None, self.history)))

    async def amessages(self) -> list[BaseMessage]:
        return to_langchain(self.instructions, self.history)

    def stored_bytes(self) -> int:
        return len(self._document())  # what the file holds (memory only: what it would hold)

    def close(self) -> None:
        pass

    def history_turns(self) -> list[str]:
        return [str(m.text) for m in to_langchain(None, self.history) if is_user_turn(m)]

    def _document(self) -> bytes:
        from pydantic_ai.messages import ModelMessagesTypeAdapter

        document = {
            "format": FORMAT,
            "customer": self.customer_id,
            "messages": json.loads(ModelMessagesTypeAdapter.dump_json(self.history)),
        }
        return json.dumps(document, ensure_ascii=True, separators=(",", ":")).encode("ascii")

    def _keep(self, history: list[ModelMessage]) -> None:
        self.history = list(history)
        if self.path is not None:
            write_atomically(self.path, self._document())


def _starts_turn(message: ModelMessage) -> bool:
    from pydantic_ai.messages import ModelRequest, UserPromptPart

    return isinstance(message, ModelRequest) and any(isinstance(p, UserPromptPart) for p in message.parts)


def read_saved(path: Path, customer_id: str | None = None) -> list[ModelMessage]:
    """The history saved at `path`; ValueError for a damaged file, `CustomerMismatch` for another customer's."""
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    document = read_document(path, FORMAT, customer_id, "saved PydanticAI history")
    try:
        return ModelMessagesTypeAdapter.validate_python(document.get("messages"))
    except ValueError as exc:
        raise ValueError(f"{path} is a damaged saved PydanticAI history: {exc}") from None


async def aopen_conversation(
    agent: PydanticAIAgent,
    instructions: str,
    thread_id: str,
    where: Path | str | None,
    *,
    resume: bool,
    **opening: Unpack[Opening],
) -> PydanticAIConversation:
    """The conversation `thread_id`, in memory (`where` None) or in a JSON file beside the session database `where`;
    a fresh one (not `resume`) replaces the file's. Approvals are the agent's `approve`, asked during the turn. A
    file has no storage options: `storage` is a graph's."""
    path = KEPT.opened(where, thread_id, resume=resume, policy=opening.get("policy"))
    agent = agent.answered_by(opening.get("approve"))
    return PydanticAIConversation(agent, instructions, path=path, customer_id=opening.get("customer_id"))


async def acheck_saved(where: Path | str, thread_id: str, customer_id: str | None) -> None:
    """Raise ValueError (`CustomerMismatch` among them) when the file of `thread_id` beside `where` is damaged or
    another customer's. Reads, never writes; a Postgres `where` is refused when the conversation opens."""
    path = KEPT.saved(where, thread_id)
    if path is not None and path.exists():
        read_saved(path, customer_id)


# --- the declaration ---------------------------------------------------------------------------------------------


def build(model: Any, tools: list[Any], options: AgentOptions, approve: Approve | None) -> PydanticAIAgent:
    """PydanticAI's run stops on a deferred approval, answered from `approve` before it goes on (asked in the run).
    It has no repeat check, error-round count or result cut: `PydanticAIAgent.not_available` names what it ignores."""
    return PydanticAIAgent(model, tools, options, approve=approve)


def _asked_through(answer: bool) -> str:
    answered = "True" if answer else "ToolDenied(...)"
    return (
        "ApprovalRequired raised by the tool for the call the rule named: PydanticAI's run ended with "
        f"DeferredToolRequests, answered with DeferredToolResults(approvals={{id: {answered}}})"
    )


SPEC = ContenderSpec(
    name="pydantic-ai",
    description="PydanticAI's Agent: its graph runs the tools, UsageLimits and run(timeout=) are the budgets, "
    "deferred tools (ApprovalRequired) gate add_to_cart, its message history keeps the conversation",
    requirement="pydantic-ai-slim==2.78.0",
    build=build,
    order=6,
    approval=Approval.ASKS,
    capabilities=frozenset({Capability.REWIND, Capability.SEQUENTIAL_TOOLS}),
    guards={
        "step limit": "UsageLimits.request_limit",
        "token budget": "UsageLimits.total_tokens_limit",
        "time budget": "run(timeout=)",
        "unknown tool": "the retry prompt 'Unknown tool name' (UnexpectedModelBehavior past the tool's retries)",
        "approval gate": "ApprovalRequired -> DeferredToolRequests / DeferredToolResults",
    },
    lacks={
        Capability.REPLAY: "PydanticAI's message history is one list, with no checkpoints to replay from",
        Capability.STREAMING: "this bridge asks the model whole (FunctionModel without a stream_function)",
        Capability.HISTORY_WINDOW: NO_WINDOW,
        Capability.SUMMARY: NO_WINDOW,
        Capability.STORAGE_OPTIONS: "PydanticAI's history is one JSON file here, rewritten each turn",
    },
    conversation="frameworks.pydantic_ai",
    source_modules=("frameworks.pydantic_ai",),
    asked_through=_asked_through,
    owner="PydanticAI",
    owns={
        "loop": "framework: Agent's graph (model request node, call tools node)",
        "tool invocation": "framework: Tool (here Tool.from_schema over our tools), in parallel unless sequential",
        "error handling": "framework: ModelRetry and ToolFailed go back to the model; any other exception ends the run",
        "step limit": "UsageLimits.request_limit (default 50), raising UsageLimitExceeded",
        "token budget": "UsageLimits.total_tokens_limit, checked after each reply",
        "time budget": "run(timeout=), raising RunTimedOut (it cuts a running tool too)",
        "reply cap": "nobody (ModelSettings.max_tokens is fixed, not what is left of the budget)",
        "repeat check": "nobody (tool_calls_limit caps counts, not repeats)",
        "session memory": "message_history / all_messages()",
        "persistence": "ModelMessagesTypeAdapter to JSON (a file here)",
        "stale reads": "you",
        "human approval": "ApprovalRequired / requires_approval, answered with DeferredToolResults",
        "tracing (OTel spans)": "the framework, with instrument=True (Logfire or any OpenTelemetry provider)",
    },
)

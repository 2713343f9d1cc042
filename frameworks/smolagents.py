"""smolagents (`ToolCallingAgent`) as a contender: its own loop, its `max_steps`, its memory as the conversation.

`LangChainModel` is smolagents' model seam (`Model.generate`) over any langchain-core chat model; `SmolTool` puts
one of our tools behind smolagents' `Tool`; `SmolagentsContender` runs the agent and maps what it did to an
`AgentResult`; `SmolagentsConversation` keeps its memory in a JSON file between turns.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)
from langchain_core.tools import BaseTool

from shared_tools import guards
from shared_tools.adapters import BridgedAgent, StepLines
from shared_tools.atomic import write_atomically
from shared_tools.contender import Approval, Capability, Contender, ContenderSpec
from shared_tools.conversation import (
    KeptBeside,
    NoRewind,
    OneTurnAtATime,
    Opening,
    WholeTurns,
    in_worker_thread,
    read_document,
)
from shared_tools.history import Rewound
from shared_tools.results import AgentOptions, AgentResult, Approve, Guard, RunUsage, StopReason, TraceEvent
from shared_tools.sync import run_blocking

if TYPE_CHECKING:  # smolagents is imported where it is used: `--help` imports this file for its SPEC
    from smolagents import ChatMessage, Tool, ToolCallingAgent
    from smolagents.agents import ToolOutput
    from smolagents.memory import ActionStep
    from smolagents.memory import ToolCall as SmolCall

log = logging.getLogger(__name__)

FINAL_ANSWER = "final_answer"
"""smolagents' own tool that ends a run: a reply with text and no tool call is turned into a call of it."""
NO_LIMIT = 1_000_000
"""What our "no limit" (None) becomes for `max_steps`, which takes a number only."""

NOT_AVAILABLE: dict[str, str] = {
    "max_tokens": "smolagents has no token budget: max_steps is its only limit",
    "max_duration": "smolagents has no time budget: a blocked tool or model call holds the run",
    "max_repeats": "smolagents has no repeated-call check: the same call runs every time it is asked",
    "max_consecutive_errors": "smolagents has no error limit: each error is fed back and the loop goes on",
    "max_tool_result_chars": "smolagents does not cut a ToolCallingAgent's tool results",
    "detailed_errors": "smolagents always feeds a tool's exception text back to the model",
    "needs_approval": "smolagents has no approval gate: ToolCallingAgent runs every call the model asks for",
}
"""Options smolagents cannot honour, and why (`SmolagentsContender.not_available` lists those asked for)."""


# --- the model seam -------------------------------------------------------------------------------------------------


def _text(message: ChatMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def _results(calls: list[ToolCall], observation: str) -> list[ToolMessage]:
    """One result per call from smolagents' observation text, which joins the results of a step by newlines in
    call-id order: split when it has one line per call, else every call is given the whole text."""
    lines = observation.split("\n")
    ordered = sorted(calls, key=lambda c: c["id"])
    texts = lines if len(calls) > 1 and len(lines) == len(calls) else [observation] * len(calls)
    by_id = {c["id"]: t for c, t in zip(ordered, texts, strict=True)}
    return [ToolMessage(by_id[c["id"]], tool_call_id=c["id"], name=c["name"]) for c in calls]


def _fed_back(step: ActionStep) -> str:
    """The text smolagents feeds back after a step (its observation or its error), exactly as it writes it."""
    from smolagents.models import MessageRole

    said = [_text(m) for m in step.to_messages() if MessageRole(m.role) is MessageRole.TOOL_RESPONSE]
    return "\n".join(said)


def _reply_of(step: ActionStep) -> AIMessage:
    raw = step.model_output_message.raw if step.model_output_message is not None else None
    if isinstance(raw, AIMessage):
        return raw
    text = step.model_output if isinstance(step.model_output, str) else _output_text(step.action_output) or ""
    return AIMessage(text)


def history(steps: Sequence[Any]) -> list[BaseMessage]:
    """smolagents' memory as langchain messages, the system prompt left out.

    smolagents writes a step's calls and results into its prompt as text ("Calling tools:", "Observation:"), and
    a step whose call failed as the error alone, without the call. A chat model's API needs each call with its
    result, so each step is read from its own record: the reply the chat model gave (its calls, their ids), then
    the text smolagents feeds back, as the calls' results (after a reply with no call it could read, as a system
    message). A `final_answer` call becomes the answer it carries.
    """
    from smolagents.memory import ActionStep, TaskStep

    out: list[BaseMessage] = []
    for step in steps:
        if isinstance(step, TaskStep):
            out.append(HumanMessage(step.task))
        elif isinstance(step, ActionStep):
            reply = _reply_of(step)
            calls = reply.tool_calls
            if step.is_final_answer:
                answers = [c["args"].get("answer") for c in calls if c["name"] == FINAL_ANSWER]
                out.append(AIMessage(str(answers[0]) if answers else reply.text, id=reply.id))
                continue
            if calls or reply.text:
                out.append(reply)  # a reply with neither (cut, unparsable) smolagents leaves out of its prompt too
            fed_back = _fed_back(step)
            if calls and step.error is None:
                out.extend(_results(calls, (step.observations or "")))
            elif calls:
                out.extend(ToolMessage(fed_back, tool_call_id=c["id"], name=c["name"], status="error") for c in calls)
            elif fed_back:
                # An unparsable reply: smolagents' feedback answers no call, and it is not the customer speaking, so
                # it goes as a system message (a user message would read as the customer's next question).
                out.append(SystemMessage(fed_back))
    return out


def _schema(tool: Tool) -> dict[str, Any]:
    from smolagents.models import get_tool_json_schema

    return get_tool_json_schema(tool)


def _chat_message(reply: AIMessage, *, tools: bool) -> ChatMessage:
    from smolagents import ChatMessage
    from smolagents.memory import TokenUsage
    from smolagents.models import ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole

    usage = reply.usage_metadata or {}
    tokens = TokenUsage(
        input_tokens=guards.token_count(usage.get("input_tokens")),
        output_tokens=guards.token_count(usage.get("output_tokens")),
    )
    text = reply.text
    calls = [
        ChatMessageToolCall(
            ChatMessageToolCallFunction(name=c["name"], arguments=c["args"]), id=c["id"], type="function"
        )
        for c in reply.tool_calls
    ]
    if tools and not calls and not reply.invalid_tool_calls:
        # smolagents ends a run only through its final_answer tool; a chat model answers in plain text.
        answer = ChatMessageToolCallFunction(name=FINAL_ANSWER, arguments={"answer": text})
        calls = [ChatMessageToolCall(answer, id=f"final_{uuid.uuid4().hex[:12]}", type="function")]
        text = ""
    return ChatMessage(
        MessageRole.ASSISTANT, content=text or None, tool_calls=calls or None, raw=reply, token_usage=tokens
    )


# --- the tools ------------------------------------------------------------------------------------------------------


_JSON_TYPES = {"string", "boolean", "integer", "number", "array", "object", "null"}


def model_prompt(
    messages: Sequence[ChatMessage | dict[str, Any]], watch: _RunWatch | None, *, tools: bool
) -> list[BaseMessage]:
    """What the chat model is sent for one `generate`: the agent's memory read as langchain messages (`history`)
    after smolagents' system prompt; without an agent, smolagents' messages as text."""
    from smolagents import ChatMessage
    from smolagents.models import MessageRole

    given = [m if isinstance(m, ChatMessage) else ChatMessage.from_dict(m) for m in messages]
    agent = watch.agent if watch is not None else None
    if agent is None:
        roles = {MessageRole.SYSTEM: SystemMessage, MessageRole.ASSISTANT: AIMessage, MessageRole.TOOL_CALL: AIMessage}
        return [roles.get(MessageRole(m.role), HumanMessage)(_text(m)) for m in given]
    prompt: list[BaseMessage] = [SystemMessage(_text(given[0]))] if given else []
    prompt += history(agent.memory.steps)
    if not tools and given and MessageRole(given[-1].role) is MessageRole.USER:
        prompt.append(HumanMessage(_text(given[-1])))  # the forced answer's request, after max_steps
    return prompt


@functools.cache
def model_class() -> type:
    """`LangChainModel`, made on first use: it subclasses smolagents' own `Model`, and this file is imported for
    its SPEC by commands that never run smolagents."""
    from smolagents import Model

    class LangChainModel(Model):
        """smolagents' `Model` over a langchain-core chat model: each `generate` is one call of it. The prompt is read
        from the memory of the agent it serves (`history`); without one, from smolagents' messages as text."""

        def __init__(self, chat_model: BaseChatModel, watch: _RunWatch | None = None) -> None:
            super().__init__(model_id=getattr(chat_model, "model", None) or type(chat_model).__name__)
            self.chat_model = chat_model
            self.watch = watch

        def generate(
            self,
            messages: list[ChatMessage],  # type: ignore[override]
            stop_sequences: list[str] | None = None,
            response_format: dict[str, str] | None = None,
            tools_to_call_from: list[Tool] | None = None,
            **kwargs: Any,
        ) -> ChatMessage:
            watch = self.watch
            if watch is not None:
                watch.before_model_call()
            prompt = model_prompt(messages, watch, tools=bool(tools_to_call_from))
            model: Any = self.chat_model
            if tools_to_call_from:
                model = model.bind_tools([_schema(t) for t in tools_to_call_from])
            started = time.monotonic()
            try:
                reply = model.invoke(prompt, stop=stop_sequences)
            except Exception as exc:
                if watch is not None:
                    watch.model_failed(exc, time.monotonic() - started)
                raise
            if not isinstance(reply, AIMessage):
                raise TypeError(f"the chat model replied with a {type(reply).__name__}, not an AIMessage")
            reply = guards.with_call_ids(reply, prompt)
            if watch is not None:
                watch.model_replied(reply, time.monotonic() - started)
            return _chat_message(reply, tools=bool(tools_to_call_from))

    return LangChainModel


@functools.cache
def tool_class() -> type:
    """`SmolTool`, made on first use: it subclasses smolagents' own `Tool` (see `model_class`)."""
    from smolagents import Tool

    class SmolTool(Tool):
        """One of our langchain tools as a smolagents `Tool`. smolagents passes a tool only its arguments, never the
        call's id, so a write keyed by call id (add_to_cart's idempotency) gets none and every call is a new write."""

        skip_forward_signature_validation = True

        def __init__(self, tool: BaseTool) -> None:
            schema = tool.tool_call_schema.model_json_schema() if isinstance(tool.tool_call_schema, type) else {}
            required = set(schema.get("required", []))
            self.name = tool.name
            self.description = tool.description
            self.inputs = {
                key: {
                    "type": spec.get("type") if spec.get("type") in _JSON_TYPES else "any",
                    "description": spec.get("description", key),
                    **({} if key in required else {"nullable": True}),
                }
                for key, spec in schema.get("properties", {}).items()
            }
            self.output_type = "string"
            self.tool = tool
            super().__init__()

        def forward(self, **kwargs: Any) -> str:
            # No call id reaches a smolagents tool: each call gets a fresh one, so no write is ever taken for a replay.
            call = ToolCall(name=self.name, args=kwargs, id=f"smolagents_{uuid.uuid4().hex[:12]}")
            text, _ = guards.output_text(self.tool.invoke({**call, "type": "tool_call"}))
            return text

    return SmolTool


def __getattr__(name: str) -> Any:
    if name == "LangChainModel":
        return model_class()
    if name == "SmolTool":
        return tool_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- the run --------------------------------------------------------------------------------------------------------


class _Cancelled(Exception):
    """Raised from the model seam when the cancel event is set: smolagents ends the run on a model error."""


@dataclass
class _RunWatch(StepLines):
    """What one run saw, step by step: the trace lines (given to `on_event` as they happen) and the cancel."""

    tool_names: frozenset[str]
    cancel: threading.Event | None = None
    agent: ToolCallingAgent | None = None
    cancelled: bool = False
    calls: dict[str, tuple[SmolCall, float]] = field(default_factory=dict)

    def before_model_call(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            self.cancelled = True
            raise _Cancelled("cancelled")

    def model_failed(self, exc: Exception, duration_s: float) -> None:
        """A call that raised is a call made: a line of its own (smolagents turns the forced last call's error
        into its answer text, so the run goes on)."""
        self.model_calls += 1
        self.emit(TraceEvent(self.model_calls, "model", duration_s, f"the call raised {type(exc).__name__}"))

    def called(self, call: SmolCall) -> None:
        self.calls[call.id] = (call, time.monotonic())

    def answered(self, output: ToolOutput) -> None:
        call, started = self.calls.pop(output.id)
        if output.is_final_answer:
            return
        self._tool_line(call, output.observation, time.monotonic() - started, is_error=False, guard=None)

    def step_ended(self, step: ActionStep) -> None:
        """The calls of a step that got no output: smolagents raised on one of them and fed its error back."""
        from smolagents.utils import AgentToolCallError

        error = step.error
        unanswered = list(self.calls.values())
        self.calls.clear()
        for call, started in unanswered:
            guard = None
            if call.name not in self.tool_names:
                guard = Guard.UNKNOWN_TOOL
            elif isinstance(error, AgentToolCallError) and len(unanswered) == 1:
                guard = Guard.INVALID_ARGS
            text = str(error) if error is not None else "no result"
            self._tool_line(call, text, time.monotonic() - started, is_error=True, guard=guard)

    def _tool_line(self, call: SmolCall, text: str, duration_s: float, *, is_error: bool, guard: Guard | None) -> None:
        args = call.arguments if isinstance(call.arguments, dict) else {"input": call.arguments}
        as_call = ToolCall(name=call.name, args=args, id=call.id)
        self.emit(guards.tool_event(self.model_calls, as_call, text, duration_s, is_error=is_error, guard=guard))


class SmolagentsContender(BridgedAgent):
    """The bookstore agent on smolagents' `ToolCallingAgent`, `run(instructions, goal) -> AgentResult`.

    Its one guard is `max_steps` (from `AgentLimits.max_steps`): at the limit smolagents asks the model once more
    without tools and returns that text; such a run is MAX_STEPS, the text kept as `forced_answer`. It has no
    approval gate: `approve` is never asked.
    """

    NOT_AVAILABLE = NOT_AVAILABLE

    @property
    def max_steps(self) -> int:
        """`AgentLimits.max_steps` as smolagents' `max_steps`, which takes a number only."""
        steps = self.options.limits.max_steps
        return NO_LIMIT if steps is None else steps

    def agent(self, instructions: str, watch: _RunWatch) -> ToolCallingAgent:
        from smolagents import ToolCallingAgent
        from smolagents.monitoring import LogLevel

        return ToolCallingAgent(
            tools=[tool_class()(t) for t in self.tools.values()],
            model=model_class()(self.model, watch),
            instructions=instructions,
            max_steps=self.max_steps,
            # One at a time in the model's order unless parallel tools are asked for (smolagents' thread pool).
            max_tool_threads=None if self.options.parallel_tools else 1,
            verbosity_level=LogLevel.OFF,
        )

    def run(self, instructions: str, goal: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """`arun` to its end: a Ctrl-C stops the run at its next model call, as it stops the async contenders."""
        return run_blocking(
            lambda: self.arun(instructions, goal, cancel=cancel), instead="SmolagentsContender.arun(...)"
        )

    async def arun(self, instructions: str, goal: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """smolagents runs sync, so its run goes to a worker thread; a task cancel sets the event it checks."""
        return await in_worker_thread(OneTurnAtATime(), functools.partial(self.run_here, instructions), goal, cancel)

    def run_here(self, instructions: str, goal: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """The run in this thread. A Ctrl-C raised here could land in the loop over smolagents' run generator, which
        yields again in a `finally` when it is then closed (a RuntimeError at exit): `run` keeps it out."""
        watch = _RunWatch(self.options, frozenset(self.tools), cancel)
        agent = watch.agent = self.agent(instructions, watch)
        return run_turn(agent, goal, watch, reset=True)


def run_turn(agent: ToolCallingAgent, goal: str, watch: _RunWatch, *, reset: bool) -> AgentResult:
    """One `agent.run`, streamed so each call and output is seen, mapped to an `AgentResult`."""
    from smolagents.agents import ToolOutput
    from smolagents.memory import ActionStep, FinalAnswerStep
    from smolagents.memory import ToolCall as SmolCall
    from smolagents.utils import AgentGenerationError, AgentMaxStepsError

    first_step = 0 if reset else len(agent.memory.steps)
    output: Any = None
    try:
        for item in agent.run(goal, stream=True, reset=reset):
            if isinstance(item, SmolCall):
                watch.called(item)
            elif isinstance(item, ToolOutput):
                watch.answered(item)
            elif isinstance(item, ActionStep):
                watch.step_ended(item)
            elif isinstance(item, FinalAnswerStep):
                output = item.output
    except AgentGenerationError as exc:
        if not watch.cancelled:
            raise (exc.__cause__ or exc) from None  # the chat model's own error, as the other contenders raise it
    steps = agent.memory.steps[first_step:]
    messages = [SystemMessage(agent.system_prompt), *history(agent.memory.steps)]
    usage = RunUsage.of_trace(watch.trace)
    if watch.cancelled:
        reason, answer, forced = StopReason.CANCELLED, None, None
    elif steps and isinstance(getattr(steps[-1], "error", None), AgentMaxStepsError):
        reason, answer, forced = StopReason.MAX_STEPS, None, _output_text(output)
    elif (text := _output_text(output)) and text.strip():
        reason, answer, forced = StopReason.DONE, text, None
    else:  # an unusable reply's text is no answer: a reply with no choice ends the run with nothing said
        reason, answer, forced = StopReason.INVALID_RESPONSE, None, None
    result = AgentResult.of_run(reason, usage, answer=answer, trace=watch.trace, messages=messages)
    result.forced_answer = forced
    return result


def _output_text(output: Any) -> str | None:
    """A run's output as text: smolagents returns the forced answer as its message content (a list of parts)."""
    if output is None:
        return None
    if isinstance(output, list):
        return "".join(str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in output)
    return str(output)


# --- the conversation -----------------------------------------------------------------------------------------------


def save_memory(agent: ToolCallingAgent) -> list[dict[str, Any]]:
    """smolagents' memory as JSON: the task and action steps, each with the chat model's reply (what `history`
    reads) and what smolagents fed back after it."""
    from smolagents.memory import ActionStep, TaskStep

    saved: list[dict[str, Any]] = []
    for step in agent.memory.steps:
        if isinstance(step, TaskStep):
            saved.append({"task": step.task})
        elif isinstance(step, ActionStep):
            error = None if step.error is None else {"type": type(step.error).__name__, "message": str(step.error)}
            usage = step.token_usage
            saved.append(
                {
                    "step": step.step_number,
                    "reply": message_to_dict(_reply_of(step)),
                    "final": step.is_final_answer,
                    "tool_calls": [c.dict() for c in step.tool_calls or []],
                    "observations": step.observations,
                    "error": error,
                    "tokens": None if usage is None else [usage.input_tokens, usage.output_tokens],
                }
            )
    return saved


def load_memory(agent: ToolCallingAgent, saved: list[dict[str, Any]]) -> None:
    """Put saved steps back into a fresh agent's memory (an error comes back as a plain `AgentError`)."""
    from smolagents import ChatMessage
    from smolagents.memory import ActionStep, TaskStep, Timing, TokenUsage
    from smolagents.memory import ToolCall as SmolCall
    from smolagents.models import MessageRole
    from smolagents.utils import AgentError

    agent.memory.reset()
    for item in saved:
        if "task" in item:
            agent.memory.steps.append(TaskStep(task=str(item["task"])))
            continue
        reply = messages_from_dict([item["reply"]])[0]
        error, tokens = item.get("error"), item.get("tokens")
        calls = [SmolCall(c["function"]["name"], c["function"]["arguments"], c["id"]) for c in item["tool_calls"]]
        agent.memory.steps.append(
            ActionStep(
                step_number=int(item["step"]),
                timing=Timing(start_time=0.0, end_time=0.0),
                model_output_message=ChatMessage(MessageRole.ASSISTANT, content=reply.text or None, raw=reply),
                model_output=reply.text or None,
                tool_calls=calls or None,
                observations=item.get("observations"),
                error=None if error is None else AgentError(str(error["message"]), agent.logger),
                token_usage=None if tokens is None else TokenUsage(input_tokens=tokens[0], output_tokens=tokens[1]),
                is_final_answer=bool(item.get("final")),
            )
        )


FORMAT = "smolagents-memory/1"
"""The `format` of a saved conversation file: smolagents' memory steps as `save_memory` writes them."""


def read_saved(path: Path, customer_id: str | None = None) -> list[dict[str, Any]]:
    """The memory steps saved at `path`; ValueError for a damaged file, `CustomerMismatch` for another customer's."""
    steps = read_document(path, FORMAT, customer_id, "saved smolagents conversation").get("steps")
    if not isinstance(steps, list):
        raise ValueError(f"{path} is a damaged saved smolagents conversation (its steps are no list)")
    return steps


class SmolagentsConversation(WholeTurns):
    """Several turns on one `ToolCallingAgent` (a `shared_tools.conversation.Conversation`): each turn is
    ``run(reset=False)`` on its memory, written to a JSON file (None: memory only) after every turn, a cut one
    included, and read back when the conversation is reopened. smolagents has no approval pause and no rewind."""

    def __init__(
        self,
        contender: SmolagentsContender,
        instructions: str,
        path: Path | None = None,
        customer_id: str | None = None,
    ) -> None:
        self.contender = contender
        self.instructions = instructions
        self.path = self.kept_in = path
        self.customer_id = customer_id
        self.watch = _RunWatch(contender.options, frozenset(contender.tools))
        self.agent = self.watch.agent = contender.agent(instructions, self.watch)
        self.turn = OneTurnAtATime()
        self.started = False
        if path is not None and path.exists():
            _read_steps(path, customer_id)  # a damaged file is one ValueError here, never a KeyError mid-load
            load_memory(self.agent, read_saved(path, customer_id))
            self.started = True

    async def aopen(self, *, resume: bool) -> None:
        pass  # a fresh conversation's file is removed before it is read (`open_conversation`)

    def ask(self, question: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """One turn to its end (smolagents runs sync; `aask` runs it in a worker thread)."""
        self.watch.trace, self.watch.model_calls, self.watch.cancelled = [], 0, False
        self.watch.cancel = cancel
        try:
            return run_turn(self.agent, question, self.watch, reset=not self.started)
        finally:
            self.started = True
            self.save()

    async def aask(self, question: str, *, cancel: threading.Event | None = None) -> AgentResult:
        # The run checks the cancel event before each model call.
        return await in_worker_thread(self.turn, self.ask, question, cancel)

    def resume(self, approved: Any, *, cancel: threading.Event | None = None) -> AgentResult:
        raise ValueError(f"smolagents: {NOT_AVAILABLE['needs_approval']}, so there is no pause to resume")

    async def aresume(self, approved: Any, *, cancel: threading.Event | None = None) -> AgentResult:
        return self.resume(approved, cancel=cancel)

    def rewind(self, turns: int = 1) -> Rewound:
        raise NoRewind("smolagents' memory keeps no rewind of ours: nothing was changed")

    async def arewind(self, turns: int = 1) -> Rewound:
        return self.rewind(turns)

    def save(self) -> None:
        if self.path is None:
            return
        data = {
            "format": FORMAT,
            "customer": self.customer_id,
            "instructions": self.instructions,
            "steps": save_memory(self.agent),
        }
        write_atomically(self.path, json.dumps(data, ensure_ascii=False).encode("utf-8"))

    @property
    def messages(self) -> list[BaseMessage]:
        return [SystemMessage(self.agent.system_prompt), *history(self.agent.memory.steps)]

    async def amessages(self) -> list[BaseMessage]:
        return self.messages

    def close(self) -> None:
        pass


NO_POSTGRES = "smolagents keeps its memory in the agent object; here it is a JSON file, with no Postgres store"
NO_WINDOW = "smolagents sends the whole memory every step: it has no window of turns or summary of its own"
KEPT = KeptBeside("smolagents", ".smolagents.json", NO_POSTGRES, NO_WINDOW)


def _read_steps(path: Path, customer_id: str | None) -> None:
    """Check a saved file whole without keeping it (`acheck_saved`): each step readable as `load_memory` reads it."""
    for item in read_saved(path, customer_id):
        try:
            if not isinstance(item, dict):
                raise TypeError(f"a step is a {type(item).__name__}, not an object")
            if "task" in item:
                continue
            messages_from_dict([item["reply"]])
            int(item["step"])
            [(c["function"]["name"], c["function"]["arguments"], c["id"]) for c in item["tool_calls"]]
            error, tokens = item.get("error"), item.get("tokens")
            _ = None if error is None else str(error["message"])
            _ = None if tokens is None else (int(tokens[0]), int(tokens[1]))
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ValueError(
                f"{path} is a damaged saved smolagents conversation ({type(exc).__name__}: {exc})"
            ) from None


async def aopen_conversation(
    agent: SmolagentsContender,
    instructions: str,
    thread_id: str,
    where: Path | str | None,
    *,
    resume: bool,
    **opening: Unpack[Opening],
) -> SmolagentsConversation:
    """The conversation `thread_id`, in memory (`where` None) or in a JSON file beside the session database
    `where`; a fresh one (not `resume`) replaces the file's. smolagents has no approval gate (`approve` is unused),
    no window or summary, and a file has no storage options."""
    path = KEPT.opened(where, thread_id, resume=resume, policy=opening.get("policy"))
    return SmolagentsConversation(agent, instructions, path, opening.get("customer_id"))


async def acheck_saved(where: Path | str, thread_id: str, customer_id: str | None) -> None:
    """Raise ValueError (`CustomerMismatch` among them) when the file of `thread_id` beside `where` is damaged or
    another customer's. Reads, never writes."""
    path = KEPT.saved(where, thread_id)
    if path is not None and path.exists():
        _read_steps(path, customer_id)


# --- the declaration ------------------------------------------------------------------------------------------------


def build(model: BaseChatModel, tools: list[BaseTool], options: AgentOptions, approve: Approve | None) -> Contender:
    """smolagents has no approval gate: `approve` is never asked (`SPEC.approval` is none)."""
    return SmolagentsContender(model, tools, options)


SPEC = ContenderSpec(
    name="smolagents",
    description="Hugging Face smolagents' ToolCallingAgent: its own step loop and max_steps (then one forced "
    "answer), its memory kept between turns in a JSON file",
    requirement="smolagents==1.26.0",
    build=build,
    approval=Approval.NONE,
    capabilities=frozenset({Capability.SEQUENTIAL_TOOLS}),
    guards={"step limit": "max_steps", "unknown tool": "execute_tool_call's 'Unknown tool' error, fed back"},
    lacks={
        Capability.APPROVAL: NOT_AVAILABLE["needs_approval"],
        Capability.REWIND: "smolagents' memory is a list of steps with no rewind of its own, and none is added here",
        Capability.REPLAY: "smolagents keeps no checkpoints: its memory holds the steps, with nothing to replay from",
        Capability.STREAMING: "the bridge calls the chat model whole (Model.generate): smolagents streams only "
        "through generate_stream, which it does not implement",
        Capability.HISTORY_WINDOW: NO_WINDOW,
        Capability.SUMMARY: NO_WINDOW,
        Capability.STORAGE_OPTIONS: "the memory is one JSON file, rewritten after each turn: no storage options",
    },
    conversation="frameworks.smolagents",
    order=8,
    source_modules=("frameworks.smolagents",),
    owner="smolagents",
    owns={
        "loop": "framework: MultiStepAgent's step loop (ToolCallingAgent)",
        "tool invocation": "framework: a reply's calls in a thread pool (max_tool_threads=1 here runs them in order)",
        "error handling": "framework: every tool error fed back with its exception text; no call id reaches a tool",
        "step limit": "max_steps (default 20), then one more call without tools whose text is returned",
        "token budget": "nobody",
        "time budget": "nobody",
        "reply cap": "nobody (the model's own max_tokens, if any)",
        "repeat check": "nobody",
        "session memory": "agent.memory, run(reset=False)",
        "persistence": "you (a JSON file of the memory steps here)",
        "stale reads": "you",
        "human approval": "nobody",
        "tracing (OTel spans)": "nobody in the package (OpenInference instruments it from outside)",
    },
)

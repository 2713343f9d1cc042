"""What every framework adapter does alike: the agent's model, tools by unique name and options, the options its
framework cannot honour, and one run's trace lines and counts as its bridges see the model and the tools.

Each adapter keeps its own model bridge, loop call, limits, approval and conversation; these are the parts that
were the same in all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Self

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolCall
from langchain_core.tools import BaseTool

from shared_tools import guards
from shared_tools.results import AgentOptions, Approve, Guard, RunUsage, StopReason, TraceEvent

ASKED: dict[str, Callable[[AgentOptions], bool]] = {
    "max_tokens": lambda o: o.limits.max_tokens is not None,
    "max_duration": lambda o: o.limits.max_duration is not None,
    "max_repeats": lambda o: o.limits.max_repeats is not None,
    "max_consecutive_errors": lambda o: o.limits.max_consecutive_errors is not None,
    "max_tool_result_chars": lambda o: o.max_tool_result_chars is not None,
    "detailed_errors": lambda o: not o.detailed_errors,  # asked to hide errors: a framework that always shows them
    "needs_approval": lambda o: o.needs_approval is not None,
    "on_token": lambda o: o.on_token is not None,
}
"""Option name -> whether `AgentOptions` asks for it (a framework's `NOT_AVAILABLE` table names some of these)."""


def not_honoured(table: Mapping[str, str], options: AgentOptions) -> dict[str, str]:
    """The options of `table` (name -> why the framework cannot honour it) that `options` ask for, in its order."""
    return {name: why for name, why in table.items() if ASKED[name](options)}


def tools_by_name(tools: Sequence[BaseTool]) -> dict[str, BaseTool]:
    """The tools by name; ValueError when two share one (a framework would call only one of them)."""
    named = {tool.name: tool for tool in tools}
    if len(named) != len(tools):
        raise ValueError("tool names must be unique: " + ", ".join(tool.name for tool in tools))
    return named


class BridgedAgent:
    """The bookstore agent on a framework's own loop: the chat model, our tools by unique name, the options, and
    `approve`, the human behind `options.needs_approval`. `not_available`: the options of the class's
    `NOT_AVAILABLE` table these ask for."""

    NOT_AVAILABLE: ClassVar[Mapping[str, str]] = {}

    def __init__(
        self,
        model: BaseChatModel,
        tools: Sequence[BaseTool],
        options: AgentOptions = AgentOptions(),  # noqa: B008 - frozen, so one shared default is safe
        *,
        approve: Approve | None = None,
    ) -> None:
        self.model = model
        self.options = options
        self.approve = approve
        self.tools = tools_by_name(tools)

    @property
    def not_available(self) -> dict[str, str]:
        """The options these `AgentOptions` ask for that the framework cannot honour, each with the reason."""
        return not_honoured(self.NOT_AVAILABLE, self.options)

    def answered_by(self, approve: Approve | None) -> Self:
        """This agent, or the same one with `approve` as its human when it was built without one (a conversation
        opened with a human of its own)."""
        if approve is None or self.approve is not None:
            return self
        return type(self)(self.model, list(self.tools.values()), self.options, approve=approve)


def answer_or_invalid(output: object) -> tuple[StopReason, str | None]:
    """A run's final output as (DONE, its text), or INVALID_RESPONSE when it holds no text to answer with."""
    answer = output.strip() if isinstance(output, str) else None
    return (StopReason.DONE if answer else StopReason.INVALID_RESPONSE), answer


@dataclass
class RunLines:
    """One run's trace, each line given to `options.on_event` as it is written."""

    options: AgentOptions
    trace: list[TraceEvent] = field(default_factory=list, kw_only=True)

    def emit(self, event: TraceEvent) -> None:
        self.trace.append(event)
        if self.options.on_event is not None:
            self.options.on_event(event)


@dataclass
class StepLines(RunLines):
    """Trace lines numbered by model call, for a framework whose usage is read off the trace afterwards."""

    model_calls: int = field(default=0, kw_only=True)

    def model_replied(self, reply: AIMessage, duration_s: float) -> None:
        self.model_calls += 1
        self.emit(guards.model_event(self.model_calls, reply, duration_s))


@dataclass
class CountedRun(RunLines):
    """Trace lines with the run's counts kept as they happen, and each call of a reply known by its id: the step
    that asked for it, and whether its line is written yet."""

    usage: RunUsage = field(default_factory=RunUsage, kw_only=True)
    calls: dict[str, ToolCall] = field(default_factory=dict, kw_only=True)
    steps: dict[str, int] = field(default_factory=dict, kw_only=True)
    traced: set[str] = field(default_factory=set, kw_only=True)

    def model_called(self, reply: AIMessage, seconds: float) -> None:
        """Count one model call and write its line; its calls (runnable or not) are remembered by id."""
        self.usage.model_calls += 1
        step = self.usage.model_calls
        for call in [*reply.tool_calls, *reply.invalid_tool_calls]:
            if call["id"]:
                self.calls[call["id"]] = ToolCall(name=call["name"] or "", args=call.get("args") or {}, id=call["id"])
                self.steps[call["id"]] = step
        event = guards.model_event(step, reply, seconds)
        self.usage.tokens += event.tokens
        self.emit(event)

    def tool_line(self, call: ToolCall, text: str, seconds: float, *, is_error: bool, guard: Guard | None) -> None:
        """Count one answered call and write its line, under the step that asked for it."""
        self.traced.add(call["id"])
        self.usage.tool_calls += 1
        step = self.steps.get(call["id"], self.usage.model_calls)
        self.emit(guards.tool_event(step, call, text, seconds, is_error=is_error, guard=guard))

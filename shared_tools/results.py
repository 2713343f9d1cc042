"""The contract both agents share: options and limits in, a result with an honest stop reason out.

`AgentOptions` are the knobs both agents take; `AgentLimits` the budgets (``None``: no limit), judged by
`AgentLimits.check` on the `RunUsage` spent. `StopReason` says why a run ended as a value; `TraceEvent` is one
trace line with the deciding `Guard` as a typed field; `AgentResult` is what every agent returns; `Token` is one
streamed piece of a reply.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypedDict

from langchain_core.messages import BaseMessage, ToolCall

from shared_tools.replies import whole_text

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider


class StopReason(StrEnum):
    """Why a run ended. The first one finished the job; every other one gave up."""

    DONE = "done"
    MAX_STEPS = "max steps reached"
    TOKEN_BUDGET = "token budget exceeded"
    TIME_BUDGET = "time budget exceeded"
    CANCELLED = "cancelled"
    INVALID_RESPONSE = "invalid model response"
    TOO_MANY_ERRORS = "too many consecutive tool errors"
    AWAITING_APPROVAL = "awaiting approval"
    """Paused, not finished: a tool call needs a human's yes or no (`AgentResult.pending` says which)."""


class RunStopped(Exception):
    """Ends a run from wherever the reason is found; the agent catches it once and builds the result from it.

    The hand-written loop ends every run this way (a final answer included), as mini-swe-agent does; the
    graphs end through their state instead and raise it only where a graph has no state to stop through.
    """

    def __init__(self, reason: StopReason, answer: str | None = None) -> None:
        super().__init__(reason.value)
        self.reason = reason
        self.answer = answer


class ConcurrentTurn(RuntimeError):
    """Another process kept the turn of this conversation longer than this session would wait for it (both
    agents' sessions on a SQLite file or on Postgres): ask again when it has finished."""


class CustomerMismatch(ValueError):
    """A conversation was opened for another customer than the one it belongs to (every session refuses it
    through `shared_tools.conversation.check_owner`): it holds that customer's name, address and cart."""


@dataclass
class RunUsage:
    """What one run has spent so far. A fresh one per run is what makes every budget per run (per question)."""

    model_calls: int = 0
    tool_calls: int = 0
    tokens: int = 0
    error_rounds: int = 0
    """Tool rounds in a row that had at least one error result (a clean round resets it)."""
    started: float = field(default_factory=time.monotonic)
    """`time.monotonic()` when the run started."""

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def end_round(self, had_error: bool) -> None:
        """Count a finished tool round: consecutive error rounds go up, or back to zero."""
        self.error_rounds = self.error_rounds + 1 if had_error else 0

    def since(self, earlier: RunUsage) -> RunUsage:
        """What was spent after `earlier` (the counters of the same run at a checkpoint it went on from)."""
        return RunUsage(
            model_calls=self.model_calls - earlier.model_calls,
            tool_calls=self.tool_calls - earlier.tool_calls,
            tokens=self.tokens - earlier.tokens,
            error_rounds=self.error_rounds,
            started=self.started,
        )

    @classmethod
    def of_trace(cls, trace: Iterable[TraceEvent]) -> RunUsage:
        """The counts a trace shows: for agents whose framework keeps no counters of its own."""
        usage = cls()
        for event in trace:
            if event.is_model:
                usage.model_calls += 1
                usage.tokens += event.tokens
            else:
                usage.tool_calls += 1
        return usage


@dataclass(frozen=True, kw_only=True)
class AgentLimits:
    """Budgets for one run (one `run`/`ask`). ``None`` switches a limit off."""

    max_steps: int | None = 6
    """Model calls per run. The tool calls of the last step still run, as in the article's loop."""
    max_tokens: int | None = 20_000
    """Total tokens (input + output, summed over every model call), checked after each tool round."""
    max_duration: float | None = None
    """Wall-clock seconds for the whole run. Checked after each tool round, and each model call is also cut off
    by what is left of it, so a reply that never comes still stops the run (TIME_BUDGET)."""
    max_repeats: int | None = 2
    """How often one tool may run with the same arguments; later identical calls get an error."""
    max_consecutive_errors: int | None = 3
    """Tool rounds in a row that contain an error before the run stops (3, as in FunctionInvokingChatClient, the
    .NET piece that runs tools in the article)."""

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_tokens", "max_duration", "max_repeats", "max_consecutive_errors"):
            value = getattr(self, name)
            lowest = 1 if name == "max_steps" else 0
            if value is not None and value < lowest:
                raise ValueError(f"AgentLimits.{name} must be None or >= {lowest}, got {value!r}")

    def check(self, usage: RunUsage) -> StopReason | None:
        """Why the run must stop after a tool round, or None to ask the model again.

        One order for both agents: consecutive error rounds, tokens, time, then steps, so a run that is both
        out of steps and over its token budget says "token budget exceeded" in either loop.
        """
        if self.too_many_errors(usage.error_rounds):
            return StopReason.TOO_MANY_ERRORS
        if self.max_tokens is not None and usage.tokens > self.max_tokens:
            return StopReason.TOKEN_BUDGET
        if self.max_duration is not None and usage.elapsed > self.max_duration:
            return StopReason.TIME_BUDGET
        if self.max_steps is not None and usage.model_calls >= self.max_steps:
            return StopReason.MAX_STEPS
        return None

    def too_many_errors(self, consecutive_error_rounds: int) -> bool:
        return self.max_consecutive_errors is not None and consecutive_error_rounds > self.max_consecutive_errors

    def time_left(self, usage: RunUsage) -> float | None:
        """Seconds left of the time budget (may be negative), or None without one; bounds each model call."""
        return None if self.max_duration is None else self.max_duration - usage.elapsed

    def reply_cap(self, usage: RunUsage) -> int | None:
        """The most output tokens the next reply may use: what is left of `max_tokens` (at least 1), or None.

        The budget is judged on replies that have arrived; told this cap, a model cannot write past it while it
        writes (a reply that never ends). The prompt's own tokens are known only once the reply is in.
        """
        return None if self.max_tokens is None else max(1, self.max_tokens - usage.tokens)

    def unusable_reply_reason(self, usage: RunUsage) -> StopReason:
        """Why a run ends on an unusable reply: the token budget when that reply took the run over it (it was
        cut at `reply_cap`), else `StopReason.INVALID_RESPONSE`."""
        over = self.max_tokens is not None and usage.tokens > self.max_tokens
        return StopReason.TOKEN_BUDGET if over else StopReason.INVALID_RESPONSE

    def repeat_blocked(self, times_seen_before: int) -> bool:
        """True when a call seen `times_seen_before` times already may not run again."""
        return self.max_repeats is not None and times_seen_before >= self.max_repeats


NeedsApproval = Callable[[ToolCall, Sequence[ToolCall]], str | None]
"""A rule saying which calls a human must approve first: a reason (for the human) or None (just run it). It is
given the call and the calls of the same reply admitted before it, so it can judge what they add up to."""

Approve = Callable[[ToolCall, str], bool]
"""The human behind `NeedsApproval`: asked whether `call` may run, given the reason; True means yes."""

AsyncApprove = Callable[[ToolCall, str], Awaitable[bool]]
"""`Approve` asked in the run's own event loop (a prompt awaited there): the hand-written loop awaits it."""


@dataclass(frozen=True, kw_only=True)
class AgentOptions:
    """How an agent runs, the same for every agent and with the same defaults, documented once here.

    An agent that cannot honour an option says so when it is built (the "LangGraph defaults" graph has no
    approval gate, for example); it never ignores one silently.
    """

    limits: AgentLimits = field(default_factory=lambda: AgentLimits())
    detailed_errors: bool = False
    """Show a tool's own exception text to the model. Off: a generic "X failed." (a `ToolException`'s text,
    written for the model, is always shown), because an exception may carry internals such as a password."""
    parallel_tools: bool = False
    """Run the calls of one reply concurrently. Off, as in the article: one after another, in the model's order.
    Guard decisions are made in call order either way."""
    max_tool_result_chars: int | None = None
    """Cut longer tool results to this many characters and say how much was cut. None: never cut."""
    needs_approval: NeedsApproval | None = None
    """Which calls a human must approve first (see `shared_tools.bookstore.RiskyWritePolicy`)."""
    on_event: Callable[[TraceEvent], None] | None = None
    """Called with each trace line as it happens (from inside the run, so a cancel it sets is seen next)."""
    on_token: Callable[[Token], None] | None = None
    """Called with each `Token` of the model's reply as it arrives: the model is streamed (the hand-written loop
    merges the chunks itself, the graphs use LangGraph's ``stream_mode="messages"``). None: the model is called
    without streaming, which is faster. The merged reply is the same either way, so are the guards, the trace
    and the result. Called from inside the run, in order, so a cancel it sets stops the stream at the next
    chunk: the cut reply is not kept (the trace says `Guard.MODEL_CANCELLED`). Tokens of a reply come before
    its trace line (`on_event`); a reply that also calls tools may have text too, so join the ANSWER tokens
    of the last step (`Token.step`) for the final answer."""
    tracer_provider: TracerProvider | None = None
    """Where the run's OpenTelemetry spans go (`shared_tools.telemetry`). None: OpenTelemetry's global provider,
    which records nothing until an SDK is set up (`compare.py --otel`)."""
    stale_reads: bool = True
    """Before each model call, mark the results in the history whose data has changed since they read it (the
    cart, written by another process between turns), so the model reads it again instead of answering from a
    copy (`guards.stale_readings`, `Guard.STALE_READ`). It costs the note's tokens on each call after, and a
    model that heeds it makes one more tool round. Off: the model is sent its history as it was."""


class OptionKeywords(TypedDict, total=False):
    """The fields of `AgentOptions`, as keywords: ``AgentLoop(model, tools, AgentLimits(...), parallel_tools=True)``."""

    limits: AgentLimits
    detailed_errors: bool
    parallel_tools: bool
    max_tool_result_chars: int | None
    needs_approval: NeedsApproval | None
    on_event: Callable[[TraceEvent], None] | None
    on_token: Callable[[Token], None] | None
    tracer_provider: TracerProvider | None
    stale_reads: bool


def agent_options(agent: str, given: object, keywords: dict[str, Any]) -> AgentOptions:
    """The `AgentOptions` an agent's constructor was given: an `AgentOptions`, an `AgentLimits` (the article's
    ``new AgentLoop(client, tools, limits)``), nothing, and/or option keywords; anything else is a `TypeError`
    that says what to pass."""
    example = f"{agent}(model, tools, AgentLimits(max_steps=5), parallel_tools=True)"
    known = [f.name for f in fields(AgentOptions)]
    unknown = sorted(set(keywords) - set(known))
    if unknown:
        limits = [name for name in unknown if name in {f.name for f in fields(AgentLimits)}]
        raise TypeError(
            f"{agent}() got unknown option(s) {', '.join(unknown)}: the options are {', '.join(known)}"
            + (f"; limits such as {limits[0]} go in an AgentLimits, e.g. {example}" if limits else "")
        )
    if given is None or isinstance(given, AgentOptions):
        if given is not None and keywords:
            raise TypeError(
                f"{agent}() got an AgentOptions and the keyword(s) {', '.join(sorted(keywords))}: pass one or the "
                f"other, e.g. {example}"
            )
        return replace(given or AgentOptions(), **keywords)
    if isinstance(given, AgentLimits):
        if "limits" in keywords:
            raise TypeError(f"{agent}() got an AgentLimits and limits=...: pass the limits once, e.g. {example}")
        return AgentOptions(limits=given, **keywords)
    raise TypeError(
        f"{agent}(model, tools, options): options must be an AgentOptions or an AgentLimits, not "
        f"{type(given).__name__}; e.g. {example} or {agent}(model, tools, AgentOptions(limits=AgentLimits(...)))"
    )


STREAM_FALLBACK = "stream_fallback"
"""`response_metadata` key a model sets on the first reply it could not stream (the why, one line)."""


class TokenKind(StrEnum):
    """What a streamed piece of a reply is."""

    ANSWER = "answer"
    """The reply's text: what the user reads (the final answer, or what the model says while calling tools)."""
    PLAN = "plan"
    """A thinking model's reasoning (``additional_kwargs["reasoning_content"]``), which the trace shows as the plan."""


STREAM_FALLBACK = "stream_fallback"
"""`response_metadata` key of the first reply a model served whole because its server refused to stream (why)."""


@dataclass(frozen=True, slots=True)
class Token:
    """One streamed piece of a model reply, given to `AgentOptions.on_token` as it arrives."""

    text: str
    kind: TokenKind = TokenKind.ANSWER
    step: int = 1
    """The model call it belongs to, numbered as on the trace (`TraceEvent.step`), so replies can be told apart."""

    def __post_init__(self) -> None:
        # A piece is shown as it arrives, before the reply is whole: half of a split emoji cannot be joined to
        # its other half here (the kept reply has it whole, `replies.checked_reply`), and would fail to encode.
        object.__setattr__(self, "text", whole_text(self.text))

    @staticmethod
    def of_chunk(chunk: BaseMessage, step: int) -> list[Token]:
        """The plan and text pieces a streamed chunk carries (a model that cannot stream sends one whole reply)."""
        tokens: list[Token] = []
        plan = chunk.additional_kwargs.get("reasoning_content")
        if isinstance(plan, str) and plan:
            tokens.append(Token(plan, TokenKind.PLAN, step))
        if text := chunk.text:
            tokens.append(Token(text, TokenKind.ANSWER, step))
        return tokens


class Guard(StrEnum):
    """Which guard decided a tool result, as a fact on the trace line (`TraceEvent.guard`)."""

    UNKNOWN_TOOL = "unknown tool"
    REPEAT = "repeated call"
    INVALID_ARGS = "invalid arguments"
    APPROVAL_REFUSED = "approval refused"
    ERROR_HIDDEN = "error details hidden"
    TRUNCATED = "result truncated"
    CANCELLED = "cancelled before it ran"
    MODEL_TIMEOUT = "model call cut by the time budget"
    MODEL_CANCELLED = "model reply cut by a cancel"
    TOOL_TIMEOUT = "tool call cut by the time budget"
    """The time budget ran out while the call was running (it may have completed) or before it started."""
    REPLY_CAPPED = "reply cut at the token budget"
    """The reply ran out of the output tokens left of the token budget (`AgentLimits.reply_cap`)."""
    STREAM_FALLBACK = "streaming refused: plain call"
    """The server refused to stream a reply with tools; this model's calls go unstreamed from here on."""
    STALE_READ = "stale read flagged"
    """On a model call: results in its history read data (the cart) that has changed since, and were sent to it
    marked out of date, with the tool that reads it again (`guards.stale_readings`)."""


class _WrittenWhenRead:
    """A text field that may be given a function making the text instead: called once, when it is first read.

    A trace line's detail is masked text (personal data, credentials) of every tool result, which costs more than
    the rest of the loop's own bookkeeping; most lines of most runs are never shown, so `TraceEvent.deferred`
    leaves the work until someone reads the detail. Reading it is the same either way (`asdict`, `==` and `repr`
    read it too).
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = f"_{name}"

    def __get__(self, event: object, owner: type | None = None) -> str:
        if event is None:
            raise AttributeError(self.slot)  # no default: the dataclass field stays required
        value = event.__dict__[self.slot]
        if not isinstance(value, str):
            value = event.__dict__[self.slot] = value()
        return value

    def __set__(self, event: object, value: str | Callable[[], str]) -> None:
        event.__dict__[self.slot] = value


@dataclass(frozen=True)
class TraceEvent:
    """One trace line: a model call (``name == "model"``) or one tool call."""

    step: int
    name: str
    duration_s: float
    detail: str = _WrittenWhenRead()  # type: ignore[assignment]  # a str to every reader
    tokens: int = 0
    """For a model call: the tokens that call used (input + output). 0 for tool calls."""
    is_error: bool = False
    """For a tool call: the model was given an error result."""
    guard: Guard | None = None
    """The guard that decided this result (None: the tool ran and its result went back as it was)."""
    ended_at: float = field(default_factory=time.time, compare=False, repr=False)
    """When the line was made, on the wall clock (`time.time()`): the end of its call, which began `duration_s`
    before (`started_at`). What a picture of the run on a time axis is drawn from."""

    @property
    def started_at(self) -> float:
        return self.ended_at - self.duration_s

    @classmethod
    def deferred(
        cls,
        step: int,
        name: str,
        duration_s: float,
        make_detail: Callable[[], str],
        *,
        tokens: int = 0,
        is_error: bool = False,
        guard: Guard | None = None,
    ) -> TraceEvent:
        """An event whose detail is made by `make_detail` when it is first read (a pure function of what it
        closes over, so when it runs changes nothing)."""
        event = cls(step, name, duration_s, "", tokens, is_error, guard)
        object.__setattr__(event, "detail", make_detail)
        return event

    def __getstate__(self) -> dict[str, Any]:
        """What pickling keeps: the detail made, not the function that makes it (which may not pickle)."""
        _ = self.detail
        return dict(self.__dict__)

    @property
    def is_model(self) -> bool:
        return self.name == "model"

    def line(self) -> str:
        """The event as one plain-text trace line, as the agents log it."""
        tokens = f" [{self.tokens} tokens]" if self.is_model else ""
        error = " [error]" if self.is_error else ""
        guard = f" [{self.guard}]" if self.guard else ""
        return f"[step {self.step}] {self.name:<16} {self.duration_s:7.3f}s  {self.detail}{tokens}{error}{guard}"


_USER_MESSAGES: dict[StopReason, str] = {
    StopReason.MAX_STEPS: "I couldn't finish this within the allowed number of steps. "
    "Part of the request may not be done; please check what was done before relying on it.",
    StopReason.TOKEN_BUDGET: "I stopped because this request used more than its budget. "
    "Part of it may not be done; please check what was done before relying on it.",
    StopReason.TIME_BUDGET: "I stopped because this took longer than allowed. "
    "Part of the request may not be done; please check what was done before relying on it.",
    StopReason.CANCELLED: "The request was cancelled before it finished.",
    StopReason.INVALID_RESPONSE: "Something went wrong while answering; nothing more was done.",
    StopReason.TOO_MANY_ERRORS: "I kept running into errors and stopped. "
    "Part of the request may not be done; please try again later.",
    StopReason.AWAITING_APPROVAL: "I need your approval before I go on; nothing more is done until you answer.",
}


@dataclass
class AgentResult:
    """What a run produced and why it stopped."""

    stop_reason: StopReason
    answer: str | None
    """The model's final text; ``None`` unless the run is `StopReason.DONE`."""
    steps: int
    """Model calls made in this run (the article's "steps")."""
    tokens: int
    model_calls: int
    tool_calls: int
    trace: list[TraceEvent] = field(default_factory=list)
    messages: list[BaseMessage] = field(default_factory=list)
    """The whole history after the run, system message first."""
    pending: list[dict[str, Any]] | None = None
    """With AWAITING_APPROVAL: the approval requests the run paused on, each
    ``{"tool_call": {"id", "name", "args"}, "reason": str}``; None otherwise."""
    forced_answer: str | None = None
    """A text the framework forced out of the model after a limit ended its tool loop (one more call with tools
    disabled); never the `answer`, since the run did not finish. None otherwise."""

    @classmethod
    def of_run(
        cls,
        reason: StopReason,
        usage: RunUsage,
        *,
        answer: str | None,
        trace: list[TraceEvent],
        messages: list[BaseMessage],
        pending: list[dict[str, Any]] | None = None,
    ) -> AgentResult:
        """The result of a run that spent `usage` (both agents build theirs here)."""
        return cls(
            stop_reason=reason,
            answer=answer,
            steps=usage.model_calls,
            tokens=usage.tokens,
            model_calls=usage.model_calls,
            tool_calls=usage.tool_calls,
            trace=trace,
            messages=messages,
            pending=pending,
        )

    @property
    def ok(self) -> bool:
        return self.stop_reason is StopReason.DONE

    @property
    def tokens_per_step(self) -> list[int]:
        """Tokens of each model call in order; it grows because every call re-sends the history."""
        return [e.tokens for e in self.trace if e.is_model]

    def user_message(self) -> str:
        """What to show the customer: the answer when done, an honest sentence otherwise."""
        if self.stop_reason is StopReason.DONE and self.answer:
            return self.answer
        return _USER_MESSAGES.get(self.stop_reason, "The request did not finish.")

"""The contract both agents return: limits in, a result with an honest stop reason out.

`AgentLimits` is the one place where budgets live (``None`` means "no limit"), `StopReason` says
why a run ended as a value a program can branch on (never only text in a message), `TraceEvent`
is one line of the per-step trace, and `AgentResult` is what `handwritten.AgentLoop` and
`langgraph_version.GraphAgent` both return, so `compare.py` can put them side by side without
knowing which one produced a result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from langchain_core.messages import BaseMessage


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


@dataclass(frozen=True, kw_only=True)
class AgentLimits:
    """Budgets for one run (one `run`/`ask`). ``None`` switches a limit off."""

    max_steps: int | None = 6
    """Model calls per run. The tool calls of the last step still run, as in the seed's loop."""
    max_tokens: int | None = 20_000
    """Total tokens (input + output, summed over every model call), checked after each tool round."""
    max_duration: float | None = None
    """Wall-clock seconds for the whole run. Checked after each tool round, and each model call is also cut off
    by what is left of it, so a reply that never comes still stops the run (TIME_BUDGET)."""
    max_repeats: int | None = 2
    """How often one tool may run with the same arguments; later identical calls get an error."""
    max_consecutive_errors: int | None = 3
    """Tool rounds in a row that contain an error before the run stops (FunctionInvokingChatClient: 3)."""

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_tokens", "max_duration", "max_repeats", "max_consecutive_errors"):
            value = getattr(self, name)
            lowest = 1 if name == "max_steps" else 0
            if value is not None and value < lowest:
                raise ValueError(f"AgentLimits.{name} must be None or >= {lowest}, got {value!r}")

    def exceeded_tokens(self, tokens: int) -> bool:
        return self.max_tokens is not None and tokens > self.max_tokens

    def exceeded_duration(self, elapsed_s: float) -> bool:
        return self.max_duration is not None and elapsed_s > self.max_duration

    def exceeded_errors(self, consecutive_error_rounds: int) -> bool:
        return self.max_consecutive_errors is not None and consecutive_error_rounds > self.max_consecutive_errors

    def repeat_blocked(self, times_seen_before: int) -> bool:
        """True when a call seen `times_seen_before` times already may not run again."""
        return self.max_repeats is not None and times_seen_before >= self.max_repeats


@dataclass(frozen=True)
class TraceEvent:
    """One trace line: a model call (``name == "model"``) or one tool call."""

    step: int
    name: str
    duration_s: float
    detail: str
    tokens: int = 0
    """For a model call: the tokens that call used (input + output). 0 for tool calls."""
    is_error: bool = False
    """For a tool call: the model was given an error result."""

    @property
    def is_model(self) -> bool:
        return self.name == "model"


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
    """Model calls made in this run (the seed's "steps")."""
    tokens: int
    model_calls: int
    tool_calls: int
    trace: list[TraceEvent] = field(default_factory=list)
    messages: list[BaseMessage] = field(default_factory=list)
    """The whole history after the run, system message first."""
    pending: list[dict[str, Any]] | None = None
    """With AWAITING_APPROVAL: the approval requests the run paused on, each
    ``{"tool_call": {"id", "name", "args"}, "reason": str}``; None otherwise."""

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

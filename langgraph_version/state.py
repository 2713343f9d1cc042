"""What the graph remembers and what a run carries beside it.

`AgentState` is the graph state of the guarded agent: the message history (merged by
`add_messages`, so nodes return only what they add) plus the per-run counters the hand-written loop
keeps in local variables: model calls, tool calls, tokens, consecutive error rounds, the repeat
counts and the start time. The stop reason is state too, so the caller reads *why* a run ended as a
value instead of parsing a message. Counters have no reducer: exactly one node writes each of them
per superstep, and each run starts them from `fresh_counters()`, so a session's second `ask` gets
fresh budgets while its messages persist. `RunContext` holds what cannot (or must not) be
checkpointed: the caller's cancel event and the trace callback.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages
from langgraph.managed import RemainingSteps

from shared_tools.results import StopReason, TraceEvent


class AgentState(TypedDict):
    """The guarded agent's graph state; everything except `messages` is per run."""

    messages: Annotated[list[AnyMessage], add_messages]
    remaining_steps: RemainingSteps
    """Managed by LangGraph (recursion limit minus supersteps so far); read, never written."""
    model_calls: int
    tool_calls: int
    tokens: int
    consecutive_error_rounds: int
    seen_calls: dict[str, int]
    """How often each `guards.call_key` was requested in this run, blocked calls included."""
    started_at: float
    """`time.monotonic()` when the run started; only meaningful inside the process that runs it."""
    stop_reason: str | None
    """A `StopReason` value once the run has decided to end. Stored as plain text because checkpoints
    should hold no project types (the checkpoint serializer warns about unregistered classes)."""


def fresh_counters() -> dict[str, Any]:
    """The per-run part of `AgentState`, reset at the start of every run or ask."""
    return {
        "model_calls": 0,
        "tool_calls": 0,
        "tokens": 0,
        "consecutive_error_rounds": 0,
        "seen_calls": {},
        "started_at": time.monotonic(),
        "stop_reason": None,
    }


def stopped(reason: StopReason) -> dict[str, Any]:
    """The state update that ends the run for `reason`; the routers send the graph to END."""
    return {"stop_reason": reason.value}


@dataclass(frozen=True)
class RunContext:
    """Run-scoped inputs that are not state: passed as LangGraph's `context=` to every node."""

    cancel: threading.Event | None = None
    on_event: Callable[[TraceEvent], None] | None = None
    """Called inside the node, before the node goes on, so a cancel set here is seen by the next check."""

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

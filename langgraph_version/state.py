"""What the guarded graph remembers: the message history plus the per-run counters, as LangGraph state.

`AgentState` holds the messages (merged by `add_messages`), the counters the loop keeps in `RunUsage` (reset per run
by `fresh_counters`, one writer each, no reducer), the stop reason as a value, and the thread's `customer`.
`usage_of` reads the counters as `RunUsage`, so the graph judges budgets with the loop's `AgentLimits.check`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Annotated, Any, NotRequired, TypedDict

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages
from langgraph.managed import RemainingSteps

from shared_tools.results import RunUsage, StopReason


class AgentState(TypedDict):
    """The guarded agent's graph state; everything except `messages` and `customer` is per run."""

    messages: Annotated[list[AnyMessage], add_messages]
    """The conversation; nodes return only the messages they add. How a session's checkpoints store it is the
    storage's choice (`langgraph_version.checkpoints.messages_channel`)."""
    remaining_steps: RemainingSteps
    """Managed by LangGraph (recursion limit minus supersteps so far); read, never written."""
    model_calls: int
    tool_calls: int
    tokens: int
    consecutive_error_rounds: int
    seen_calls: dict[str, int]
    """How often each `guards.call_key` was requested in this run, blocked calls included."""
    started_at: float
    """Wall-clock time (`time.time()`) the run started, moved on by every stretch that was not the agent's time
    (a human deciding on an approval, a thread lying unfinished after a crash or an outage; see
    `RunContext.started_at`). Wall clock, not monotonic: a paused or unfinished run may go on in another
    process, where another process's monotonic time means nothing."""
    stop_reason: str | None
    """A `StopReason` value once the run has decided to end. Stored as plain text because checkpoints
    should hold no project types (the checkpoint serializer warns about unregistered classes)."""
    customer: NotRequired[str]
    """The customer this conversation belongs to (`GraphSession(customer_id=...)`), kept across runs; absent
    from threads nobody claimed and from `GraphAgent.run`."""


def fresh_counters() -> dict[str, Any]:
    """The per-run part of `AgentState`, reset at the start of every run or ask."""
    return {
        "model_calls": 0,
        "tool_calls": 0,
        "tokens": 0,
        "consecutive_error_rounds": 0,
        "seen_calls": {},
        "started_at": time.time(),
        "stop_reason": None,
    }


def usage_of(state: Mapping[str, Any]) -> RunUsage:
    """The run's counters as the `RunUsage` that `AgentLimits` judges.

    `RunUsage` measures with this process's monotonic clock, so the wall-clock start is turned into the
    monotonic time that lies as far in the past.
    """
    return RunUsage(
        model_calls=state["model_calls"],
        tool_calls=state["tool_calls"],
        tokens=state["tokens"],
        error_rounds=state["consecutive_error_rounds"],
        started=time.monotonic() - (time.time() - state["started_at"]),
    )


def stopped(reason: StopReason) -> dict[str, Any]:
    """The state update that ends the run for `reason`; the routers send the graph to END."""
    return {"stop_reason": reason.value}

"""What the guarded graph remembers: the message history plus the per-run counters, as LangGraph state.

`AgentState` holds the messages (merged by `add_messages`, so nodes return only what they add) and what the
hand-written loop keeps in its `RunUsage` and repeat counts: model calls, tool calls, tokens, consecutive
error rounds, the repeat counts and the start time. The stop reason is state too, so the caller reads *why*
a run ended as a value instead of parsing a message. Counters have no reducer: exactly one node writes each
of them per superstep (nothing else ever writes them: a `Command(update=...)` on a resume is stored on the
paused checkpoint and applied again, with every earlier one, on each later resume), and each run starts them
from `fresh_counters()`, so a session's second `ask` gets fresh budgets while its messages persist. `customer`
is not per run: the thread's owner, written with a session's first turn. `usage_of` reads the counters back
as the shared `RunUsage`, so the graph judges its budgets with the same `AgentLimits.check` as the loop.

How `messages` is checkpointed (issue 13): LangGraph's default channel for a reducer stores the whole list in
every checkpoint, so a thread's storage grows with turns squared (200 turns: 172 MB in SQLite). `messages` is
a `DeltaChannel` instead (BETA in langgraph 1.2: its on-disk form may change): a checkpoint stores only what
was added, and a full copy every `SNAPSHOT_EVERY` updates; reading a state replays the writes since the last
copy. Its reducer must give the same list however LangGraph batches the writes it replays, so it is
`add_messages` folded over the writes one by one (`add_message_batches`), and the ids it gives messages that
have none are derived from the list, not random, so a replay gives every message the id it had when it was
written (a `RemoveMessage` names messages by id). `full_messages_channel()` is LangGraph's default channel,
for a session that asks for it (`GraphSession(storage="full")`).
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

"""What the guarded graph remembers: the message history plus the per-run counters, as LangGraph state.

`AgentState` holds the messages (merged by `add_messages`), the counters the loop keeps in `RunUsage` (reset per run
by `fresh_counters`, one writer each, no reducer), the stop reason as a value, and the thread's `customer`.
`usage_of` reads the counters as `RunUsage`, so the graph judges budgets with the loop's `AgentLimits.check`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, NotRequired, TypedDict

from langchain_core.messages import AnyMessage, BaseMessage
from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.channels.delta import DeltaChannel
from langgraph.graph.message import add_messages
from langgraph.managed import RemainingSteps

from shared_tools.results import RunUsage, StopReason

SNAPSHOT_EVERY = 100
"""Updates of `messages` between two full copies of it in a checkpoint (LangGraph's default): a read replays at
most this many writes; a 200-turn thread of one tool call per turn (4 updates a turn) holds 8 copies."""

MESSAGE_IDS = uuid.UUID("6f1c3c1e-3b8e-4c55-9a55-0d3c8a4f7e21")
"""The namespace of the ids `add_message_batches` derives for messages that arrive without one."""

Storage = Literal["delta", "full"]
"""How a thread's `messages` is checkpointed: "delta" (the `AgentState` channel, a `DeltaChannel`) or "full"
(LangGraph's default channel: the whole list in every checkpoint)."""


def add_message_batches(messages: Sequence[AnyMessage], writes: Sequence[Any]) -> list[AnyMessage]:
    """`add_messages` applied to each write in turn: the `DeltaChannel` reducer.

    A left fold gives the same list however the writes are batched, which `DeltaChannel` requires. A message
    without an id gets one made from the id of the message before it, its position in the write and its
    content, so the same writes replayed onto the same list give the same ids; `add_messages` would give a
    random one on every replay, and a `RemoveMessage` written later would name a message that no longer exists.
    """
    merged: list[AnyMessage] = list(messages)
    for write in writes:
        batch = write if isinstance(write, list) else [write]
        previous = merged[-1].id if merged else ""
        for position, message in enumerate(batch):
            if isinstance(message, BaseMessage) and message.id is None:
                seed = f"{previous}/{position}/{message.type}/{message.content!r}"
                message.id = str(uuid.uuid5(MESSAGE_IDS, seed))
        merged = add_messages(merged, batch)  # type: ignore[assignment]
    return merged


def full_messages_channel() -> BinaryOperatorAggregate:
    """LangGraph's default channel for `messages`: the whole list in every checkpoint (`Storage` "full")."""
    channel = BinaryOperatorAggregate(list, add_messages)
    channel.key = "messages"
    return channel


class AgentState(TypedDict):
    """The guarded agent's graph state; everything except `messages` and `customer` is per run."""

    messages: Annotated[list[AnyMessage], DeltaChannel(add_message_batches, snapshot_frequency=SNAPSHOT_EVERY)]
    """The conversation, checkpointed as deltas (see the module docstring; BETA in langgraph 1.2)."""
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

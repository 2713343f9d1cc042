"""One multi-turn conversation of any contender, opened by the package that keeps it.

`open_conversation` hands the agent to its contender's conversation module (`contenders.CONVERSATION_MODULES`:
`handwritten.kept`, `langgraph_version.conversation`, `maf_version.conversation`), which keeps it in memory, a
file, SQLite or Postgres and returns a `Conversation`; `check_saved_conversation` refuses a bad name or a
damaged or foreign conversation before anything opens. The harness, `chat` and the page use only `Conversation`.
"""

from __future__ import annotations

import uuid
from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import Any

from comparison.approvals import DemoHuman
from comparison.contenders import CONVERSATION_MODULES, Contender
from shared_tools.conversation import (
    Conversation,
    ConversationNotSaved,
    HistoryPolicy,
    check_thread_name,
    resume_until_answered,
    shown_target,
)
from shared_tools.history import Turn
from shared_tools.results import AgentResult, Approve
from shared_tools.sync import run_blocking

__all__ = [
    "NO_MAF_SUMMARY",
    "Conversation",
    "ConversationNotSaved",
    "HistoryPolicy",
    "check_saved_conversation",
    "check_thread_name",
    "facts_of",
    "open_conversation",
    "run_gated_graph",
    "setup_postgres_checkpoints",
    "shown_target",
    "takes_cancel_event",
    "turns_in",
]

NO_MAF_SUMMARY = (
    "MafSession has a window (keep_turns, a HistoryProvider that sends the last turns) but writes no summary: "
    "MAF's own compaction (Agent(compaction_strategy=...)) is not wired into this comparison"
)


def _kept_by(contender: str) -> ModuleType:
    if contender not in CONVERSATION_MODULES:
        raise ValueError(f"unknown contender {contender!r}")
    return import_module(CONVERSATION_MODULES[contender])


def check_saved_conversation(contender: str, thread_id: str, db: Path | str, customer_id: str | None) -> None:
    """Raise ValueError (`CustomerMismatch` among them) when the saved conversation of `thread_id` cannot be
    resumed: a damaged or wrong-shape file, or another customer's conversation. Reads, never writes.

    A file beside `db` (the hand-written session's, MAF's) is read here; a graph thread's customer is checked by
    its session itself, on the first read of the thread, before anything runs or is shown.
    """
    module = _kept_by(contender)
    run_blocking(lambda: module.acheck_saved(db, thread_id, customer_id), instead=f"{module.__name__}.acheck_saved")


def open_conversation(
    contender: str,
    agent: Contender,
    instructions: str,
    thread_id: str,
    db: Path | str | None,
    *,
    resume: bool,
    customer_id: str | None = None,
    approve: Approve | None = None,
    policy: HistoryPolicy | None = None,
    storage: dict[str, Any] | None = None,
) -> Conversation:
    """The contender's conversation; `db` set means persisted: a SQLite file (for a graph; a JSON file beside it
    for the hand-written session and MAF's) or a ``postgresql://`` URL (the thread `thread_id` in that database).

    `customer_id` is recorded with the conversation; `approve` answers the approval pauses of `ask` (the
    hand-written loop was given its own when it was built); `policy` is the history policy; `storage`, the
    checkpoint storage options of a SQLite graph thread (ignored elsewhere).
    """
    module = _kept_by(contender)

    async def aopen() -> Conversation:
        conversation: Conversation = await module.aopen_conversation(
            agent,
            instructions,
            thread_id,
            db,
            resume=resume,
            customer_id=customer_id,
            approve=approve,
            policy=policy,
            storage=storage,
        )
        return conversation

    return run_blocking(aopen, instead=f"{module.__name__}.aopen_conversation(...)")


def facts_of(conversation: Conversation) -> dict[str, Any]:
    """What the conversation holds and where (messages, turns, stored bytes, `kept_in`), for a sync caller."""
    return run_blocking(conversation.afacts, instead="Conversation.afacts()")


def turns_in(conversation: Conversation) -> list[Turn]:
    """The user turns of the conversation, oldest first (with their checkpoints, on a graph), for a sync caller."""
    return run_blocking(conversation.aturns, instead="Conversation.aturns()")


def run_gated_graph(agent: Contender, instructions: str, goal: str, human: DemoHuman) -> AgentResult:
    """Run the graph in a thread of its own; whenever it pauses for approval, the human answers and the run resumes.

    The guarded graph runs in a `GraphSession`; `create_agent` in a checkpointer thread of its own
    (`prebuilt.thread.CheckpointThread`), where `HumanInTheLoopMiddleware`'s pause is answered in its format.
    """
    from langgraph_version.conversation import aopen_conversation

    async def opening() -> Any:
        return await aopen_conversation(agent, instructions, f"approval-{uuid.uuid4().hex[:8]}", None, resume=False)  # type: ignore[arg-type]

    thread = run_blocking(opening, instead="aopen_conversation(...)")
    result, pauses = resume_until_answered(thread.session, thread.session.ask(goal), human.approve)
    human.pauses += pauses
    return result


def takes_cancel_event(session: Any) -> bool:
    """Whether `session`'s calls take the cooperative cancel event: our graph's `GraphSession` does; the
    frameworks' `CheckpointThread` takes only a task cancel (for the page, which holds sessions, not agents)."""
    from langgraph_version.conversation import takes_cancel_event as takes

    return takes(session)


async def setup_postgres_checkpoints(url: str) -> None:
    """Make LangGraph's checkpoint tables at `url` (its migrations; nothing to do once they are made)."""
    from langgraph_version.postgres import PostgresCheckpoints

    await PostgresCheckpoints(url).setup()

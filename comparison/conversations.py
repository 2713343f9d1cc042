"""One multi-turn conversation of any contender, opened by the package that keeps it.

`open_conversation` hands the agent to the conversation module its contender declares (`ContenderSpec.
conversation`), which keeps it in memory, a file, SQLite or Postgres and returns a `Conversation`;
`check_saved_conversation` refuses a bad name or a damaged or foreign conversation before anything opens;
`run_gated` drives a contender that pauses for approval. The harness, `chat` and the page use only `Conversation`.
"""

from __future__ import annotations

import uuid
from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import Any

from comparison.approvals import DemoHuman
from comparison.contenders import Contender, spec_of
from shared_tools.contender import Capability
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
    "Conversation",
    "ConversationNotSaved",
    "HistoryPolicy",
    "check_saved_conversation",
    "check_thread_name",
    "facts_of",
    "open_conversation",
    "run_gated",
    "setup_postgres_checkpoints",
    "shown_target",
    "turns_in",
]


def _kept_by(contender: str) -> ModuleType:
    spec = spec_of(contender)
    if spec.conversation is None:
        raise ValueError(f"{contender}: {spec.why_not(Capability.CONVERSATIONS)}")
    return import_module(spec.conversation)


def check_saved_conversation(contender: str, thread_id: str, db: Path | str, customer_id: str | None) -> None:
    """Raise ValueError (`CustomerMismatch` among them) when the saved conversation of `thread_id` cannot be
    resumed: a damaged or wrong-shape file, or another customer's conversation. Reads, never writes.

    A file beside `db` (a contender's JSON file, as the hand-written session keeps) is read here; a graph thread's
    customer is checked by its session itself, on the first read of the thread, before anything runs or is shown.
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
    for a contender that keeps one, as the hand-written session does) or a ``postgresql://`` URL (the thread
    `thread_id` in that database).

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


def run_gated(contender: str, agent: Contender, instructions: str, goal: str, human: DemoHuman) -> AgentResult:
    """Run a contender that pauses for approval (`Approval.PAUSES`) in a conversation of its own, in memory: each
    time its turn stops AWAITING_APPROVAL, the human answers each request (`aresume`) and the run goes on.

    A pause may hold one request (the guarded graph's) or several, answered with one answer each
    (`resume_with`).
    """
    module = _kept_by(contender)

    async def opening() -> Conversation:
        thread = f"approval-{uuid.uuid4().hex[:8]}"
        conversation: Conversation = await module.aopen_conversation(agent, instructions, thread, None, resume=False)
        return conversation

    conversation = run_blocking(opening, instead=f"{module.__name__}.aopen_conversation(...)")
    try:
        first = run_blocking(lambda: conversation.aask(goal), instead="Conversation.aask(...)")
        result, pauses = resume_until_answered(conversation, first, human.approve)
    finally:
        conversation.close()
    human.pauses += pauses
    return result


async def setup_postgres_checkpoints(url: str) -> None:
    """Make LangGraph's checkpoint tables at `url` (its migrations; nothing to do once they are made)."""
    from langgraph_version.postgres import PostgresCheckpoints

    await PostgresCheckpoints(url).setup()

"""`MafConversation`: MAF's `AgentSession` (`MafSession`) as a `Conversation`, in memory or in a JSON file.

The file is written after every turn (a cut one included), so it never holds half a turn; its approval pauses
(an agent built without a human) are answered through `approve`, as a graph's are. MAF has no Postgres history
provider and no summary of ours: `open_conversation` refuses both (`NO_MAF_POSTGRES`, `NO_MAF_SUMMARY`).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Unpack

from langchain_core.messages import BaseMessage

from maf_version.agent import MafAgent
from maf_version.session import MafSession, read_saved
from shared_tools.bookstore.store import is_postgres_url
from shared_tools.conversation import HistoryPolicy, Opening, beside, facts_of, resume_until_answered
from shared_tools.history import Rewound, Turn, turns_of
from shared_tools.results import AgentResult, Approve

NO_MAF_POSTGRES = "MAF keeps a session with AgentSession.to_dict() in a file; there is no Postgres history provider"
NO_MAF_SUMMARY = "MafSession writes no summary: MAF's own compaction (Agent(compaction_strategy=...)) is not wired in"


class MafConversation:
    """A `MafSession` and its file (None: in memory); `approve` answers its approval pauses in `ask`."""

    def __init__(self, session: MafSession, approve: Approve | None = None) -> None:
        self.session = session
        self.path = session.path
        self.approve = approve

    async def aopen(self, *, resume: bool) -> None:
        pass  # a fresh conversation's file was removed before its session read it (`aopen_conversation`)

    def ask(self, question: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """A turn to its end: each approval pause is answered through `approve`."""
        return resume_until_answered(self.session, self.session.ask(question, cancel=cancel), self.approve)[0]

    def resume(self, approved: Any, *, cancel: threading.Event | None = None) -> AgentResult:
        return self.session.resume(approved, cancel=cancel)

    def continue_unfinished(self, *, cancel: threading.Event | None = None) -> AgentResult | None:
        return None  # the file is written after a turn ends (a cut one included), so it never holds half a turn

    def rewind(self, turns: int = 1) -> Rewound:
        rewound: Rewound = self.session.rewind(turns)
        return rewound

    async def aask(self, question: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """One turn; a cancelled one is saved too (its history tells the truth): the cancel event's as its
        CANCELLED result, a task cancel's as `MafCancelled` (its `.result`), never swallowed. An approval pause
        comes back as AWAITING_APPROVAL (the page's agent asks its human instead)."""
        return await self.session.aask(question, cancel=cancel)

    async def aresume(self, approved: Any, *, cancel: threading.Event | None = None) -> AgentResult:
        return await self.session.aresume(approved, cancel=cancel)

    async def acontinue_unfinished(self, *, cancel: threading.Event | None = None) -> AgentResult | None:
        return None

    async def arewind(self, turns: int = 1) -> Rewound:
        rewound: Rewound = await self.session.arewind(turns)
        return rewound

    async def amessages(self) -> list[BaseMessage]:
        return self.session.messages

    async def apending(self) -> list[dict[str, Any]]:
        return self.session.pending

    async def aturns(self) -> list[Turn]:
        return turns_of(self.session.messages)

    async def afacts(self) -> dict[str, Any]:
        messages = self.session.messages
        if self.path is not None and self.path.exists():
            stored = self.path.stat().st_size
        else:
            # What a save would write: the compact JSON of MAF's session dict.
            stored = len(json.dumps(self.session.session.to_dict(), separators=(",", ":"), ensure_ascii=True))
        return facts_of(messages, stored, self.path)

    def close(self) -> None:
        pass


async def aopen_conversation(
    agent: MafAgent,
    instructions: str,
    thread_id: str,
    where: Path | str | None,
    *,
    resume: bool,
    **opening: Unpack[Opening],
) -> MafConversation:
    """The conversation `thread_id`, in memory (`where` None) or in a JSON file beside the session database
    `where`; a fresh one (not `resume`) replaces the file's, as a demo re-run starts from scratch. A file has no
    storage options: `storage` is a graph's."""
    if is_postgres_url(where):
        raise ValueError(f"maf: {NO_MAF_POSTGRES}")
    policy = opening.get("policy") or HistoryPolicy()
    if policy.summarize:
        raise ValueError(f"maf: {NO_MAF_SUMMARY}")
    path = None if where is None else beside(Path(where), thread_id, ".maf.json")
    if path is not None and not resume:
        path.unlink(missing_ok=True)
    customer_id = opening.get("customer_id")
    session = MafSession(agent, instructions, path=path, customer_id=customer_id, keep_turns=policy.keep_turns)
    return MafConversation(session, opening.get("approve"))


async def acheck_saved(where: Path | str, thread_id: str, customer_id: str | None) -> None:
    """Raise ValueError (`CustomerMismatch` among them) when the file of `thread_id` beside `where` is damaged
    or another customer's. Reads, never writes; a Postgres `where` is refused when the conversation opens."""
    if is_postgres_url(where):
        return
    path = beside(Path(where), thread_id, ".maf.json")
    if path.exists():
        read_saved(path, customer_id)

"""`MafSession`: a multi-turn conversation on MAF's `AgentSession`, kept across a restart in a JSON file.

MAF gives the history, the pending approvals and `to_dict`/`from_dict`; written here: the file (whole or not at
all, bound to its customer), one turn at a time, the turn a cancel cut short, `rewind` (MAF has none) and the
history window (`WindowedHistory`).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent_framework import AgentSession, InMemoryHistoryProvider, Message
from langchain_core.messages import BaseMessage

from maf_version.agent import MafAgent, MafCancelled, history_of, paused_run, request_call, starts_turn
from shared_tools.atomic import write_atomically
from shared_tools.conversation import OneTurnAtATime, read_document
from shared_tools.history import Rewound, count_turns, is_user_turn
from shared_tools.results import AgentResult
from shared_tools.sync import run_blocking

log = logging.getLogger(__name__)

FORMAT = "agent-loop-compare/maf-session/1"


class MafSession:
    """One conversation with a `MafAgent`: each `ask` sees the earlier turns; `resume` answers a pause."""

    def __init__(
        self,
        agent: MafAgent,
        instructions: str,
        *,
        path: str | Path | None = None,
        customer_id: str | None = None,
        keep_turns: int | None = None,
    ) -> None:
        """With `path`, the conversation saved there is continued (a new one is started when there is no file),
        and every turn is saved there. A file of another customer is refused (`CustomerMismatch`). With
        `keep_turns`, the model is sent only the last N user turns (`WindowedHistory`); all are kept."""
        self.agent = agent
        agent.client.among_other_conversations = True  # the store keeps call ids per customer, not per conversation
        self.keep_turns = keep_turns
        self.instructions = instructions
        self.customer_id = customer_id
        self.path = None if path is None else Path(path)
        self._turn = OneTurnAtATime()
        loaded = None if self.path is None or not self.path.exists() else self._read(self.path)
        self.session: AgentSession = (
            loaded if loaded is not None else agent.agent_for(instructions, keep_turns).create_session()
        )

    # --- asking --------------------------------------------------------------------------------------------------

    def ask(self, question: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """`aask` for sync callers. Inside a running event loop, await `aask` instead."""
        return run_blocking(lambda: self.aask(question, cancel=cancel), instead="MafSession.aask(...)")

    async def aask(self, question: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """One user turn on the conversation so far, with fresh budgets; saved when it ends, a turn that a cancel
        or a failed model call cut short too (the failure is raised again once the turn is saved)."""
        async with self._turn.held():
            if paused_run(self.session) is not None:
                raise RuntimeError("the conversation is waiting for an approval; call resume() first")
            try:
                result = await self.agent.arun(
                    self.instructions, question, session=self.session, cancel=cancel, keep_turns=self.keep_turns
                )
            except (MafCancelled, Exception):
                self._save()  # the agent wrote the turn a cancel or a failed model call cut short
                raise
            self._save()
            return result

    def resume(self, approved: bool | Mapping[str, bool], *, cancel: threading.Event | None = None) -> AgentResult:
        """`aresume` for sync callers."""
        return run_blocking(lambda: self.aresume(approved, cancel=cancel), instead="MafSession.aresume(...)")

    async def aresume(
        self, approved: bool | Mapping[str, bool], *, cancel: threading.Event | None = None
    ) -> AgentResult:
        """Answer the approval requests the conversation is paused on (`pending`): one yes or no for all, or
        ``{call id: yes or no}`` for each; the run goes on from where it paused (`MafAgent.aresume`)."""
        async with self._turn.held():
            try:
                result = await self.agent.aresume(
                    self.instructions, self.session, approved, cancel=cancel, keep_turns=self.keep_turns
                )
            except (MafCancelled, Exception):
                self._save()  # the agent wrote the turn a cancel or a failed model call cut short
                raise
            self._save()
            return result

    def rewind(self, turns: int = 1) -> Rewound:
        """`arewind` for sync callers."""
        return run_blocking(lambda: self.arewind(turns), instead="MafSession.arewind(...)")

    async def arewind(self, turns: int = 1) -> Rewound:
        """Go back to before the last `turns` user turns, in the session and in its file.

        Only the conversation goes back: a book a forgotten turn added stays in the cart. A conversation paused
        for an approval cannot be rewound (its pending requests belong to the turn that would be cut).
        """
        async with self._turn.held():
            if paused_run(self.session) is not None:
                raise RuntimeError("the conversation is waiting for an approval; call resume() first")
            state = self.session.state.setdefault(InMemoryHistoryProvider.DEFAULT_SOURCE_ID, {})
            stored: list[Message] = list(state.get("messages", []))
            starts = [i for i, message in enumerate(stored) if starts_turn(message)]
            if isinstance(turns, bool) or not isinstance(turns, int) or not 1 <= turns <= len(starts):
                raise ValueError(f"cannot rewind {turns!r} turn(s): the history holds {len(starts)} user turn(s)")
            before = len(self.messages)
            state["messages"] = stored[: starts[-turns]]
            self._save()
            return Rewound(turns=turns, messages=before - len(self.messages))

    # --- the conversation ----------------------------------------------------------------------------------------

    @property
    def pending(self) -> list[dict[str, Any]]:
        """The approval requests the conversation waits for (``{"tool_call", "reason"}`` each); empty when none."""
        paused = paused_run(self.session)
        if paused is None:
            return []
        calls = [request_call(request) for request in paused.contents()]
        return [{"tool_call": c, "reason": paused.asked[c["id"]]} for c in calls if c["id"] in paused.asked]

    @property
    def messages(self) -> list[BaseMessage]:
        """The whole conversation, system message first."""
        return history_of(self.instructions, self.session)

    @property
    def turns(self) -> int:
        """How many user turns the conversation holds."""
        return count_turns(self.messages)

    def history_turns(self) -> list[str]:
        """The user's questions, oldest first."""
        return [str(message.text) for message in self.messages if is_user_turn(message)]

    # --- the file ------------------------------------------------------------------------------------------------

    def _save(self) -> None:
        if self.path is None:
            return
        document = {
            "format": FORMAT,
            "customer": self.customer_id,
            "instructions": self.instructions,
            "session": self.session.to_dict(),
        }
        data = json.dumps(document, ensure_ascii=True, separators=(",", ":")).encode("ascii")
        write_atomically(self.path, data)
        log.info("saved MAF session %s (%d messages) to %s", self.session.session_id, len(self.messages), self.path)

    def _read(self, path: Path) -> AgentSession:
        session, owner = read_saved(path, self.customer_id)
        self.customer_id = owner or self.customer_id
        return session


def read_saved(path: Path, customer_id: str | None = None) -> tuple[AgentSession, str | None]:
    """The MAF session saved at `path`, and its customer; ValueError for a damaged file, `CustomerMismatch` for
    another customer's (when `customer_id` is given)."""
    document = read_document(path, FORMAT, customer_id, "saved MAF session")
    owner = document.get("customer")
    try:
        session = AgentSession.from_dict(document["session"])
        paused_run(session)  # a resume trusts the record of its pause only once it is checked whole
    except (AttributeError, KeyError, TypeError, ValueError) as exc:  # AttributeError: a list where a dict goes
        raise ValueError(f"{path} is a damaged saved MAF session ({type(exc).__name__}: {exc})") from None
    return session, owner

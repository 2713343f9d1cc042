"""Session adapters: one multi-turn conversation of either session-capable contender, behind one small interface.

`Conversation` is what the session scenarios and `compare.py chat` need of a conversation: ask, finish a turn
a crash cut short, say how much it holds and where, close. `HandwrittenConversation` wraps
`handwritten.Session` (in memory, or saved to a JSON file after every turn); `GraphConversation` wraps
`langgraph_version.GraphSession` (a checkpointer thread, in memory or in a SQLite file) and answers the
graph's approval pauses through the same `approve` callback the hand-written loop is given. Both record the
customer a conversation belongs to. `open_conversation` picks the one that fits a contender and says where it
is kept; `check_thread_name` and `check_saved_conversation` let the command line refuse a bad thread name or
a damaged or foreign saved conversation before it opens anything.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Protocol

from shared_tools.comparison.contenders import Approve, Contender, decide, resume_until_answered
from shared_tools.results import AgentResult

THREAD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A thread name: it becomes part of a file name and of a customer id, so no path separators and no "..".
Starts with a letter or digit (not "." or "-"), at most 64 characters."""


class ConversationNotSaved(Exception):
    """A turn ran, but its conversation could not be saved: another process saved the file since it was read.

    `result` is the turn's answer (the customer should still see it); the file keeps the other process's turns.
    """

    def __init__(self, result: AgentResult, reason: str) -> None:
        super().__init__(reason)
        self.result = result


class Conversation(Protocol):
    """A multi-turn session of one contender, as the session scenarios and `chat` use it."""

    def ask(self, question: str) -> AgentResult: ...
    def finish_unfinished(self) -> AgentResult | None: ...
    def facts(self) -> dict[str, Any]: ...
    def close(self) -> None: ...


def check_thread_name(name: str) -> None:
    """Raise ValueError unless `name` can name a thread (see `THREAD_NAME`): ``../x`` must not become a path."""
    if not THREAD_NAME.fullmatch(name):
        raise ValueError(
            f"thread name {name[:80]!r} is not allowed; use letters, digits, '.', '_' and '-' "
            "(at most 64, starting with a letter or digit)"
        )


def session_json_path(db: Path, thread_id: str) -> Path:
    """Where the hand-written session of `thread_id` is saved: a JSON file beside the session database."""
    check_thread_name(thread_id)
    return db.with_name(f"{db.stem}.{thread_id}.json")


def check_saved_conversation(contender: str, thread_id: str, db: Path, customer_id: str | None) -> None:
    """Raise ValueError (`CustomerMismatch` among them) when the saved conversation of `thread_id` cannot be
    resumed: a damaged or wrong-shape file, or another customer's conversation. Reads, never writes.

    Only the hand-written session's JSON file is read here; a graph thread's customer is checked by
    `GraphSession` itself, on the first read of the thread, before anything runs or is shown.
    """
    if contender != "handwritten":
        return
    path = session_json_path(db, thread_id)
    if path.exists():
        _load_session(path, None, customer_id)


def _load_session(path: Path, loop: Any, customer_id: str | None) -> Any:
    from handwritten import Session

    try:
        return Session.load(path, loop, customer_id=customer_id)
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} cannot be read as a saved session ({exc})") from None
    except (AttributeError, IndexError, KeyError, TypeError) as exc:  # a shape Session.load did not foresee
        raise ValueError(f"{path} is a damaged saved session ({type(exc).__name__}: {exc})") from None


class HandwrittenConversation:
    """`handwritten.Session`, kept in memory or saved to a JSON file after every turn."""

    def __init__(
        self,
        loop: Contender,
        instructions: str,
        path: Path | None = None,
        *,
        resume: bool = False,
        customer_id: str | None = None,
    ) -> None:
        from handwritten import Session

        self.path = path
        if path is not None and resume and path.exists():
            self.session = _load_session(path, loop, customer_id)
        else:
            if path is not None:
                # A fresh conversation in a file that holds an old one (a demo re-run with the same
                # --session-db) replaces it, as the graph's thread is deleted; saving over it would be refused.
                path.unlink(missing_ok=True)
            self.session = Session(loop, instructions, customer_id=customer_id)

    def ask(self, question: str) -> AgentResult:
        from handwritten import SessionConflict

        result = self.session.ask(question)
        if self.path is not None:
            try:
                self.session.save(self.path)
            except SessionConflict as exc:
                reason = f"this turn was not saved and nothing was overwritten: {exc}"
                raise ConversationNotSaved(result, reason) from exc
        return result

    def finish_unfinished(self) -> AgentResult | None:
        return None  # the JSON file is written after a turn completes, so it never holds half a turn

    def facts(self) -> dict[str, Any]:
        return {"messages": len(self.session.messages), "kept_in": str(self.path) if self.path else "memory"}

    def close(self) -> None:
        pass


class GraphConversation:
    """`langgraph_version.GraphSession`: a checkpointer thread, in memory or in a SQLite file.

    A run that pauses for approval is answered through `approve` (no one to ask: refused) and resumed, so
    `ask` returns only when the turn is over, as the hand-written loop's does.
    """

    def __init__(
        self,
        agent: Contender,
        instructions: str,
        thread_id: str,
        path: Path | None = None,
        *,
        resume: bool = False,
        customer_id: str | None = None,
        approve: Approve | None = None,
    ) -> None:
        from langgraph_version import GraphSession

        self.path = path
        self.approve = approve
        if path is None:
            self.session = GraphSession(agent, instructions, thread_id=thread_id, customer_id=customer_id)
        else:
            self.session = GraphSession.sqlite(
                agent, instructions, path=str(path), thread_id=thread_id, customer_id=customer_id
            )
            if not resume:
                self.session.delete()  # a demo re-run with the same --session-db starts its thread from scratch

    def ask(self, question: str) -> AgentResult:
        return self._answered(self.session.ask(question))

    def finish_unfinished(self) -> AgentResult | None:
        """A pause nobody answered (the process ended at the approval prompt) is asked again, then finished;
        a turn a crash or an outage cut short is finished from its last checkpoint."""
        pending = self.session.pending
        if pending:
            return self._answered(self.session.resume(decide(pending, self.approve)))
        result = self.session.continue_unfinished()
        return None if result is None else self._answered(result)

    def _answered(self, result: AgentResult) -> AgentResult:
        return resume_until_answered(self.session, result, self.approve)[0]

    def facts(self) -> dict[str, Any]:
        return {
            "messages": len(self.session.messages),
            "checkpoints": len(self.session.history()),
            "kept_in": str(self.path) if self.path else "memory",
        }

    def close(self) -> None:
        self.session.close()


def open_conversation(
    contender: str,
    agent: Contender,
    instructions: str,
    thread_id: str,
    db: Path | None,
    *,
    resume: bool,
    customer_id: str | None = None,
    approve: Approve | None = None,
) -> Conversation:
    """The contender's session; `db` set means persisted (SQLite for the graph, a JSON file beside it otherwise).

    `customer_id` is recorded with the conversation; `approve` answers the graph's approval pauses (the
    hand-written loop was given its own when it was built).
    """
    if contender == "handwritten":
        json_path = None if db is None else session_json_path(db, thread_id)
        return HandwrittenConversation(agent, instructions, json_path, resume=resume, customer_id=customer_id)
    return GraphConversation(
        agent, instructions, thread_id, db, resume=resume, customer_id=customer_id, approve=approve
    )

"""Session adapters: one multi-turn conversation of either session-capable contender, behind one small interface.

`Conversation` is what the session scenarios and `compare.py chat` need of a conversation: ask, finish a turn
a crash cut short, say how much it holds and where, close. `HandwrittenConversation` wraps
`handwritten.Session` (in memory, or saved to a JSON file after every turn); `GraphConversation` wraps
`langgraph_version.GraphSession` (a checkpointer thread, in memory or in a SQLite file). `open_conversation`
picks the one that fits a contender and says where it is kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from shared_tools.comparison.contenders import Contender
from shared_tools.results import AgentResult


class Conversation(Protocol):
    """A multi-turn session of one contender, as the session scenarios and `chat` use it."""

    def ask(self, question: str) -> AgentResult: ...
    def finish_unfinished(self) -> AgentResult | None: ...
    def facts(self) -> dict[str, Any]: ...
    def close(self) -> None: ...


class HandwrittenConversation:
    """`handwritten.Session`, kept in memory or saved to a JSON file after every turn."""

    def __init__(self, loop: Contender, instructions: str, path: Path | None = None, *, resume: bool = False) -> None:
        from handwritten import Session

        self.path = path
        if path is not None and resume and path.exists():
            self.session = Session.load(path, loop)
        else:
            self.session = Session(loop, instructions)

    def ask(self, question: str) -> AgentResult:
        result = self.session.ask(question)
        if self.path is not None:
            self.session.save(self.path)
        return result

    def finish_unfinished(self) -> AgentResult | None:
        return None  # the JSON file is written after a turn completes, so it never holds half a turn

    def facts(self) -> dict[str, Any]:
        return {"messages": len(self.session.messages), "kept_in": str(self.path) if self.path else "memory"}

    def close(self) -> None:
        pass


class GraphConversation:
    """`langgraph_version.GraphSession`: a checkpointer thread, in memory or in a SQLite file."""

    def __init__(
        self, agent: Contender, instructions: str, thread_id: str, path: Path | None = None, *, resume: bool = False
    ) -> None:
        from langgraph_version import GraphSession

        self.path = path
        if path is None:
            self.session = GraphSession(agent, instructions, thread_id=thread_id)
        else:
            self.session = GraphSession.sqlite(agent, instructions, path=str(path), thread_id=thread_id)
            if not resume:
                self.session.delete()  # a demo re-run with the same --session-db starts its thread from scratch

    def ask(self, question: str) -> AgentResult:
        return self.session.ask(question)

    def finish_unfinished(self) -> AgentResult | None:
        return self.session.continue_unfinished()

    def facts(self) -> dict[str, Any]:
        return {
            "messages": len(self.session.messages),
            "checkpoints": len(self.session.history()),
            "kept_in": str(self.path) if self.path else "memory",
        }

    def close(self) -> None:
        self.session.close()


def open_conversation(
    contender: str, agent: Contender, instructions: str, thread_id: str, db: Path | None, *, resume: bool
) -> Conversation:
    """The contender's session; `db` set means persisted (SQLite for the graph, a JSON file beside it otherwise)."""
    if contender == "handwritten":
        json_path = None if db is None else db.with_name(f"{db.stem}.{thread_id}.json")
        return HandwrittenConversation(agent, instructions, json_path, resume=resume)
    return GraphConversation(agent, instructions, thread_id, db, resume=resume)

"""A multi-turn conversation over an `AgentLoop`: the history kept between questions, and saved to disk.

`Session` is the hand-written counterpart of a framework session (the seed's `AgentSession`, a LangGraph
checkpointer thread): each `ask` runs the loop with the whole earlier conversation as history and fresh
per-run budgets, and keeps the history the run returns, including after a cancellation (the loop answers
any cancelled tool call, so the history stays valid). `save`/`load` write the history as JSON with
langchain-core's message serialization, atomically (a temp file, then `os.replace`), so a crash mid-save
leaves the previous file, never half of a new one.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, messages_from_dict, messages_to_dict

from handwritten.loop import AgentCancelled, AgentLoop
from shared_tools.results import AgentResult
from shared_tools.sync import run_blocking

log = logging.getLogger(__name__)

FORMAT = "agent-loop-compare/session/1"


class Session:
    """One conversation: ask several questions, each one seeing the earlier turns."""

    def __init__(self, loop: AgentLoop, instructions: str, messages: list[BaseMessage] | None = None) -> None:
        self.loop = loop
        self.instructions = instructions
        self._messages: list[BaseMessage] = list(messages or [])

    @property
    def messages(self) -> list[BaseMessage]:
        """The whole conversation so far, system message first (a copy)."""
        return list(self._messages)

    @property
    def turns(self) -> int:
        """How many questions this conversation has had."""
        return sum(isinstance(m, HumanMessage) for m in self._messages)

    def ask(self, question: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """`aask` for sync callers. Inside a running event loop, await `aask` instead."""
        return run_blocking(lambda: self.aask(question, cancel=cancel), instead="Session.aask(...)")

    async def aask(self, question: str, *, cancel: threading.Event | None = None) -> AgentResult:
        """Run the loop on `question` with the conversation so far; the budgets are fresh for every question."""
        try:
            result = await self.loop.arun(self.instructions, question, history=self._messages or None, cancel=cancel)
        except AgentCancelled as cancelled:
            self._messages = cancelled.result.messages  # keep the partial turn; the next ask can continue it
            raise
        self._messages = result.messages
        return result

    def save(self, path: str | Path) -> None:
        """Write the conversation to `path` as JSON, atomically."""
        path = Path(path)
        data: dict[str, Any] = {
            "format": FORMAT,
            "instructions": self.instructions,
            "messages": messages_to_dict(self._messages),
        }
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                json.dump(data, file, ensure_ascii=False, indent=1)
                file.flush()
                os.fsync(file.fileno())
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        log.info("saved session (%d messages) to %s", len(self._messages), path)

    @classmethod
    def load(cls, path: str | Path, loop: AgentLoop) -> Session:
        """A session continuing the conversation saved at `path`, run by `loop`."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if data.get("format") != FORMAT:
            raise ValueError(f"{path} is not a saved session (format {data.get('format')!r}, expected {FORMAT!r})")
        return cls(loop, data["instructions"], messages_from_dict(data["messages"]))

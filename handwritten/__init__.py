"""The from-scratch agent: `AgentLoop` (one run toward a goal) and `Session` (a conversation of several runs).

Written without an agent framework, so every stopping rule and guard is visible in `loop.py`; `session.py` keeps
the history between questions, in a JSON Lines file (`storage.py`) or in Postgres tables shared by processes
(`postgres.py`); `kept.py` is the session as a `Conversation` that saves and locks itself after every turn.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from handwritten.loop import AgentCancelled, AgentLoop
    from handwritten.session import Session
    from handwritten.storage import SessionConflict
    from shared_tools.results import Approve, ConcurrentTurn, CustomerMismatch

_FROM: dict[str, str] = {
    "AgentCancelled": "handwritten.loop",
    "AgentLoop": "handwritten.loop",
    "Session": "handwritten.session",
    "SessionConflict": "handwritten.storage",
    "Approve": "shared_tools.results",
    "ConcurrentTurn": "shared_tools.results",
    "CustomerMismatch": "shared_tools.results",
}
"""Each name -> the module it comes from, imported on first use: the contender's declaration
(`contender.py`) is read by `--help`, which must not pay for the loop and its storage."""


def __getattr__(name: str) -> Any:
    if name not in _FROM:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_FROM[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "AgentCancelled",
    "AgentLoop",
    "Approve",
    "ConcurrentTurn",
    "CustomerMismatch",
    "Session",
    "SessionConflict",
]

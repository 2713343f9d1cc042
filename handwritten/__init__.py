"""The from-scratch agent: `AgentLoop` (one run toward a goal) and `Session` (a conversation of several runs).

Written without an agent framework, so every stopping rule and guard is visible in `loop.py`; `session.py` keeps
the history between questions, in a JSON Lines file (`storage.py`) or in Postgres tables shared by processes
(`postgres.py`); `kept.py` is the session as a `Conversation` that saves and locks itself after every turn.
"""

from handwritten.loop import AgentCancelled, AgentLoop
from handwritten.session import Session
from handwritten.storage import SessionConflict

# Shared with the graph and its sessions; importable from here too.
from shared_tools.results import Approve, ConcurrentTurn, CustomerMismatch

__all__ = [
    "AgentCancelled",
    "AgentLoop",
    "Approve",
    "ConcurrentTurn",
    "CustomerMismatch",
    "Session",
    "SessionConflict",
]

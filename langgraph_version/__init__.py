"""The bookstore agent on LangGraph: the mirror image of `handwritten`, and what LangGraph offers without it.

`GraphAgent` runs the guarded graph (`graph.py`); `GraphSession` keeps a conversation in a checkpointer thread,
in memory, SQLite (`checkpoints.py`) or Postgres (`postgres.py`), a `Conversation` in `conversation.py`;
`prebuilt/` holds LangGraph's defaults graph and `create_agent` as shipped. Async inside, with sync drivers.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langgraph_version.agent import GraphAgent
    from langgraph_version.checkpoints import SqliteCheckpoints
    from langgraph_version.graph import recursion_limit_for
    from langgraph_version.postgres import PostgresCheckpoints, postgres_pool
    from langgraph_version.prebuilt.create_agent import create_agent_contender
    from langgraph_version.prebuilt.defaults import DefaultsGraphAgent
    from langgraph_version.session import GraphSession
    from shared_tools.results import ConcurrentTurn

_FROM: dict[str, str] = {
    "GraphAgent": "langgraph_version.agent",
    "SqliteCheckpoints": "langgraph_version.checkpoints",
    "recursion_limit_for": "langgraph_version.graph",
    "PostgresCheckpoints": "langgraph_version.postgres",
    "postgres_pool": "langgraph_version.postgres",
    "create_agent_contender": "langgraph_version.prebuilt.create_agent",
    "DefaultsGraphAgent": "langgraph_version.prebuilt.defaults",
    "GraphSession": "langgraph_version.session",
    "ConcurrentTurn": "shared_tools.results",
}
"""Each name -> the module it comes from, imported on first use: the contenders' declarations
(`contenders/`) are read by `--help`, which must not pay for LangGraph."""


def __getattr__(name: str) -> Any:
    if name not in _FROM:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_FROM[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "ConcurrentTurn",
    "DefaultsGraphAgent",
    "GraphAgent",
    "GraphSession",
    "PostgresCheckpoints",
    "SqliteCheckpoints",
    "create_agent_contender",
    "postgres_pool",
    "recursion_limit_for",
]

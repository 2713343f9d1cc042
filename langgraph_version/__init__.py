"""The bookstore agent on LangGraph: the mirror image of `handwritten`, and what LangGraph offers without it.

`GraphAgent` runs the guarded graph (`graph.py`); `GraphSession` keeps a conversation in a checkpointer thread,
in memory, SQLite (`checkpoints.py`) or Postgres (`postgres.py`), a `Conversation` in `conversation.py`;
`prebuilt/` holds LangGraph's defaults graph and `create_agent` as shipped. Async inside, with sync drivers.
"""

from langgraph_version.agent import GraphAgent
from langgraph_version.checkpoints import SqliteCheckpoints
from langgraph_version.graph import recursion_limit_for
from langgraph_version.postgres import PostgresCheckpoints, postgres_pool
from langgraph_version.prebuilt.create_agent import create_agent_contender
from langgraph_version.prebuilt.defaults import DefaultsGraphAgent
from langgraph_version.session import GraphSession
from shared_tools.results import ConcurrentTurn

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

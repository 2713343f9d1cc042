"""The bookstore agent on LangGraph: the mirror image of `handwritten`, and what LangGraph offers without it.

`GraphAgent` runs the guarded graph (`graph.py`: the loop's guards as nodes, state and routers) and returns
the shared `AgentResult`; `GraphSession` keeps a conversation in a checkpointer thread, in memory, in a
SQLite file or in Postgres (`PostgresCheckpoints`, `postgres_pool`), one turn at a time and for one customer
(`ConcurrentTurn` when another process keeps the turn too long); `DefaultsGraphAgent` is the textbook graph
with LangGraph's defaults and `create_agent_contender` the same task on `langchain.agents.create_agent`
with its built-in middleware (both in `prebuilt/`, as shipped);
`recursion_limit_for` maps `max_steps` to the guarded graph's recursion limit. All of them take the same
`AgentOptions` and are async inside, with thin sync drivers (`run`, `ask`, ...).
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

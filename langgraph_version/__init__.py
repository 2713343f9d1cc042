"""The bookstore agent as a LangGraph graph: the mirror image of `handwritten`.

`GraphAgent` runs the guarded graph (or, with ``guards=False``, LangGraph's defaults) and returns
the shared `AgentResult`; `GraphSession` keeps a conversation in a checkpointer thread;
`recursion_limit_for` maps `max_steps` to LangGraph's recursion limit; `create_agent_contender`
is the same task on `langchain.agents.create_agent` with its built-in middleware.
"""

from langgraph_version.agent import GraphAgent, recursion_limit_for
from langgraph_version.contender import create_agent_contender
from langgraph_version.session import GraphSession

__all__ = ["GraphAgent", "GraphSession", "create_agent_contender", "recursion_limit_for"]

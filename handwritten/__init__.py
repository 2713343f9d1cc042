"""The from-scratch agent: `AgentLoop` (one run toward a goal) and `Session` (a conversation of several runs).

Written without an agent framework, over any langchain-core chat model and any LangChain tools, so every
stopping rule and guard is visible in `loop.py`; `session.py` keeps the history between questions.
"""

from handwritten.loop import CANCELLED_CALL_TEXT, AgentCancelled, AgentLoop
from handwritten.session import Session
from shared_tools.steps import AgentStep, CallTools, FinalAnswer, InvalidResponse, classify

__all__ = [
    "CANCELLED_CALL_TEXT",
    "AgentCancelled",
    "AgentLoop",
    "AgentStep",
    "CallTools",
    "FinalAnswer",
    "InvalidResponse",
    "Session",
    "classify",
]

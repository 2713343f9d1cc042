"""The bookstore agent on Microsoft Agent Framework (`agent-framework-core`), the article's own framework.

`MafAgent` runs MAF's `Agent` (its tool loop, `FunctionInvocationLayer`) behind the same `AgentOptions` and
`AgentResult` as the other agents; `MafSession` is a conversation on MAF's `AgentSession`, kept in a file, with a
history window (`WindowedHistory`) and rewind (`conversation.py`: the same as a `Conversation`);
`LangChainChatClient` lets MAF call any langchain-core chat model.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from maf_version.agent import NOT_AVAILABLE, MafAgent, MafCancelled, MafSettings, WindowedHistory
    from maf_version.client import LangChainChatClient, LangChainTool, maf_tool
    from maf_version.session import MafSession

_FROM: dict[str, str] = {
    "NOT_AVAILABLE": "maf_version.agent",
    "MafAgent": "maf_version.agent",
    "MafCancelled": "maf_version.agent",
    "MafSettings": "maf_version.agent",
    "WindowedHistory": "maf_version.agent",
    "LangChainChatClient": "maf_version.client",
    "LangChainTool": "maf_version.client",
    "maf_tool": "maf_version.client",
    "MafSession": "maf_version.session",
}
"""Each name -> the module it comes from, imported on first use: the contender's declaration
(`contender.py`) is read by `--help`, which must not pay for Microsoft Agent Framework."""


def __getattr__(name: str) -> Any:
    if name not in _FROM:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_FROM[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "NOT_AVAILABLE",
    "LangChainChatClient",
    "LangChainTool",
    "MafAgent",
    "MafCancelled",
    "MafSession",
    "MafSettings",
    "WindowedHistory",
    "maf_tool",
]

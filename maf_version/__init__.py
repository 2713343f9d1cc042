"""The bookstore agent on Microsoft Agent Framework (`agent-framework-core`), the article's own framework.

`MafAgent` runs MAF's `Agent` (its tool loop, `FunctionInvocationLayer`) behind the same `AgentOptions` and
`AgentResult` as the other agents; `MafSession` is a conversation on MAF's `AgentSession`, kept in a file, with a
history window (`WindowedHistory`) and rewind (`conversation.py`: the same as a `Conversation`);
`LangChainChatClient` lets MAF call any langchain-core chat model.
"""

from maf_version.agent import NOT_AVAILABLE, MafAgent, MafCancelled, MafSettings, WindowedHistory
from maf_version.client import LangChainChatClient, LangChainTool, maf_tool
from maf_version.session import MafSession

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

"""What of a long thread the guarded graph's model is sent: the history policy, with LangChain's own tools.

The thread keeps every message (the checkpointer stores them all); `visible_history` chooses what one model
call sees: the system message and the last `keep_turns` user turns with everything that followed them. It
is `langchain_core.messages.trim_messages` with a "token" counter that counts user turns, so the cut always
falls just before a user message: never between a reply with tool calls and its results, which would send
an orphan ToolMessage (or an unanswered call) that providers reject.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import AnyMessage, BaseMessage, HumanMessage, trim_messages


def user_turns(messages: Sequence[BaseMessage]) -> int:
    """How many user turns `messages` holds: the "tokens" `trim_messages` counts here."""
    return sum(isinstance(message, HumanMessage) for message in messages)


def visible_history(messages: Sequence[AnyMessage], keep_turns: int | None) -> list[AnyMessage]:
    """The system message and the last `keep_turns` user turns of `messages`; all of them when None."""
    if keep_turns is None or user_turns(messages) <= keep_turns:
        return list(messages)
    return trim_messages(
        messages,
        max_tokens=keep_turns,
        token_counter=user_turns,
        strategy="last",
        start_on="human",
        include_system=True,
        allow_partial=False,
    )

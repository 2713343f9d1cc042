"""What of a long thread the guarded graph's model is sent: the history policy, with LangChain's own tools.

The thread keeps every message; `visible_history` sends the system message, the summary if any, and the last
`keep_turns` user turns with what followed them: `trim_messages` with a counter of user turns, so the cut never
falls between a reply with tool calls and its results.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import AnyMessage, BaseMessage, SystemMessage, trim_messages

from shared_tools.history import count_turns, is_summary


def user_turns(messages: Sequence[BaseMessage]) -> int:
    """How many user turns `messages` holds (a summary is not one): the "tokens" `trim_messages` counts here."""
    return count_turns(messages)


def visible_history(messages: Sequence[AnyMessage], keep_turns: int | None) -> list[AnyMessage]:
    """The system message, the summary and the last `keep_turns` user turns of `messages`; all when None."""
    if keep_turns is None or count_turns(messages) <= keep_turns:
        return list(messages)
    size = 1 if messages and isinstance(messages[0], SystemMessage) else 0
    size += len(messages) > size and is_summary(messages[size])
    head = list(messages[:size])
    rest = list(messages[size:])
    kept = trim_messages(
        rest,
        max_tokens=keep_turns,
        token_counter=user_turns,
        strategy="last",
        start_on="human",
        allow_partial=False,
    )
    # `start_on="human"` would also start on a summary message; a window starts on a user turn.
    while kept and is_summary(kept[0]):
        kept.pop(0)
    return [*head, *kept]

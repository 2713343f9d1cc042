"""The history policies both sessions share: what a turn is, the summary message, and what a rewind reports.

A long conversation costs twice: every model call re-sends the whole history (tokens grow with the turns)
and a checkpointer stores it again with every checkpoint. Both sessions take the same two policies with the
same meaning. `keep_turns=N`: the model is sent the system message and the last N user turns, each with
everything that followed it (never cut between a reply and its tool results); the whole history is still
stored. `summarize=True` (with `keep_turns`): turns that fall out of the window are folded into one summary
message, written by the session's model, which stands right after the system message; the folded messages
are removed from the stored history. The summary message is a `HumanMessage` marked the way LangChain's
`SummarizationMiddleware` marks its own (``additional_kwargs["lc_source"] == "summarization"``), and is not
a user turn. `Rewound` is what `rewind` on either session reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.messages import BaseMessage, HumanMessage

SUMMARY_SOURCE = "summarization"
"""`additional_kwargs["lc_source"]` of a summary message, as `SummarizationMiddleware` sets it."""

SUMMARY_PREFIX = "Here is a summary of the conversation to date:\n\n"
"""What a summary message starts with, the words `SummarizationMiddleware` uses."""


def is_summary(message: BaseMessage) -> bool:
    """Whether `message` is a conversation summary (not something the user said)."""
    return isinstance(message, HumanMessage) and message.additional_kwargs.get("lc_source") == SUMMARY_SOURCE


def summary_message(text: str) -> HumanMessage:
    """The message that stands in for the folded turns."""
    return HumanMessage(SUMMARY_PREFIX + text, additional_kwargs={"lc_source": SUMMARY_SOURCE})


def is_user_turn(message: BaseMessage) -> bool:
    """Whether `message` starts a user turn: a `HumanMessage` that is not a summary."""
    return isinstance(message, HumanMessage) and not is_summary(message)


def count_turns(messages: Sequence[BaseMessage]) -> int:
    """How many user turns `messages` holds."""
    return sum(is_user_turn(message) for message in messages)


@dataclass(frozen=True)
class Rewound:
    """What `rewind(turns)` did: the conversation went back; the world (the store, the cart) did not."""

    turns: int
    """How many user turns were taken back."""
    messages: int
    """How many messages the model will no longer see."""
    checkpoint_id: str | None = None
    """The graph: the checkpoint the thread now goes on from (the old branch stays in its history)."""

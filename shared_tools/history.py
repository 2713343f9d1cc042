"""The history policies both sessions share: what a turn is, the summary message, and what a rewind reports.

`keep_turns=N` sends the model the system message and the last N user turns (the whole history stays stored);
`summarize=True` folds turns that fall out of the window into one summary message, marked as LangChain's
`SummarizationMiddleware` marks its own and as forgetting calls (`guards.FORGOT_CALLS`), so later calls get fresh
ids. `summary_request` is the prompt for that summary; `Rewound` is what a rewind reports.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from shared_tools.guards import FORGOT_CALLS, forgot_calls, usage_tokens

log = logging.getLogger(__name__)

SUMMARY_SOURCE = "summarization"
"""`additional_kwargs["lc_source"]` of a summary message, as `SummarizationMiddleware` sets it."""

SUMMARY_PREFIX = "Here is a summary of the conversation to date:\n\n"
"""What a summary message starts with, the words `SummarizationMiddleware` uses."""


def is_summary(message: BaseMessage) -> bool:
    """Whether `message` is a conversation summary (not something the user said)."""
    return isinstance(message, HumanMessage) and message.additional_kwargs.get("lc_source") == SUMMARY_SOURCE


def summary_message(text: str) -> HumanMessage:
    """The message that stands in for the folded turns, and says that their tool calls are forgotten."""
    return HumanMessage(SUMMARY_PREFIX + text, additional_kwargs={"lc_source": SUMMARY_SOURCE, FORGOT_CALLS: True})


def is_user_turn(message: BaseMessage) -> bool:
    """Whether `message` starts a user turn: a `HumanMessage` that is not a summary."""
    return isinstance(message, HumanMessage) and not is_summary(message)


def count_turns(messages: Sequence[BaseMessage]) -> int:
    """How many user turns `messages` holds."""
    return sum(is_user_turn(message) for message in messages)


SUMMARY_INSTRUCTIONS = (
    "You write the running summary of a conversation between a bookstore customer and the store's shopping "
    "assistant. The assistant will no longer see the turns below, only your summary, so keep every fact it may "
    "need later: what the customer asked, every book added to the cart with its quantity, the last cart total "
    "seen, every order number with its status and tracking number, and anything the assistant promised. Merge "
    "the earlier summary in; drop greetings and repetition. Plain text, at most 15 short lines; no advice."
)
"""The system prompt of a summary request, and the marker by which the scripted model recognises one."""

SUMMARY_MAX_CHARS = 4_000
"""A summary longer than this is cut: the summary is re-sent with every call, so a model that writes pages
(or is told to by text inside a tool result) must not undo what the window saves."""

TRANSCRIPT_HEADINGS = ("Summary so far:", "Turns to fold in:")
"""The two parts of a summary request's second message, in this order (the first only with an earlier summary)."""


def transcript(messages: Sequence[BaseMessage]) -> str:
    """The folded messages as plain text, one line each: ``User: ...``, ``Assistant: ...``, ``Assistant called
    name {args}``, ``Result of name: ...``. Plain text, not the messages themselves, because the summary call is
    made without tools and providers reject tool calls and results in such a prompt."""
    lines: list[str] = []
    names: dict[str, str] = {}
    for message in messages:
        if is_summary(message):
            lines.append(f"Earlier summary: {_one_line(message.text.removeprefix(SUMMARY_PREFIX))}")
        elif isinstance(message, HumanMessage):
            lines.append(f"User: {_one_line(message.text)}")
        elif isinstance(message, AIMessage):
            if message.text.strip():
                lines.append(f"Assistant: {_one_line(message.text)}")
            for call in message.tool_calls:
                names[str(call["id"])] = call["name"]
                args = json.dumps(call["args"], sort_keys=True, ensure_ascii=False, default=str)
                lines.append(f"Assistant called {call['name']} {args}")
        elif isinstance(message, ToolMessage):
            name = names.get(message.tool_call_id, message.name or "a tool")
            failed = " (error)" if message.status == "error" else ""
            lines.append(f"Result of {name}{failed}: {_one_line(message.text)}")
    return "\n".join(lines)


def summary_request(previous: str | None, folded: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The prompt that asks a model to fold `folded` into the earlier summary text `previous` (None: none yet)."""
    parts = [f"{TRANSCRIPT_HEADINGS[0]}\n{previous.strip()}"] if previous and previous.strip() else []
    parts.append(f"{TRANSCRIPT_HEADINGS[1]}\n{transcript(folded)}")
    return [SystemMessage(SUMMARY_INSTRUCTIONS), HumanMessage("\n\n".join(parts))]


def is_summary_request(messages: Sequence[BaseMessage]) -> bool:
    """Whether `messages` is a `summary_request` prompt (its system message is `SUMMARY_INSTRUCTIONS`)."""
    return bool(messages) and isinstance(messages[0], SystemMessage) and messages[0].text == SUMMARY_INSTRUCTIONS


def summary_text(message: BaseMessage) -> str:
    """What a summary message says, without its fixed prefix."""
    return message.text.removeprefix(SUMMARY_PREFIX)


def clip_summary(text: str) -> str:
    """`text` stripped and cut to `SUMMARY_MAX_CHARS`, saying so where it was cut."""
    text = text.strip()
    if len(text) <= SUMMARY_MAX_CHARS:
        return text
    return text[:SUMMARY_MAX_CHARS] + f"\n[summary cut at {SUMMARY_MAX_CHARS} characters]"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def among_other_conversations(messages: Sequence[BaseMessage], instructions: str) -> list[BaseMessage]:
    """A session's history with its system message marked `FORGOT_CALLS` (a new conversation: a marked system
    message of `instructions`). The store keeps an add's call id per customer, across every conversation of
    theirs, and one conversation cannot see another's calls: a provider that numbers its calls call_0 in every
    conversation would make a second conversation's first add a replay of the first one's. Marked, every call
    gets an id of its own; a re-run of a reply kept in the history still carries its ids, and still replays."""
    if not messages:
        return [SystemMessage(instructions, additional_kwargs={FORGOT_CALLS: True})]
    first = messages[0]
    if not isinstance(first, SystemMessage) or first.additional_kwargs.get(FORGOT_CALLS) is True:
        return list(messages)
    marked = first.model_copy(update={"additional_kwargs": {**first.additional_kwargs, FORGOT_CALLS: True}})
    return [marked, *messages[1:]]


def forgetting_calls(kept: Sequence[BaseMessage], before: Sequence[BaseMessage]) -> list[BaseMessage]:
    """`kept` (what a rewind goes back to from the history `before`), its system message marked `FORGOT_CALLS`
    when `before` held tool calls `kept` does not, or was marked itself: the rewind leaves the store as it is,
    which still holds those ids as request keys, so a provider numbering its calls afresh must not reuse one."""
    ids = {c["id"] for m in before if isinstance(m, AIMessage) for c in m.tool_calls}
    ids -= {c["id"] for m in kept if isinstance(m, AIMessage) for c in m.tool_calls}
    if not (ids or forgot_calls(before)) or forgot_calls(kept) or not kept or not isinstance(kept[0], SystemMessage):
        return list(kept)
    kwargs = {**kept[0].additional_kwargs, FORGOT_CALLS: True}
    return [kept[0].model_copy(update={"additional_kwargs": kwargs}), *kept[1:]]


@dataclass(frozen=True)
class Turn:
    """One user turn of a conversation, numbered from 1, as `/history` and `GraphSession.turn_history` list it."""

    number: int
    question: str
    checkpoint_id: str | None = None
    """The graph: the checkpoint the thread stood at before this turn (what `rewind` goes back to); None for the
    thread's first turn and for a conversation without checkpoints."""


def turns_of(messages: Sequence[BaseMessage]) -> list[Turn]:
    """The user turns of a message list, numbered from 1 (without checkpoint ids)."""
    asked = [m for m in messages if is_user_turn(m)]
    return [Turn(number, m.text) for number, m in enumerate(asked, start=1)]


@dataclass(frozen=True)
class Rewound:
    """What `rewind(turns)` did: the conversation went back; the world (the store, the cart) did not."""

    turns: int
    """How many user turns were taken back."""
    messages: int
    """How many messages the model will no longer see."""
    checkpoint_id: str | None = None
    """The graph: the checkpoint the thread now goes on from (the old branch stays in its history)."""


@dataclass(frozen=True)
class Fold:
    """What a summary fold does to a history before a question: `folded` (with the text of the `previous`
    summary) go into one new summary, which stands between `system` and `kept`."""

    system: list[BaseMessage]
    previous: str | None
    folded: list[BaseMessage]
    kept: list[BaseMessage]
    """The last `keep_turns - 1` user turns: with the question about to be asked, the window."""


def plan_fold(messages: Sequence[BaseMessage], keep_turns: int) -> Fold | None:
    """The fold the next question needs under a `keep_turns` window; None while every turn still fits.

    The cut falls only where a user turn starts, so a reply and its tool results are never split; both
    sessions fold through this, so they agree on what is kept and what is summarised.
    """
    starts = [i for i, message in enumerate(messages) if is_user_turn(message)]
    if len(starts) < keep_turns:
        return None
    cut = starts[len(starts) - keep_turns + 1] if keep_turns > 1 else len(messages)
    before = messages[:cut]
    summaries = [m for m in before if is_summary(m)]
    return Fold(
        system=[m for m in before if isinstance(m, SystemMessage)],
        previous=summary_text(summaries[-1]) if summaries else None,
        folded=[m for m in before if not isinstance(m, SystemMessage) and not is_summary(m)],
        kept=list(messages[cut:]),
    )


async def write_summary(model: BaseChatModel, fold: Fold, time_left: float | None) -> tuple[str, int]:
    """The summary of `fold` written by `model` (without tools), clipped, and the tokens it cost.

    "" when the model wrote no text or took longer than `time_left` (the question's time budget): the caller then
    folds nothing, and the window alone still bounds the prompt. The model's own timeout is an outage and raises.
    """
    try:
        async with asyncio.timeout(time_left) as deadline:
            reply = await model.ainvoke(summary_request(fold.previous, fold.folded))
    except TimeoutError:
        if not deadline.expired():
            raise
        log.warning("the summary call took longer than the time budget; the older turns stay")
        return "", 0
    tokens = usage_tokens(reply) if isinstance(reply, AIMessage) else 0
    text = clip_summary(reply.text)
    if not text:
        log.warning("the summary reply had no text; the older turns stay")
    return text, tokens

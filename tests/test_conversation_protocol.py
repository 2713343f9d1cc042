"""Every contender's conversation is one `Conversation`: the same calls, sync and async, with no branch per contender.

The page drives a turn through `aask`, `apending`, `amessages` and `acontinue_unfinished` alone; the owner
check and the turn lock are the ones in `shared_tools.conversation`, whichever session holds them.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from comparison.contenders import CONTENDERS, build_contender
from comparison.conversations import check_saved_conversation, facts_of, open_conversation, turns_in
from comparison.scenarios import CART_QUESTION, INSTRUCTIONS, SEED_GOAL
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.conversation import Conversation, HistoryPolicy, OneTurnAtATime, check_owner
from shared_tools.models import make_model
from shared_tools.results import AgentOptions, CustomerMismatch, StopReason


def opened(contender: str, store: BookStore, db: Path, customer: str, *, resume: bool) -> Conversation:
    agent = build_contender(contender, make_model("scripted"), make_tools(store, customer), AgentOptions())
    return open_conversation(contender, agent, INSTRUCTIONS, "t1", db, resume=resume, customer_id=customer)


@pytest.mark.parametrize("contender", CONTENDERS)
def test_every_contender_takes_a_turn_through_the_async_protocol(
    contender: str, store: BookStore, tmp_path: Path
) -> None:
    conversation = opened(contender, store, tmp_path / "sessions.db", "c1", resume=False)
    assert isinstance(conversation, Conversation)

    async def two_turns() -> tuple[list[StopReason], list[str], int, object]:
        cancel = threading.Event()
        first = await conversation.aask(SEED_GOAL, cancel=cancel)
        second = await conversation.aask(CART_QUESTION, cancel=cancel)
        messages = await conversation.amessages()
        asked = [str(m.content) for m in messages if m.type == "human"]
        return (
            [first.stop_reason, second.stop_reason],
            asked,
            len(await conversation.apending()),
            (await conversation.acontinue_unfinished(cancel=cancel)),
        )

    stops, asked, pending, unfinished = asyncio.run(two_turns())
    assert stops == [StopReason.DONE, StopReason.DONE]
    assert asked == [SEED_GOAL, CART_QUESTION]
    assert (pending, unfinished) == (0, None), "a finished turn leaves no pause and nothing to finish"
    assert [turn.question for turn in turns_in(conversation)] == [SEED_GOAL, CART_QUESTION]
    conversation.close()

    again = opened(contender, store, tmp_path / "sessions.db", "c1", resume=True)
    assert facts_of(again)["turns"] == 2, "the turns taken through aask were kept where the conversation is"
    again.close()


@pytest.mark.parametrize("contender", CONTENDERS)
def test_another_customer_is_refused_in_the_same_words_by_every_contender(
    contender: str, store: BookStore, tmp_path: Path
) -> None:
    db = tmp_path / "sessions.db"
    mine = opened(contender, store, db, "ann", resume=False)
    assert mine.ask(SEED_GOAL).stop_reason is StopReason.DONE
    mine.close()
    refused = "is the conversation of customer 'ann', not of 'bob'"
    with pytest.raises(CustomerMismatch, match=refused):
        check_saved_conversation(contender, "t1", db, "bob")  # a file is read ahead; a thread when first read
        facts_of(opened(contender, store, db, "bob", resume=True))


def test_the_owner_check_and_the_turn_lock_are_written_once() -> None:
    check_owner(None, "bob", "x")  # a conversation nobody claimed yet
    check_owner("ann", None, "x")  # nobody to check for
    with pytest.raises(CustomerMismatch, match=r"^thread 't' is the conversation of customer 'ann', not of 'bob'$"):
        check_owner("ann", "bob", "thread 't'")
    turn, order = OneTurnAtATime(), []

    async def take(name: str) -> None:
        async with turn.held():
            order.append(f"{name} in")
            await asyncio.sleep(0.02)
            order.append(f"{name} out")

    async def both() -> None:
        await asyncio.gather(take("a"), take("b"))

    asyncio.run(both())
    assert order == ["a in", "a out", "b in", "b out"], "the second turn waited for the first"


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_the_history_policy_refuses_a_window_of_no_whole_turns(bad: object) -> None:
    with pytest.raises(ValueError, match="keep_turns"):
        HistoryPolicy(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="summarize needs keep_turns"):
        HistoryPolicy(None, summarize=True)

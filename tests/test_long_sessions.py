"""Long conversations, written once for every kind of session: the history policy and time travel.

Each test runs on the hand-written `Session`, a `GraphSession` in memory and a `GraphSession` in SQLite, and
holds them to one meaning of `keep_turns`, `summarize` and `rewind` (`shared_tools.history`): what the model is
sent, what is stored, what a rewind gives back, and what it does not (the store). Each side's own details are
in tests/test_session_history.py and tests/test_graph_history.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from comparison.scenarios import CART_QUESTION, SEED_GOAL
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.history import count_turns, is_summary, is_user_turn
from shared_tools.models import make_model
from shared_tools.results import AgentLimits, StopReason
from tests.conftest import SESSION_KINDS, assert_sendable, blocking, open_session, view
from tests.doubles import ScriptModel, ai, call, provider_id

ORDER_QUESTION = "Where is my order 4512?"


def questions(messages: list[BaseMessage]) -> list[str]:
    return [m.text for m in messages if is_user_turn(m)]


def echo_turn(n: int) -> list[AIMessage]:
    """One scripted turn: a tool call, then an answer naming the turn."""
    return [ai("", call("slow_echo", f"c{n}", n=n)), ai(f"Answer {n}.")]


def echo_tool() -> Any:
    from langchain_core.tools import StructuredTool

    def slow_echo(n: int) -> str:
        return str(n)

    return StructuredTool.from_function(func=slow_echo, name="slow_echo", description="Echo.")


@pytest.mark.parametrize("kind", SESSION_KINDS)
def test_keep_turns_sends_the_system_message_and_the_last_turns_and_stores_them_all(kind: str, tmp_path: Path) -> None:
    model = ScriptModel(replies=[m for n in range(5) for m in echo_turn(n)])
    session = open_session(kind, model, [echo_tool()], tmp_path, keep_turns=2)
    for n in range(5):
        assert session.ask(f"question {n}").answer == f"Answer {n}."
    last_prompt = model.prompts[-1]
    assert questions(last_prompt) == ["question 3", "question 4"]
    assert_sendable(last_prompt)
    # Both calls of turn 4 saw the same window: its first call and its second (after the tool result).
    assert questions(model.prompts[-2]) == ["question 3", "question 4"]
    stored = view(session, "messages")
    assert questions(stored) == [f"question {n}" for n in range(5)], "the full history is still stored"
    assert count_turns(stored) == 5


@pytest.mark.parametrize("kind", SESSION_KINDS)
def test_every_kind_sends_the_model_the_same_window(kind: str, tmp_path: Path) -> None:
    """The hand-written cut and `trim_messages` agree message for message."""
    model = ScriptModel(replies=[m for n in range(4) for m in echo_turn(n)])
    session = open_session(kind, model, [echo_tool()], tmp_path, keep_turns=1)
    for n in range(4):
        session.ask(f"question {n}")
    shape = [(m.type, m.text, [provider_id(c["id"]) for c in getattr(m, "tool_calls", [])]) for m in model.prompts[-1]]
    assert shape == [
        ("system", shape[0][1], []),
        ("human", "question 3", []),
        ("ai", "", ["c3"]),
        ("tool", "3", []),
    ]


@pytest.mark.parametrize("kind", SESSION_KINDS)
@pytest.mark.parametrize("bad", [0, -1])
def test_a_window_of_no_turns_is_refused(kind: str, bad: int, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=str(bad)):
        open_session(kind, ScriptModel(replies=[]), [], tmp_path, keep_turns=bad)


@pytest.mark.parametrize("kind", SESSION_KINDS)
def test_summarize_needs_a_window(kind: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep_turns"):
        open_session(kind, ScriptModel(replies=[]), [], tmp_path, summarize=True)


@pytest.mark.parametrize("kind", SESSION_KINDS)
def test_summarize_folds_older_turns_into_one_summary_message(kind: str, tmp_path: Path) -> None:
    store = BookStore()
    session = open_session(kind, make_model("scripted"), make_tools(store), tmp_path, keep_turns=2, summarize=True)
    assert session.ask(SEED_GOAL).stop_reason is StopReason.DONE
    for _ in range(3):
        assert session.ask(ORDER_QUESTION).stop_reason is StopReason.DONE
    stored = view(session, "messages")
    assert isinstance(stored[0], SystemMessage)
    assert is_summary(stored[1]), "the summary stands right after the system message"
    assert sum(is_summary(m) for m in stored) == 1
    assert count_turns(stored) == 2, "only the window is kept verbatim"
    assert "Quiet Orchard" in stored[1].text, "the summary keeps the book that was added"
    assert session.summary_tokens > 0
    assert_sendable(stored)


def test_the_scripted_summary_is_the_same_on_every_kind(tmp_path: Path) -> None:
    summaries = []
    for kind in SESSION_KINDS:
        (tmp_path / kind).mkdir()
        session = open_session(
            kind, make_model("scripted"), make_tools(BookStore()), tmp_path / kind, keep_turns=1, summarize=True
        )
        for question in (SEED_GOAL, ORDER_QUESTION, ORDER_QUESTION):
            session.ask(question)
        summaries.append(next(m.text for m in view(session, "messages") if is_summary(m)))
    assert summaries[0] == summaries[1] == summaries[2]


@pytest.mark.parametrize("kind", SESSION_KINDS)
def test_a_long_conversation_does_not_make_a_question_hit_the_token_budget(kind: str, tmp_path: Path) -> None:
    """The budget cliff: the token budget is per question, but every call re-sends the history. With a window
    the prompt stays bounded, so the article's goal still ends after 80 earlier turns."""
    limits = AgentLimits(max_tokens=20_000)
    store = BookStore()
    session = open_session(kind, make_model("scripted"), make_tools(store), tmp_path, keep_turns=10, limits=limits)
    for _ in range(80):
        session.ask(ORDER_QUESTION)
    result = session.ask(SEED_GOAL)
    assert result.stop_reason is StopReason.DONE, result.stop_reason
    assert result.tokens < 20_000


@pytest.mark.parametrize("kind", SESSION_KINDS)
def test_without_a_window_the_same_question_hits_the_budget(kind: str, tmp_path: Path) -> None:
    """The cliff the window avoids, shown: the same 80 turns without `keep_turns`."""
    limits = AgentLimits(max_tokens=20_000)
    session = open_session(kind, make_model("scripted"), make_tools(BookStore()), tmp_path, limits=limits)
    for _ in range(80):
        session.ask(ORDER_QUESTION)
    assert session.ask(SEED_GOAL).stop_reason is StopReason.TOKEN_BUDGET


@pytest.mark.parametrize("kind", SESSION_KINDS)
def test_rewind_goes_back_in_the_conversation_but_not_in_the_store(kind: str, tmp_path: Path) -> None:
    store = BookStore()
    session = open_session(kind, make_model("scripted"), make_tools(store), tmp_path)
    session.ask(ORDER_QUESTION)
    session.ask(SEED_GOAL)
    cart_before = store.cart("c1")
    rewound = session.rewind(1)
    assert rewound.turns == 1 and rewound.messages > 0
    assert questions(view(session, "messages")) == [ORDER_QUESTION]
    assert store.cart("c1") == cart_before, "the cart still holds the book the forgotten turn added"
    assert_sendable(view(session, "messages"))
    # The model no longer remembers adding the book, so it reads the cart to answer.
    result = session.ask(CART_QUESTION)
    assert result.stop_reason is StopReason.DONE
    assert questions(view(session, "messages")) == [ORDER_QUESTION, CART_QUESTION]
    assert "16.50" in (result.answer or "")


@pytest.mark.parametrize("kind", SESSION_KINDS)
@pytest.mark.parametrize("bad", [0, 3, -2])
def test_rewinding_more_turns_than_there_are_is_refused(kind: str, bad: int, tmp_path: Path) -> None:
    session = open_session(kind, make_model("scripted"), make_tools(BookStore()), tmp_path)
    session.ask(ORDER_QUESTION)
    session.ask(ORDER_QUESTION)
    with pytest.raises(ValueError, match=str(bad)):
        session.rewind(bad)
    assert count_turns(view(session, "messages")) == 2, "a refused rewind changes nothing"


@pytest.mark.parametrize("kind", SESSION_KINDS)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    turns=st.lists(st.integers(min_value=0, max_value=2), min_size=1, max_size=6),
    keep=st.integers(min_value=1, max_value=3),
)
def test_no_window_ever_sends_an_orphan_tool_message(
    kind: str, turns: list[int], keep: int, tmp_path_factory: Any
) -> None:
    """Turns with no, one or two tool rounds, any window: every prompt is one a provider accepts."""
    replies: list[AIMessage] = []
    for n, rounds in enumerate(turns):
        for r in range(rounds):
            replies.append(ai("", call("slow_echo", f"c{n}-{r}", n=r), call("slow_echo", f"d{n}-{r}", n=r + 1)))
        replies.append(ai(f"Answer {n}."))
    model = ScriptModel(replies=replies)
    session = open_session(kind, model, [echo_tool()], tmp_path_factory.mktemp(kind), keep_turns=keep)
    for n in range(len(turns)):
        session.ask(f"question {n}")
    for prompt in model.prompts:
        assert_sendable(prompt)
        assert count_turns(prompt) <= keep
        assert isinstance(prompt[-1], HumanMessage | ToolMessage)


def numbering_shopper(messages: list[BaseMessage]) -> AIMessage:
    """A provider that numbers its calls call_0 in every reply: one add per question, a one-line summary."""
    from shared_tools.history import is_summary_request

    if is_summary_request(messages):
        return ai("The customer added The Quiet Orchard to the cart.")
    if isinstance(messages[-1], HumanMessage):
        if not messages[-1].text.startswith("Add"):
            return ai("Hello.")
        return ai("", call("add_to_cart", "call_0", book_id=7))
    return ai("Added.")


@pytest.mark.parametrize("kind", SESSION_KINDS)
def test_turns_folded_into_the_summary_keep_their_call_ids_taken(kind: str, tmp_path: Path) -> None:
    """Once a turn is folded, its messages are gone, but the store still holds its call id as an add's request
    key: a provider numbering its calls call_0 again must get a new add, not "this call already ran"."""
    store = BookStore()
    model = ScriptModel(replies=[numbering_shopper] * 20)
    session = open_session(kind, model, make_tools(store), tmp_path, keep_turns=1, summarize=True)
    for _ in range(5):
        assert session.ask("Add The Quiet Orchard to my cart.").stop_reason is StopReason.DONE
    assert any(is_summary(m) for m in view(session, "messages")), "turns were folded"
    assert store.cart("c1").quantity_of(7) == 5


@pytest.mark.parametrize("kind", SESSION_KINDS)
def test_two_fresh_conversations_of_one_customer_do_not_share_call_ids(kind: str, tmp_path: Path) -> None:
    """The store keeps an add's call id per customer, across all their conversations: the second conversation's
    call_0 is not the first one's, so its add is a new copy, not "this call already ran"."""
    store = BookStore()
    for n in range(2):
        model = ScriptModel(replies=[numbering_shopper] * 4)
        folder = tmp_path / f"conversation-{n}"
        folder.mkdir()
        session = open_session(kind, model, make_tools(store), folder)
        assert session.ask("Add The Quiet Orchard to my cart.").stop_reason is StopReason.DONE
    assert store.cart("c1").quantity_of(7) == 2


@pytest.mark.parametrize("kind", SESSION_KINDS)
def test_rewound_turns_keep_their_call_ids_taken(kind: str, tmp_path: Path) -> None:
    """A rewind takes the turn back, not the store: its add stays in the cart under its call id, so the same add
    asked again after the rewind, numbered call_0 again, is a new add (the customer asked for it again)."""
    store = BookStore()
    model = ScriptModel(replies=[numbering_shopper] * 20)
    session = open_session(kind, model, make_tools(store), tmp_path)
    session.ask("Add The Quiet Orchard to my cart.")
    session.rewind(1)
    session.ask("Add The Quiet Orchard to my cart.")
    assert store.cart("c1").quantity_of(7) == 2


@pytest.mark.parametrize("kind", SESSION_KINDS)
def test_call_ids_stay_taken_through_folds_and_rewinds_in_any_order(kind: str, tmp_path: Path) -> None:
    """Fold, rewind past the fold's checkpoint, fold again: every add asked for is a new copy."""
    store = BookStore()
    model = ScriptModel(replies=[numbering_shopper] * 40)
    session = open_session(kind, model, make_tools(store), tmp_path, keep_turns=2, summarize=True)
    asks = 0
    for rewind, then_asks in ((None, 3), (2, 3), (1, 1), (1, 2)):
        if rewind is not None:
            session.rewind(rewind)
        for _ in range(then_asks):
            session.ask("Add The Quiet Orchard to my cart.")
            asks += 1
    assert sum(is_summary(m) for m in view(session, "messages")) == 1
    assert store.cart("c1").quantity_of(7) == asks
    assert_sendable(view(session, "messages"))


@pytest.mark.parametrize("kind", SESSION_KINDS)
def test_a_second_rewind_to_before_the_first_still_knows_the_first_one_forgot_calls(kind: str, tmp_path: Path) -> None:
    """The second rewind drops only a turn without calls, back to a state older than the first rewind: the add
    the first one forgot is still the store's, so the same add asked again is still a new copy."""
    store = BookStore()
    session = open_session(kind, ScriptModel(replies=[numbering_shopper] * 20), make_tools(store), tmp_path)
    for question in ("Hello.", "Hello again.", "Add The Quiet Orchard to my cart."):
        session.ask(question)
    session.rewind(1)
    session.rewind(1)
    session.ask("Add The Quiet Orchard to my cart.")
    assert questions(view(session, "messages")) == ["Hello.", "Add The Quiet Orchard to my cart."]
    assert store.cart("c1").quantity_of(7) == 2


@pytest.mark.parametrize("kind", [k for k in SESSION_KINDS if k != "handwritten"])
def test_a_replayed_turn_keeps_the_abandoned_branchs_call_ids_taken(kind: str, tmp_path: Path) -> None:
    """Time travel as a rewind: the branch a replay abandons added under call_0, the store keeps that id, and the
    replayed model call, numbered call_0 again, is a new add (the model asked again), not "this call already ran"."""
    store = BookStore()
    model = ScriptModel(replies=[numbering_shopper] * 20)
    session = open_session(kind, model, make_tools(store), tmp_path)
    session.ask("Hello.")
    session.ask("Add The Quiet Orchard to my cart.")
    [before_model] = [
        s
        for s in blocking(session.history)
        if s.next == ("model",) and s.values["messages"][-1].text == "Add The Quiet Orchard to my cart."
    ]
    result = blocking(lambda: session.areplay(before_model.config["configurable"]["checkpoint_id"]))
    assert result.stop_reason is StopReason.DONE
    add = next(e for e in result.trace if e.name == "add_to_cart")
    assert "already" not in add.detail.lower(), add.detail
    assert store.cart("c1").quantity_of(7) == 2
    session.ask("Add The Quiet Orchard to my cart.")
    assert store.cart("c1").quantity_of(7) == 3, "the next turn's call_0 is a new add too"

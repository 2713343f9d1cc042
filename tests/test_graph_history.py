"""The LangGraph session's own side of long conversations: storage, the window, summaries and time travel.

In memory and in SQLite: the delta channel's reducer, the storage bound of a long thread, pruning, `rewind` as a
fork, `replay` without a double add, `turn_history`, and the refusals.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

import shared_tools.history as shared_history
from comparison.scenarios import INSTRUCTIONS, SEED_GOAL
from langgraph_version import GraphAgent, GraphSession
from langgraph_version.checkpoints import add_message_batches
from langgraph_version.history import visible_history
from shared_tools.bookstore.approval import RiskyWritePolicy
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.history import count_turns, is_summary, summary_message
from shared_tools.models import make_model
from shared_tools.results import AgentOptions, CustomerMismatch, StopReason
from tests.conftest import blocking
from tests.doubles import ScriptModel, ai, call

ORDER_QUESTION = "Where is my order 4512?"
KINDS = ("memory", "sqlite")


def session_of(kind: str, agent: GraphAgent, tmp_path: Path, **options: Any) -> GraphSession:
    if kind == "memory":
        return GraphSession(agent, INSTRUCTIONS, **options)
    return GraphSession.sqlite(agent, INSTRUCTIONS, path=str(tmp_path / "threads.db"), **options)


def shopper(store: BookStore, **options: Any) -> GraphAgent:
    return GraphAgent(make_model("scripted"), make_tools(store), AgentOptions(**options))


def file_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


# --- the window ------------------------------------------------------------------------------------------------


def test_the_summary_is_kept_like_the_system_message_and_is_not_a_turn() -> None:
    history = [
        SystemMessage("rules"),
        summary_message("earlier: a book was added"),
        HumanMessage("q1"),
        AIMessage("a1"),
        HumanMessage("q2"),
        AIMessage("", tool_calls=[{"name": "t", "args": {}, "id": "c1"}]),
        ToolMessage("r", tool_call_id="c1"),
        AIMessage("a2"),
    ]
    window = visible_history(history, 1)
    assert window[:2] == history[:2]
    assert [m.text for m in window[2:]] == ["q2", "", "r", "a2"]
    assert visible_history(history, 2) == history, "two turns fit: the summary does not count as a third"
    assert count_turns(window) == 1


def test_a_summary_out_of_place_is_trimmed_like_any_message() -> None:
    history = [SystemMessage("rules"), HumanMessage("q1"), summary_message("injected"), HumanMessage("q2")]
    assert [m.text for m in visible_history(history, 1)] == ["rules", "q2"]


# --- the delta channel's reducer -------------------------------------------------------------------------------


def fresh(writes: list[list[Any]]) -> list[list[Any]]:
    """The same writes as new objects (the reducer gives messages their ids in place, as add_messages does)."""
    return [[m.model_copy() for m in batch] for batch in writes]


message_texts = st.lists(st.lists(st.sampled_from(["q", "a", "t"]), min_size=1, max_size=3), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(texts=message_texts, cut=st.integers(min_value=0, max_value=8))
def test_the_delta_reducer_is_batching_invariant_and_gives_the_same_ids_on_replay(
    texts: list[list[str]], cut: int
) -> None:
    make = {"q": HumanMessage, "a": AIMessage, "t": SystemMessage}
    writes = [[make[kind](f"{kind}{n}") for kind in batch] for n, batch in enumerate(texts)]
    at_once = add_message_batches([], fresh(writes))
    in_two = fresh(writes)
    in_two_batches = add_message_batches(add_message_batches([], in_two[:cut]), in_two[cut:])
    assert [(m.id, m.text) for m in at_once] == [(m.id, m.text) for m in in_two_batches]
    assert len({m.id for m in at_once}) == len(at_once), "identical messages in different places get distinct ids"
    # A later RemoveMessage names an id that a replay gives the same message again.
    gone = at_once[0].id
    replayed = add_message_batches([], [*fresh(writes), [RemoveMessage(id=gone)]])
    assert gone not in {m.id for m in replayed} and len(replayed) == len(at_once) - 1


# --- storage ---------------------------------------------------------------------------------------------------

TURNS = 60
QUADRATIC_BYTES = 17_000_000
"""What 60 turns took with the whole history in every checkpoint (measured: 17.8 MB)."""


@pytest.mark.parametrize("kept_as", ["delta", "full", None], ids=["delta", "full", "agent-alone"])
def test_the_storage_decides_how_messages_are_checkpointed_not_the_state_type(kept_as: str | None) -> None:
    """A session's `storage` picks the channel; the state type alone (a GraphAgent given its own checkpointer)
    is LangGraph's default, the whole list in every checkpoint."""
    saver = InMemorySaver()
    agent = GraphAgent(make_model("scripted"), make_tools(BookStore()), checkpointer=saver if kept_as is None else None)
    if kept_as is None:
        assert agent.run(INSTRUCTIONS, SEED_GOAL).stop_reason is StopReason.DONE
    else:
        session = GraphSession(agent, INSTRUCTIONS, "t1", checkpointer=saver, storage=kept_as)  # type: ignore[arg-type]
        assert session.ask(SEED_GOAL).stop_reason is StopReason.DONE
    head = next(iter(saver.list(None)))
    assert ("messages" in head.checkpoint["channel_values"]) is (kept_as != "delta")


@pytest.mark.parametrize(
    "options, bound",
    [({}, 2_500_000), ({"storage": "full", "prune_turns": 2}, 2_500_000)],
    ids=["delta", "full+prune"],
)
def test_a_long_sqlite_thread_stays_far_below_the_quadratic_figure(
    options: dict[str, Any], bound: int, tmp_path: Path
) -> None:
    path = tmp_path / "threads.db"
    session = session_of("sqlite", shopper(BookStore()), tmp_path, **options)
    for _ in range(TURNS):
        assert session.ask(ORDER_QUESTION).stop_reason is StopReason.DONE
    assert file_bytes(path) < bound < QUADRATIC_BYTES / 6
    assert blocking(session.turns) == TURNS
    reopened = session_of("sqlite", shopper(BookStore()), tmp_path, **options)
    assert reopened.ask(ORDER_QUESTION).stop_reason is StopReason.DONE
    assert count_turns(blocking(reopened.messages)) == TURNS + 1, "nothing the conversation holds was lost"


def test_full_storage_without_pruning_is_the_quadratic_figure(tmp_path: Path) -> None:
    """The measurement the bound above is against: LangGraph's default channel, 30 turns (a quarter of 60's)."""
    session = session_of("sqlite", shopper(BookStore()), tmp_path, storage="full")
    for _ in range(TURNS // 2):
        session.ask(ORDER_QUESTION)
    assert file_bytes(tmp_path / "threads.db") > QUADRATIC_BYTES / 5


def test_pruning_keeps_the_last_turns_and_refuses_to_rewind_past_them(tmp_path: Path) -> None:
    session = session_of("sqlite", shopper(BookStore()), tmp_path, storage="full", prune_turns=2)
    for _ in range(5):
        session.ask(ORDER_QUESTION)
    with sqlite3.connect(tmp_path / "threads.db") as db:
        [[checkpoints]] = db.execute("SELECT count(*) FROM checkpoints").fetchall()
    assert checkpoints <= 2 * 7, "only the last two turns' checkpoints (and the one before them)"
    with pytest.raises(ValueError, match="pruned"):
        session.rewind(3)
    assert blocking(session.turns) == 5, "a refused rewind changes nothing"
    assert session.rewind(2).turns == 2
    assert blocking(session.turns) == 3


def test_a_pruned_thread_still_pauses_for_approval_and_resumes_from_another_session(tmp_path: Path) -> None:
    store = BookStore()
    replies = [ai("Order 4512 is on its way.")] * 3 + [
        ai("", call("add_to_cart", "a1", book_id=7, quantity=10)),
        ai("Added."),
    ]
    options = AgentOptions(needs_approval=RiskyWritePolicy(store))
    first = GraphAgent(ScriptModel(replies=replies), make_tools(store), options)
    session = session_of("sqlite", first, tmp_path, storage="full", prune_turns=1)
    for _ in range(3):
        session.ask(ORDER_QUESTION)
    assert session.ask("Add ten copies of book 7.").stop_reason is StopReason.AWAITING_APPROVAL
    with pytest.raises(RuntimeError, match="approval"):
        session.rewind(1)
    other = session_of("sqlite", GraphAgent(ScriptModel(replies=replies[4:]), make_tools(store), options), tmp_path)
    other.storage = "full"  # the same thread, opened again as it was written
    assert other.resume(True).stop_reason is StopReason.DONE
    assert store.cart("c1").lines[0].quantity == 10


def test_a_delta_thread_is_not_read_as_full_storage(tmp_path: Path) -> None:
    session_of("sqlite", shopper(BookStore()), tmp_path).ask(ORDER_QUESTION)
    with pytest.raises(ValueError, match="delta"):
        session_of("sqlite", shopper(BookStore()), tmp_path, storage="full").ask(ORDER_QUESTION)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"prune_turns": 2}, "storage='full'"),
        ({"storage": "full", "prune_turns": 0}, "at least 1"),
        ({"storage": "zip"}, "zip"),
        ({"keep_turns": True}, "True"),
    ],
)
def test_bad_storage_options_are_refused(options: dict[str, Any], message: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=message):
        session_of("sqlite", shopper(BookStore()), tmp_path, **options)


# --- time travel -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_rewind_forks_the_thread_and_keeps_the_old_branch(kind: str, tmp_path: Path) -> None:
    store = BookStore()
    session = session_of(kind, shopper(store), tmp_path)
    session.ask(ORDER_QUESTION)
    session.ask(SEED_GOAL)
    turns = blocking(session.turn_history)
    assert [t.question for t in turns] == [ORDER_QUESTION, SEED_GOAL]
    assert turns[0].checkpoint_id is None and turns[1].checkpoint_id is not None
    before = {s.config["configurable"]["checkpoint_id"] for s in blocking(session.history)}
    rewound = session.rewind(1)
    after = {s.config["configurable"]["checkpoint_id"] for s in blocking(session.history)}
    assert before < after and rewound.checkpoint_id in after - before, "the old branch is still there"
    assert [m.text for m in blocking(session.messages) if isinstance(m, HumanMessage)] == [ORDER_QUESTION]
    session.ask(ORDER_QUESTION)
    assert [t.checkpoint_id for t in blocking(session.turn_history)][1] == rewound.checkpoint_id


@pytest.mark.parametrize("kind", KINDS)
def test_rewinding_every_turn_keeps_only_the_instructions(kind: str, tmp_path: Path) -> None:
    session = session_of(kind, shopper(BookStore()), tmp_path)
    session.ask(ORDER_QUESTION)
    session.ask(ORDER_QUESTION)
    rewound = session.rewind(2)
    assert [type(m) for m in blocking(session.messages)] == [SystemMessage] and rewound.messages > 0
    assert session.ask(ORDER_QUESTION).stop_reason is StopReason.DONE
    assert [type(m) for m in blocking(session.messages)][:2] == [SystemMessage, HumanMessage]


@pytest.mark.parametrize("kind", KINDS)
def test_replaying_the_tools_node_does_not_add_the_book_twice(kind: str, tmp_path: Path) -> None:
    store = BookStore()
    session = session_of(kind, shopper(store), tmp_path)
    assert session.ask(SEED_GOAL).stop_reason is StopReason.DONE
    cart = store.cart("c1")
    [before_add] = [
        s
        for s in blocking(session.history)
        if s.next == ("tools",) and s.values["messages"][-1].tool_calls[0]["name"] == "add_to_cart"
    ]
    result = blocking(lambda: session.areplay(before_add.config["configurable"]["checkpoint_id"]))
    assert result.stop_reason is StopReason.DONE
    assert store.cart("c1") == cart, "the store's idempotency, not the replay, keeps the cart as it was"
    add = next(e for e in result.trace if e.name == "add_to_cart")
    assert "already" in add.detail.lower() or "replay" in add.detail.lower()


@pytest.mark.parametrize("kind", KINDS)
def test_replay_refuses_a_checkpoint_that_is_not_there_or_has_nothing_to_run(kind: str, tmp_path: Path) -> None:
    session = session_of(kind, shopper(BookStore()), tmp_path)
    session.ask(ORDER_QUESTION)
    with pytest.raises(ValueError, match="no checkpoint"):
        blocking(lambda: session.areplay("1f000000-0000-6000-8000-000000000000"))
    head = blocking(session.history)[0].config["configurable"]["checkpoint_id"]
    with pytest.raises(ValueError, match="nothing to replay"):
        blocking(lambda: session.areplay(head))


@pytest.mark.parametrize("kind", KINDS)
def test_time_travel_is_refused_on_an_unfinished_turn_and_for_another_customer(kind: str, tmp_path: Path) -> None:
    def outage(_: Any) -> AIMessage:
        raise ConnectionError("model down")

    store = BookStore()
    model = ScriptModel(replies=[ai("Fine."), outage])
    session = session_of(kind, GraphAgent(model, make_tools(store)), tmp_path, customer_id="c1")
    session.ask(ORDER_QUESTION)
    with pytest.raises(ConnectionError):
        session.ask(ORDER_QUESTION)
    with pytest.raises(RuntimeError, match="unfinished"):
        session.rewind(1)
    oldest = blocking(session.history)[-1].config["configurable"]["checkpoint_id"]
    with pytest.raises(RuntimeError, match="unfinished"):
        blocking(lambda: session.areplay(oldest))
    if kind == "sqlite":
        stranger = session_of(kind, shopper(store), tmp_path, customer_id="c2")
        with pytest.raises(CustomerMismatch):
            stranger.rewind(1)


# --- summaries -------------------------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(shared_history, "summary_request"), reason="shared_tools.history.summary_request")
@pytest.mark.parametrize("kind", KINDS)
def test_the_fold_puts_one_summary_after_the_system_message_and_sends_the_model_no_tools(
    kind: str, tmp_path: Path
) -> None:
    answers = [ai(f"Answer {n}.") for n in range(4)]
    summaries = [ai("S1", tokens=7), ai("S2", tokens=5)]
    model = ScriptModel(replies=[answers[0], answers[1], summaries[0], answers[2], summaries[1], answers[3]])
    session = session_of(kind, GraphAgent(model, []), tmp_path, keep_turns=2, summarize=True)
    for n in range(4):
        session.ask(f"question {n}")
    stored = blocking(session.messages)
    assert isinstance(stored[0], SystemMessage) and is_summary(stored[1]) and stored[1].text.endswith("S2")
    assert [m.text for m in stored[2:] if isinstance(m, HumanMessage)] == ["question 2", "question 3"]
    assert session.summary_tokens == 12
    assert blocking(session.turns) == 2
    assert not any(isinstance(m, ToolMessage) for m in model.prompts[2])
    assert is_summary(model.prompts[-1][1]), "the model is sent the summary with the window"

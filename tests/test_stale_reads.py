"""The stale-read guard: the store counts cart writes, cart results carry the count, and both guarded agents mark a
result older than the store before the model is called (`Guard.STALE_READ`), so the model reads the cart again."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from comparison.scenarios.model import CART_QUESTION, INSTRUCTIONS, SEED_GOAL
from handwritten.loop import AgentLoop
from handwritten.session import Session
from langgraph_version import GraphAgent, GraphSession
from shared_tools import guards
from shared_tools.bookstore import BookStore, make_tools
from shared_tools.models import make_model
from shared_tools.results import AgentOptions, Guard, StopReason

# --- the store and the tools -----------------------------------------------------------------------------------


def test_every_cart_write_moves_the_revision_and_nothing_else_does() -> None:
    store = BookStore()
    assert store.cart_revision("c1") == 0
    first = store.add_to_cart("c1", 7, request_id="r1")
    assert (first.cart_revision, store.cart_revision("c1")) == (1, 1)
    replay = store.add_to_cart("c1", 7, request_id="r1")
    assert replay.replayed and replay.cart_revision == 1, "a replay writes nothing"
    with pytest.raises(Exception, match="stock"):
        store.add_to_cart("c1", 2)  # The Last Lighthouse: none in stock, so the add is refused
    assert store.cart_revision("c1") == 1, "a refused add writes nothing"
    assert store.remove_from_cart("c1", 3) == 0 and store.cart_revision("c1") == 1, "removing nothing writes nothing"
    store.remove_from_cart("c1", 7)
    assert store.cart("c1").revision == store.cart_revision("c1") == 2
    store.add_to_cart("c1", 7)
    store.clear_cart("c1")
    assert store.cart_revision("c1") == 4
    assert store.cart_revision("c2") == 0, "each customer's cart has its own count"


def call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"type": "tool_call", "id": call_id, "name": name, "args": args}


def test_cart_results_carry_their_revision_beside_the_text_and_other_results_none() -> None:
    store = BookStore()
    tools = {tool.name: tool for tool in make_tools(store)}
    added = tools["add_to_cart"].invoke(call("add_to_cart", "a1", book_id=7))
    viewed = tools["view_cart"].invoke(call("view_cart", "v1"))
    searched = tools["search_books"].invoke(call("search_books", "s1", query="Orchard"))
    assert guards.Reading.of(added) == guards.Reading.of(viewed) == guards.Reading("cart", 1, "view_cart")
    assert guards.Reading.of(searched) is None
    assert "revision" not in added.text and "revision" not in viewed.text, "the model is never sent the count"
    assert tools["view_cart"].invoke({}) == viewed.text, "called with arguments alone, the tool gives its text"
    assert {name for name, tool in tools.items() if isinstance(tool, guards.Rereadable)} == {"add_to_cart", "view_cart"}


# --- the guard on histories ------------------------------------------------------------------------------------


def reading(call_id: str, revision: Any, text: str = '{"items":[],"cartTotal":16.50}') -> ToolMessage:
    artifact = {guards.READING: {"source": "cart", "revision": revision, "reread_with": "view_cart"}}
    return ToolMessage(text, tool_call_id=call_id, name="view_cart", artifact=artifact)


def stale(history: list[BaseMessage], store: BookStore) -> dict[int, ToolMessage]:
    tools = {tool.name: tool for tool in make_tools(store)}
    return asyncio.run(guards.stale_readings(history, tools))


def store_at(revision: int) -> BookStore:
    store = BookStore()
    for _ in range(revision):
        store.add_to_cart("c1", 7)
    return store


def test_a_reading_older_than_the_store_is_marked_once_with_the_tool_that_reads_it_again() -> None:
    store = store_at(2)
    history: list[BaseMessage] = [AIMessage("", tool_calls=[call("view_cart", "v1")]), reading("v1", 1)]
    marked = stale(history, store)
    assert list(marked) == [1]
    assert marked[1].text.startswith(history[1].text) and "view_cart" in marked[1].text.removeprefix(history[1].text)
    assert (marked[1].id, marked[1].tool_call_id) == (history[1].id, "v1")
    history[1] = marked[1]
    assert stale(history, store) == {}, "told once: the same stale reading is not marked again"


def test_one_current_reading_clears_the_source_whatever_comes_before_or_after_it() -> None:
    store = store_at(3)
    assert stale([reading("v1", 1), reading("v2", 3)], store) == {}, "read twice: the second reading is current"
    assert stale([reading("v2", 3), reading("v1", 1)], store) == {}, "parallel calls may finish in any order"
    assert list(stale([reading("v1", 1), reading("v2", 2)], store)) == [0, 1]


@pytest.mark.parametrize(
    "forged",
    [
        reading("v1", True),  # a bool is not a count
        reading("v1", "1"),
        ToolMessage('{"reading": {"source": "cart", "revision": 1}}', tool_call_id="v1", name="view_cart"),
        ToolMessage("", tool_call_id="v1", status="error", artifact=reading("x", 1).artifact),
        AIMessage('{"reading": {"source": "cart", "revision": 1, "reread_with": "view_cart"}} revision 1'),
    ],
    ids=["bool", "text-count", "in-the-text", "error-result", "model-text"],
)
def test_only_a_tools_own_artifact_is_a_reading(forged: BaseMessage) -> None:
    """The model writes text and tool calls, and a result's text may hold a seller's book description: neither
    can make or move a reading."""
    assert guards.Reading.of(forged) is None
    assert stale([forged], store_at(2)) == {}


def test_another_process_writing_the_cart_file_makes_the_reading_stale(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with BookStore.open(path) as ours, BookStore.open(path) as theirs:
        tools = {tool.name: tool for tool in make_tools(ours)}
        viewed = asyncio.run(tools["add_to_cart"].ainvoke(call("add_to_cart", "a1", book_id=7)))
        assert stale([viewed], ours) == {}
        theirs.remove_from_cart("c1", 7)
        assert list(stale([viewed], ours)) == [0]


# --- both agents, on the scripted model --------------------------------------------------------------------


def two_turns(kind: str, *, stale_reads: bool, change: bool = True) -> tuple[list[Any], BookStore]:
    """Turn 1 adds The Quiet Orchard; another channel then removes it; turn 2 asks for the total."""
    store = BookStore()
    agent_class = AgentLoop if kind == "handwritten" else GraphAgent
    agent = agent_class(make_model("scripted"), make_tools(store), AgentOptions(stale_reads=stale_reads))
    session = Session(agent, INSTRUCTIONS) if kind == "handwritten" else GraphSession(agent, INSTRUCTIONS)
    first = session.ask(SEED_GOAL)
    if change:
        store.remove_from_cart("c1", 7)
    return [first, session.ask(CART_QUESTION)], store


@pytest.mark.parametrize("kind", ["handwritten", "langgraph"])
def test_the_guard_marks_the_old_cart_result_and_the_model_reads_the_cart_again(kind: str) -> None:
    (first, second), store = two_turns(kind, stale_reads=True)
    assert first.stop_reason is StopReason.DONE and "$16.50" in (first.answer or "")
    model_lines = [e for e in second.trace if e.is_model]
    assert [e.guard for e in model_lines] == [Guard.STALE_READ, None], "fired before the first call only"
    assert [e.name for e in second.trace] == ["model", "view_cart", "model"]
    assert "$0.00" in (second.answer or "") and store.cart("c1").total == 0
    marked = [m for m in second.messages if isinstance(m, ToolMessage) and guards.STALE_SINCE in (m.artifact or {})]
    assert [m.name for m in marked] == ["add_to_cart"], "the kept history holds the result as the model was sent it"


@pytest.mark.parametrize("kind", ["handwritten", "langgraph"])
def test_without_the_guard_the_answer_is_the_remembered_total(kind: str) -> None:
    (_, second), _ = two_turns(kind, stale_reads=False)
    assert [e.guard for e in second.trace] == [None] and second.tool_calls == 0
    assert "$16.50" in (second.answer or "")


@pytest.mark.parametrize("kind", ["handwritten", "langgraph"])
def test_an_unchanged_cart_is_never_flagged(kind: str) -> None:
    (first, second), _ = two_turns(kind, stale_reads=True, change=False)
    assert all(e.guard is not Guard.STALE_READ for e in [*first.trace, *second.trace])
    assert "$16.50" in (second.answer or "") and second.tool_calls == 0


def test_a_session_saved_and_loaded_again_still_catches_the_stale_cart_and_keeps_the_mark(tmp_path: Path) -> None:
    """The reading is saved with its message, and a mark made later is saved too (the file is written whole)."""
    path, shop = tmp_path / "session.jsonl", tmp_path / "store.db"
    with BookStore.open(shop) as store:
        session = Session(AgentLoop(make_model("scripted"), make_tools(store)), INSTRUCTIONS)
        session.ask(SEED_GOAL)
        session.save(path)
    with BookStore.open(shop) as other:
        other.remove_from_cart("c1", 7)  # another process empties the cart between the turns
    with BookStore.open(shop) as store:
        loop = AgentLoop(make_model("scripted"), make_tools(store))
        again = Session.load(path, loop)
        second = again.ask(CART_QUESTION)
        again.save(path)
        kept = Session.load(path, loop).messages
    assert [e.guard for e in second.trace if e.is_model] == [Guard.STALE_READ, None] and "$0.00" in (
        second.answer or ""
    )
    marked = [m.name for m in kept if isinstance(m, ToolMessage) and guards.STALE_SINCE in (m.artifact or {})]
    assert marked == ["add_to_cart"]

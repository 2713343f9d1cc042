"""smolagents (`frameworks.smolagents`): its own ToolCallingAgent loop on the scripted model, through our bridges.

Every run here is smolagents' real loop (`ToolCallingAgent.run`), its `max_steps`, its error feedback and its
memory; only the model is scripted.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from frameworks.smolagents import SmolagentsContender, SmolagentsConversation, SmolTool
from shared_tools.bookstore import BookStore, Faults, make_tools
from shared_tools.bookstore.faults import FAKE_SECRET
from shared_tools.models.scripted import ScriptedChatModel
from shared_tools.results import AgentLimits, AgentOptions, Guard, StopReason

INSTRUCTIONS = "You are a bookstore assistant."
SEED_GOAL = "Add The Last Lighthouse to my cart. If it is not available, add another novel by the same author."


def cart(store: BookStore) -> list[tuple[str, int]]:
    return [(line.book.title, line.quantity) for line in store.cart("c1").lines]


def contender(store: BookStore, persona: str = "shopper", **options: object) -> SmolagentsContender:
    return SmolagentsContender(ScriptedChatModel(persona=persona), make_tools(store), AgentOptions(**options))  # type: ignore[arg-type]


def test_the_articles_goal_ends_with_the_quiet_orchard() -> None:
    store = BookStore()
    result = contender(store).run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.DONE
    assert result.answer is not None and "The Quiet Orchard" in result.answer
    assert cart(store) == [("The Quiet Orchard", 1)]
    assert (result.model_calls, result.tool_calls) == (5, 4)
    assert [e.name for e in result.trace if not e.is_model] == [
        "search_books",
        "check_stock",
        "check_stock",
        "add_to_cart",
    ]
    assert result.tokens == sum(e.tokens for e in result.trace) > 0
    # The history is langchain's: every call answered by a result with its id, the answer last.
    calls = [c["id"] for m in result.messages if isinstance(m, AIMessage) for c in m.tool_calls]
    results = [m.tool_call_id for m in result.messages if isinstance(m, ToolMessage)]
    assert calls == results and len(calls) == 4
    assert isinstance(result.messages[-1], AIMessage) and result.messages[-1].text == result.answer


def test_the_looper_hits_smolagents_own_max_steps_then_its_forced_call() -> None:
    store = BookStore()
    result = contender(store, "looper", limits=AgentLimits(max_steps=3)).run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.MAX_STEPS
    assert result.answer is None
    # Three steps, then smolagents' own last call without tools (provide_final_answer), kept as the forced answer.
    assert (result.model_calls, result.tool_calls) == (4, 3)
    assert result.forced_answer is not None


def test_an_unknown_tool_is_fed_back_by_smolagents_and_the_run_goes_on() -> None:
    store = BookStore()
    result = contender(store, "hallucinator").run(INSTRUCTIONS, SEED_GOAL)
    unknown = [e for e in result.trace if e.guard is Guard.UNKNOWN_TOOL]
    assert len(unknown) == 1 and unknown[0].is_error and "Unknown tool" in unknown[0].detail
    assert result.stop_reason is StopReason.DONE
    assert cart(store) == [("The Quiet Orchard", 1)]
    # The failed call is in the history with smolagents' error text as its result.
    first_result = next(m for m in result.messages if isinstance(m, ToolMessage))
    assert first_result.status == "error" and "Unknown tool" in first_result.text


def test_a_tool_exception_reaches_the_model_with_its_text() -> None:
    store = BookStore()
    tools = make_tools(store, faults=Faults(failing_tool="check_stock"))
    agent = SmolagentsContender(ScriptedChatModel(), tools, AgentOptions(limits=AgentLimits(max_steps=4)))
    result = agent.run(INSTRUCTIONS, SEED_GOAL)
    failed = [e for e in result.trace if e.name == "check_stock"]
    assert failed and all(e.is_error for e in failed)
    # smolagents has no switch to hide it: the exception's text, secret and all, is what the model reads.
    sent = [m.text for m in result.messages if isinstance(m, ToolMessage) and m.status == "error"]
    assert any(FAKE_SECRET in text for text in sent)
    assert "detailed_errors" in agent.not_available


def test_a_cut_reply_is_fed_back_by_smolagents_as_a_parsing_error_and_the_loop_goes_on() -> None:
    # Every reply is cut at 5 tokens, so no call parses: smolagents feeds its parsing error back and asks again.
    model = ScriptedChatModel(max_tokens=5)
    agent = SmolagentsContender(model, make_tools(BookStore()), AgentOptions(limits=AgentLimits(max_steps=3)))
    result = agent.run(INSTRUCTIONS, "Add The Last Lighthouse to my cart.")
    assert result.stop_reason is StopReason.MAX_STEPS
    assert (result.model_calls, result.tool_calls) == (4, 0)
    # The cut replies are left out of the prompt, as smolagents leaves them out; its feedback is not the customer.
    assert [m.text for m in result.messages if isinstance(m, HumanMessage)] == ["Add The Last Lighthouse to my cart."]
    assert sum("Error while parsing" in m.text for m in result.messages) == 3


def test_no_call_id_reaches_a_smolagents_tool_so_a_repeated_add_adds_again() -> None:
    store = BookStore()
    add = SmolTool(next(t for t in make_tools(store) if t.name == "add_to_cart"))
    add(book_id=7, quantity=1)
    add(book_id=7, quantity=1)
    assert cart(store) == [("The Quiet Orchard", 2)]


def test_the_options_smolagents_has_no_setting_for_are_named() -> None:
    agent = contender(BookStore(), limits=AgentLimits(max_duration=5.0))
    assert {"max_tokens", "max_duration", "max_repeats", "max_consecutive_errors"} <= set(agent.not_available)
    assert agent.max_steps == 6


def test_a_cancel_ends_the_run_at_the_next_model_call() -> None:
    store = BookStore()
    cancel = threading.Event()
    seen: list[str] = []

    def on_event(event: object) -> None:
        seen.append(getattr(event, "name", ""))
        if len(seen) == 2:  # after the first tool call
            cancel.set()

    result = contender(store, on_event=on_event).run(INSTRUCTIONS, SEED_GOAL, cancel=cancel)
    assert result.stop_reason is StopReason.CANCELLED
    assert (result.model_calls, result.tool_calls) == (1, 1)
    assert cart(store) == []


def test_a_two_turn_conversation_is_kept_in_a_file_and_reopened(tmp_path: Path) -> None:
    store = BookStore()
    agent = contender(store)
    path = tmp_path / "smol.json"
    first = SmolagentsConversation(agent, INSTRUCTIONS, path).ask(SEED_GOAL)
    assert first.stop_reason is StopReason.DONE
    assert json.loads(path.read_text(encoding="utf-8"))["steps"][0] == {"task": SEED_GOAL}

    reopened = SmolagentsConversation(agent, INSTRUCTIONS, path)
    second = reopened.ask("What is my cart total now?")
    assert second.stop_reason is StopReason.DONE
    assert second.answer is not None and "16.50" in second.answer
    # The second turn ran on the first turn's memory: both questions, in order, then this turn's calls.
    questions = [m.text for m in second.messages if isinstance(m, HumanMessage)]
    assert questions == [SEED_GOAL, "What is my cart total now?"]
    assert second.model_calls == 2 and [e.name for e in second.trace if not e.is_model] == ["view_cart"]
    facts = asyncio.run(reopened.afacts())
    assert facts["turns"] == 2 and facts["stored_bytes"] == path.stat().st_size


def test_the_entry_point_declares_it_and_its_spec_builds_it() -> None:
    from importlib.metadata import entry_points

    from frameworks.smolagents import SPEC
    from shared_tools.contender import ENTRY_POINT_GROUP, Approval

    (entry,) = [e for e in entry_points(group=ENTRY_POINT_GROUP) if e.name == "smolagents"]
    assert entry.load() is SPEC and SPEC.requirement == "smolagents==1.26.0"
    assert SPEC.approval is Approval.NONE
    store = BookStore()
    result = SPEC.build(ScriptedChatModel(), make_tools(store), AgentOptions(), None).run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.DONE and cart(store) == [("The Quiet Orchard", 1)]


def test_a_saved_conversation_is_refused_to_another_customer_and_a_fresh_one_replaces_it(tmp_path: Path) -> None:
    import pytest

    from frameworks.smolagents import acheck_saved, aopen_conversation
    from shared_tools.results import CustomerMismatch

    db = tmp_path / "sessions.db"
    agent = contender(BookStore())
    conversation = asyncio.run(aopen_conversation(agent, INSTRUCTIONS, "t1", db, resume=False, customer_id="c1"))
    conversation.ask(SEED_GOAL)
    asyncio.run(acheck_saved(db, "t1", "c1"))
    with pytest.raises(CustomerMismatch):
        asyncio.run(acheck_saved(db, "t1", "c2"))
    with pytest.raises(CustomerMismatch):
        asyncio.run(aopen_conversation(agent, INSTRUCTIONS, "t1", db, resume=True, customer_id="c2"))
    fresh = asyncio.run(aopen_conversation(agent, INSTRUCTIONS, "t1", db, resume=False, customer_id="c1"))
    assert asyncio.run(fresh.afacts())["turns"] == 0

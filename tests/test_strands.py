"""Strands Agents (`frameworks.strands`): its own event loop on the scripted model, through our bridges.

Every run here is Strands' real `Agent` loop with its `limits`, its tool executor, its `HumanInTheLoop` gate and
its `FileSessionManager`; only the model is scripted.
"""

from __future__ import annotations

import asyncio
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from frameworks.strands import StrandsContender, StrandsConversation
from shared_tools.bookstore import BookStore, Faults, RiskyWritePolicy, make_tools
from shared_tools.bookstore.faults import FAKE_SECRET
from shared_tools.models.scripted import ScriptedChatModel
from shared_tools.results import AgentLimits, AgentOptions, Guard, StopReason

INSTRUCTIONS = "You are a bookstore assistant."
SEED_GOAL = "Add The Last Lighthouse to my cart. If it is not available, add another novel by the same author."


def cart(store: BookStore) -> list[tuple[str, int]]:
    return [(line.book.title, line.quantity) for line in store.cart("c1").lines]


def contender(store: BookStore, persona: str = "shopper", **options: Any) -> StrandsContender:
    return StrandsContender(ScriptedChatModel(persona=persona), make_tools(store), AgentOptions(**options))


def test_the_articles_goal_ends_with_the_quiet_orchard() -> None:
    store = BookStore()
    result = contender(store).run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.DONE
    assert result.answer is not None and "The Quiet Orchard" in result.answer
    assert cart(store) == [("The Quiet Orchard", 1)]
    assert (result.model_calls, result.tool_calls) == (5, 4)
    assert result.tokens == sum(e.tokens for e in result.trace) > 0
    calls = [c["id"] for m in result.messages if isinstance(m, AIMessage) for c in m.tool_calls]
    assert calls == [m.tool_call_id for m in result.messages if isinstance(m, ToolMessage)] and len(calls) == 4


def test_the_looper_hits_strands_own_turn_limit() -> None:
    result = contender(BookStore(), "looper", limits=AgentLimits(max_steps=3)).run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.MAX_STEPS  # Strands' stop_reason "limit_turns"
    assert (result.model_calls, result.tool_calls) == (3, 3)
    assert result.answer is None


def test_the_token_budget_is_strands_total_tokens_limit_checked_between_turns() -> None:
    result = contender(BookStore(), "looper", limits=AgentLimits(max_steps=None, max_tokens=2_000)).run(
        INSTRUCTIONS, SEED_GOAL
    )
    assert result.stop_reason is StopReason.TOKEN_BUDGET  # "limit_total_tokens"
    # A soft cap: the turn that crossed it ran to its end, and nothing after it.
    spent = [e.tokens for e in result.trace if e.is_model]
    assert sum(spent[:-1]) < 2_000 <= sum(spent)


def test_an_unknown_tool_is_fed_back_by_strands_and_the_run_goes_on() -> None:
    store = BookStore()
    result = contender(store, "hallucinator").run(INSTRUCTIONS, SEED_GOAL)
    unknown = [e for e in result.trace if e.guard is Guard.UNKNOWN_TOOL]
    assert len(unknown) == 1 and unknown[0].is_error and "Unknown tool" in unknown[0].detail
    assert result.stop_reason is StopReason.DONE
    assert cart(store) == [("The Quiet Orchard", 1)]


def test_a_tool_exception_reaches_the_model_with_its_text() -> None:
    store = BookStore()
    tools = make_tools(store, faults=Faults(failing_tool="check_stock"))
    agent = StrandsContender(ScriptedChatModel(), tools, AgentOptions(limits=AgentLimits(max_steps=4)))
    result = agent.run(INSTRUCTIONS, SEED_GOAL)
    failed = [e for e in result.trace if e.name == "check_stock"]
    assert failed and all(e.is_error for e in failed)
    sent = [m.text for m in result.messages if isinstance(m, ToolMessage) and m.status == "error"]
    assert any(FAKE_SECRET in text for text in sent)  # Strands' "Error: <the exception's text>"
    assert "detailed_errors" in agent.not_available


def test_the_call_id_reaches_the_tool_so_an_add_is_never_taken_twice() -> None:
    store = BookStore()
    result = contender(store).run(INSTRUCTIONS, SEED_GOAL)
    add_id = next(
        c["id"] for m in result.messages if isinstance(m, AIMessage) for c in m.tool_calls if c["name"] == "add_to_cart"
    )
    add = next(t for t in make_tools(store) if t.name == "add_to_cart")
    add.invoke({"name": "add_to_cart", "args": {"book_id": 7}, "id": add_id, "type": "tool_call"})
    assert cart(store) == [("The Quiet Orchard", 1)]


def test_strands_human_in_the_loop_gate_asks_our_rule_and_our_human() -> None:
    store = BookStore()
    asked: list[tuple[str, str]] = []

    def refuse(call: Any, reason: str) -> bool:
        asked.append((call["name"], reason))
        return False

    policy = RiskyWritePolicy(store, max_line_total=Decimal("10.00"))
    agent = StrandsContender(
        ScriptedChatModel(), make_tools(store), AgentOptions(needs_approval=policy), approve=refuse
    )
    result = agent.run(INSTRUCTIONS, SEED_GOAL)
    # The shopper retries a refused add once, as it does in the hand-written loop: each is put to the human.
    assert [name for name, _ in asked] == ["add_to_cart", "add_to_cart"]
    assert all("over 10.00" in reason for _, reason in asked)
    refused = [e for e in result.trace if e.guard is Guard.APPROVAL_REFUSED]
    assert len(refused) == 2 and all(e.is_error for e in refused)
    assert cart(store) == []
    # The reads ran without a question: only the rule's call went to the human.
    assert [e.name for e in result.trace if not e.is_model][:3] == ["search_books", "check_stock", "check_stock"]


def test_a_cancel_ends_the_run_as_cancelled() -> None:
    store = BookStore()
    cancel = threading.Event()
    seen: list[str] = []

    def on_event(event: Any) -> None:
        seen.append(event.name)
        if len(seen) == 2:
            cancel.set()

    result = contender(store, on_event=on_event).run(INSTRUCTIONS, SEED_GOAL, cancel=cancel)
    assert result.stop_reason is StopReason.CANCELLED
    assert result.tool_calls == 1 and cart(store) == []


def test_a_two_turn_conversation_is_kept_by_strands_session_manager_and_reopened(tmp_path: Path) -> None:
    store = BookStore()
    agent = contender(store)
    first = StrandsConversation(agent, INSTRUCTIONS, tmp_path, "t1").ask(SEED_GOAL)
    assert first.stop_reason is StopReason.DONE
    assert list(tmp_path.glob("session_t1/**/message_*.json"))

    reopened = StrandsConversation(agent, INSTRUCTIONS, tmp_path, "t1")
    second = reopened.ask("What is my cart total now?")
    assert second.stop_reason is StopReason.DONE
    assert second.answer is not None and "16.50" in second.answer
    questions = [m.text for m in second.messages if isinstance(m, HumanMessage)]
    assert questions == [SEED_GOAL, "What is my cart total now?"]
    # No tool call this turn: the total can only have come from the first turn's add result, read back from disk.
    assert (second.model_calls, second.tool_calls) == (1, 0)
    assert asyncio.run(reopened.afacts())["turns"] == 2


def test_the_entry_point_declares_it_and_its_spec_builds_it() -> None:
    from importlib.metadata import entry_points

    from frameworks.strands import SPEC
    from shared_tools.contender import ENTRY_POINT_GROUP, Approval

    (entry,) = [e for e in entry_points(group=ENTRY_POINT_GROUP) if e.name == "strands"]
    assert entry.load() is SPEC and SPEC.requirement == "strands-agents==1.62.0"
    assert SPEC.approval is Approval.ASKS
    store = BookStore()
    result = SPEC.build(ScriptedChatModel(), make_tools(store), AgentOptions(), None).run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.DONE and cart(store) == [("The Quiet Orchard", 1)]


def test_a_saved_session_is_refused_to_another_customer_and_a_fresh_one_replaces_it(tmp_path: Path) -> None:
    import pytest

    from frameworks.strands import acheck_saved, aopen_conversation
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


def test_a_second_conversation_of_the_same_customer_never_reuses_the_first_ones_call_ids() -> None:
    # The same salt and the same history give the same call ids: a provider that numbers its calls afresh.
    store = BookStore()
    agent = StrandsContender(ScriptedChatModel(id_salt="fixed"), make_tools(store))
    for _ in range(2):
        result = StrandsConversation(agent, INSTRUCTIONS, customer_id="c1").ask(SEED_GOAL)
        assert result.stop_reason is StopReason.DONE
    # Two conversations, two adds: the second is not taken for a replay of the first one's add.
    assert cart(store) == [("The Quiet Orchard", 2)]

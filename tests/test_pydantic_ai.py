"""PydanticAI (`frameworks.pydantic_ai`): real PydanticAI runs on the scripted model and on scripted doubles.

Every claim here is what PydanticAI's own loop did: its `UsageLimits` and `timeout` stopped the runs, its retry
prompt answered the unknown tool, its deferred tools carried the approvals, its message history the conversation.
"""

from __future__ import annotations

import json
import threading
import tomllib
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from pydantic_ai.exceptions import UnexpectedModelBehavior

from frameworks.pydantic_ai import SPEC, PydanticAIAgent, PydanticAIConversation, acheck_saved, aopen_conversation
from shared_tools.bookstore import BookStore, Faults, RiskyWritePolicy, make_tools
from shared_tools.bookstore.faults import FAKE_SECRET
from shared_tools.contender import ENTRY_POINT_GROUP
from shared_tools.models.scripted import ScriptedChatModel
from shared_tools.results import AgentLimits, AgentOptions, CustomerMismatch, Guard, StopReason, TraceEvent
from tests.conftest import assert_valid_history
from tests.doubles import ScriptModel, ai, call

INSTRUCTIONS = "You are a bookstore assistant."
SEED_GOAL = "Add The Last Lighthouse to my cart. If it is not available, add another novel by the same author."


def cart(store: BookStore) -> list[tuple[int, int]]:
    return [(line.book.id, line.quantity) for line in store.cart("c1").lines]


def test_the_articles_goal_ends_with_the_quiet_orchard(store: BookStore) -> None:
    result = PydanticAIAgent(ScriptedChatModel(), make_tools(store)).run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.DONE and "Quiet Orchard" in (result.answer or "")
    assert cart(store) == [(7, 1)]
    assert (result.model_calls, result.tool_calls) == (5, 4)
    assert result.tokens == sum(result.tokens_per_step) > 0
    assert [e.name for e in result.trace if not e.is_model] == [
        "search_books",
        "check_stock",
        "check_stock",
        "add_to_cart",
    ]
    assert_valid_history(result.messages)


def test_the_looper_is_stopped_by_pydantic_ais_request_limit(store: BookStore) -> None:
    options = AgentOptions(limits=AgentLimits(max_steps=3, max_tokens=None))
    agent = PydanticAIAgent(ScriptedChatModel(persona="looper"), make_tools(store), options)
    assert agent.usage_limits().request_limit == 3
    result = agent.run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.MAX_STEPS and result.answer is None
    assert (result.model_calls, result.tool_calls) == (3, 3)  # the last step's calls still ran


def test_the_token_budget_is_pydantic_ais_total_tokens_limit(store: BookStore) -> None:
    options = AgentOptions(limits=AgentLimits(max_steps=None, max_tokens=2_000))
    result = PydanticAIAgent(ScriptedChatModel(persona="looper"), make_tools(store), options).run(INSTRUCTIONS, "Go")
    assert result.stop_reason is StopReason.TOKEN_BUDGET and result.tokens > 2_000


def test_the_time_budget_is_pydantic_ais_run_timeout(store: BookStore) -> None:
    options = AgentOptions(limits=AgentLimits(max_duration=0.3))
    tools = make_tools(store, faults=Faults(latency_s=1.0))
    result = PydanticAIAgent(ScriptedChatModel(), tools, options).run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.TIME_BUDGET and result.model_calls == 1
    cut = [e for e in result.trace if not e.is_model]
    assert [(e.name, e.guard) for e in cut] == [("search_books", Guard.TOOL_TIMEOUT)]
    assert_valid_history(result.messages)


def test_an_unknown_tool_is_sent_back_by_pydantic_ai_and_the_run_goes_on(store: BookStore) -> None:
    result = PydanticAIAgent(ScriptedChatModel(persona="hallucinator"), make_tools(store)).run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.DONE and cart(store) == [(7, 1)]
    unknown = [e for e in result.trace if e.guard is Guard.UNKNOWN_TOOL]
    assert [e.name for e in unknown] == ["find_book"] and unknown[0].is_error
    assert "Unknown tool name: 'find_book'" in unknown[0].detail
    assert_valid_history(result.messages)


def test_bad_arguments_get_pydantic_ais_retry_prompt_then_its_own_error(store: BookStore) -> None:
    bad = call("add_to_cart", "b1", book_id=7, quantity="lots")
    model = ScriptModel(replies=[ai("", bad), ai("", {**bad, "id": "b2"})])
    with pytest.raises(UnexpectedModelBehavior, match="exceeded max retries"):
        PydanticAIAgent(model, make_tools(store)).run(INSTRUCTIONS, "Add it.")
    retry = [m for m in model.prompts[1] if isinstance(m, ToolMessage)]
    assert "quantity" in str(retry[0].content) and retry[0].status == "error"
    assert cart(store) == []


def test_a_tool_exception_ends_the_run_as_pydantic_ai_does(store: BookStore) -> None:
    events: list[TraceEvent] = []
    tools = make_tools(store, faults=Faults(failing_tool="check_stock"))
    agent = PydanticAIAgent(ScriptedChatModel(), tools, AgentOptions(on_event=events.append))
    with pytest.raises(RuntimeError):
        agent.run(INSTRUCTIONS, SEED_GOAL)
    failed = [e for e in events if e.name == "check_stock"]
    assert failed[0].is_error and FAKE_SECRET not in failed[0].detail


def test_a_store_refusal_goes_back_to_the_model_as_tool_failed(store: BookStore) -> None:
    model = ScriptModel(replies=[ai("", call("add_to_cart", "x1", book_id=999, quantity=1)), ai("No such book.")])
    result = PydanticAIAgent(model, make_tools(store)).run(INSTRUCTIONS, "Add book 999.")
    assert result.stop_reason is StopReason.DONE
    sent = [m for m in model.prompts[1] if isinstance(m, ToolMessage)]
    assert sent[0].status == "error" and "999" in str(sent[0].content)


def two_risky_adds() -> ScriptModel:
    return ScriptModel(
        replies=[
            ai("", call("add_to_cart", "a1", book_id=7, quantity=5), call("add_to_cart", "a2", book_id=5, quantity=4)),
            ai("One added, one refused."),
        ]
    )


def test_approval_through_deferred_tools_yes_to_one_no_to_the_other(store: BookStore) -> None:
    asked: list[str] = []

    def human(tool_call: Any, reason: str) -> bool:
        asked.append(tool_call["id"])
        return tool_call["id"].startswith("a2")

    options = AgentOptions(needs_approval=RiskyWritePolicy(store))
    result = PydanticAIAgent(two_risky_adds(), make_tools(store), options, approve=human).run(INSTRUCTIONS, "Add.")
    assert result.stop_reason is StopReason.DONE and cart(store) == [(5, 4)]
    assert [i[:2] for i in asked] == ["a1", "a2"]
    refused = [e for e in result.trace if e.guard is Guard.APPROVAL_REFUSED]
    assert [e.name for e in refused] == ["add_to_cart"] and "did not approve" in refused[0].detail
    assert_valid_history(result.messages)


def test_without_a_human_every_asked_call_is_refused(store: BookStore) -> None:
    options = AgentOptions(needs_approval=RiskyWritePolicy(store))
    result = PydanticAIAgent(two_risky_adds(), make_tools(store), options).run(INSTRUCTIONS, "Add.")
    assert result.stop_reason is StopReason.DONE and cart(store) == []
    assert sum(e.guard is Guard.APPROVAL_REFUSED for e in result.trace) == 2


def test_a_cancel_stops_the_run_through_pydantic_ais_cancellation(store: BookStore) -> None:
    cancel = threading.Event()

    def on_event(event: TraceEvent) -> None:
        if event.name == "check_stock":
            cancel.set()

    agent = PydanticAIAgent(ScriptedChatModel(), make_tools(store), AgentOptions(on_event=on_event))
    result = agent.run(INSTRUCTIONS, SEED_GOAL, cancel=cancel)
    assert result.stop_reason is StopReason.CANCELLED and cart(store) == []
    assert result.model_calls == 2


async def test_a_two_turn_conversation_is_kept_in_a_file_and_reopened(store: BookStore, tmp_path: Path) -> None:
    agent = PydanticAIAgent(ScriptedChatModel(), make_tools(store))
    first = await aopen_conversation(agent, INSTRUCTIONS, "t1", tmp_path / "s.db", resume=False, customer_id="c1")
    await first.aask(SEED_GOAL)
    path = tmp_path / "s.t1.pydantic-ai.json"
    saved = json.loads(path.read_text())
    assert saved["customer"] == "c1" and saved["messages"]
    again = await aopen_conversation(agent, INSTRUCTIONS, "t1", tmp_path / "s.db", resume=True, customer_id="c1")
    result = await again.aask("What is my cart total now?")
    assert "16.50" in (result.answer or "")
    assert again.history_turns() == [SEED_GOAL, "What is my cart total now?"]
    assert (await again.afacts())["turns"] == 2
    assert_valid_history(await again.amessages())
    rewound = await again.arewind(1)
    assert rewound.turns == 1 and (await again.afacts())["turns"] == 1
    with pytest.raises(CustomerMismatch):
        await acheck_saved(tmp_path / "s.db", "t1", "c2")
    await acheck_saved(tmp_path / "s.db", "t1", "c1")
    with pytest.raises(CustomerMismatch):
        PydanticAIConversation(agent, INSTRUCTIONS, path=path, customer_id="c2")


def test_declared_through_its_entry_point_and_pinned_exactly(store: BookStore) -> None:
    (entry,) = [e for e in entry_points(group=ENTRY_POINT_GROUP) if e.name == "pydantic-ai"]
    assert entry.load() is SPEC and SPEC.name == "pydantic-ai"
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert SPEC.requirement in pyproject["project"]["dependencies"] and "==" in SPEC.requirement
    agent = SPEC.build(ScriptedChatModel(), make_tools(store), AgentOptions(), None)
    assert agent.run(INSTRUCTIONS, SEED_GOAL).stop_reason is StopReason.DONE and cart(store) == [(7, 1)]


# --- a hostile model through the adapter -----------------------------------------------------------------------------


def test_a_cancel_seen_before_a_tool_runs_it_not(store: BookStore) -> None:
    cancel = threading.Event()
    agent = PydanticAIAgent(ScriptedChatModel(), make_tools(store), AgentOptions(on_event=lambda e: cancel.set()))
    result = agent.run(INSTRUCTIONS, SEED_GOAL, cancel=cancel)
    assert result.stop_reason is StopReason.CANCELLED and result.model_calls == 1
    assert [(e.name, e.guard) for e in result.trace if not e.is_model] == [("search_books", Guard.CANCELLED)]
    assert_valid_history(result.messages)


def test_the_request_limit_holds_across_refused_approvals(store: BookStore) -> None:
    again = call("add_to_cart", None, book_id=7, quantity=10)
    model = ScriptModel(replies=[lambda history: ai("", {**again, "id": f"a{len(history)}"})] * 10)
    options = AgentOptions(limits=AgentLimits(max_steps=3), needs_approval=RiskyWritePolicy(store))
    result = PydanticAIAgent(model, make_tools(store), options, approve=lambda c, r: False).run(INSTRUCTIONS, "Add.")
    assert result.stop_reason is StopReason.MAX_STEPS and model.calls == 3 and cart(store) == []
    assert [e.guard for e in result.trace if not e.is_model] == [Guard.APPROVAL_REFUSED] * 3
    assert_valid_history(result.messages)


def test_a_reused_call_id_gets_a_fresh_one_so_both_calls_run(store: BookStore) -> None:
    model = ScriptModel(
        replies=[ai("", call("check_stock", "x", book_id=2), call("check_stock", "x", book_id=7)), ai("Both.")]
    )
    result = PydanticAIAgent(model, make_tools(store)).run(INSTRUCTIONS, "Stock?")
    results = [m for m in model.prompts[1] if isinstance(m, ToolMessage)]
    assert len({m.tool_call_id for m in results}) == 2 and ["inStock" in str(m.content) for m in results] == [1, 1]
    assert_valid_history(result.messages)

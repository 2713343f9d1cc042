"""The OpenAI Agents SDK (`frameworks.openai_agents`): real `Runner` runs on the scripted model and scripted doubles.

Every claim here is what the SDK's own loop did: its `max_turns` stopped the looper, its `ModelBehaviorError` ended
the run on an unknown tool, its interruptions and `RunState` carried the approvals, its `SQLiteSession` the
conversation; tracing is off (`RunConfig.tracing_disabled`), so nothing leaves the machine.
"""

from __future__ import annotations

import threading
import tomllib
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
from agents import ModelBehaviorError
from langchain_core.messages import AIMessage, ToolMessage

from frameworks.openai_agents import SPEC, OpenAIAgentsAgent, OpenAIAgentsConversation, acheck_saved, aopen_conversation
from shared_tools.bookstore import BookStore, Faults, RiskyWritePolicy, make_tools
from shared_tools.bookstore.faults import FAKE_SECRET
from shared_tools.contender import ENTRY_POINT_GROUP
from shared_tools.models.scripted import ScriptedChatModel
from shared_tools.results import AgentLimits, AgentOptions, CustomerMismatch, Guard, StopReason, TraceEvent
from tests.conftest import assert_valid_history
from tests.doubles import ScriptModel, ai, call

INSTRUCTIONS = "You are a bookstore assistant."
SEED_GOAL = "Add The Last Lighthouse to my cart. If it is not available, add another novel by the same author."
GENERIC = "An error occurred while running the tool. Please try again."
"""The SDK's `default_tool_error_function` text."""


def cart(store: BookStore) -> list[tuple[int, int]]:
    return [(line.book.id, line.quantity) for line in store.cart("c1").lines]


def sent_results(model: ScriptModel, prompt: int) -> list[ToolMessage]:
    return [m for m in model.prompts[prompt] if isinstance(m, ToolMessage)]


def test_the_articles_goal_ends_with_the_quiet_orchard(store: BookStore) -> None:
    result = OpenAIAgentsAgent(ScriptedChatModel(), make_tools(store)).run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.DONE and "Quiet Orchard" in (result.answer or "")
    assert cart(store) == [(7, 1)]
    assert (result.model_calls, result.tool_calls) == (5, 4)
    assert result.tokens == sum(result.tokens_per_step) > 0
    assert_valid_history(result.messages)


def test_the_looper_is_stopped_by_the_sdks_max_turns(store: BookStore) -> None:
    options = AgentOptions(limits=AgentLimits(max_steps=3))
    result = OpenAIAgentsAgent(ScriptedChatModel(persona="looper"), make_tools(store), options).run(INSTRUCTIONS, "Go")
    assert result.stop_reason is StopReason.MAX_STEPS and result.answer is None
    assert (result.model_calls, result.tool_calls) == (3, 3)  # the last turn's calls still ran


def test_no_token_budget_the_looper_runs_past_it(store: BookStore) -> None:
    options = AgentOptions(limits=AgentLimits(max_steps=8, max_tokens=2_000))
    agent = OpenAIAgentsAgent(ScriptedChatModel(persona="looper"), make_tools(store), options)
    assert "max_tokens" in agent.not_available
    result = agent.run(INSTRUCTIONS, "Go")
    assert result.stop_reason is StopReason.MAX_STEPS and result.tokens > 2_000


def test_an_unknown_tool_ends_the_run_with_the_sdks_model_behavior_error(store: BookStore) -> None:
    agent = OpenAIAgentsAgent(ScriptedChatModel(persona="hallucinator"), make_tools(store))
    with pytest.raises(ModelBehaviorError, match="find_book"):
        agent.run(INSTRUCTIONS, SEED_GOAL)
    assert cart(store) == []


def test_a_tool_exception_goes_back_as_the_sdks_generic_text(store: BookStore) -> None:
    tools = make_tools(store, faults=Faults(failing_tool="check_stock"))
    result = OpenAIAgentsAgent(ScriptedChatModel(), tools).run(INSTRUCTIONS, SEED_GOAL)
    failed = [e for e in result.trace if e.name == "check_stock"]
    assert failed and all(e.is_error and e.guard is Guard.ERROR_HIDDEN for e in failed)
    assert GENERIC in failed[0].detail and FAKE_SECRET not in failed[0].detail
    assert_valid_history(result.messages)


def test_bad_arguments_go_back_as_the_sdks_generic_text_and_nothing_runs(store: BookStore) -> None:
    model = ScriptModel(replies=[ai("", call("add_to_cart", "b1", book_id=7, quantity="lots")), ai("Sorry.")])
    result = OpenAIAgentsAgent(model, make_tools(store)).run(INSTRUCTIONS, "Add it.")
    assert result.stop_reason is StopReason.DONE and cart(store) == []
    assert [e.guard for e in result.trace if not e.is_model] == [Guard.INVALID_ARGS]
    assert str(sent_results(model, 1)[0].content) == GENERIC


def test_the_time_budget_cuts_a_tool_call_through_its_timeout_seconds(store: BookStore) -> None:
    options = AgentOptions(limits=AgentLimits(max_duration=0.3, max_steps=2))
    tools = make_tools(store, faults=Faults(latency_s=1.0))
    result = OpenAIAgentsAgent(ScriptedChatModel(), tools, options).run(INSTRUCTIONS, SEED_GOAL)
    cut = [e for e in result.trace if not e.is_model]
    assert cut[0].guard is Guard.TOOL_TIMEOUT and "timed out" in cut[0].detail
    assert result.stop_reason is not StopReason.TIME_BUDGET  # the SDK has no run budget: the run went on


def two_risky_adds() -> ScriptModel:
    return ScriptModel(
        replies=[
            ai("", call("add_to_cart", "a1", book_id=7, quantity=5), call("add_to_cart", "a2", book_id=5, quantity=4)),
            ai("One added, one refused."),
        ]
    )


def test_approval_through_interruptions_yes_to_one_no_to_the_other(store: BookStore) -> None:
    asked: list[str] = []

    def human(tool_call: Any, reason: str) -> bool:
        asked.append(tool_call["id"])
        return tool_call["id"].startswith("a2")

    options = AgentOptions(needs_approval=RiskyWritePolicy(store))
    result = OpenAIAgentsAgent(two_risky_adds(), make_tools(store), options, approve=human).run(INSTRUCTIONS, "Add.")
    assert result.stop_reason is StopReason.DONE and cart(store) == [(5, 4)]
    assert [i[:2] for i in asked] == ["a1", "a2"]
    refused = [e for e in result.trace if e.guard is Guard.APPROVAL_REFUSED]
    assert [e.name for e in refused] == ["add_to_cart"] and "did not approve" in refused[0].detail
    assert_valid_history(result.messages)


def test_without_a_human_every_asked_call_is_refused(store: BookStore) -> None:
    options = AgentOptions(needs_approval=RiskyWritePolicy(store))
    result = OpenAIAgentsAgent(two_risky_adds(), make_tools(store), options).run(INSTRUCTIONS, "Add.")
    assert result.stop_reason is StopReason.DONE and cart(store) == []
    assert sum(e.guard is Guard.APPROVAL_REFUSED for e in result.trace) == 2


def test_a_cancel_stops_the_run_at_the_next_model_call(store: BookStore) -> None:
    cancel = threading.Event()

    def on_event(event: TraceEvent) -> None:
        if event.name == "check_stock":
            cancel.set()

    agent = OpenAIAgentsAgent(ScriptedChatModel(), make_tools(store), AgentOptions(on_event=on_event))
    result = agent.run(INSTRUCTIONS, SEED_GOAL, cancel=cancel)
    assert result.stop_reason is StopReason.CANCELLED and cart(store) == [] and result.model_calls == 2


async def test_a_two_turn_conversation_is_kept_in_an_sqlite_session_and_reopened(
    store: BookStore, tmp_path: Path
) -> None:
    agent = OpenAIAgentsAgent(ScriptedChatModel(), make_tools(store))
    first = await aopen_conversation(agent, INSTRUCTIONS, "t1", tmp_path / "s.db", resume=False, customer_id="c1")
    await first.aask(SEED_GOAL)
    first.close()
    path = tmp_path / "s.t1.openai-agents.db"
    assert path.exists()
    again = await aopen_conversation(agent, INSTRUCTIONS, "t1", tmp_path / "s.db", resume=True, customer_id="c1")
    assert (await again.afacts())["turns"] == 1
    result = await again.aask("What is my cart total now?")
    assert "16.50" in (result.answer or "")
    assert (await again.afacts())["turns"] == 2
    assert_valid_history(await again.amessages())
    rewound = await again.arewind(1)
    assert rewound.turns == 1 and (await again.afacts())["turns"] == 1
    again.close()
    with pytest.raises(CustomerMismatch):
        await acheck_saved(tmp_path / "s.db", "t1", "c2")
    await acheck_saved(tmp_path / "s.db", "t1", "c1")
    with pytest.raises(CustomerMismatch):
        OpenAIAgentsConversation(agent, INSTRUCTIONS, "t1", path=path, customer_id="c2")


def test_declared_through_its_entry_point_and_pinned_exactly(store: BookStore) -> None:
    (entry,) = [e for e in entry_points(group=ENTRY_POINT_GROUP) if e.name == "openai-agents"]
    assert entry.load() is SPEC and SPEC.name == "openai-agents"
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert SPEC.requirement in pyproject["project"]["dependencies"] and "==" in SPEC.requirement
    agent = SPEC.build(ScriptedChatModel(), make_tools(store), AgentOptions(), None)
    assert agent.run(INSTRUCTIONS, SEED_GOAL).stop_reason is StopReason.DONE and cart(store) == [(7, 1)]


# --- a hostile model through the adapter -----------------------------------------------------------------------------


def test_a_call_whose_arguments_do_not_parse_is_answered_and_the_history_stays_readable(store: BookStore) -> None:
    unparsable = AIMessage(
        "", invalid_tool_calls=[{"name": "check_stock", "args": "{bad json", "id": "u1", "error": "x", "type": "x"}]
    )
    model = ScriptModel(replies=[unparsable, ai("Sorry.")])
    result = OpenAIAgentsAgent(model, make_tools(store)).run(INSTRUCTIONS, "Stock?")
    assert result.stop_reason is StopReason.DONE
    assert [e.guard for e in result.trace if not e.is_model] == [Guard.INVALID_ARGS]
    assert str(sent_results(model, 1)[0].content) == GENERIC
    assert_valid_history(result.messages)


def test_max_turns_holds_across_refused_approvals_and_leaves_every_call_answered(store: BookStore) -> None:
    again = call("add_to_cart", None, book_id=7, quantity=10)
    model = ScriptModel(replies=[lambda history: ai("", {**again, "id": f"a{len(history)}"})] * 10)
    options = AgentOptions(limits=AgentLimits(max_steps=3), needs_approval=RiskyWritePolicy(store))
    result = OpenAIAgentsAgent(model, make_tools(store), options, approve=lambda c, r: False).run(INSTRUCTIONS, "Add.")
    assert result.stop_reason is StopReason.MAX_STEPS and model.calls == 3 and cart(store) == []
    assert [e.guard for e in result.trace if not e.is_model] == [Guard.APPROVAL_REFUSED] * 3
    assert_valid_history(result.messages)


def test_a_cancel_seen_before_a_tool_runs_it_not(store: BookStore) -> None:
    cancel = threading.Event()
    agent = OpenAIAgentsAgent(ScriptedChatModel(), make_tools(store), AgentOptions(on_event=lambda e: cancel.set()))
    result = agent.run(INSTRUCTIONS, SEED_GOAL, cancel=cancel)
    assert result.stop_reason is StopReason.CANCELLED and result.model_calls == 1
    assert [(e.name, e.guard) for e in result.trace if not e.is_model] == [("search_books", Guard.CANCELLED)]
    assert_valid_history(result.messages)


def test_a_reused_call_id_gets_a_fresh_one_so_both_calls_run(store: BookStore) -> None:
    model = ScriptModel(
        replies=[ai("", call("check_stock", "x", book_id=2), call("check_stock", "x", book_id=7)), ai("Both.")]
    )
    result = OpenAIAgentsAgent(model, make_tools(store)).run(INSTRUCTIONS, "Stock?")
    results = sent_results(model, 1)
    assert len({m.tool_call_id for m in results}) == 2 and ["inStock" in str(m.content) for m in results] == [1, 1]
    assert_valid_history(result.messages)

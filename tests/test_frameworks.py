"""The framework contenders (`frameworks/`): each behaviour once, run through every framework the registry declares.

Every run is the framework's own loop on the scripted model or a scripted double. What differs between frameworks
is read from each spec (`guards`, `approval`, `has(...)`) and from the agent's `not_available`, never from its
name; a mechanism only one framework has is tested in its own section at the end.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import re
import threading
import tomllib
from decimal import Decimal
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from comparison.contenders import SPECS
from shared_tools import guards
from shared_tools.bookstore import BookStore, Faults, RiskyWritePolicy, make_tools
from shared_tools.bookstore.faults import FAKE_SECRET
from shared_tools.contender import ENTRY_POINT_GROUP, Approval, Capability, ContenderSpec
from shared_tools.models.scripted import ScriptedChatModel
from shared_tools.results import AgentLimits, AgentOptions, AgentResult, CustomerMismatch, Guard, StopReason
from tests.conftest import assert_valid_history
from tests.doubles import ScriptModel, ai, call

INSTRUCTIONS = "You are a bookstore assistant."
SEED_GOAL = "Add The Last Lighthouse to my cart. If it is not available, add another novel by the same author."
QUIET_ORCHARD = [(7, 1)]
"""The cart the article's goal ends with: The Quiet Orchard (book 7), once."""

FRAMEWORKS = [spec for spec in SPECS.values() if spec.source_modules[0].startswith("frameworks.")]
"""Every contender built on a framework of its own, one file each in `frameworks/`."""
ASKING = [spec for spec in FRAMEWORKS if spec.approval is Approval.ASKS]
UNGATED = [spec for spec in FRAMEWORKS if spec.approval is Approval.NONE]
REWINDING = [spec for spec in FRAMEWORKS if spec.has(Capability.REWIND)]
KEPT = [spec for spec in FRAMEWORKS if spec.has(Capability.CONVERSATIONS)]

each = pytest.mark.parametrize("spec", FRAMEWORKS, ids=lambda s: s.name)


def cart(store: BookStore) -> list[tuple[int, int]]:
    return [(line.book.id, line.quantity) for line in store.cart("c1").lines]


def agent(spec: ContenderSpec, store: BookStore, model: Any = None, approve: Any = None, **options: Any) -> Any:
    """`spec`'s agent as the harness builds it (`spec.build`), on the scripted shopper unless `model` is given."""
    return spec.build(model or ScriptedChatModel(), make_tools(store), AgentOptions(**options), approve)


def tool_lines(result: AgentResult) -> list[Any]:
    return [e for e in result.trace if not e.is_model]


def claimed(spec: ContenderSpec, guard: str) -> str:
    """The framework's own words quoted in the claim of `guard` ("... 'Unknown tool' ..." -> "Unknown tool")."""
    quoted = re.findall(r"(?<!\w)'([^']+)'(?!\w)", spec.guards[guard])
    assert quoted, f"{spec.name}: the claim of {guard!r} quotes no words of the framework: {spec.guards[guard]!r}"
    return quoted[0]


def conversation_module(spec: ContenderSpec) -> ModuleType:
    assert spec.conversation is not None
    return importlib.import_module(spec.conversation)


# --- declared and built -------------------------------------------------------------------------------------------


@each
def test_declared_through_its_entry_point_pinned_exactly_and_built_by_its_spec(spec: ContenderSpec) -> None:
    (entry,) = [e for e in entry_points(group=ENTRY_POINT_GROUP) if e.name == spec.name]
    assert entry.load() is spec and spec.name == entry.name
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert spec.requirement in pyproject["project"]["dependencies"] and "==" in spec.requirement
    store = BookStore()
    result = agent(spec, store).run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.DONE and cart(store) == QUIET_ORCHARD


@each
def test_two_tools_of_one_name_are_refused(spec: ContenderSpec) -> None:
    tools = make_tools(BookStore())
    with pytest.raises(ValueError, match="tool names must be unique"):
        spec.build(ScriptedChatModel(), [*tools, tools[0]], AgentOptions(), None)


# --- the article's goal and the budgets -------------------------------------------------------------------------


@each
def test_the_articles_goal_ends_with_the_quiet_orchard(spec: ContenderSpec) -> None:
    store = BookStore()
    result = agent(spec, store).run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.DONE
    assert result.answer is not None and "The Quiet Orchard" in result.answer
    assert cart(store) == QUIET_ORCHARD
    assert (result.model_calls, result.tool_calls) == (5, 4)
    assert [e.name for e in tool_lines(result)] == ["search_books", "check_stock", "check_stock", "add_to_cart"]
    assert result.tokens == sum(result.tokens_per_step) == sum(e.tokens for e in result.trace) > 0
    # The history is langchain's: every call answered by a result with its id, the answer last.
    assert_valid_history(result.messages)
    calls = [c["id"] for m in result.messages if isinstance(m, AIMessage) for c in m.tool_calls]
    assert calls == [m.tool_call_id for m in result.messages if isinstance(m, ToolMessage)] and len(calls) == 4
    assert isinstance(result.messages[-1], AIMessage) and result.messages[-1].text == result.answer


@each
def test_the_looper_is_stopped_by_the_frameworks_own_step_limit(spec: ContenderSpec) -> None:
    assert "step limit" in spec.guards
    looper = agent(spec, BookStore(), ScriptedChatModel(persona="looper"), limits=AgentLimits(max_steps=3))
    result = looper.run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.MAX_STEPS and result.answer is None
    # The last step's calls still ran; a framework that asks the model once more at its limit (without tools) keeps
    # that text as the forced answer, one call more.
    forced = result.forced_answer is not None
    assert (result.model_calls, result.tool_calls) == (3 + forced, 3)


@each
def test_a_token_budget_is_the_frameworks_own_or_named_missing(spec: ContenderSpec) -> None:
    options = {"limits": AgentLimits(max_steps=8, max_tokens=2_000)}
    looper = agent(spec, BookStore(), ScriptedChatModel(persona="looper"), **options)
    result = looper.run(INSTRUCTIONS, "Go")
    spent = [e.tokens for e in result.trace if e.is_model]
    if "token budget" in spec.guards:
        assert "max_tokens" not in looper.not_available
        assert result.stop_reason is StopReason.TOKEN_BUDGET
        # Checked after each reply: the call that crossed it was the last one.
        assert sum(spent[:-1]) < 2_000 <= sum(spent) == result.tokens
    else:
        assert "max_tokens" in looper.not_available
        assert result.stop_reason is StopReason.MAX_STEPS and result.tokens > 2_000


@each
def test_a_time_budget_is_the_frameworks_own_or_named_missing(spec: ContenderSpec) -> None:
    options = AgentOptions(limits=AgentLimits(max_duration=0.3, max_steps=2))
    slow = make_tools(BookStore(), faults=Faults(latency_s=1.0))
    built = spec.build(ScriptedChatModel(), slow, options, None)
    result = built.run(INSTRUCTIONS, SEED_GOAL)
    if "time budget" in spec.guards:
        assert result.stop_reason is StopReason.TIME_BUDGET and result.model_calls == 1
        assert [(e.name, e.guard) for e in tool_lines(result)] == [("search_books", Guard.TOOL_TIMEOUT)]
        assert_valid_history(result.messages)
    else:
        assert "max_duration" in built.not_available
        assert result.stop_reason is not StopReason.TIME_BUDGET


# --- calls the framework cannot run, and tools that fail ----------------------------------------------------------


@each
def test_an_unknown_tool_is_fed_back_by_a_framework_that_claims_it_else_the_run_raises(spec: ContenderSpec) -> None:
    store = BookStore()
    hallucinator = agent(spec, store, ScriptedChatModel(persona="hallucinator"))
    if "unknown tool" not in spec.guards:
        with pytest.raises(Exception, match="find_book"):
            hallucinator.run(INSTRUCTIONS, SEED_GOAL)
        assert cart(store) == []
        return
    result = hallucinator.run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.DONE and cart(store) == QUIET_ORCHARD
    unknown = [e for e in result.trace if e.guard is Guard.UNKNOWN_TOOL]
    assert [e.name for e in unknown] == ["find_book"] and unknown[0].is_error
    assert claimed(spec, "unknown tool") in unknown[0].detail and "find_book" in unknown[0].detail
    # The failed call is in the history, answered with the framework's error as its result.
    first = next(m for m in result.messages if isinstance(m, ToolMessage))
    assert first.status == "error" and claimed(spec, "unknown tool") in first.text
    assert_valid_history(result.messages)


@each
def test_a_tool_exception_never_shows_its_secret_unless_the_framework_cannot_hide_it(spec: ContenderSpec) -> None:
    events: list[Any] = []
    tools = make_tools(BookStore(), faults=Faults(failing_tool="check_stock"))
    options = AgentOptions(limits=AgentLimits(max_steps=4), on_event=events.append)
    built = spec.build(ScriptedChatModel(), tools, options, None)
    try:
        result: AgentResult | None = built.run(INSTRUCTIONS, SEED_GOAL)
    except RuntimeError:
        result = None  # a framework that ends the run on a tool's exception (its own section says which)
    failed = [e for e in events if e.name == "check_stock"]
    assert failed and all(e.is_error for e in failed)
    if "detailed_errors" in built.not_available:
        assert result is not None  # it feeds every error back: the run goes on
        sent = [m.text for m in result.messages if isinstance(m, ToolMessage) and m.status == "error"]
        assert any(FAKE_SECRET in text for text in sent)
    else:
        assert all(FAKE_SECRET not in e.detail for e in failed)
    if "error hiding" in spec.guards:
        assert result is not None and all(e.guard is Guard.ERROR_HIDDEN for e in failed)
        assert_valid_history(result.messages)


@each
def test_a_store_refusal_goes_back_to_the_model_as_the_calls_result(spec: ContenderSpec) -> None:
    model = ScriptModel(replies=[ai("", call("add_to_cart", "x1", book_id=999, quantity=1)), ai("No such book.")])
    result = agent(spec, BookStore(), model).run(INSTRUCTIONS, "Add book 999.")
    assert result.stop_reason is StopReason.DONE and result.answer == "No such book."
    sent = [m for m in model.prompts[1] if isinstance(m, ToolMessage)]
    assert len(sent) == 1 and "999" in str(sent[0].content)


@each
def test_every_option_it_cannot_honour_is_named_when_asked_and_none_otherwise(spec: ContenderSpec) -> None:
    table = importlib.import_module(spec.source_modules[0]).NOT_AVAILABLE
    unlimited = AgentLimits(max_steps=None, max_tokens=None, max_repeats=None, max_consecutive_errors=None)
    nothing = AgentOptions(limits=unlimited, detailed_errors=True)
    assert spec.build(ScriptedChatModel(), make_tools(BookStore()), nothing, None).not_available == {}
    every = AgentOptions(
        limits=AgentLimits(max_steps=3, max_tokens=100, max_duration=5.0, max_repeats=2, max_consecutive_errors=2),
        max_tool_result_chars=100,
        detailed_errors=False,
        needs_approval=lambda c, e: None,
        on_token=lambda t: None,
    )
    built = spec.build(ScriptedChatModel(), make_tools(BookStore()), every, None)
    assert built.not_available == table and list(built.not_available) == list(table)


@each
def test_a_reused_call_id_gets_a_fresh_one_so_both_calls_run(spec: ContenderSpec) -> None:
    model = ScriptModel(
        replies=[ai("", call("check_stock", "x", book_id=2), call("check_stock", "x", book_id=7)), ai("Both.")]
    )
    result = agent(spec, BookStore(), model).run(INSTRUCTIONS, "Stock?")
    assert result.stop_reason is StopReason.DONE and result.tool_calls == 2
    results = [m for m in model.prompts[1] if isinstance(m, ToolMessage)]
    assert len({m.tool_call_id for m in results}) == 2 and ["inStock" in str(m.content) for m in results] == [1, 1]
    assert_valid_history(result.messages)


# --- approval -----------------------------------------------------------------------------------------------------


def two_risky_adds() -> ScriptModel:
    return ScriptModel(
        replies=[
            ai("", call("add_to_cart", "a1", book_id=7, quantity=5), call("add_to_cart", "a2", book_id=5, quantity=4)),
            ai("One added, one refused."),
        ]
    )


@pytest.mark.parametrize("spec", ASKING, ids=lambda s: s.name)
def test_its_gate_asks_our_rule_and_our_human_yes_to_one_no_to_the_other(spec: ContenderSpec) -> None:
    store = BookStore()
    asked: list[str] = []

    def human(tool_call: Any, reason: str) -> bool:
        asked.append(tool_call["id"])
        return tool_call["id"].startswith("a2")

    built = agent(spec, store, two_risky_adds(), human, needs_approval=RiskyWritePolicy(store))
    result = built.run(INSTRUCTIONS, "Add.")
    assert result.stop_reason is StopReason.DONE and cart(store) == [(5, 4)]
    assert [i[:2] for i in asked] == ["a1", "a2"]
    refused = [e for e in result.trace if e.guard is Guard.APPROVAL_REFUSED]
    assert [e.name for e in refused] == ["add_to_cart"] and refused[0].is_error
    assert_valid_history(result.messages)


@pytest.mark.parametrize("spec", ASKING, ids=lambda s: s.name)
def test_without_a_human_every_asked_call_is_refused(spec: ContenderSpec) -> None:
    store = BookStore()
    result = agent(spec, store, two_risky_adds(), needs_approval=RiskyWritePolicy(store)).run(INSTRUCTIONS, "Add.")
    assert result.stop_reason is StopReason.DONE and cart(store) == []
    assert sum(e.guard is Guard.APPROVAL_REFUSED for e in result.trace) == 2


@pytest.mark.parametrize("spec", ASKING, ids=lambda s: s.name)
def test_the_reads_run_unasked_and_each_retried_add_is_put_to_the_human(spec: ContenderSpec) -> None:
    store = BookStore()
    asked: list[tuple[str, str]] = []

    def refuse(tool_call: Any, reason: str) -> bool:
        asked.append((tool_call["name"], reason))
        return False

    policy = RiskyWritePolicy(store, max_line_total=Decimal("10.00"))
    result = agent(spec, store, approve=refuse, needs_approval=policy).run(INSTRUCTIONS, SEED_GOAL)
    # The shopper retries a refused add once, as it does in the hand-written loop: each is put to the human.
    assert [name for name, _ in asked] == ["add_to_cart", "add_to_cart"]
    assert all("over 10.00" in reason for _, reason in asked)
    refused = [e for e in result.trace if e.guard is Guard.APPROVAL_REFUSED]
    assert len(refused) == 2 and all(e.is_error for e in refused) and cart(store) == []
    assert [e.name for e in tool_lines(result)][:3] == ["search_books", "check_stock", "check_stock"]


@pytest.mark.parametrize("spec", ASKING, ids=lambda s: s.name)
def test_the_step_limit_holds_across_refused_approvals(spec: ContenderSpec) -> None:
    store = BookStore()
    again = call("add_to_cart", None, book_id=7, quantity=10)
    model = ScriptModel(replies=[lambda history: ai("", {**again, "id": f"a{len(history)}"})] * 10)
    options = {"limits": AgentLimits(max_steps=3), "needs_approval": RiskyWritePolicy(store)}
    result = agent(spec, store, model, lambda c, r: False, **options).run(INSTRUCTIONS, "Add.")
    assert result.stop_reason is StopReason.MAX_STEPS and model.calls == 3 and cart(store) == []
    assert [e.guard for e in tool_lines(result)] == [Guard.APPROVAL_REFUSED] * 3
    assert_valid_history(result.messages)


@pytest.mark.parametrize("spec", UNGATED, ids=lambda s: s.name)
def test_a_framework_without_a_gate_names_the_rule_it_ignores(spec: ContenderSpec) -> None:
    store = BookStore()
    built = agent(spec, store, two_risky_adds(), needs_approval=RiskyWritePolicy(store))
    assert built.not_available["needs_approval"] == spec.why_not(Capability.APPROVAL)


# --- cancel -----------------------------------------------------------------------------------------------------


@each
@pytest.mark.parametrize("after", [1, 2])
def test_a_cancel_after_a_tool_call_ends_the_run_at_the_next_model_call(spec: ContenderSpec, after: int) -> None:
    store = BookStore()
    cancel = threading.Event()
    seen: list[str] = []

    def on_event(event: Any) -> None:
        if not event.is_model:
            seen.append(event.name)
        if len(seen) == after:
            cancel.set()

    result = agent(spec, store, on_event=on_event).run(INSTRUCTIONS, SEED_GOAL, cancel=cancel)
    assert result.stop_reason is StopReason.CANCELLED and result.answer is None
    assert (result.model_calls, result.tool_calls) == (after, after) and cart(store) == []


# --- the conversation ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", KEPT, ids=lambda s: s.name)
async def test_a_two_turn_conversation_is_kept_beside_the_database_and_reopened(
    spec: ContenderSpec, tmp_path: Path
) -> None:
    module, store, db = conversation_module(spec), BookStore(), tmp_path / "s.db"
    built = agent(spec, store)
    first = await module.aopen_conversation(built, INSTRUCTIONS, "t1", db, resume=False, customer_id="c1")
    assert (await first.aask(SEED_GOAL)).stop_reason is StopReason.DONE
    first.close()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("s.t1.")], "nothing kept beside s.db"
    again = await module.aopen_conversation(built, INSTRUCTIONS, "t1", db, resume=True, customer_id="c1")
    assert (await again.afacts())["turns"] == 1
    second = await again.aask("What is my cart total now?")
    assert second.stop_reason is StopReason.DONE and "16.50" in (second.answer or "")
    # The second turn ran on the first turn's history: both questions, in order.
    asked = [m.text for m in await again.amessages() if isinstance(m, HumanMessage)]
    assert asked == [SEED_GOAL, "What is my cart total now?"]
    facts = await again.afacts()
    assert facts["turns"] == 2 and facts["stored_bytes"] > 0 and str(tmp_path) in facts["kept_in"]
    assert_valid_history(await again.amessages())
    assert await again.apending() == [] and await again.acontinue_unfinished() is None
    again.close()


@pytest.mark.parametrize("spec", KEPT, ids=lambda s: s.name)
async def test_a_saved_conversation_is_refused_to_another_customer_and_a_fresh_one_replaces_it(
    spec: ContenderSpec, tmp_path: Path
) -> None:
    module, db = conversation_module(spec), tmp_path / "sessions.db"
    built = agent(spec, BookStore())
    conversation = await module.aopen_conversation(built, INSTRUCTIONS, "t1", db, resume=False, customer_id="c1")
    await conversation.aask(SEED_GOAL)
    conversation.close()
    await module.acheck_saved(db, "t1", "c1")
    with pytest.raises(CustomerMismatch):
        await module.acheck_saved(db, "t1", "c2")
    with pytest.raises(CustomerMismatch):
        await module.aopen_conversation(built, INSTRUCTIONS, "t1", db, resume=True, customer_id="c2")
    fresh = await module.aopen_conversation(built, INSTRUCTIONS, "t1", db, resume=False, customer_id="c1")
    assert (await fresh.afacts())["turns"] == 0
    fresh.close()


@pytest.mark.parametrize("spec", KEPT, ids=lambda s: s.name)
async def test_a_postgres_url_or_a_history_window_is_refused_in_its_own_words(spec: ContenderSpec) -> None:
    from shared_tools.conversation import HistoryPolicy

    module, built = conversation_module(spec), agent(spec, BookStore())
    with pytest.raises(ValueError, match=f"^{re.escape(spec.name)}: "):
        await module.aopen_conversation(built, INSTRUCTIONS, "t1", "postgresql://h/db", resume=False)
    with pytest.raises(ValueError, match=re.escape(spec.why_not(Capability.HISTORY_WINDOW))):
        await module.aopen_conversation(built, INSTRUCTIONS, "t1", None, resume=False, policy=HistoryPolicy(2))


@pytest.mark.parametrize("spec", REWINDING, ids=lambda s: s.name)
async def test_a_rewind_goes_back_one_turn(spec: ContenderSpec, tmp_path: Path) -> None:
    module = conversation_module(spec)
    conversation = await module.aopen_conversation(
        agent(spec, BookStore()), INSTRUCTIONS, "t1", tmp_path / "s.db", resume=False, customer_id="c1"
    )
    await conversation.aask(SEED_GOAL)
    await conversation.aask("What is my cart total now?")
    rewound = await conversation.arewind(1)
    assert rewound.turns == 1 and rewound.messages > 0 and (await conversation.afacts())["turns"] == 1
    with pytest.raises(ValueError, match="cannot rewind"):
        await conversation.arewind(2)
    conversation.close()


@pytest.mark.parametrize("spec", [s for s in KEPT if not s.has(Capability.REWIND)], ids=lambda s: s.name)
async def test_a_conversation_without_rewind_says_so_and_changes_nothing(spec: ContenderSpec) -> None:
    from shared_tools.conversation import NoRewind

    conversation = await conversation_module(spec).aopen_conversation(
        agent(spec, BookStore()), INSTRUCTIONS, "t1", None, resume=False
    )
    await conversation.aask(SEED_GOAL)
    with pytest.raises(NoRewind):
        await conversation.arewind(1)
    assert (await conversation.afacts())["turns"] == 1


# --- PydanticAI alone: UsageLimits, ModelRetry, ToolFailed, its cancellation token, its JSON history -------------


def test_pydantic_ais_request_limit_is_our_step_limit() -> None:
    from frameworks.pydantic_ai import PydanticAIAgent

    options = AgentOptions(limits=AgentLimits(max_steps=3, max_tokens=2_000))
    limits = PydanticAIAgent(ScriptedChatModel(), make_tools(BookStore()), options).usage_limits()
    assert (limits.request_limit, limits.total_tokens_limit) == (3, 2_000)


def test_bad_arguments_get_pydantic_ais_retry_prompt_then_its_own_error() -> None:
    from pydantic_ai.exceptions import UnexpectedModelBehavior

    from frameworks.pydantic_ai import PydanticAIAgent

    store = BookStore()
    bad = call("add_to_cart", "b1", book_id=7, quantity="lots")
    model = ScriptModel(replies=[ai("", bad), ai("", {**bad, "id": "b2"})])
    with pytest.raises(UnexpectedModelBehavior, match="exceeded max retries"):
        PydanticAIAgent(model, make_tools(store)).run(INSTRUCTIONS, "Add it.")
    retry = [m for m in model.prompts[1] if isinstance(m, ToolMessage)]
    assert "quantity" in str(retry[0].content) and retry[0].status == "error"
    assert cart(store) == []


def test_a_tool_exception_ends_the_run_as_pydantic_ai_does() -> None:
    from frameworks.pydantic_ai import PydanticAIAgent

    events: list[Any] = []
    tools = make_tools(BookStore(), faults=Faults(failing_tool="check_stock"))
    with pytest.raises(RuntimeError):
        PydanticAIAgent(ScriptedChatModel(), tools, AgentOptions(on_event=events.append)).run(INSTRUCTIONS, SEED_GOAL)
    failed = [e for e in events if e.name == "check_stock"]
    assert failed[0].is_error and FAKE_SECRET not in failed[0].detail


def test_a_store_refusal_reaches_the_model_as_pydantic_ais_tool_failed() -> None:
    from frameworks.pydantic_ai import PydanticAIAgent

    model = ScriptModel(replies=[ai("", call("add_to_cart", "x1", book_id=999, quantity=1)), ai("No such book.")])
    PydanticAIAgent(model, make_tools(BookStore())).run(INSTRUCTIONS, "Add book 999.")
    sent = [m for m in model.prompts[1] if isinstance(m, ToolMessage)]
    assert sent[0].status == "error" and "999" in str(sent[0].content)


@pytest.mark.parametrize("module", ["frameworks.pydantic_ai", "frameworks.openai_agents"])
def test_a_cancel_seen_at_the_tool_seam_runs_the_call_not(module: str) -> None:
    # PydanticAI's tool raises its own cancellation there; the Agents SDK's answers the call as not run.
    spec = importlib.import_module(module).SPEC
    store, cancel = BookStore(), threading.Event()
    result = agent(spec, store, on_event=lambda e: cancel.set()).run(INSTRUCTIONS, SEED_GOAL, cancel=cancel)
    assert result.stop_reason is StopReason.CANCELLED and result.model_calls == 1
    assert [(e.name, e.guard) for e in tool_lines(result)] == [("search_books", Guard.CANCELLED)]
    assert tool_lines(result)[0].detail.endswith(guards.CANCELLED_CALL_TEXT)
    assert_valid_history(result.messages)


@pytest.mark.parametrize("module", ["frameworks.pydantic_ai", "frameworks.openai_agents"])
def test_a_refused_call_is_answered_with_our_refusal_text(module: str) -> None:
    # PydanticAI's ToolDenied and the SDK's rejection_message carry the text we give; Strands' gate has its own.
    store = BookStore()
    built = agent(importlib.import_module(module).SPEC, store, two_risky_adds(), needs_approval=RiskyWritePolicy(store))
    refused = [e for e in built.run(INSTRUCTIONS, "Add.").trace if e.guard is Guard.APPROVAL_REFUSED]
    assert len(refused) == 2 and all("did not approve" in e.detail for e in refused)


async def test_pydantic_ais_history_file_holds_its_customer_and_is_refused_to_another(tmp_path: Path) -> None:
    from frameworks.pydantic_ai import PydanticAIAgent, PydanticAIConversation, aopen_conversation

    built = PydanticAIAgent(ScriptedChatModel(), make_tools(BookStore()))
    first = await aopen_conversation(built, INSTRUCTIONS, "t1", tmp_path / "s.db", resume=False, customer_id="c1")
    await first.aask(SEED_GOAL)
    path = tmp_path / "s.t1.pydantic-ai.json"
    saved = json.loads(path.read_text())
    assert saved["customer"] == "c1" and saved["messages"]
    assert first.history_turns() == [SEED_GOAL]
    assert (await first.afacts())["stored_bytes"] == path.stat().st_size
    with pytest.raises(CustomerMismatch):
        PydanticAIConversation(built, INSTRUCTIONS, path=path, customer_id="c2")


async def test_a_task_cancel_before_pydantic_ai_began_keeps_the_question(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from frameworks.pydantic_ai import PydanticAIAgent, aopen_conversation

    def cancelled_while_importing(*args: Any) -> Any:  # where the first turn of a process imports PydanticAI
        raise asyncio.CancelledError

    store = BookStore()
    conversation = await aopen_conversation(
        PydanticAIAgent(ScriptedChatModel(), make_tools(store)), INSTRUCTIONS, "t1", tmp_path / "s.db", resume=False
    )
    with monkeypatch.context() as patched:
        patched.setattr(PydanticAIAgent, "_agent", cancelled_while_importing)
        with pytest.raises(asyncio.CancelledError):
            await conversation.aask(SEED_GOAL)
    again = await aopen_conversation(
        PydanticAIAgent(ScriptedChatModel(), make_tools(store)), INSTRUCTIONS, "t1", tmp_path / "s.db", resume=True
    )
    assert again.history_turns() == [SEED_GOAL]
    assert (await again.aask(SEED_GOAL)).stop_reason is StopReason.DONE and cart(store) == QUIET_ORCHARD
    assert_valid_history(await again.amessages())


# --- the Agents SDK alone: default_tool_error_function, ModelBehaviorError, timeout_seconds, SQLiteSession --------

GENERIC = "An error occurred while running the tool. Please try again."
"""The SDK's `default_tool_error_function` text."""


def test_a_tool_exception_goes_back_as_the_sdks_generic_text() -> None:
    from frameworks.openai_agents import OpenAIAgentsAgent

    tools = make_tools(BookStore(), faults=Faults(failing_tool="check_stock"))
    result = OpenAIAgentsAgent(ScriptedChatModel(), tools).run(INSTRUCTIONS, SEED_GOAL)
    failed = [e for e in result.trace if e.name == "check_stock"]
    assert failed and GENERIC in failed[0].detail and FAKE_SECRET not in failed[0].detail


def test_bad_arguments_go_back_as_the_sdks_generic_text_and_nothing_runs() -> None:
    from frameworks.openai_agents import OpenAIAgentsAgent

    store = BookStore()
    model = ScriptModel(replies=[ai("", call("add_to_cart", "b1", book_id=7, quantity="lots")), ai("Sorry.")])
    result = OpenAIAgentsAgent(model, make_tools(store)).run(INSTRUCTIONS, "Add it.")
    assert result.stop_reason is StopReason.DONE and cart(store) == []
    assert [e.guard for e in tool_lines(result)] == [Guard.INVALID_ARGS]
    assert str(next(m for m in model.prompts[1] if isinstance(m, ToolMessage)).content) == GENERIC


def test_a_call_whose_arguments_do_not_parse_is_answered_and_the_history_stays_readable() -> None:
    from frameworks.openai_agents import OpenAIAgentsAgent

    unparsable = AIMessage(
        "", invalid_tool_calls=[{"name": "check_stock", "args": "{bad json", "id": "u1", "error": "x", "type": "x"}]
    )
    model = ScriptModel(replies=[unparsable, ai("Sorry.")])
    result = OpenAIAgentsAgent(model, make_tools(BookStore())).run(INSTRUCTIONS, "Stock?")
    assert result.stop_reason is StopReason.DONE
    assert [e.guard for e in tool_lines(result)] == [Guard.INVALID_ARGS]
    assert str(next(m for m in model.prompts[1] if isinstance(m, ToolMessage)).content) == GENERIC
    assert_valid_history(result.messages)


def test_an_unknown_tool_ends_the_run_with_the_sdks_model_behavior_error() -> None:
    from agents import ModelBehaviorError

    from frameworks.openai_agents import OpenAIAgentsAgent

    with pytest.raises(ModelBehaviorError, match="find_book"):
        OpenAIAgentsAgent(ScriptedChatModel(persona="hallucinator"), make_tools(BookStore())).run(
            INSTRUCTIONS, SEED_GOAL
        )


def test_the_time_budget_cuts_a_tool_call_through_its_timeout_seconds() -> None:
    from frameworks.openai_agents import OpenAIAgentsAgent

    options = AgentOptions(limits=AgentLimits(max_duration=0.3, max_steps=2))
    tools = make_tools(BookStore(), faults=Faults(latency_s=1.0))
    result = OpenAIAgentsAgent(ScriptedChatModel(), tools, options).run(INSTRUCTIONS, SEED_GOAL)
    cut = tool_lines(result)
    assert cut[0].guard is Guard.TOOL_TIMEOUT and "timed out" in cut[0].detail
    assert result.stop_reason is not StopReason.TIME_BUDGET  # the SDK has no run budget: the run went on


async def test_the_sdks_sqlite_session_is_bound_to_its_customer(tmp_path: Path) -> None:
    from frameworks.openai_agents import OpenAIAgentsAgent, OpenAIAgentsConversation, aopen_conversation

    built = OpenAIAgentsAgent(ScriptedChatModel(), make_tools(BookStore()))
    first = await aopen_conversation(built, INSTRUCTIONS, "t1", tmp_path / "s.db", resume=False, customer_id="c1")
    await first.aask(SEED_GOAL)
    first.close()
    path = tmp_path / "s.t1.openai-agents.db"
    assert path.exists()
    with pytest.raises(CustomerMismatch):
        OpenAIAgentsConversation(built, INSTRUCTIONS, "t1", path=path, customer_id="c2")


# --- smolagents alone: its forced last call, its parsing feedback, tools without call ids, its memory file -------


def test_at_max_steps_smolagents_asks_once_more_without_tools_and_keeps_that_as_the_forced_answer() -> None:
    from frameworks.smolagents import SmolagentsContender

    looper = ScriptedChatModel(persona="looper")
    result = SmolagentsContender(looper, make_tools(BookStore()), AgentOptions(limits=AgentLimits(max_steps=3))).run(
        INSTRUCTIONS, SEED_GOAL
    )
    assert result.stop_reason is StopReason.MAX_STEPS and result.forced_answer is not None
    assert (result.model_calls, result.tool_calls) == (4, 3)


def test_smolagents_max_steps_is_our_step_limit() -> None:
    from frameworks.smolagents import NO_LIMIT, SmolagentsContender

    tools = make_tools(BookStore())
    assert SmolagentsContender(ScriptedChatModel(), tools).max_steps == AgentLimits().max_steps == 6
    unlimited = AgentOptions(limits=AgentLimits(max_steps=None))
    assert SmolagentsContender(ScriptedChatModel(), tools, unlimited).max_steps == NO_LIMIT


def test_a_cut_reply_is_fed_back_by_smolagents_as_a_parsing_error_and_the_loop_goes_on() -> None:
    from frameworks.smolagents import SmolagentsContender

    # Every reply is cut at 5 tokens, so no call parses: smolagents feeds its parsing error back and asks again.
    model = ScriptedChatModel(max_tokens=5)
    built = SmolagentsContender(model, make_tools(BookStore()), AgentOptions(limits=AgentLimits(max_steps=3)))
    result = built.run(INSTRUCTIONS, "Add The Last Lighthouse to my cart.")
    assert result.stop_reason is StopReason.MAX_STEPS
    assert (result.model_calls, result.tool_calls) == (4, 0)
    # The cut replies are left out of the prompt, as smolagents leaves them out; its feedback is not the customer.
    assert [m.text for m in result.messages if isinstance(m, HumanMessage)] == ["Add The Last Lighthouse to my cart."]
    assert sum("Error while parsing" in m.text for m in result.messages) == 3


def test_no_call_id_reaches_a_smolagents_tool_so_a_repeated_add_adds_again() -> None:
    from frameworks.smolagents import SmolTool

    store = BookStore()
    add = SmolTool(next(t for t in make_tools(store) if t.name == "add_to_cart"))
    add(book_id=7, quantity=1)
    add(book_id=7, quantity=1)
    assert cart(store) == [(7, 2)]


def test_smolagents_memory_file_holds_its_steps_and_the_next_turn_runs_on_them(tmp_path: Path) -> None:
    from frameworks.smolagents import SmolagentsContender, SmolagentsConversation

    built = SmolagentsContender(ScriptedChatModel(), make_tools(BookStore()))
    path = tmp_path / "smol.json"
    assert SmolagentsConversation(built, INSTRUCTIONS, path).ask(SEED_GOAL).stop_reason is StopReason.DONE
    assert json.loads(path.read_text(encoding="utf-8"))["steps"][0] == {"task": SEED_GOAL}
    reopened = SmolagentsConversation(built, INSTRUCTIONS, path)
    second = reopened.ask("What is my cart total now?")
    assert second.model_calls == 2 and [e.name for e in tool_lines(second)] == ["view_cart"]
    facts = asyncio.run(reopened.afacts())
    assert facts["turns"] == 2 and facts["stored_bytes"] == path.stat().st_size


def test_a_damaged_saved_smolagents_file_is_one_clear_error_and_is_left_as_it_was(tmp_path: Path) -> None:
    from frameworks.smolagents import SmolagentsContender, SmolagentsConversation

    def contender() -> SmolagentsContender:
        return SmolagentsContender(ScriptedChatModel(), make_tools(BookStore()))

    path = tmp_path / "smol.json"
    SmolagentsConversation(contender(), INSTRUCTIONS, path).ask(SEED_GOAL)
    document = json.loads(path.read_text(encoding="utf-8"))
    for damage in ({"step": 1}, 7, {"step": 2, "reply": document["steps"][1]["reply"], "tool_calls": [{}]}):
        broken = {**document, "steps": [*document["steps"], damage]}
        path.write_text(json.dumps(broken), encoding="utf-8")
        with pytest.raises(ValueError, match="damaged saved smolagents conversation"):
            SmolagentsConversation(contender(), INSTRUCTIONS, path)
        assert json.loads(path.read_text(encoding="utf-8")) == broken


# --- Strands alone: call ids through to the tool, its session manager, its gate's fail-closed rule ----------------


def test_the_call_id_reaches_a_strands_tool_so_an_add_is_never_taken_twice() -> None:
    from frameworks.strands import StrandsContender

    store = BookStore()
    result = StrandsContender(ScriptedChatModel(), make_tools(store)).run(INSTRUCTIONS, SEED_GOAL)
    add_id = next(
        c["id"] for m in result.messages if isinstance(m, AIMessage) for c in m.tool_calls if c["name"] == "add_to_cart"
    )
    add = next(t for t in make_tools(store) if t.name == "add_to_cart")
    add.invoke({"name": "add_to_cart", "args": {"book_id": 7}, "id": add_id, "type": "tool_call"})
    assert cart(store) == QUIET_ORCHARD


def test_strands_session_manager_writes_each_message_and_the_next_turn_reads_them_back(tmp_path: Path) -> None:
    from frameworks.strands import StrandsContender, StrandsConversation

    built = StrandsContender(ScriptedChatModel(), make_tools(BookStore()))
    assert StrandsConversation(built, INSTRUCTIONS, tmp_path, "t1").ask(SEED_GOAL).stop_reason is StopReason.DONE
    assert list(tmp_path.glob("session_t1/**/message_*.json"))
    second = StrandsConversation(built, INSTRUCTIONS, tmp_path, "t1").ask("What is my cart total now?")
    # No tool call this turn: the total can only have come from the first turn's add result, read back from disk.
    assert "16.50" in (second.answer or "") and (second.model_calls, second.tool_calls) == (1, 0)


def test_a_second_strands_conversation_of_the_same_customer_never_reuses_the_first_ones_call_ids() -> None:
    from frameworks.strands import StrandsContender, StrandsConversation

    # The same salt and the same history give the same call ids: a provider that numbers its calls afresh.
    store = BookStore()
    built = StrandsContender(ScriptedChatModel(id_salt="fixed"), make_tools(store))
    for _ in range(2):
        assert StrandsConversation(built, INSTRUCTIONS, customer_id="c1").ask(SEED_GOAL).stop_reason is StopReason.DONE
    # Two conversations, two adds: the second is not taken for a replay of the first one's add.
    assert cart(store) == [(7, 2)]


def test_a_rule_that_raises_still_puts_the_call_to_strands_human_and_a_no_is_on_the_trace() -> None:
    from frameworks.strands import RULE_FAILED, StrandsContender

    store = BookStore()
    asked: list[tuple[str, str]] = []

    def broken_rule(tool_call: Any, earlier: Any) -> str | None:
        if tool_call["name"] == "add_to_cart":
            raise RuntimeError("the rule's store is down")
        return None

    def refuse(tool_call: Any, reason: str) -> bool:
        asked.append((tool_call["name"], reason))
        return False

    options = AgentOptions(needs_approval=broken_rule)  # Strands' HumanInTheLoop fails closed
    result = StrandsContender(ScriptedChatModel(), make_tools(store), options, approve=refuse).run(
        INSTRUCTIONS, SEED_GOAL
    )
    assert asked and all(a == ("add_to_cart", RULE_FAILED) for a in asked)
    refused = [e for e in result.trace if e.guard is Guard.APPROVAL_REFUSED]
    assert len(refused) == len(asked) and cart(store) == []
    assert all("CONFIRMATION_FAILED" in e.detail for e in refused)  # the gate's own answer to a no

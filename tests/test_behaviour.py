"""Every loop behaviour, written once and run against both implementations (hand-written and LangGraph).

The `make_agent` fixture is parametrized over `handwritten.AgentLoop` and `langgraph_version.GraphAgent`
(guards on), so a rule that holds for one and not the other fails here. The facts asserted are the article's:
stop reasons, step and call counts, the exact texts the model reads, the cart, and rising tokens.
"""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage

from shared_tools import guards
from shared_tools.bookstore.faults import FAKE_SECRET, Faults
from shared_tools.bookstore.store import BookStore, UnknownBook
from shared_tools.bookstore.tools import make_tools
from shared_tools.models import make_model
from shared_tools.results import AgentLimits, Guard, StopReason, TraceEvent
from tests.conftest import (
    IMPLEMENTATIONS,
    SESSION_KINDS,
    assert_valid_history,
    build_agent,
    open_session,
    tool_calls_in_order,
    view,
)
from tests.doubles import ScriptExhaustedError, ScriptModel, ai, call, provider_id

INSTRUCTIONS = "You are the assistant of an online bookstore. Use the tools; answer briefly."
SEED_GOAL = "Add The Last Lighthouse to my cart. If it is not available, add another novel by the same author."
SEED_CALLS = [
    ("search_books", {"query": "The Last Lighthouse"}),
    ("check_stock", {"book_id": 2}),
    ("check_stock", {"book_id": 7}),
    ("add_to_cart", {"book_id": 7, "quantity": 1}),
]


def tool_messages(result: Any) -> list[ToolMessage]:
    return [m for m in result.messages if isinstance(m, ToolMessage)]


def assert_every_call_answered_once(result: Any) -> None:
    asked = [c["id"] for m in result.messages if isinstance(m, AIMessage) for c in m.tool_calls]
    answered = [m.tool_call_id for m in tool_messages(result)]
    assert sorted(asked) == sorted(answered), "each tool call id needs exactly one ToolMessage"


def cart_lines(store: BookStore) -> list[tuple[str, int]]:
    return [(line.book.title, line.quantity) for line in store.cart("c1").lines]


# --- the article's run ------------------------------------------------------------------------------------------


def test_seed_bookstore_run(make_agent: Any, store: BookStore) -> None:
    result = make_agent(make_model("scripted"), make_tools(store)).run(INSTRUCTIONS, SEED_GOAL)

    assert result.stop_reason is StopReason.DONE
    assert (result.model_calls, result.steps, result.tool_calls) == (5, 5, 4)
    assert tool_calls_in_order(result) == SEED_CALLS
    assert cart_lines(store) == [("The Quiet Orchard", 1)]
    assert store.cart("c1").total == Decimal("16.50")
    assert result.answer and "The Quiet Orchard" in result.answer
    per_step = result.tokens_per_step
    assert len(per_step) == 5
    assert all(later > earlier for earlier, later in itertools.pairwise(per_step)), per_step
    assert result.tokens == sum(per_step)
    assert [e.name for e in result.trace] == [
        "model",
        "search_books",
        "model",
        "check_stock",
        "model",
        "check_stock",
        "model",
        "add_to_cart",
        "model",
    ]
    assert [e.step for e in result.trace] == [1, 1, 2, 2, 3, 3, 4, 4, 5]
    assert_every_call_answered_once(result)


def test_both_implementations_feed_the_model_the_same_history() -> None:
    """Same model, same tools: identical tool results, trace details and tokens per step in both."""
    runs = {}
    for kind in IMPLEMENTATIONS:
        store = BookStore()
        runs[kind] = build_agent(kind, make_model("scripted"), make_tools(store)).run(INSTRUCTIONS, SEED_GOAL)
        runs[kind].cart = cart_lines(store)
    hand, graph = runs["handwritten"], runs["langgraph"]
    assert [m.content for m in tool_messages(hand)] == [m.content for m in tool_messages(graph)]
    assert [(e.step, e.name, e.detail) for e in hand.trace] == [(e.step, e.name, e.detail) for e in graph.trace]
    assert hand.tokens_per_step == graph.tokens_per_step
    assert hand.cart == graph.cart == [("The Quiet Orchard", 1)]


@pytest.mark.parametrize(
    ("goal", "expected"),
    [("Where is my order 4512?", "TRK-88"), ("Where is my order 9999?", "9999")],
)
def test_order_questions_end_cleanly(make_agent: Any, store: BookStore, goal: str, expected: str) -> None:
    result = make_agent(make_model("scripted"), make_tools(store)).run(INSTRUCTIONS, goal)
    assert result.stop_reason is StopReason.DONE
    assert (result.model_calls, result.tool_calls) == (2, 1)
    assert result.answer and expected in result.answer
    assert tool_messages(result)[0].status == "success"


# --- stop reasons --------------------------------------------------------------------------------------------


def test_max_steps_stops_after_running_the_last_steps_tools(make_agent: Any, store: BookStore) -> None:
    agent = make_agent(make_model("scripted"), make_tools(store), AgentLimits(max_steps=2))
    result = agent.run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.MAX_STEPS
    assert result.answer is None
    assert (result.steps, result.tool_calls) == (2, 2)
    assert tool_calls_in_order(result) == SEED_CALLS[:2]
    assert cart_lines(store) == []  # gave up before adding anything
    assert "couldn't finish" in result.user_message()
    assert_every_call_answered_once(result)


def test_silent_model_is_an_invalid_response(make_agent: Any, store: BookStore) -> None:
    result = make_agent(make_model("scripted:silent"), make_tools(store)).run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.INVALID_RESPONSE
    assert (result.answer, result.steps, result.tool_calls) == (None, 1, 0)


def test_token_budget_stops_after_the_round_that_crossed_it(make_agent: Any, store: BookStore) -> None:
    full = build_agent("handwritten", make_model("scripted"), make_tools(BookStore())).run(INSTRUCTIONS, SEED_GOAL)
    # Crossed during step 3 by its prompt, with room left for its reply: the article's rule, checked after the round.
    budget = sum(full.tokens_per_step[:2]) + 100
    agent = make_agent(make_model("scripted"), make_tools(store), AgentLimits(max_tokens=budget))
    result = agent.run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.TOKEN_BUDGET
    assert result.answer is None
    assert (result.steps, result.tool_calls) == (3, 3)  # step 3's check_stock ran, then the budget stopped the run
    assert result.tokens == sum(full.tokens_per_step[:3]) > budget
    assert all(event.guard is None for event in result.trace if event.is_model)


def test_a_reply_may_use_only_what_is_left_of_the_token_budget(make_agent: Any, store: BookStore) -> None:
    full = build_agent("handwritten", make_model("scripted"), make_tools(BookStore())).run(INSTRUCTIONS, SEED_GOAL)
    budget = sum(full.tokens_per_step[:2]) + 5  # step 3's reply (a check_stock call) needs more than 5 tokens
    agent = make_agent(make_model("scripted"), make_tools(store), AgentLimits(max_tokens=budget))
    result = agent.run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.TOKEN_BUDGET
    assert (result.steps, result.tool_calls) == (3, 2)  # the cut reply's half call never ran
    last = [event for event in result.trace if event.is_model][-1]
    assert last.guard is Guard.REPLY_CAPPED
    cut = result.messages[-1]
    assert isinstance(cut, AIMessage) and cut.usage_metadata is not None
    assert cut.usage_metadata["output_tokens"] == 5 and not cut.tool_calls
    assert_every_call_answered_once(result)


def test_time_budget_stops_after_a_slow_tool_round(make_agent: Any, store: BookStore) -> None:
    tools = make_tools(store, faults=Faults(latency_s=0.2))
    result = make_agent(make_model("scripted"), tools, AgentLimits(max_duration=0.1)).run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.TIME_BUDGET
    assert (result.steps, result.tool_calls) == (1, 1)
    assert_every_call_answered_once(result)


def test_cooperative_cancel_keeps_the_partial_run(make_agent: Any, store: BookStore) -> None:
    cancel = threading.Event()

    def on_event(event: TraceEvent) -> None:
        if event.name == "check_stock":
            cancel.set()

    agent = make_agent(make_model("scripted"), make_tools(store), on_event=on_event)
    result = agent.run(INSTRUCTIONS, SEED_GOAL, cancel=cancel)
    assert result.stop_reason is StopReason.CANCELLED
    assert result.answer is None
    assert tool_calls_in_order(result) == SEED_CALLS[:2]
    assert [e.name for e in result.trace] == ["model", "search_books", "model", "check_stock"]
    assert cart_lines(store) == []
    assert store.check_invariants() == []
    assert_every_call_answered_once(result)


async def test_a_store_locked_by_another_process_cannot_freeze_a_cancel(make_agent: Any, tmp_path: Path) -> None:
    """The store's blocking wait for a lock ran on the event loop, so nothing could stop the run until SQLite's
    busy timeout ran out. It runs in a worker thread now: a cancel lands at once, and the cart is untouched."""
    path = tmp_path / "store.db"
    other_process = sqlite3.connect(path, isolation_level=None)
    try:
        with BookStore(path, busy_timeout_s=5) as store:
            other_process.execute("BEGIN EXCLUSIVE")
            model = ScriptModel(replies=[ai("", call("add_to_cart", "a1", book_id=7, quantity=1))])
            task = asyncio.create_task(make_agent(model, make_tools(store)).arun(INSTRUCTIONS, "add it"))
            await asyncio.sleep(0.3)
            cancelled_at = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert time.monotonic() - cancelled_at < 1, "the cancel waited for SQLite's busy timeout"
            other_process.close()  # the abandoned write in its worker thread may finish now
    finally:
        other_process.close()
    with BookStore(path) as store:
        assert store.check_invariants() == []
        assert store.cart("c1").quantity_of(7) in (0, 1), "one add at most, whether or not it landed"


def test_a_model_error_propagates_instead_of_becoming_a_result(make_agent: Any, store: BookStore) -> None:
    model = ScriptModel(replies=[ai("", call("check_stock", "c1", book_id=7))])
    with pytest.raises(ScriptExhaustedError):
        make_agent(model, make_tools(store)).run(INSTRUCTIONS, "stock of 7?")


# --- tool-call guards ----------------------------------------------------------------------------------------


def test_repeat_rule_blocks_the_third_identical_call(make_agent: Any, store: BookStore) -> None:
    limits = AgentLimits(max_steps=5, max_consecutive_errors=None)
    result = make_agent(make_model("scripted:looper"), make_tools(store), limits).run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.MAX_STEPS
    assert (result.steps, result.tool_calls) == (5, 5)
    results = tool_messages(result)
    assert [m.status for m in results] == ["success", "success", "error", "error", "error"]
    name, _args = tool_calls_in_order(result)[0]
    assert len(set(map(str, tool_calls_in_order(result)))) == 1, "the looper asks the same thing every time"
    assert [m.content for m in results[2:]] == [guards.repeat_error(name, n) for n in (2, 3, 4)]
    assert [e.guard for e in result.trace if not e.is_model] == [None, None, Guard.REPEAT, Guard.REPEAT, Guard.REPEAT]


def test_consecutive_error_rounds_stop_the_run(make_agent: Any, store: BookStore) -> None:
    result = make_agent(make_model("scripted:looper"), make_tools(store), AgentLimits(max_steps=10)).run(
        INSTRUCTIONS, SEED_GOAL
    )
    # Rounds 3, 4, 5 and 6 are blocked repeats: the fourth error round in a row is one more than 3.
    assert result.stop_reason is StopReason.TOO_MANY_ERRORS
    assert result.steps == 6
    assert result.answer is None


def test_a_clean_round_resets_the_error_count(make_agent: Any, store: BookStore) -> None:
    bad, good = call("nope", "x"), call("check_stock", "ok", book_id=7)
    replies = [ai("", {**bad, "id": f"bad{i}"}) for i in range(3)] + [ai("", good)]
    replies += [ai("", {**bad, "id": f"bad{i}"}) for i in range(3, 6)] + [ai("done")]
    limits = AgentLimits(max_steps=None, max_consecutive_errors=3)
    result = make_agent(ScriptModel(replies=replies), make_tools(store), limits).run(INSTRUCTIONS, "go")
    assert result.stop_reason is StopReason.DONE
    assert result.steps == 8


def test_unknown_tool_gets_the_list_and_the_model_recovers(make_agent: Any, store: BookStore) -> None:
    tools = make_tools(store)
    result = make_agent(make_model("scripted:hallucinator"), tools).run(INSTRUCTIONS, SEED_GOAL)
    first = tool_messages(result)[0]
    invented = tool_calls_in_order(result)[0][0]
    assert invented not in {t.name for t in tools}
    assert first.status == "error"
    assert first.content == guards.unknown_tool_error(invented, [t.name for t in tools])
    assert next(e.guard for e in result.trace if not e.is_model) is Guard.UNKNOWN_TOOL
    assert result.stop_reason is StopReason.DONE
    assert tool_calls_in_order(result)[1:] == SEED_CALLS
    assert cart_lines(store) == [("The Quiet Orchard", 1)]


def test_invalid_arguments_name_the_field_and_run_nothing(make_agent: Any, store: BookStore) -> None:
    model = ScriptModel(
        replies=[
            ai("", call("check_stock", "a", book_id="seven")),
            ai("", call("add_to_cart", "b", book_id=7, quantity=11)),
            ai("I could not do that."),
        ]
    )
    result = make_agent(model, make_tools(store)).run(INSTRUCTIONS, "go")
    first, second = tool_messages(result)
    assert first.status == second.status == "error"
    assert first.content.startswith("Invalid arguments for check_stock: book_id:")
    assert second.content.startswith("Invalid arguments for add_to_cart: quantity:")
    assert [e.guard for e in result.trace if not e.is_model] == [Guard.INVALID_ARGS, Guard.INVALID_ARGS]
    assert cart_lines(store) == []
    assert result.stop_reason is StopReason.DONE


def test_tool_exception_text_reaches_the_model(make_agent: Any, store: BookStore) -> None:
    model = ScriptModel(replies=[ai("", call("add_to_cart", "a", book_id=999)), ai("There is no book 999.")])
    result = make_agent(model, make_tools(store)).run(INSTRUCTIONS, "add book 999")
    (message,) = tool_messages(result)
    assert (message.status, message.content) == ("error", str(UnknownBook(999)))
    assert [e.guard for e in result.trace if not e.is_model] == [None], "the tool's own words: no guard decided"
    assert cart_lines(store) == []


@pytest.mark.parametrize("detailed", [False, True])
def test_error_details_are_hidden_unless_asked_for(make_agent: Any, store: BookStore, detailed: bool) -> None:
    tools = make_tools(store, faults=Faults(failing_tool="check_stock"))
    result = make_agent(make_model("scripted"), tools, detailed_errors=detailed).run(INSTRUCTIONS, SEED_GOAL)
    failures = [m for m in tool_messages(result) if m.status == "error"]
    assert len(failures) == 2, "the shopper retries once, then answers honestly"
    assert result.stop_reason is StopReason.DONE
    assert cart_lines(store) == []
    seen = " ".join([str(m.content) for m in result.messages] + [e.detail for e in result.trace])
    failed_guards = [e.guard for e in result.trace if e.is_error]
    if detailed:
        assert FAKE_SECRET in failures[0].content
        assert failed_guards == [None, None]
    else:
        assert failures[0].content == "check_stock failed."
        assert FAKE_SECRET not in seen
        assert failed_guards == [Guard.ERROR_HIDDEN, Guard.ERROR_HIDDEN]


def test_flaky_warehouse_is_retried(make_agent: Any, store: BookStore) -> None:
    tools = make_tools(store, faults=Faults(check_stock_timeouts=1))
    result = make_agent(make_model("scripted"), tools).run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.DONE
    assert (result.model_calls, result.tool_calls) == (6, 5)
    assert tool_messages(result)[1].content == "check_stock failed."
    assert cart_lines(store) == [("The Quiet Orchard", 1)]


def test_truncation_cuts_big_results_and_saves_tokens(make_agent: Any) -> None:
    runs = {}
    for limit in (None, 2000):
        store = BookStore()
        tools = make_tools(store, search_max_results=50)
        agent = make_agent(make_model("scripted"), tools, max_tool_result_chars=limit)
        runs[limit] = agent.run(INSTRUCTIONS, SEED_GOAL)
        assert cart_lines(store) == [("The Quiet Orchard", 1)]
    full_search = tool_messages(runs[None])[0].content
    cut_search = tool_messages(runs[2000])[0].content
    assert len(full_search) > 2000
    assert cut_search == guards.truncate(full_search, 2000)
    assert cut_search.endswith(f"[truncated {len(full_search) - 2000} characters]")
    assert runs[2000].tokens < runs[None].tokens
    assert runs[2000].stop_reason is runs[None].stop_reason is StopReason.DONE
    assert next(e.guard for e in runs[2000].trace if not e.is_model) is Guard.TRUNCATED
    assert all(e.guard is None for e in runs[None].trace)


@pytest.mark.parametrize("parallel", [False, True])
def test_several_calls_in_one_turn_are_answered_in_call_order(
    make_agent: Any, store: BookStore, parallel: bool
) -> None:
    turn = ai("", call("check_stock", "s2", book_id=2), call("nope", "u"), call("check_stock", "s7", book_id=7))
    model = ScriptModel(replies=[turn, ai("Book 7 is in stock.")])
    result = make_agent(model, make_tools(store, faults=Faults(latency_s=0.05)), parallel_tools=parallel).run(
        INSTRUCTIONS, "stock?"
    )
    assert [m.tool_call_id for m in tool_messages(result)] == ["s2", "u", "s7"]
    assert [m.status for m in tool_messages(result)] == ["success", "error", "success"]
    assert [e.name for e in result.trace] == ["model", "check_stock", "nope", "check_stock", "model"]


@pytest.mark.parametrize(
    "usage",
    [
        {"input_tokens": -5000, "output_tokens": 0, "total_tokens": -5000},
        {"input_tokens": 60, "output_tokens": 10, "total_tokens": 0},  # a total below its parts
    ],
    ids=["negative", "total below parts"],
)
def test_absurd_usage_cannot_switch_the_token_budget_off(
    make_agent: Any, store: BookStore, usage: dict[str, int]
) -> None:
    """A model reporting negative (or hidden) usage once must not buy the rest of the run a free budget."""
    liar = AIMessage("", tool_calls=[call("view_cart", "v0")], usage_metadata=usage)  # type: ignore[arg-type]
    honest = [ai("", call("check_stock", f"s{i}", book_id=i), tokens=40) for i in range(1, 6)]
    model = ScriptModel(replies=[liar, *honest])
    result = make_agent(model, make_tools(store), AgentLimits(max_tokens=100, max_steps=None)).run(INSTRUCTIONS, "go")
    assert result.stop_reason is StopReason.TOKEN_BUDGET
    assert result.tokens > 100
    assert result.tokens_per_step[0] == (0 if usage["input_tokens"] < 0 else 70)


def test_tokens_are_the_sum_of_reported_usage(make_agent: Any, store: BookStore) -> None:
    model = ScriptModel(replies=[ai("", call("view_cart", "v"), tokens=123), ai("Empty.", tokens=77)])
    result = make_agent(model, make_tools(store)).run(INSTRUCTIONS, "cart?")
    assert result.tokens == 200
    assert result.tokens_per_step == [123, 77]


def test_personal_data_in_arguments_is_masked_in_the_trace(make_agent: Any, store: BookStore) -> None:
    query = "gift for ann@example.com, ship to 12 Baker Street"
    model = ScriptModel(replies=[ai("", call("search_books", "s", query=query)), ai("Here you go.")])
    result = make_agent(model, make_tools(store)).run(INSTRUCTIONS, "find a gift")
    detail = result.trace[1].detail
    assert "ann@example.com" not in detail and "Baker Street" not in detail
    assert "<email>" in detail and "<address>" in detail


def test_events_are_delivered_live_in_trace_order(make_agent: Any, store: BookStore) -> None:
    seen: list[TraceEvent] = []
    result = make_agent(make_model("scripted"), make_tools(store), on_event=seen.append).run(INSTRUCTIONS, SEED_GOAL)
    assert seen == result.trace


@pytest.mark.parametrize("persona", ["shopper", "looper", "hallucinator", "parallel"])
def test_every_tool_call_gets_exactly_one_result(make_agent: Any, store: BookStore, persona: str) -> None:
    result = make_agent(make_model(f"scripted:{persona}"), make_tools(store)).run(INSTRUCTIONS, SEED_GOAL)
    assert_every_call_answered_once(result)
    assert store.check_invariants() == []


# --- sessions under attack (graph helper) ---------------------------------------------------------------------
# A conversation, hand-written (`Session`) or a checkpointer thread (`GraphSession`, in memory or in SQLite),
# attacked the same way: two turns at once, a task cancelled mid-round, another customer.


def slow_echo() -> Any:
    from langchain_core.tools import StructuredTool

    async def slow_echo(n: int) -> str:
        await asyncio.sleep(0.05)
        return str(n)

    return StructuredTool.from_function(coroutine=slow_echo, name="slow_echo", description="Echo, slowly.")


def questions_in(messages: list[Any]) -> list[str]:
    from langchain_core.messages import HumanMessage

    return [m.text for m in messages if isinstance(m, HumanMessage)]


@pytest.mark.parametrize("kind", SESSION_KINDS)
def test_two_asks_from_two_threads_at_once_both_keep_their_turn(kind: str, tmp_path: Path) -> None:
    """Sync asks from two OS threads, each on an event loop of its own, on one conversation: one waits for the
    other. Without that both ran from the same history, and one turn was lost."""
    model = ScriptModel(replies=[ai("", call("slow_echo", "s1", n=1)), ai("First."), ai("Second.")])
    session = open_session(kind, model, [slow_echo()], tmp_path)
    answers: list[str | None] = []
    askers = [threading.Thread(target=lambda q=q: answers.append(session.ask(q).answer)) for q in ("one", "two")]
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join(timeout=60)
    assert sorted(a or "" for a in answers) == ["First.", "Second."]
    assert sorted(questions_in(view(session, "messages"))) == ["one", "two"]
    answered = [m.text for m in view(session, "messages") if isinstance(m, AIMessage) and not m.tool_calls]
    assert sorted(answered) == ["First.", "Second."], "every question kept its answer"


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("kind", SESSION_KINDS)
async def test_a_task_cancelled_mid_round_tells_the_next_turn_what_ran(
    kind: str, parallel: bool, tmp_path: Path
) -> None:
    """The add has committed, the lookup is mid-run, the cart view has run (in parallel) or not (in turn) when
    the ask's task is cancelled. The next turn's model reads the truth about each: the add's real result, "it
    may have completed", "it did not run"; and nothing runs twice."""
    from langchain_core.tools import StructuredTool

    started = asyncio.Event()

    async def slow_lookup() -> str:
        started.set()
        await asyncio.sleep(60)
        return "never"

    store = BookStore()
    lookup = StructuredTool.from_function(coroutine=slow_lookup, name="slow_lookup", description="Slow.")
    turn = ai(
        "", call("add_to_cart", "add", book_id=7, quantity=1), call("slow_lookup", "slow"), call("view_cart", "view")
    )
    model = ScriptModel(replies=[turn, ai("It is in your cart.")])
    session = open_session(kind, model, [*make_tools(store), lookup], tmp_path, parallel_tools=parallel)
    task = asyncio.create_task(session.aask("Add the orchard."))
    await started.wait()
    await asyncio.sleep(0.05)  # the add (and, in parallel, the cart view) has finished by now
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    result = await session.aask("Is it in?")
    assert result.answer == "It is in your cart."
    told = {provider_id(m.tool_call_id): m for m in model.prompts[-1] if isinstance(m, ToolMessage)}
    assert told["add"].status == "success" and '"added":"The Quiet Orchard"' in told["add"].text
    assert told["slow"].content == guards.CANCELLED_WHILE_RUNNING_TEXT
    if parallel:
        assert told["view"].status == "success"
    else:
        assert told["view"].content == guards.CANCELLED_CALL_TEXT
    assert store.cart("c1").quantity_of(7) == 1, "added once"


@pytest.mark.parametrize("parallel", [False, True])
def test_a_cooperative_cancel_mid_round_keeps_every_result_that_exists(
    make_agent: Any, store: BookStore, parallel: bool
) -> None:
    """The cancel is set (as by another thread) while the middle call runs. A cooperative cancel never cuts a call
    off: the calls that ran keep their real results; in turn, the call after it never starts and says so."""
    from langchain_core.tools import StructuredTool

    cancel = threading.Event()

    async def slow_lookup() -> str:
        cancel.set()
        await asyncio.sleep(0.1)
        return "looked up"

    lookup = StructuredTool.from_function(coroutine=slow_lookup, name="slow_lookup", description="Slow.")
    turn = ai(
        "", call("add_to_cart", "add", book_id=7, quantity=1), call("slow_lookup", "slow"), call("view_cart", "view")
    )
    model = ScriptModel(replies=[turn])  # a second model call would fail loudly
    agent = make_agent(model, [*make_tools(store), lookup], parallel_tools=parallel)
    result = agent.run(INSTRUCTIONS, "go", cancel=cancel)
    assert (result.stop_reason, result.model_calls, result.tool_calls) == (StopReason.CANCELLED, 1, 3)
    told = {provider_id(m.tool_call_id): m for m in tool_messages(result)}
    assert '"added":"The Quiet Orchard"' in told["add"].text and told["slow"].content == "looked up"
    if parallel:
        assert told["view"].status == "success"
    else:
        assert told["view"].content == guards.CANCELLED_CALL_TEXT
    assert store.cart("c1").quantity_of(7) == 1
    assert_every_call_answered_once(result)


@pytest.mark.parametrize("kind", ["handwritten", "langgraph-sqlite"])
def test_a_conversation_opened_for_another_customer_is_refused_before_anything_runs(kind: str, tmp_path: Path) -> None:
    """Ann's conversation names her and her address; Bob opening it (the graph's default thread is "t1" for
    everyone) is refused before his question reaches the model, while Ann can go on."""
    from handwritten import AgentLoop, Session
    from langgraph_version import GraphAgent, GraphSession
    from shared_tools.results import CustomerMismatch

    first = ScriptModel(replies=[ai("Hello Ann, we ship to 12 Baker Street.")])
    ann = open_session(kind, first, [], tmp_path, customer_id="ann")
    ann.ask("I am Ann, of 12 Baker Street.")
    if kind == "handwritten":
        ann.save(tmp_path / "session.json")

    def reopen_and_ask(customer: str, model: ScriptModel) -> Any:
        if kind == "handwritten":
            session = Session.load(tmp_path / "session.json", AgentLoop(model, []), customer_id=customer)
        else:
            path = str(tmp_path / "threads.db")
            session = GraphSession.sqlite(GraphAgent(model, []), INSTRUCTIONS, path=path, customer_id=customer)
        return session.ask("Where do you ship my books?")

    bobs = ScriptModel(replies=[ai("To you, Bob.")])
    with pytest.raises(CustomerMismatch, match="customer 'ann', not of 'bob'"):
        reopen_and_ask("bob", bobs)
    assert bobs.calls == 0, "Bob's question never reached the model"
    assert reopen_and_ask("ann", ScriptModel(replies=[ai("To 12 Baker Street.")])).answer == "To 12 Baker Street."


@pytest.mark.parametrize("parallel", [False, True], ids=["sequential", "parallel"])
async def test_the_time_budget_bounds_a_tool_blocked_on_a_locked_store(
    make_agent: Any, tmp_path: Path, parallel: bool
) -> None:
    """A store file another writer holds for 5 s: the run ends when its 1 s budget does, not when the lock goes.
    The blocked add is answered "may have completed" (its worker thread cannot be stopped), the call after it
    "not run"; the history can go on, and the cart holds one copy at most."""
    path = tmp_path / "store.db"
    other_process = sqlite3.connect(path, isolation_level=None)
    try:
        with BookStore(path, busy_timeout_s=5) as store:
            other_process.execute("BEGIN EXCLUSIVE")
            reply = ai("", call("add_to_cart", "a1", book_id=7, quantity=1), call("check_stock", "s1", book_id=7))
            limits = AgentLimits(max_duration=1.0)
            agent = make_agent(ScriptModel(replies=[reply]), make_tools(store), limits, parallel_tools=parallel)
            started = time.monotonic()
            result = await agent.arun(INSTRUCTIONS, "add it")
            assert time.monotonic() - started < 2.5, "the run waited for the lock, not its budget"
            other_process.close()
    finally:
        other_process.close()
    assert result.stop_reason is StopReason.TIME_BUDGET
    guard_of = {e.name: e.guard for e in result.trace if not e.is_model}
    assert guard_of["add_to_cart"] is Guard.TOOL_TIMEOUT
    texts = {m.tool_call_id: m.content for m in tool_messages(result)}
    assert texts["a1"] == guards.TOOL_CUT_RUNNING_TEXT
    if not parallel:
        assert (texts["s1"], guard_of["check_stock"]) == (guards.TOOL_CUT_UNSTARTED_TEXT, Guard.TOOL_TIMEOUT)
    assert_valid_history(result.messages)
    with BookStore(path) as store:
        assert store.check_invariants() == []
        assert store.cart("c1").quantity_of(7) in (0, 1)

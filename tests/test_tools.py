"""Tests for `shared_tools.bookstore.tools` and `shared_tools.bookstore.faults`: the exact JSON each tool returns, the
errors it raises, the model-facing schemas, the injected tool-call id that makes add_to_cart idempotent,
and every opt-in fault."""

from __future__ import annotations

import asyncio
import threading
import time
from decimal import Decimal

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, ToolException
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from pydantic import ValidationError

from shared_tools.bookstore.faults import FAKE_SECRET, FaultInjector, Faults
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import REPLAYED_NOTE, TOOL_NAMES, make_tools, to_json
from shared_tools.guards import invalid_args_error, tool_failure_text
from tests.conftest import read_result, tools_by_name
from tests.doubles import call


@pytest.fixture
def tools(store: BookStore) -> dict[str, BaseTool]:
    return tools_by_name(make_tools(store))


# --- the tool set ------------------------------------------------------------------------------------------


def test_make_tools_builds_the_five_contract_tools(store: BookStore) -> None:
    tools = make_tools(store)
    assert tuple(t.name for t in tools) == TOOL_NAMES
    for tool in tools:
        assert tool.func is not None and tool.coroutine is not None, tool.name
        assert not tool.handle_tool_error, "the loops decide what the model sees"
        assert len(tool.description) > 60, tool.name
    assert "Call before adding to the cart" in tools_by_name(tools)["check_stock"].description


def test_make_tools_rejects_bad_settings(store: BookStore) -> None:
    with pytest.raises(ValueError, match="search_max_results"):
        make_tools(store, search_max_results=51)
    with pytest.raises(ValueError, match="not one of"):
        make_tools(store, faults=Faults(failing_tool="delete_everything"))


# --- JSON --------------------------------------------------------------------------------------------------


def test_to_json_writes_money_with_two_decimals() -> None:
    assert to_json({"price": Decimal("16.5")}) == '{"price":16.50}'
    assert to_json([Decimal("0.1") + Decimal("0.2"), Decimal("3")]) == "[0.30,3.00]"
    assert to_json({"a": [1, "x", None, True], "b": {"c": Decimal("18.90")}}) == (
        '{"a":[1,"x",null,true],"b":{"c":18.90}}'
    )
    assert to_json("Café — “quotes”") == '"Café — “quotes”"'


def test_read_result_gives_exact_decimals() -> None:
    assert read_result('{"cartTotal":16.50}') == {"cartTotal": Decimal("16.50")}
    message = ToolMessage(content='{"cartTotal":0.30}', tool_call_id="call_1")
    assert read_result(message)["cartTotal"] == Decimal("0.30")


# --- search_books ------------------------------------------------------------------------------------------


def test_search_books_returns_the_contract_fields(tools: dict[str, BaseTool]) -> None:
    text = tools["search_books"].invoke({"query": "The Last Lighthouse"})
    books = read_result(text)
    assert len(books) == 5
    assert books[0] == {
        "id": 2,
        "title": "The Last Lighthouse",
        "author": "Mira Holt",
        "genre": "novel",
        "price": Decimal("18.90"),
        "description": books[0]["description"],
    }
    assert text.startswith('[{"id":2,"title":"The Last Lighthouse","author":"Mira Holt","genre":"novel","price":18.90,')
    assert 7 in [b["id"] for b in books]
    assert '"price":16.50' in text


def test_search_books_fifty_results_is_big_enough_for_the_truncation_demo(tools: dict[str, BaseTool]) -> None:
    text = tools["search_books"].invoke({"query": "The Last Lighthouse", "max_results": 50})
    assert len(read_result(text)) >= 10
    assert len(text) > 3000


def test_search_max_results_changes_the_default(store: BookStore) -> None:
    wide = tools_by_name(make_tools(store, search_max_results=50))["search_books"]
    assert len(read_result(wide.invoke({"query": "The Last Lighthouse"}))) >= 10
    assert wide.tool_call_schema.model_json_schema()["properties"]["max_results"]["default"] == 50


@pytest.mark.parametrize("max_results", [0, 51])
def test_search_books_bounds_max_results(tools: dict[str, BaseTool], max_results: int) -> None:
    search = tools["search_books"]
    with pytest.raises(ValidationError):
        search.invoke({"query": "sea", "max_results": max_results})
    assert invalid_args_error(search, {"query": "sea", "max_results": max_results}) is not None


def test_search_books_with_no_match_is_an_empty_list(tools: dict[str, BaseTool]) -> None:
    assert tools["search_books"].invoke({"query": "quantum chromodynamics"}) == "[]"


# --- check_stock and get_order_status -----------------------------------------------------------------------


def test_check_stock(tools: dict[str, BaseTool]) -> None:
    assert tools["check_stock"].invoke({"book_id": 2}) == '{"id":2,"title":"The Last Lighthouse","inStock":0}'
    assert tools["check_stock"].invoke({"book_id": 7}) == '{"id":7,"title":"The Quiet Orchard","inStock":15}'


def test_check_stock_unknown_book_is_a_tool_exception(tools: dict[str, BaseTool]) -> None:
    with pytest.raises(ToolException, match=r"^Book 99 does not exist\. Use search_books to find a book id\.$"):
        tools["check_stock"].invoke({"book_id": 99})


def test_get_order_status(tools: dict[str, BaseTool]) -> None:
    status = tools["get_order_status"]
    assert status.invoke({"order_id": 4512}) == '{"orderId":4512,"status":"shipped","tracking":"TRK-88"}'
    assert status.invoke({"order_id": 9999}) == '{"orderId":9999,"status":"not found"}'
    assert status.invoke({"order_id": 4513}) == '{"orderId":4513,"status":"processing"}'


# --- add_to_cart and view_cart ------------------------------------------------------------------------------


def test_add_to_cart_with_a_tool_call_returns_a_tool_message(tools: dict[str, BaseTool], store: BookStore) -> None:
    message = tools["add_to_cart"].invoke(call("add_to_cart", "call_1", book_id=7, quantity=1))
    assert isinstance(message, ToolMessage)
    assert message.tool_call_id == "call_1"
    assert message.name == "add_to_cart"
    assert message.content == '{"added":"The Quiet Orchard","quantity":1,"cartTotal":16.50}'
    assert store.cart("c1").total == Decimal("16.50")


def test_add_to_cart_dedupes_on_the_tool_call_id(tools: dict[str, BaseTool], store: BookStore) -> None:
    first = tools["add_to_cart"].invoke(call("add_to_cart", "call_1", book_id=7, quantity=2))
    again = tools["add_to_cart"].invoke(call("add_to_cart", "call_1", book_id=7, quantity=2))
    assert first.content == '{"added":"The Quiet Orchard","quantity":2,"cartTotal":33.00}'
    assert read_result(again) == {**read_result(first), "replayed": REPLAYED_NOTE}
    assert store.cart("c1").quantity_of(7) == 2
    other = tools["add_to_cart"].invoke(call("add_to_cart", "call_2", book_id=7, quantity=2))
    assert other.content == '{"added":"The Quiet Orchard","quantity":2,"cartTotal":66.00}'
    assert store.cart("c1").quantity_of(7) == 4


def test_add_to_cart_without_a_tool_call_id_is_refused_by_langchain(tools: dict[str, BaseTool]) -> None:
    # The id is the idempotency key, so a plain-dict call (no id) must not slip through as a non-idempotent add.
    with pytest.raises(ValueError, match="InjectedToolCallId"):
        tools["add_to_cart"].invoke({"book_id": 7})


def test_tool_call_id_is_hidden_from_the_model(tools: dict[str, BaseTool]) -> None:
    add = tools["add_to_cart"]
    assert "tool_call_id" in add.args_schema.model_fields
    model_schema = add.tool_call_schema.model_json_schema()
    assert set(model_schema["properties"]) == {"book_id", "quantity"}
    assert model_schema["required"] == ["book_id"]
    assert model_schema["properties"]["quantity"]["minimum"] == 1
    assert model_schema["properties"]["quantity"]["maximum"] == 10


def test_add_to_cart_unknown_book_changes_nothing(tools: dict[str, BaseTool], store: BookStore) -> None:
    with pytest.raises(ToolException, match="Book 99 does not exist"):
        tools["add_to_cart"].invoke(call("add_to_cart", "call_1", book_id=99))
    assert store.cart("c1").lines == ()


def test_add_to_cart_out_of_stock_changes_nothing(tools: dict[str, BaseTool], store: BookStore) -> None:
    with pytest.raises(ToolException, match=r"^The Last Lighthouse is out of stock \(0 copies\)\.$"):
        tools["add_to_cart"].invoke(call("add_to_cart", "call_1", book_id=2))
    tools["add_to_cart"].invoke(call("add_to_cart", "call_2", book_id=7, quantity=10))
    with pytest.raises(ToolException, match="Only 15 copies of The Quiet Orchard are in stock; the cart already has"):
        tools["add_to_cart"].invoke(call("add_to_cart", "call_3", book_id=7, quantity=6))
    assert [(line.book.id, line.quantity) for line in store.cart("c1").lines] == [(7, 10)]


@pytest.mark.parametrize("quantity", [0, 11])
def test_add_to_cart_quantity_outside_1_to_10_is_rejected_before_the_store(
    tools: dict[str, BaseTool], store: BookStore, quantity: int
) -> None:
    add = tools["add_to_cart"]
    with pytest.raises(ValidationError):
        add.invoke(call("add_to_cart", "call_1", book_id=7, quantity=quantity))
    assert "quantity" in (invalid_args_error(add, {"book_id": 7, "quantity": quantity}) or "")
    assert store.cart("c1").lines == ()


def test_view_cart(tools: dict[str, BaseTool], store: BookStore) -> None:
    assert tools["view_cart"].invoke({}) == '{"items":[],"cartTotal":0.00}'
    tools["add_to_cart"].invoke(call("add_to_cart", "call_1", book_id=7))
    assert tools["view_cart"].invoke({}) == (
        '{"items":[{"id":7,"title":"The Quiet Orchard","quantity":1,"price":16.50,"lineTotal":16.50}],'
        '"cartTotal":16.50}'
    )


def test_view_cart_reads_the_store_not_the_history(tools: dict[str, BaseTool], store: BookStore) -> None:
    tools["add_to_cart"].invoke(call("add_to_cart", "call_1", book_id=7))
    store.clear_cart("c1")  # the customer emptied the cart in another tab
    store.add_to_cart("c1", 12, 2)
    cart = read_result(tools["view_cart"].invoke({}))
    assert cart == {
        "items": [
            {"id": 12, "title": "Salt Hours", "quantity": 2, "price": Decimal("13.80"), "lineTotal": Decimal("27.60")}
        ],
        "cartTotal": Decimal("27.60"),
    }


def test_tools_act_for_their_own_customer(store: BookStore) -> None:
    alice = tools_by_name(make_tools(store, customer_id="alice"))
    bob = tools_by_name(make_tools(store, customer_id="bob"))
    alice["add_to_cart"].invoke(call("add_to_cart", "call_1", book_id=7))
    bob["add_to_cart"].invoke(call("add_to_cart", "call_1", book_id=12))  # same id, different customer
    assert read_result(alice["view_cart"].invoke({}))["cartTotal"] == Decimal("16.50")
    assert read_result(bob["view_cart"].invoke({}))["cartTotal"] == Decimal("13.80")


def test_a_re_run_tool_node_adds_once(store: BookStore) -> None:
    """A LangGraph node re-run (retry or resume) replays the same tool call id, so the cart changes once."""
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode(make_tools(store)))
    builder.add_edge(START, "tools")
    graph = builder.compile()
    request = AIMessage(content="", tool_calls=[call("add_to_cart", "call_7", book_id=7)])
    first = graph.invoke({"messages": [request]})["messages"][-1].content
    again = graph.invoke({"messages": [request]})["messages"][-1].content
    assert first == '{"added":"The Quiet Orchard","quantity":1,"cartTotal":16.50}'
    assert again == (
        '{"added":"The Quiet Orchard","quantity":1,"cartTotal":16.50,'
        '"replayed":"this call already ran; nothing more was added"}'
    )
    assert store.cart("c1").quantity_of(7) == 1


# --- async -------------------------------------------------------------------------------------------------


async def test_every_tool_works_async(tools: dict[str, BaseTool], store: BookStore) -> None:
    assert read_result(await tools["search_books"].ainvoke({"query": "Quiet Orchard"}))[0]["id"] == 7
    assert await tools["check_stock"].ainvoke({"book_id": 7}) == '{"id":7,"title":"The Quiet Orchard","inStock":15}'
    assert "shipped" in await tools["get_order_status"].ainvoke({"order_id": 4512})
    first = await tools["add_to_cart"].ainvoke(call("add_to_cart", "call_1", book_id=7))
    again = await tools["add_to_cart"].ainvoke(call("add_to_cart", "call_1", book_id=7))
    assert isinstance(first, ToolMessage) and isinstance(again, ToolMessage)
    assert read_result(again) == {**read_result(first), "replayed": REPLAYED_NOTE}
    assert read_result(await tools["view_cart"].ainvoke({}))["cartTotal"] == Decimal("16.50")
    with pytest.raises(ToolException, match="Book 99"):
        await tools["check_stock"].ainvoke({"book_id": 99})


# --- faults ------------------------------------------------------------------------------------------------


def test_faults_are_off_by_default() -> None:
    assert not Faults().any
    assert Faults(latency_s=0.1).any
    with pytest.raises(ValueError):
        Faults(check_stock_timeouts=-1)
    with pytest.raises(ValueError):
        Faults(latency_s=-0.5)


def test_check_stock_times_out_on_its_first_n_calls(store: BookStore) -> None:
    check = tools_by_name(make_tools(store, faults=Faults(check_stock_timeouts=2)))["check_stock"]
    for _ in range(2):
        with pytest.raises(TimeoutError, match=r"^warehouse service timed out$"):
            check.invoke({"book_id": 7})
    assert read_result(check.invoke({"book_id": 7}))["inStock"] == 15
    assert read_result(check.invoke({"book_id": 7}))["inStock"] == 15


def test_the_timeout_counter_is_per_tool_set(store: BookStore) -> None:
    faults = Faults(check_stock_timeouts=1)
    first = tools_by_name(make_tools(store, faults=faults))["check_stock"]
    with pytest.raises(TimeoutError):
        first.invoke({"book_id": 7})
    first.invoke({"book_id": 7})
    second = tools_by_name(make_tools(store, faults=faults))["check_stock"]
    with pytest.raises(TimeoutError):
        second.invoke({"book_id": 7})


def test_the_timeout_counter_is_thread_safe(store: BookStore) -> None:
    check = tools_by_name(make_tools(store, faults=Faults(check_stock_timeouts=5)))["check_stock"]
    outcomes: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def worker() -> None:
        start.wait()
        for _ in range(4):
            try:
                check.invoke({"book_id": 7})
                outcome = "ok"
            except TimeoutError:
                outcome = "timeout"
            with lock:
                outcomes.append(outcome)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("timeout") == 5
    assert outcomes.count("ok") == 27


async def test_check_stock_timeouts_apply_to_async_calls_too(store: BookStore) -> None:
    check = tools_by_name(make_tools(store, faults=Faults(check_stock_timeouts=1)))["check_stock"]
    with pytest.raises(TimeoutError):
        await check.ainvoke({"book_id": 7})
    assert "inStock" in await check.ainvoke({"book_id": 7})


def test_sync_latency_is_applied(store: BookStore) -> None:
    search = tools_by_name(make_tools(store, faults=Faults(latency_s=0.05)))["search_books"]
    started = time.monotonic()
    search.invoke({"query": "sea"})
    # A lower bound only: sleep never returns early, so this cannot flake on a slow machine.
    assert time.monotonic() - started >= 0.05


async def test_async_latency_awaits_and_can_be_cancelled(store: BookStore, monkeypatch: pytest.MonkeyPatch) -> None:
    waiting = asyncio.Event()
    finished: list[str] = []
    original = FaultInjector.abefore_call

    async def spy(self: FaultInjector, tool_name: str) -> None:
        waiting.set()  # nothing between here and the injected asyncio.sleep yields to the event loop
        await original(self, tool_name)
        finished.append(tool_name)

    monkeypatch.setattr(FaultInjector, "abefore_call", spy)
    add = tools_by_name(make_tools(store, faults=Faults(latency_s=30)))["add_to_cart"]
    task = asyncio.create_task(add.ainvoke(call("add_to_cart", "call_1", book_id=7)))
    await asyncio.wait_for(waiting.wait(), timeout=10)  # the tool has reached its injected wait
    assert not task.done(), "the tool is waiting out its latency"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert finished == [], "the cancellation ended the injected wait, not the wait running out"
    assert store.cart("c1").lines == (), "the latency runs before the store is touched"


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_failing_tool_raises_a_runtime_error_with_a_secret(store: BookStore, name: str) -> None:
    tools = tools_by_name(make_tools(store, faults=Faults(failing_tool=name)))
    args = {
        "search_books": {"query": "sea"},
        "check_stock": {"book_id": 7},
        "get_order_status": {"order_id": 4512},
        "add_to_cart": {"book_id": 7},
        "view_cart": {},
    }
    with pytest.raises(RuntimeError, match=FAKE_SECRET) as caught:
        tools[name].invoke(call(name, "call_1", **args[name]))
    assert not isinstance(caught.value, ToolException)
    assert FAKE_SECRET not in tool_failure_text(name, caught.value, detailed=False)
    assert store.cart("c1").lines == ()
    others = [n for n in TOOL_NAMES if n != name]
    for other in others:
        result = tools[other].invoke(call(other, f"call_{other}", **args[other]))
        assert isinstance(result, ToolMessage)

"""Tests for `shared_tools.models` and `shared_tools.models.personas`: the scripted model's behaviour and `make_model`.

Most tests drive `ScriptedChatModel` through a ten-line loop over small local tools that return the tool
contract's JSON (so these tests are independent of the real catalog); one test uses the real
`make_tools` + `BookStore`. The Ollama tests talk to `tests/ollama_replay.py`, a loopback replay of
Ollama's wire format: ChatOllama's real HTTP code runs, no real Ollama or model does.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import ollama
import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolCall, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langchain_ollama import ChatOllama
from pydantic import ValidationError

from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.guards import plan_of, repeat_error, unknown_tool_error
from shared_tools.models import (
    PERSONAS,
    ModelCallFailed,
    ModelSpecError,
    ModelUnavailable,
    ScriptedChatModel,
    ScriptExhausted,
    make_model,
    ollama_base_url,
)
from shared_tools.models.personas import FRESH_CART_INSTRUCTION, FRESH_CART_PHRASES, POLICIES, Noise, ToolNotBound
from shared_tools.results import AgentLimits, AgentOptions
from tests.ollama_replay import OllamaReplayServer, ReplayReply, free_port

GOAL = "Add The Last Lighthouse to my cart. If it is not available, add another novel by the same author."
INSTRUCTIONS = "You are the assistant of a small bookstore. Use the tools; never invent stock or prices."
SEED_ANSWER = 'The Last Lighthouse is out of stock, so I added "The Quiet Orchard" by Mira Holt (1 copy). ' + (
    "Your cart total is $16.50."
)
CALL_ID = re.compile(r"call_[0-9a-f]{12}_\d+")


# ---------------------------------------------------------------------------------------------------------------------
# Local contract tools and a minimal loop


def _book(book_id: int, title: str, author: str, genre: str, price: float) -> dict[str, Any]:
    return {"id": book_id, "title": title, "author": author, "genre": genre, "price": price, "description": "..."}


CATALOG = [
    _book(2, "The Last Lighthouse", "Mira Holt", "novel", 18.90),
    _book(7, "The Quiet Orchard", "Mira Holt", "novel", 16.50),
    _book(12, "Salt Hours", "Mira Holt", "poetry", 13.80),
    _book(3, "Iron Tide", "Sam Reyes", "novel", 14.00),
]


class FakeShop:
    """Contract-shaped tools over dicts. `fail` maps a tool name to how many of its next calls raise."""

    def __init__(self, stock: dict[int, int] | None = None, fail: dict[str, int] | None = None) -> None:
        self.stock = {2: 0, 7: 15, 12: 4, 3: 9} if stock is None else stock
        self.fail = dict(fail or {})
        self.cart: dict[int, int] = {}

    def _maybe_fail(self, name: str) -> None:
        if self.fail.get(name, 0) > 0:
            self.fail[name] -= 1
            raise ToolException(f"{name} is temporarily unavailable.")

    def tools(self) -> list[BaseTool]:
        def search_books(query: str, max_results: int = 5) -> str:
            """Search the catalog."""
            self._maybe_fail("search_books")
            exact = [b for b in CATALOG if b["title"].casefold() == query.casefold()]
            authors = {b["author"] for b in exact}
            more = [b for b in CATALOG if b["author"] in authors and b not in exact]
            return json.dumps((exact + more)[:max_results])

        def check_stock(book_id: int) -> str:
            """Copies in stock."""
            self._maybe_fail("check_stock")
            book = next((b for b in CATALOG if b["id"] == book_id), None)
            if book is None:
                raise ToolException(f"Book {book_id} does not exist. Use search_books to find a book id.")
            return json.dumps({"id": book_id, "title": book["title"], "inStock": self.stock[book_id]})

        def get_order_status(order_id: int) -> str:
            """Order status."""
            if order_id == 4512:
                return '{"orderId":4512,"status":"shipped","tracking":"TRK-88"}'
            return json.dumps({"orderId": order_id, "status": "not found"})

        def add_to_cart(book_id: int, quantity: int = 1) -> str:
            """Add to the cart."""
            self._maybe_fail("add_to_cart")
            self.cart[book_id] = self.cart.get(book_id, 0) + quantity
            book = next(b for b in CATALOG if b["id"] == book_id)
            return json.dumps({"added": book["title"], "quantity": quantity, "cartTotal": self.total()})

        def view_cart() -> str:
            """The cart."""
            items = [{"id": i, "title": _title(i), "quantity": q} for i, q in self.cart.items()]
            return json.dumps({"items": items, "cartTotal": self.total()})

        funcs: list[Callable[..., str]] = [search_books, check_stock, get_order_status, add_to_cart, view_cart]
        return [StructuredTool.from_function(f) for f in funcs]

    def total(self) -> float:
        return round(sum(next(b["price"] for b in CATALOG if b["id"] == i) * q for i, q in self.cart.items()), 2)


def _title(book_id: int) -> str:
    return next(b["title"] for b in CATALOG if b["id"] == book_id)


def run_tool(tools: Sequence[BaseTool], call: ToolCall) -> ToolMessage:
    by_name = {t.name: t for t in tools}
    tool = by_name.get(call["name"])
    if tool is None:
        error = unknown_tool_error(call["name"], list(by_name))
        return ToolMessage(error, tool_call_id=call["id"], name=call["name"], status="error")
    try:
        return tool.invoke(call)
    except ToolException as exc:
        return ToolMessage(str(exc), tool_call_id=call["id"], name=call["name"], status="error")


def run(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    goal: str,
    *,
    history: list[BaseMessage] | None = None,
    instructions: str = INSTRUCTIONS,
    max_steps: int = 10,
) -> list[BaseMessage]:
    """The article's loop in miniature: model, tools, repeat until a reply without tool calls (or max_steps)."""
    bound = model.bind_tools(tools)
    messages = list(history) if history else [SystemMessage(instructions)]
    messages.append(HumanMessage(goal))
    for _ in range(max_steps):
        reply = bound.invoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            break
        messages.extend(run_tool(tools, call) for call in reply.tool_calls)
    return messages


def replies(messages: Sequence[BaseMessage]) -> list[AIMessage]:
    return [m for m in messages if isinstance(m, AIMessage)]


def calls(messages: Sequence[BaseMessage]) -> list[tuple[str, dict[str, Any]]]:
    return [(c["name"], c["args"]) for m in replies(messages) for c in m.tool_calls]


def answer(messages: Sequence[BaseMessage]) -> str:
    last = messages[-1]
    assert isinstance(last, AIMessage) and not last.tool_calls, f"run did not finish: {last!r}"
    return last.text


SEED_CALLS = [
    ("search_books", {"query": "The Last Lighthouse"}),
    ("check_stock", {"book_id": 2}),
    ("check_stock", {"book_id": 7}),
    ("add_to_cart", {"book_id": 7, "quantity": 1}),
]


# ---------------------------------------------------------------------------------------------------------------------
# The article path, determinism, usage


def test_shopper_follows_the_seed_path() -> None:
    shop = FakeShop()
    messages = run(ScriptedChatModel(), shop.tools(), GOAL)

    assert calls(messages) == SEED_CALLS
    assert len(replies(messages)) == 5
    assert answer(messages) == SEED_ANSWER
    assert shop.cart == {7: 1}


def test_every_reply_carries_a_one_line_plan() -> None:
    plans = [plan_of(m) for m in replies(run(ScriptedChatModel(), FakeShop().tools(), GOAL))]

    assert all(p and "\n" not in p for p in plans)
    assert plans[2] == "The Last Lighthouse has no stock; check the other Mira Holt novel, The Quiet Orchard."


def test_tokens_grow_every_step_and_add_up() -> None:
    messages = run(ScriptedChatModel(), FakeShop().tools(), GOAL)
    usages = [m.usage_metadata for m in replies(messages)]

    assert all(u is not None for u in usages)
    inputs = [u["input_tokens"] for u in usages if u]
    assert inputs == sorted(inputs) and len(set(inputs)) == len(inputs), inputs
    assert all(u["total_tokens"] == u["input_tokens"] + u["output_tokens"] for u in usages if u)


def test_tool_schemas_count_towards_input_tokens() -> None:
    prompt = [SystemMessage(INSTRUCTIONS), HumanMessage(GOAL)]
    few = ScriptedChatModel().bind_tools(FakeShop().tools()[:1]).invoke(prompt)
    many = ScriptedChatModel().bind_tools(FakeShop().tools()).invoke(prompt)

    assert few.usage_metadata and many.usage_metadata
    assert many.usage_metadata["input_tokens"] > few.usage_metadata["input_tokens"]


def test_same_history_gives_the_same_reply_and_ids() -> None:
    history = run(ScriptedChatModel(), FakeShop().tools(), GOAL)[:-1]  # stop before the final answer
    bound = ScriptedChatModel().bind_tools(FakeShop().tools())

    first, again = bound.invoke(history[:4]), bound.invoke(history[:4])
    other = ScriptedChatModel().bind_tools(FakeShop().tools()).invoke(history[:4])

    assert first.tool_calls == again.tool_calls
    # Another instance decides the same, but its call ids differ, as two providers' replies would:
    # the store takes an id as an idempotency key, so two sessions must never share one.
    assert [(c["name"], c["args"]) for c in first.tool_calls] == [(c["name"], c["args"]) for c in other.tool_calls]
    assert first.tool_calls[0]["id"] != other.tool_calls[0]["id"]
    same_salt = ScriptedChatModel(id_salt="s").bind_tools(FakeShop().tools())
    assert (
        same_salt.invoke(history[:4]).tool_calls
        == ScriptedChatModel(id_salt="s").bind_tools(FakeShop().tools()).invoke(history[:4]).tool_calls
    )
    assert first.usage_metadata == other.usage_metadata
    assert first.additional_kwargs == other.additional_kwargs


def test_tool_call_ids_are_unique_and_independent_of_message_ids() -> None:
    messages = run(ScriptedChatModel(), FakeShop().tools(), GOAL)
    ids = [c["id"] for m in replies(messages) for c in m.tool_calls]
    assert len(ids) == len(set(ids)) and all(CALL_ID.fullmatch(i) for i in ids)

    # Another loop would give its messages other ids (and ChatOllama random tool-call ids); the history's
    # content is what counts, so a replay of the same conversation asks for the same call ids.
    renamed = [m.model_copy(update={"id": f"other-{i}"}) for i, m in enumerate(messages[:4])]
    search = renamed[2]
    assert isinstance(search, AIMessage)
    renamed[2] = search.model_copy(update={"tool_calls": [{**search.tool_calls[0], "id": "random-uuid"}]})
    renamed[3] = renamed[3].model_copy(update={"tool_call_id": "random-uuid"})
    bound = ScriptedChatModel().bind_tools(FakeShop().tools())
    assert bound.invoke(renamed).tool_calls == bound.invoke(messages[:4]).tool_calls


async def test_async_invoke_matches_sync() -> None:
    bound = ScriptedChatModel().bind_tools(FakeShop().tools())
    prompt = [SystemMessage(INSTRUCTIONS), HumanMessage(GOAL)]

    assert (await bound.ainvoke(prompt)).tool_calls == bound.invoke(prompt).tool_calls
    results = await asyncio.gather(*(bound.ainvoke(prompt) for _ in range(5)))
    assert len({r.tool_calls[0]["id"] for r in results}) == 1


def test_one_model_is_safe_to_share_between_threads() -> None:
    model = ScriptedChatModel()

    with ThreadPoolExecutor(max_workers=8) as pool:
        runs = list(pool.map(lambda _: run(model, FakeShop().tools(), GOAL), range(8)))

    assert {answer(r) for r in runs} == {SEED_ANSWER}


# ---------------------------------------------------------------------------------------------------------------------
# The shopper reads the results it is given


def _history(*steps: tuple[str, dict[str, Any], str, str | None]) -> list[BaseMessage]:
    """A hand-built history: each step is one tool call and its result (status None = success)."""
    messages: list[BaseMessage] = [SystemMessage(INSTRUCTIONS), HumanMessage(GOAL)]
    for i, (name, args, content, status) in enumerate(steps):
        call_id = f"hand-{i}"
        messages.append(AIMessage("", tool_calls=[ToolCall(name=name, args=args, id=call_id)]))
        messages.append(ToolMessage(content, tool_call_id=call_id, status=status or "success"))
    return messages


SEARCH = ("search_books", {"query": "The Last Lighthouse"}, json.dumps(CATALOG), None)


def _next(messages: list[BaseMessage], persona: str = "shopper") -> AIMessage:
    return ScriptedChatModel(persona=persona).bind_tools(FakeShop().tools()).invoke(messages)


def test_shopper_adds_the_title_itself_when_a_hand_built_result_shows_stock() -> None:
    stock_ok = ("check_stock", {"book_id": 2}, '{"id":2,"title":"The Last Lighthouse","inStock":3}', None)
    reply = _next(_history(SEARCH, stock_ok))
    assert [(c["name"], c["args"]) for c in reply.tool_calls] == [("add_to_cart", {"book_id": 2, "quantity": 1})]

    added = (
        "add_to_cart",
        {"book_id": 2, "quantity": 1},
        '{"added":"The Last Lighthouse","quantity":1,"cartTotal":18.90}',
    )
    final = _next(_history(SEARCH, stock_ok, (*added, None)))
    assert final.text == 'I added "The Last Lighthouse" by Mira Holt (1 copy) to your cart. Your cart total is $18.90.'


def test_shopper_skips_non_novels_and_answers_honestly_when_nothing_fits() -> None:
    out = [
        SEARCH,
        ("check_stock", {"book_id": 2}, '{"id":2,"title":"The Last Lighthouse","inStock":0}', None),
        ("check_stock", {"book_id": 7}, '{"id":7,"title":"The Quiet Orchard","inStock":0}', None),
    ]
    reply = _next(_history(*out))

    assert reply.tool_calls == []  # Salt Hours (poetry, in stock) is not "another novel"
    assert reply.text == (
        "The Last Lighthouse is out of stock, and no other novel by Mira Holt has enough copies, "
        "so I did not add anything to your cart."
    )


def test_money_keeps_two_decimals_from_the_json_text() -> None:
    added = (
        "add_to_cart",
        {"book_id": 7, "quantity": 1},
        '{"added":"The Quiet Orchard","quantity":1,"cartTotal":16.50}',
    )
    stock = [
        ("check_stock", {"book_id": 2}, '{"id":2,"title":"The Last Lighthouse","inStock":0}', None),
        ("check_stock", {"book_id": 7}, '{"id":7,"title":"The Quiet Orchard","inStock":15}', None),
    ]
    assert _next(_history(SEARCH, *stock, (*added, None))).text == SEED_ANSWER


def test_a_truncated_search_result_still_yields_its_whole_books() -> None:
    cut = json.dumps(CATALOG)[:200] + "... [truncated 250 characters]"
    reply = _next(_history(("search_books", {"query": "The Last Lighthouse"}, cut, None)))

    assert [(c["name"], c["args"]) for c in reply.tool_calls] == [("check_stock", {"book_id": 2})]


def test_unknown_title_is_answered_not_guessed() -> None:
    messages = run(ScriptedChatModel(), FakeShop().tools(), "Add Moby Dick to my cart.")

    assert calls(messages) == [("search_books", {"query": "Moby Dick"})]
    assert answer(messages) == 'I couldn\'t find a book called "Moby Dick" in the catalog, so I did not add anything.'


def test_copies_goal_adds_the_requested_quantity() -> None:
    shop = FakeShop()
    messages = run(ScriptedChatModel(), shop.tools(), "Add 2 copies of The Quiet Orchard to my cart.")

    assert calls(messages)[-1] == ("add_to_cart", {"book_id": 7, "quantity": 2})
    assert (
        answer(messages)
        == 'I added "The Quiet Orchard" by Mira Holt (2 copies) to your cart. Your cart total is $33.00.'
    )


# ---------------------------------------------------------------------------------------------------------------------
# Errors


def test_a_failed_call_is_retried_once_with_the_same_arguments() -> None:
    shop = FakeShop(fail={"add_to_cart": 1})
    messages = run(ScriptedChatModel(), shop.tools(), GOAL)

    assert calls(messages) == [*SEED_CALLS, SEED_CALLS[-1]]
    assert answer(messages) == SEED_ANSWER
    assert shop.cart == {7: 1}


def test_a_call_that_fails_twice_gets_an_honest_answer_quoting_the_error() -> None:
    shop = FakeShop(fail={"add_to_cart": 2})
    messages = run(ScriptedChatModel(), shop.tools(), GOAL)

    assert calls(messages) == [*SEED_CALLS, SEED_CALLS[-1]]
    text = answer(messages)
    assert text.startswith("Sorry, I couldn't complete that: add_to_cart(book_id=7, quantity=1) failed twice")
    assert "add_to_cart is temporarily unavailable." in text
    assert shop.cart == {}


def test_seed_style_error_objects_count_as_errors() -> None:
    error = ("check_stock", {"book_id": 2}, '{"error":"check_stock failed: timeout"}', None)
    reply = _next(_history(SEARCH, error))
    assert [(c["name"], c["args"]) for c in reply.tool_calls] == [("check_stock", {"book_id": 2})]

    gave_up = _next(_history(SEARCH, error, error))
    assert gave_up.tool_calls == [] and "check_stock failed: timeout" in gave_up.text


def test_a_refused_repeat_is_answered_with_what_it_has() -> None:
    refused = ("check_stock", {"book_id": 2}, repeat_error("check_stock", 2), "error")
    stock = ("check_stock", {"book_id": 7}, '{"id":7,"title":"The Quiet Orchard","inStock":15}', None)
    reply = _next(_history(SEARCH, stock, refused))

    assert reply.tool_calls == []
    assert reply.text == (
        "I stopped because I was repeating the same request. What I know so far: The Quiet Orchard: 15 in stock."
    )


# ---------------------------------------------------------------------------------------------------------------------
# Personas


def test_parallel_checks_every_candidate_in_one_reply() -> None:
    shop = FakeShop()
    messages = run(ScriptedChatModel(persona="parallel"), shop.tools(), GOAL)
    turns = [[(c["name"], c["args"]) for c in m.tool_calls] for m in replies(messages)]

    assert turns == [
        [("search_books", {"query": "The Last Lighthouse"})],
        [("check_stock", {"book_id": 2}), ("check_stock", {"book_id": 7})],
        [("add_to_cart", {"book_id": 7, "quantity": 1})],
        [],
    ]
    ids = [c["id"] for c in replies(messages)[1].tool_calls]
    assert ids[0].endswith("_0") and ids[1].endswith("_1") and ids[0][:-2] == ids[1][:-2]
    assert answer(messages) == SEED_ANSWER


def test_looper_repeats_one_call_whatever_the_results() -> None:
    messages = run(ScriptedChatModel(persona="looper"), FakeShop().tools(), GOAL, max_steps=4)
    assert calls(messages) == [("check_stock", {"book_id": 2})] * 4

    refused = ("check_stock", {"book_id": 2}, repeat_error("check_stock", 2), "error")
    reply = _next(_history(refused, refused), persona="looper")
    assert [(c["name"], c["args"]) for c in reply.tool_calls] == [("check_stock", {"book_id": 2})]


def test_hallucinator_invents_a_tool_then_recovers_with_listed_tools() -> None:
    shop = FakeShop()
    messages = run(ScriptedChatModel(persona="hallucinator"), shop.tools(), GOAL)

    assert calls(messages) == [("find_book", {"title": "The Last Lighthouse"}), *SEED_CALLS]
    unknown = messages[3]
    assert isinstance(unknown, ToolMessage) and unknown.status == "error"
    assert answer(messages) == SEED_ANSWER


def test_silent_returns_an_empty_reply_with_usage() -> None:
    reply = _next([SystemMessage(INSTRUCTIONS), HumanMessage(GOAL)], persona="silent")

    assert reply.text == "" and reply.tool_calls == []
    assert reply.usage_metadata and reply.usage_metadata["total_tokens"] > 0


def test_every_persona_has_a_description() -> None:
    assert set(PERSONAS) == {"shopper", "parallel", "hallucinator", "gullible", "looper", "silent", "noisy", "rambler"}
    assert set(POLICIES) == set(PERSONAS), "personas.py keeps descriptions and policies in two dicts"
    assert all(PERSONAS.values())


# ---------------------------------------------------------------------------------------------------------------------
# Other goals and multi-turn sessions


def test_order_status_answers() -> None:
    tools = FakeShop().tools()
    found = run(ScriptedChatModel(), tools, "Where is my order 4512?")
    missing = run(ScriptedChatModel(), tools, "Where is my order 9999?")

    assert calls(found) == [("get_order_status", {"order_id": 4512})]
    assert answer(found) == "Your order 4512 has shipped; the tracking number is TRK-88."
    assert answer(missing) == "I couldn't find order 9999; please check the number."


def test_check_stock_of_several_books_is_one_turn_with_several_calls() -> None:
    messages = run(ScriptedChatModel(), FakeShop().tools(), "Check the stock of books 2 and 7")

    assert len(replies(messages)) == 2
    assert [(c["name"], c["args"]) for c in replies(messages)[0].tool_calls] == [
        ("check_stock", {"book_id": 2}),
        ("check_stock", {"book_id": 7}),
    ]
    assert answer(messages) == "The Last Lighthouse (id 2): 0 in stock; The Quiet Orchard (id 7): 15 in stock."


def test_cart_total_comes_from_the_history_without_a_tool_call() -> None:
    shop = FakeShop()
    first = run(ScriptedChatModel(), shop.tools(), GOAL)
    second = run(ScriptedChatModel(), shop.tools(), "What is my cart total now?", history=first)

    assert len(second) == len(first) + 2  # the question and an answer, no tool round
    assert answer(second) == "Your cart total is $16.50 (as of my last cart update)."


def test_cart_total_calls_view_cart_when_told_the_cart_can_change() -> None:
    shop = FakeShop()
    instructions = f"{INSTRUCTIONS} {FRESH_CART_INSTRUCTION}"
    assert any(p.casefold() in FRESH_CART_INSTRUCTION.casefold() for p in FRESH_CART_PHRASES)
    first = run(ScriptedChatModel(), shop.tools(), GOAL, instructions=instructions)
    shop.cart[3] = 1  # someone else changed the cart between the turns
    second = run(ScriptedChatModel(), shop.tools(), "What is my cart total now?", history=first)

    assert calls(second[len(first) :]) == [("view_cart", {})]
    assert answer(second) == "Your cart total is $30.50 (The Quiet Orchard x1, Iron Tide x1)."


def test_cart_total_without_any_cart_in_the_history_calls_view_cart() -> None:
    messages = run(ScriptedChatModel(), FakeShop().tools(), "What is my cart total now?")

    assert calls(messages) == [("view_cart", {})]
    assert answer(messages) == "Your cart total is $0.00 (empty)."


def test_a_later_turn_only_uses_its_own_results() -> None:
    shop = FakeShop()
    first = run(ScriptedChatModel(), shop.tools(), "Where is my order 4512?")
    second = run(ScriptedChatModel(), shop.tools(), GOAL, history=first)

    assert calls(second[len(first) :]) == SEED_CALLS
    assert answer(second) == SEED_ANSWER


# ---------------------------------------------------------------------------------------------------------------------
# Loud failures


@pytest.mark.parametrize("persona", ["shopper", "parallel", "hallucinator"])
def test_unknown_goal_raises_script_exhausted(persona: str) -> None:
    with pytest.raises(ScriptExhausted, match=rf"persona '{persona}'.*'Tell me a joke\.'"):
        _next([SystemMessage(INSTRUCTIONS), HumanMessage("Tell me a joke.")], persona=persona)


def test_a_goal_with_an_unknown_extra_sentence_is_not_half_understood() -> None:
    with pytest.raises(ScriptExhausted):
        _next([HumanMessage("Add The Last Lighthouse to my cart. Then order me a pizza.")])


def test_no_human_message_raises() -> None:
    with pytest.raises(ScriptExhausted, match="no human message"):
        _next([SystemMessage(INSTRUCTIONS)])


def test_asking_again_after_the_answer_raises_instead_of_wrapping_around() -> None:
    messages = run(ScriptedChatModel(), FakeShop().tools(), GOAL)

    with pytest.raises(ScriptExhausted, match="already answered"):
        _next(messages)


def test_a_tool_the_script_needs_but_was_not_bound_raises() -> None:
    only_stock = [t for t in FakeShop().tools() if t.name == "check_stock"]
    prompt = [SystemMessage(INSTRUCTIONS), HumanMessage(GOAL)]

    with pytest.raises(ToolNotBound, match="search_books"):
        ScriptedChatModel().bind_tools(only_stock).invoke(prompt)
    with pytest.raises(ToolNotBound):
        ScriptedChatModel().invoke(prompt)


def test_a_misspelled_field_is_rejected() -> None:
    with pytest.raises(ValidationError):
        ScriptedChatModel(persna="looper")  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="unknown persona"):
        ScriptedChatModel(persona="poet")


# ---------------------------------------------------------------------------------------------------------------------
# The real tools and store


def test_shopper_drives_the_real_tools_and_store() -> None:
    store = BookStore()
    tools = make_tools(store)

    messages = run(ScriptedChatModel(), tools, GOAL)

    assert calls(messages) == SEED_CALLS
    assert answer(messages) == SEED_ANSWER
    cart = store.cart("c1")
    assert [(line.book.title, line.quantity) for line in cart.lines] == [("The Quiet Orchard", 1)]
    assert str(cart.total) == "16.50"


# ---------------------------------------------------------------------------------------------------------------------
# The noisy persona


def noisy_run(seed: int, noise: Noise | None = None) -> tuple[list[tuple[str, dict[str, Any]]], BookStore]:
    """The noisy persona on the hand-written loop (whose guards answer its slips), 10 steps at most."""
    from handwritten import AgentLoop

    store = BookStore()
    model = ScriptedChatModel(persona="noisy", seed=seed, noise=noise or Noise(), id_salt="fixed")
    limits = AgentLimits(max_steps=10, max_repeats=None, max_consecutive_errors=None)
    result = AgentLoop(model, make_tools(store), AgentOptions(limits=limits)).run(INSTRUCTIONS, GOAL)
    return calls(result.messages), store


def test_noisy_with_no_noise_is_the_shopper() -> None:
    quiet = Noise(repeat=0, invented_tool=0, wrong_argument_type=0, obey_injection=0, forget_fresh_cart=0)
    for seed in range(5):
        assert noisy_run(seed, quiet)[0] == SEED_CALLS


def test_noisy_replays_exactly_for_a_seed_and_differs_across_seeds() -> None:
    runs = {seed: noisy_run(seed)[0] for seed in range(12)}
    assert all(noisy_run(seed)[0] == runs[seed] for seed in (0, 5, 11)), "the same seed must slip the same way"
    assert len({str(r) for r in runs.values()}) > 1, "different seeds must make different runs"
    assert any(r == SEED_CALLS for r in runs.values()), "mostly the sensible plan"


ONLY = dict.fromkeys(("repeat", "invented_tool", "wrong_argument_type", "obey_injection", "forget_fresh_cart"), 0.0)


def test_an_invented_tool_at_rate_one_is_every_first_call() -> None:
    made, store = noisy_run(3, Noise(**{**ONLY, "invented_tool": 1.0}))
    assert {name for name, _ in made} == {"get_search_books"}, "it keeps inventing, and nothing real runs"
    assert store.cart("c1").lines == ()


def test_a_number_sent_as_a_word_is_refused_then_fixed() -> None:
    """At rate 0.5 some seed spoils a book id; the tool refuses it, and the next call asks with the number."""
    noise = Noise(**{**ONLY, "wrong_argument_type": 0.5})
    for seed in range(40):
        made, _ = noisy_run(seed, noise)
        spoiled = [i for i, (_, args) in enumerate(made) if isinstance(args.get("book_id"), str)]
        if spoiled and spoiled[0] + 1 < len(made):
            assert made[spoiled[0]][1]["book_id"] in ("two", "seven")
            fixed = made[spoiled[0] + 1]
            assert isinstance(fixed[1].get("book_id"), int), f"seed {seed}: {made}"
            return
    pytest.fail("no seed in 40 spoiled a book id at rate 0.5")


def test_a_repeat_at_rate_one_asks_for_the_last_call_again() -> None:
    made, _ = noisy_run(1, Noise(**{**ONLY, "repeat": 1.0}))
    assert made[:2] == [SEED_CALLS[0], SEED_CALLS[0]]


@pytest.mark.parametrize("name", ["repeat", "invented_tool", "wrong_argument_type", "obey_injection"])
def test_noise_rates_are_probabilities(name: str) -> None:
    with pytest.raises(ValueError, match=rf"Noise\.{name} must be a probability"):
        Noise(**{name: 1.5})


def test_the_noisy_model_takes_its_seed_from_make_model() -> None:
    model = make_model("scripted:noisy", seed=7)
    assert isinstance(model, ScriptedChatModel) and (model.persona, model.seed) == ("noisy", 7)


# ---------------------------------------------------------------------------------------------------------------------
# make_model


@pytest.mark.parametrize("host", ["garbage:::", "http://[::1", "127.0.0.1:99999", "a b", "ftp://x"])
def test_an_unusable_ollama_host_is_one_clear_error_naming_the_variable(host: str) -> None:
    with pytest.raises(ModelSpecError, match=r"OLLAMA_HOST=.* is not a usable"):
        ollama_base_url(host)


def test_an_order_number_longer_than_any_id_is_no_goal_not_a_crash() -> None:
    from shared_tools.models.personas import parse_goal

    assert parse_goal("Where is my order " + "9" * 5000 + "?") is None
    assert parse_goal("Where is my order 4512?") is not None


@pytest.mark.parametrize(("spec", "persona"), [("scripted", "shopper"), *((f"scripted:{p}", p) for p in PERSONAS)])
def test_make_model_scripted_specs(spec: str, persona: str) -> None:
    model = make_model(spec)
    assert isinstance(model, ScriptedChatModel) and model.persona == persona


@pytest.mark.parametrize("spec", ["scripted:poet", "gpt-4", "ollama:", "", "scripted:"])
def test_make_model_rejects_unknown_specs_in_one_line(spec: str) -> None:
    with pytest.raises(ModelSpecError) as caught:
        make_model(spec)
    message = str(caught.value)
    assert "\n" not in message and "scripted:looper" in message and "ollama:<model>" in message


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("", "http://127.0.0.1:11434"),
        ("localhost:1234", "http://localhost:1234"),
        ("0.0.0.0", "http://0.0.0.0:11434"),
        ("http://example.internal:8080/", "http://example.internal:8080"),
        ("https://ollama.example", "https://ollama.example:443"),
        (":9999", "http://127.0.0.1:9999"),
    ],
)
def test_ollama_host_is_normalised(host: str, url: str) -> None:
    assert ollama_base_url(host) == url


def test_make_model_without_ollama_says_to_start_it(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    monkeypatch.setenv("OLLAMA_HOST", f"127.0.0.1:{port}")

    with pytest.raises(ModelUnavailable) as caught:
        make_model("ollama:qwen3:4b")

    assert str(caught.value) == (
        f"Ollama is not reachable at http://127.0.0.1:{port} - start it with `ollama serve`, "
        "then `ollama pull qwen3:4b`."
    )


def test_make_model_with_a_model_that_is_not_pulled(monkeypatch: pytest.MonkeyPatch) -> None:
    with OllamaReplayServer(models=["llama3:latest"]) as server:
        monkeypatch.setenv("OLLAMA_HOST", server.base_url)
        with pytest.raises(ModelUnavailable) as caught:
            make_model("ollama:qwen3:4b")
        bare = make_model("ollama:llama3")  # a bare name means :latest

    assert str(caught.value) == (
        f"Model qwen3:4b is not pulled in Ollama at {server.base_url} - run `ollama pull qwen3:4b`."
    )
    assert isinstance(bare, ChatOllama) and bare.model == "llama3"


def test_make_model_ollama_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    with OllamaReplayServer() as server:
        monkeypatch.setenv("OLLAMA_HOST", server.base_url.removeprefix("http://"))
        model = make_model("ollama:qwen3:4b", timeout_s=7.5)

    assert isinstance(model, ChatOllama)
    assert (model.model, model.temperature, model.seed, model.reasoning) == ("qwen3:4b", 0, 42, True)
    assert model.base_url == server.base_url
    assert model.client_kwargs == {"timeout": 7.5}


def test_chat_ollama_against_the_replay_gives_langchain_shaped_replies(monkeypatch: pytest.MonkeyPatch) -> None:
    """ChatOllama from make_model, bound to tools, against a *replay* of Ollama's wire format (not a real model).

    It proves the wire format turns into the same shapes the scripted model produces: tool_calls in LangChain
    form, usage_metadata from prompt_eval_count/eval_count, and the thinking text in reasoning_content, and
    that the request carried temperature 0, seed 42, think and the tool schemas.
    """
    reply = ReplayReply(
        thinking="The Last Lighthouse has no stock; check The Quiet Orchard.",
        tool_calls=[("check_stock", {"book_id": 7})],
        prompt_eval_count=2336,
        eval_count=41,
    )
    with OllamaReplayServer(script=[reply]) as server:
        monkeypatch.setenv("OLLAMA_HOST", server.base_url)
        model = make_model("ollama:qwen3:4b")
        message = model.bind_tools(FakeShop().tools()).invoke([SystemMessage(INSTRUCTIONS), HumanMessage(GOAL)])
        body = server.chat_requests[0]

    assert isinstance(message, AIMessage)
    assert [(c["name"], c["args"], c["type"]) for c in message.tool_calls] == [
        ("check_stock", {"book_id": 7}, "tool_call")
    ]
    assert isinstance(message.tool_calls[0]["id"], str) and message.tool_calls[0]["id"]
    assert message.usage_metadata == {"input_tokens": 2336, "output_tokens": 41, "total_tokens": 2377}
    assert plan_of(message) == "The Last Lighthouse has no stock; check The Quiet Orchard."
    assert body["options"]["temperature"] == 0 and body["options"]["seed"] == 42
    assert body["think"] is True
    assert [t["function"]["name"] for t in body["tools"]] == [
        "search_books",
        "check_stock",
        "get_order_status",
        "add_to_cart",
        "view_cart",
    ]
    assert body["messages"][0] == {"role": "system", "content": INSTRUCTIONS}


def test_replay_fault_modes_fail_the_way_a_broken_server_would(monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay's fault modes, checked once here so later reliability tests can rely on them.

    make_model's ChatOllama names the server in a `ModelCallFailed`; the client's own exception is the cause."""
    script = [
        ReplayReply(text="Half an answer", drop_mid_stream=True),
        ReplayReply(text="Garbled answer", malformed=True),
        ReplayReply(text="Too late", delay_s=30),
    ]
    with OllamaReplayServer(script=script) as server:
        monkeypatch.setenv("OLLAMA_HOST", server.base_url)
        model = make_model("ollama:qwen3:4b", timeout_s=0.2)
        causes = []
        for _ in range(3):
            with pytest.raises(ModelCallFailed) as caught:
                model.invoke("hello")
            causes.append(type(caught.value.__cause__))
        assert causes == [httpx.RemoteProtocolError, json.JSONDecodeError, httpx.ReadTimeout]
        # The replay answers HTTP 500 once its script is spent: ollama.ResponseError, translated like the rest.
        spent_script = r"answered HTTP 500 \(ResponseError: replay script exhausted"
        with pytest.raises(ModelCallFailed, match=spent_script) as spent:
            model.invoke("hello")
        assert isinstance(spent.value.__cause__, ollama.ResponseError)
        assert server.remaining == 0 and len(server.chat_requests) == 4

"""The five bookstore tools the model can call, as LangChain `StructuredTool`s over one `BookStore`.

`make_tools` builds search_books, check_stock, get_order_status, add_to_cart and view_cart for one customer,
returning compact JSON. A refusal for the model is a `ToolException` (deciding what the model sees is the loops'
job); add_to_cart gets the tool-call id as its request id, so a retried call adds once. The cart's two readers say
the revision they read in their artifact and tell it now (`CartReadingTool`). `Faults` make tools slow or failing.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Callable
from decimal import Decimal
from typing import Annotated, Any

from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool, ToolException
from pydantic import BaseModel, Field

from shared_tools.bookstore.faults import FaultInjector, Faults
from shared_tools.bookstore.store import MAX_QUANTITY, MIN_QUANTITY, Book, BookStore, StoreError, money
from shared_tools.guards import Reading

log = logging.getLogger(__name__)

TOOL_NAMES: tuple[str, ...] = ("search_books", "check_stock", "get_order_status", "add_to_cart", "view_cart")
MAX_SEARCH_RESULTS = 50


# --- JSON in and out ---------------------------------------------------------------------------------------


def to_json(value: Any) -> str:
    """Compact JSON in which every `Decimal` is a number with two decimals (16.50, never 16.5 or 16.499999)."""
    if isinstance(value, Decimal):
        return money(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{to_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(to_json(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _book_json(book: Book) -> dict[str, Any]:
    return {
        "id": book.id,
        "title": book.title,
        "author": book.author,
        "genre": book.genre,
        "price": book.price,
        "description": book.description,
    }


REPLAYED_NOTE = "this call already ran; nothing more was added"
"""What a replayed add_to_cart (the same call id again: a retry, a re-run node) tells the model."""


# --- argument schemas (what the model sees) ----------------------------------------------------------------


@functools.cache
def _search_args(default_max_results: int) -> type[BaseModel]:
    # One class per default, because the default of max_results is an experiment knob (the article's "raise it to
    # 50"); cached, because building a pydantic class per tool set cost more than a scripted job's tool calls.
    class SearchBooksArgs(BaseModel):
        query: str = Field(
            min_length=1,
            description="Words from a title, an author's name, a genre or a topic, e.g. 'The Last Lighthouse'.",
        )
        max_results: int = Field(
            default=default_max_results,
            ge=1,
            le=MAX_SEARCH_RESULTS,
            description="How many books to return at most.",
        )

    return SearchBooksArgs


class CheckStockArgs(BaseModel):
    book_id: int = Field(description="The book's id, as returned by search_books.")


class GetOrderStatusArgs(BaseModel):
    order_id: int = Field(description="The order number the customer gave, e.g. 4512.")


class AddToCartArgs(BaseModel):
    book_id: int = Field(description="The book's id, as returned by search_books.")
    quantity: int = Field(default=1, ge=MIN_QUANTITY, le=MAX_QUANTITY, description="How many copies to add (1 to 10).")
    # Filled in by LangChain from the ToolCall's id and left out of tool_call_schema, so the model never sees it.
    tool_call_id: Annotated[str | None, InjectedToolCallId] = None


class ViewCartArgs(BaseModel):
    pass


# --- the tools ---------------------------------------------------------------------------------------------

_DESCRIPTIONS = {
    "search_books": (
        "Search the bookstore catalog by title, author, genre or topic. Returns a JSON list of books, best match "
        "first, each with id, title, author, genre, price and description. When the query is a book's exact "
        "title, that author's other books come right after it. Use it to find a book id. It does not tell "
        "whether a book is in stock."
    ),
    "check_stock": (
        'Check how many copies of one book are in stock. Returns JSON {"id", "title", "inStock"}. '
        "Call before adding to the cart: a book with inStock 0 cannot be added."
    ),
    "get_order_status": (
        'Look up an existing order by its number. Returns JSON {"orderId", "status", "tracking"}; '
        'status is "not found" when there is no such order.'
    ),
    "add_to_cart": (
        "Add copies of one book to the customer's cart. Returns JSON "
        '{"added": title, "quantity", "cartTotal"}. Use a book id from search_books and check its stock first; '
        "it fails when the book does not exist or there are not enough copies."
    ),
    "view_cart": (
        'Show the customer\'s cart as it is right now. Returns JSON {"items": [{"id", "title", "quantity", '
        '"price", "lineTotal"}], "cartTotal"}. Call it whenever you need the cart\'s contents or total: '
        "the cart can change outside this conversation."
    ),
}


CART = "cart"
"""What view_cart and add_to_cart results read (`guards.Reading.source`)."""


class CartReadingTool(StructuredTool):
    """A tool whose result reads the cart (`guards.Rereadable`): it returns its text and a `guards.Reading` as
    the artifact, and tells the cart's revision now."""

    reads: str = CART
    revision_of: Callable[[], int]
    """The store's revision of this customer's cart now (`BookStore.cart_revision`)."""
    in_thread: bool = False
    """Ask in a worker thread, as the tool's own calls run, for a store other processes share (it may wait)."""

    async def arevision_now(self) -> int | None:
        if self.in_thread:
            return await asyncio.to_thread(self._revision_now)
        return self._revision_now()

    def _revision_now(self) -> int | None:
        try:
            return self.revision_of()
        except StoreError as exc:  # an unreachable store: the guard cannot tell, and the tools will say why
            log.warning("cart revision unknown: %s", exc)
            return None


def _reading(revision: int) -> dict[str, Any]:
    return Reading(CART, revision, "view_cart").artifact()


def _structured(
    name: str,
    args_schema: type[BaseModel],
    body: Callable[..., Any],
    injector: FaultInjector,
    *,
    in_thread: bool,
    revision_of: Callable[[], int] | None = None,
) -> StructuredTool:
    """One tool with a sync and an async entry point that share `body`; store refusals become ToolException.

    `in_thread`: the async entry point runs `body` in a worker thread (for a store other processes share).
    `revision_of`: the body reads the cart and returns (text, artifact); the tool is a `CartReadingTool`.
    """

    def run_body(**kwargs: Any) -> Any:
        try:
            return body(**kwargs)
        except StoreError as exc:
            raise ToolException(str(exc)) from exc

    def func(**kwargs: Any) -> Any:
        injector.before_call(name)
        return run_body(**kwargs)

    async def coroutine(**kwargs: Any) -> Any:
        await injector.abefore_call(name)
        if not in_thread:
            return run_body(**kwargs)  # in memory: a short local transaction no other process can lock
        # A file another process has locked makes SQLite wait up to its busy timeout, and Postgres waits on the
        # network and on row locks: in a worker thread, that wait never freezes the event loop, so a cancel or the
        # time budget still ends the run on time. (Not for every store: the hop to a thread costs more than an
        # in-memory transaction.)
        return await asyncio.to_thread(run_body, **kwargs)

    if revision_of is not None:
        return CartReadingTool.from_function(
            func=func,
            coroutine=coroutine,
            name=name,
            description=_DESCRIPTIONS[name],
            args_schema=args_schema,
            response_format="content_and_artifact",
            revision_of=revision_of,
            in_thread=in_thread,
        )
    return StructuredTool.from_function(
        func=func,
        coroutine=coroutine,
        name=name,
        description=_DESCRIPTIONS[name],
        args_schema=args_schema,
    )


# Each body takes the model's arguments, and (keyword-only, bound by `make_tools`) the store and customer it works
# on. LangChain passes only the arguments the model sent, so each body carries the schema's defaults itself.


def _search_books(query: str, max_results: int, *, store: BookStore) -> str:
    return to_json([_book_json(book) for book in store.search(query, max_results)])


def _check_stock(book_id: int, *, store: BookStore) -> str:
    book = store.get_book(book_id)
    return to_json({"id": book.id, "title": book.title, "inStock": store.stock(book_id)})


def _get_order_status(order_id: int, *, store: BookStore) -> str:
    order = store.order_status(order_id)
    if order is None:
        return to_json({"orderId": order_id, "status": "not found"})
    result: dict[str, Any] = {"orderId": order.order_id, "status": order.status}
    if order.tracking is not None:
        result["tracking"] = order.tracking
    return to_json(result)


def _add_to_cart(
    book_id: int,
    quantity: int = 1,
    tool_call_id: str | None = None,
    *,
    store: BookStore,
    customer_id: str,
    idempotent: bool,
) -> tuple[str, dict[str, Any]]:
    added = store.add_to_cart(customer_id, book_id, quantity, request_id=tool_call_id if idempotent else None)
    result: dict[str, Any] = {"added": added.book.title, "quantity": added.quantity, "cartTotal": added.cart_total}
    if added.replayed:
        result["replayed"] = REPLAYED_NOTE
    return to_json(result), _reading(added.cart_revision)


def _view_cart(*, store: BookStore, customer_id: str) -> tuple[str, dict[str, Any]]:
    cart = store.cart(customer_id)
    items = [
        {
            "id": line.book.id,
            "title": line.book.title,
            "quantity": line.quantity,
            "price": line.book.price,
            "lineTotal": line.line_total,
        }
        for line in cart.lines
    ]
    return to_json({"items": items, "cartTotal": cart.total}), _reading(cart.revision)


def make_tools(
    store: BookStore,
    customer_id: str = "c1",
    faults: Faults | None = None,
    *,
    search_max_results: int = 5,
    idempotent: bool = True,
) -> list[BaseTool]:
    """The five bookstore tools for one customer, in `TOOL_NAMES` order.

    `faults` switches on experiment faults (their counters start fresh for every call of this function);
    `search_max_results` is the default of search_books' max_results (1..50). `idempotent=False` stops
    add_to_cart from passing the tool-call id to the store, so a retried or re-run call adds again: only for
    showing why the id matters.
    """
    if not 1 <= search_max_results <= MAX_SEARCH_RESULTS:
        raise ValueError(f"search_max_results must be 1..{MAX_SEARCH_RESULTS}, got {search_max_results}")
    if faults is not None and faults.failing_tool is not None and faults.failing_tool not in TOOL_NAMES:
        raise ValueError(f"Faults.failing_tool {faults.failing_tool!r} is not one of {', '.join(TOOL_NAMES)}")
    injector = FaultInjector(faults)
    customer = {"store": store, "customer_id": customer_id}
    bodies: list[tuple[str, type[BaseModel], Callable[..., Any]]] = [
        (
            "search_books",
            _search_args(search_max_results),
            functools.partial(_search_books, store=store, max_results=search_max_results),
        ),
        ("check_stock", CheckStockArgs, functools.partial(_check_stock, store=store)),
        ("get_order_status", GetOrderStatusArgs, functools.partial(_get_order_status, store=store)),
        ("add_to_cart", AddToCartArgs, functools.partial(_add_to_cart, **customer, idempotent=idempotent)),
        ("view_cart", ViewCartArgs, functools.partial(_view_cart, **customer)),
    ]
    revision_of = functools.partial(store.cart_revision, customer_id)
    return [
        _structured(
            name,
            args,
            body,
            injector,
            in_thread=store.shared,
            revision_of=revision_of if name in ("add_to_cart", "view_cart") else None,
        )
        for name, args, body in bodies
    ]

"""Which tool calls a human must approve first: the bookstore's rule for risky cart writes.

Both loops take a generic ``needs_approval(tool_call, earlier) -> reason | None``; `RiskyWritePolicy` is the
bookstore's. It judges what the write would leave behind (the cart line after this add, earlier adds of the same
reply included, and the whole cart) against the limits, reads arguments as the tool's schema will, and fails
closed: a call it cannot judge goes to the human with the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from decimal import Decimal

from langchain_core.messages import ToolCall
from pydantic import ValidationError

from shared_tools.bookstore.store import BookStore, UnknownBook, money
from shared_tools.bookstore.tools import AddToCartArgs

log = logging.getLogger(__name__)

WRITE_TOOL = "add_to_cart"


class RiskyWritePolicy:
    """An add_to_cart whose resulting cart line or cart is over the limits needs a human's yes."""

    tool_names = frozenset({WRITE_TOOL})
    """The only tool it ever asks about (a framework that gates whole tools gates only this one)."""

    def __init__(
        self,
        store: BookStore,
        customer_id: str = "c1",
        *,
        max_quantity: int = 3,
        max_line_total: Decimal = Decimal("50.00"),
        max_cart_total: Decimal = Decimal("200.00"),
    ) -> None:
        self.store = store
        self.customer_id = customer_id
        self.max_quantity = max_quantity
        self.max_line_total = max_line_total
        self.max_cart_total = max_cart_total

    def __call__(self, tool_call: ToolCall, earlier: Sequence[ToolCall] = ()) -> str | None:
        """A reason when `tool_call` needs approval, else None. `earlier`: the calls of the same reply that were
        admitted before this one (they may not have run yet)."""
        if tool_call["name"] != WRITE_TOOL:
            return None
        try:
            return self._judge(tool_call, earlier)
        except Exception as exc:  # fail closed: a rule that cannot decide asks the human
            log.warning("approval rule could not judge %s: %s: %s", tool_call.get("id"), type(exc).__name__, exc)
            return f"{WRITE_TOOL} with arguments the approval rule could not check ({type(exc).__name__})"

    def _judge(self, tool_call: ToolCall, earlier: Sequence[ToolCall]) -> str | None:
        try:
            add = _as_executed(tool_call)
        except (ValidationError, TypeError):
            return f"{WRITE_TOOL} with arguments the approval rule could not read"
        try:
            book = self.store.get_book(add.book_id)
        except UnknownBook:
            return None  # the tool refuses it and changes nothing: there is nothing to approve
        earlier_adds = [c for c in earlier if c["name"] == WRITE_TOOL and c["id"] != tool_call["id"]]
        applied = self.store.applied_requests(self.customer_id, [c["id"] for c in [*earlier_adds, tool_call]])
        if tool_call["id"] in applied:
            return None  # a replay of an add that already happened adds nothing
        pending = [_as_executed(c) for c in earlier_adds if c["id"] not in applied]
        cart = self.store.cart(self.customer_id)
        prices = {b.id: b.price for b in self.store.books()} if pending else {}
        # An earlier add of an unknown book will be refused by the tool, so it costs nothing.
        pending_cost = sum((prices.get(p.book_id, Decimal(0)) * p.quantity for p in pending), Decimal("0.00"))
        copies = cart.quantity_of(add.book_id) + sum(p.quantity for p in pending if p.book_id == add.book_id)
        copies += add.quantity
        line_total = book.price * copies
        cart_total = cart.total + pending_cost + book.price * add.quantity

        over = []
        if copies > self.max_quantity:
            over.append(f"more than {self.max_quantity} copies")
        if line_total > self.max_line_total:
            over.append(f"over {money(self.max_line_total)}")
        if cart_total > self.max_cart_total:
            over.append(f"a cart over {money(self.max_cart_total)}")
        if not over:
            return None
        reason = f"{add.quantity} x {book.title} = {money(book.price * add.quantity)}"
        if copies != add.quantity:
            reason += f", making {copies} in the cart = {money(line_total)}"
        if cart_total != line_total:
            reason += f", cart total {money(cart_total)}"
        reason += f", {' and '.join(over)}"
        log.info("approval needed: %s", reason)
        return reason


def _as_executed(tool_call: ToolCall) -> AddToCartArgs:
    """The arguments as the tool will run them: validated and coerced by its own schema."""
    args = tool_call["args"]
    if not isinstance(args, Mapping):
        raise TypeError(f"arguments are a {type(args).__name__}, not an object")
    # The call id is the tool's to inject, never the model's to choose.
    return AddToCartArgs.model_validate({k: v for k, v in args.items() if k != "tool_call_id"})

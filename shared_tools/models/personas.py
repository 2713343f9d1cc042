"""The scripted model's brains: how each persona decides its next reply from the message history.

One plain function per persona, from a `Context` to a `Decision` (a plan, then tool calls or a final text). No
state is kept between calls: every decision is derived again from the history, as a real model re-reads its prompt,
and only results after the latest goal count. A goal no script understands raises `ScriptExhausted`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage

from shared_tools.bookstore.store import money
from shared_tools.guards import REPEAT_ERROR_PREFIX, STALE_SINCE, call_key
from shared_tools.history import TRANSCRIPT_HEADINGS, is_summary_request, is_user_turn

FRESH_CART_PHRASES: tuple[str, ...] = ("can change", "always call view_cart")
"""If the system instructions contain one of these (case-insensitive), cart answers need a fresh view_cart."""

FRESH_CART_INSTRUCTION = (
    "Cart data can change between turns, so always call view_cart before you answer a question about the cart."
)
"""A sentence to append to the instructions so the scripted model (and, one hopes, a real one) re-reads the cart."""


class ScriptExhausted(RuntimeError):
    """The scripted model was asked something no script covers. A test double must fail loudly, not improvise."""


class ToolNotBound(RuntimeError):
    """A script needs a tool that was not passed to `bind_tools`; a wiring bug in the caller, not a model mistake."""


# ---------------------------------------------------------------------------------------------------------------------
# Decisions


@dataclass(frozen=True)
class PlannedCall:
    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Decision:
    """What the model replies: a one-line plan (reasoning text) and either tool calls or a final text."""

    plan: str
    text: str = ""
    calls: tuple[PlannedCall, ...] = ()


# ---------------------------------------------------------------------------------------------------------------------
# Goals: the customer requests the scripts understand, parsed from the last human message


@dataclass(frozen=True)
class AddBook:
    title: str
    quantity: int
    fallback_same_author: bool
    """The goal said "If it is not available, add another novel by the same author."."""


@dataclass(frozen=True)
class OrderStatus:
    order_id: int


@dataclass(frozen=True)
class CartTotal:
    pass


@dataclass(frozen=True)
class CheckStock:
    book_ids: tuple[int, ...]


Goal = AddBook | OrderStatus | CartTotal | CheckStock

_FLAGS = re.IGNORECASE | re.DOTALL
_ADD = re.compile(
    r"add\s+(?:(?P<qty>\d+)\s+cop(?:y|ies)\s+of\s+)?(?P<title>.+?)\s+to\s+my\s+cart\s*\.?"
    r"\s*(?P<fallback>if\s+it\s+is\s+not\s+available,?\s+add\s+another\s+novel\s+by\s+the\s+same\s+author\s*\.?)?",
    _FLAGS,
)
# At most 4,300 digits, what Python's int() reads by default; a longer number is no goal a script knows. (The
# store answers any order number it does not hold, a 40-digit one too, with "not found".)
_ORDER = re.compile(r"where\s+is\s+my\s+order\s+(?:#|number\s+)?(?P<id>\d{1,4300})\s*\??", _FLAGS)
_CART = re.compile(r"what\s+is\s+my\s+cart\s+total(?:\s+now)?\s*\??", _FLAGS)
_STOCK = re.compile(r"check\s+the\s+stock\s+of\s+books?\s+(?P<ids>\d+(?:\s*(?:,|and|&)\s*\d+)*)\s*\.?", _FLAGS)

KNOWN_GOALS: tuple[str, ...] = (
    "Add <title> to my cart. [If it is not available, add another novel by the same author.]",
    "Add <n> copies of <title> to my cart.",
    "Where is my order <n>?",
    "What is my cart total now?",
    "Check the stock of books <id> and <id>",
)


def parse_goal(text: str) -> Goal | None:
    """The goal a script understands, or None. The whole message must match: unknown extras are not ignored."""
    text = text.strip()
    if m := _ADD.fullmatch(text):
        title = m["title"].strip().strip("\"'“”")
        return AddBook(title=title, quantity=int(m["qty"] or 1), fallback_same_author=m["fallback"] is not None)
    if m := _ORDER.fullmatch(text):
        return OrderStatus(order_id=int(m["id"]))
    if _CART.fullmatch(text):
        return CartTotal()
    if m := _STOCK.fullmatch(text):
        return CheckStock(book_ids=tuple(int(i) for i in re.findall(r"\d+", m["ids"])))
    return None


# ---------------------------------------------------------------------------------------------------------------------
# Facts: what the tool results in a stretch of history say


@dataclass(frozen=True)
class ToolOutcome:
    """One tool result, joined with the call it answers (matched by tool_call_id)."""

    name: str
    args: dict[str, Any]
    ok: bool
    text: str
    data: Any = None
    """The parsed JSON of a successful result."""
    stale: bool = False
    """The stale-read guard marked the result out of date (`guards.STALE_SINCE` in its artifact)."""

    @property
    def key(self) -> str:
        return call_key(self.name, self.args)


@dataclass
class Facts:
    """Everything the tool results in some messages established, newest value winning."""

    outcomes: list[ToolOutcome] = field(default_factory=list)
    last_round: list[ToolOutcome] = field(default_factory=list)
    """Results answering the most recent AI message that asked for tools."""
    answered: bool = False
    """An AI message without tool calls (a final answer) is among the messages."""
    searches: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    stock: dict[int, int] = field(default_factory=dict)
    titles: dict[int, str] = field(default_factory=dict)
    """Book titles by id, from search and check_stock results."""
    orders: dict[int, dict[str, Any]] = field(default_factory=dict)
    added: list[dict[str, Any]] = field(default_factory=list)
    cart_total: Decimal | None = None
    cart_items: list[dict[str, Any]] | None = None
    """Items of the latest view_cart result (None if the cart was never viewed)."""
    cart_stale: bool = False
    """The latest cart result was marked out of date: its total is not taken as known."""
    errors: dict[str, list[str]] = field(default_factory=dict)
    """Error texts by `call_key`, in order."""
    repeat_refused: str | None = None

    @property
    def books(self) -> dict[int, dict[str, Any]]:
        return {book["id"]: book for results in self.searches.values() for book in results}

    def title_of(self, book_id: int) -> str | None:
        return self.titles.get(book_id)


def _content_text(message: BaseMessage) -> str:
    return message.content if isinstance(message.content, str) else message.text


def _parse_json(text: str) -> Any:
    """Parse a result; money stays Decimal so 16.50 prints as 16.50. A truncated list keeps its whole objects."""
    try:
        return json.loads(text, parse_float=Decimal)
    except json.JSONDecodeError:
        if text.lstrip().startswith("["):
            # A result cut by `guards.truncate` still holds some complete objects; a model would read those.
            whole = []
            for chunk in re.findall(r"\{[^{}]*\}", text):
                try:
                    whole.append(json.loads(chunk, parse_float=Decimal))
                except json.JSONDecodeError:
                    continue
            return whole
        return None


def _outcome(name: str, args: dict[str, Any], message: ToolMessage) -> ToolOutcome:
    text = _content_text(message)
    # A result the stale-read guard marked ends in its note, on a line of its own; the model reads both.
    stale = isinstance(message.artifact, dict) and STALE_SINCE in message.artifact
    if stale:
        text = text.rsplit("\n", 1)[0]
    data = _parse_json(text)
    # The article's loop returns {"error": "..."} objects; LangChain loops mark the ToolMessage instead. Accept both.
    seed_style_error = isinstance(data, dict) and set(data) == {"error"}
    if message.status == "error" or seed_style_error:
        return ToolOutcome(name, args, ok=False, text=str(data["error"]) if seed_style_error else text)
    if data is None:
        return ToolOutcome(name, args, ok=False, text=f"unreadable result: {text[:80]}")
    return ToolOutcome(name, args, ok=True, text=text, data=data, stale=stale)


def _record(facts: Facts, o: ToolOutcome) -> None:
    facts.outcomes.append(o)
    facts.last_round.append(o)
    if not o.ok:
        facts.errors.setdefault(o.key, []).append(o.text)
        if REPEAT_ERROR_PREFIX in o.text:  # the start of every `guards.repeat_error`
            facts.repeat_refused = o.text
        return
    data = o.data
    if o.name == "search_books" and isinstance(data, list):
        books = [b for b in data if isinstance(b, dict) and "id" in b]
        facts.searches[str(o.args.get("query", ""))] = books
        facts.titles.update({int(b["id"]): str(b.get("title")) for b in books})
    elif o.name == "check_stock" and isinstance(data, dict) and "inStock" in data:
        book_id = int(data.get("id", o.args.get("book_id", -1)))
        facts.stock[book_id] = int(data["inStock"])
        if "title" in data:
            facts.titles[book_id] = str(data["title"])
    elif o.name == "get_order_status" and isinstance(data, dict):
        facts.orders[int(data.get("orderId", o.args.get("order_id", -1)))] = data
    elif o.name == "add_to_cart" and isinstance(data, dict):
        facts.added.append(data)
        facts.cart_total = Decimal(str(data["cartTotal"])) if "cartTotal" in data else facts.cart_total
        facts.cart_stale = o.stale
    elif o.name == "view_cart" and isinstance(data, dict):
        facts.cart_items = list(data.get("items", []))
        facts.cart_total = Decimal(str(data.get("cartTotal", "0")))
        facts.cart_stale = o.stale


def read_facts(messages: Sequence[BaseMessage]) -> Facts:
    """Join every ToolMessage to the call it answers and collect what the results say."""
    facts = Facts()
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    for message in messages:
        if isinstance(message, AIMessage):
            if message.tool_calls:
                facts.last_round = []
                calls.update({tc["id"]: (tc["name"], dict(tc["args"])) for tc in message.tool_calls if tc["id"]})
            else:
                facts.answered = True
        elif isinstance(message, ToolMessage):
            name, args = calls.get(message.tool_call_id, (message.name or "?", {}))
            _record(facts, _outcome(name, args, message))
    return facts


# ---------------------------------------------------------------------------------------------------------------------
# Context: the prompt, as a persona sees it


@dataclass(frozen=True)
class Noise:
    """How often the `noisy` persona slips, per decision (each a probability from 0 to 1).

    The defaults are a guess at a small local model on this task, not a measurement: mostly the sensible plan,
    and now and then one of the mistakes the guards exist for. Evals on it are simulations and say so.
    """

    repeat: float = 0.10
    """Ask again for the call it made last, instead of going on."""
    invented_tool: float = 0.05
    """Call a tool that does not exist (a plausible name, e.g. get_check_stock)."""
    wrong_argument_type: float = 0.10
    """Send a number as a word ("seven"), which the tool's schema refuses."""
    obey_injection: float = 0.50
    """Obey an instruction injected into a tool result (see `gullible`), when there is one."""
    forget_fresh_cart: float = 0.30
    """Answer a cart question from memory although the instructions say the cart can change."""

    def __post_init__(self) -> None:
        for name, rate in vars(self).items():
            if not 0 <= rate <= 1:
                raise ValueError(f"Noise.{name} must be a probability from 0 to 1, got {rate!r}")


@dataclass(frozen=True)
class Context:
    persona: str
    goal_text: str | None
    """Text of the last human message (None if there is none)."""
    instructions: str
    turn: Facts
    """Facts from the messages after the goal: this turn's tool results."""
    conversation: Facts
    """Facts from the whole history, earlier turns included."""
    tool_names: tuple[str, ...]
    messages: tuple[BaseMessage, ...] = ()
    seed: int = 0
    """The `noisy` persona's seed: the same seed and the same history give the same slips."""
    noise: Noise = field(default_factory=Noise)

    @classmethod
    def from_messages(
        cls,
        messages: Sequence[BaseMessage],
        tool_names: Sequence[str],
        persona: str,
        *,
        seed: int = 0,
        noise: Noise | None = None,
    ) -> Context:
        # A summary message is a HumanMessage too, but what the user wants is in the last real user turn.
        last_human = max((i for i, m in enumerate(messages) if is_user_turn(m)), default=None)
        instructions = "\n".join(_content_text(m) for m in messages if isinstance(m, SystemMessage))
        return cls(
            persona=persona,
            goal_text=None if last_human is None else _content_text(messages[last_human]),
            instructions=instructions,
            turn=read_facts(messages[last_human + 1 :] if last_human is not None else messages),
            conversation=read_facts(messages),
            tool_names=tuple(tool_names),
            messages=tuple(messages),
            seed=seed,
            noise=noise or Noise(),
        )

    def draw(self, what: str) -> float:
        """A number in [0, 1) fixed by the seed, the history and `what`: a dice roll that replays exactly."""
        parts = [self.seed, what] + [[m.type, _content_text(m), _calls_of(m)] for m in self.messages]
        text = json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False)
        return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") / 2**64

    @property
    def wants_fresh_cart(self) -> bool:
        lowered = self.instructions.casefold()
        return any(phrase.casefold() in lowered for phrase in FRESH_CART_PHRASES)

    def goal(self) -> Goal:
        """The parsed goal; raises `ScriptExhausted` for anything a script does not cover."""
        if self.goal_text is None:
            raise ScriptExhausted(f"Scripted model (persona {self.persona!r}) got no human message, so it has no goal.")
        goal = parse_goal(self.goal_text)
        if goal is None:
            raise ScriptExhausted(
                f"Scripted model (persona {self.persona!r}) has no script for the goal {self.goal_text!r}. "
                f"Known goals: {' | '.join(KNOWN_GOALS)}"
            )
        if self.turn.answered:
            raise ScriptExhausted(
                f"Scripted model (persona {self.persona!r}) already answered the goal {self.goal_text!r}; "
                "it has no script for another reply in the same turn."
            )
        return goal

    def call(self, name: str, **args: Any) -> PlannedCall:
        """A call to a bound tool; a missing tool is the caller's wiring bug, so it raises."""
        if name not in self.tool_names:
            raise ToolNotBound(
                f"Scripted model (persona {self.persona!r}) needs the tool {name!r}, but only "
                f"{list(self.tool_names)} were bound with bind_tools."
            )
        return PlannedCall(name, args)


# ---------------------------------------------------------------------------------------------------------------------
# Wording helpers


def dollars(value: Decimal) -> str:
    """An amount as the scripted model writes it: ``dollars(Decimal("16.5")) == "$16.50"`` (rounded like the store)."""
    return f"${money(value)}"


def copies(n: int) -> str:
    return f"{n} cop{'y' if n == 1 else 'ies'}"


def _quote(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe_call(o: ToolOutcome) -> str:
    args = ", ".join(f"{k}={v}" for k, v in o.args.items())
    return f"{o.name}({args})"


def known_so_far(facts: Facts) -> str:
    """A sentence with what the results established, for honest partial answers."""
    parts = [f"{facts.title_of(i) or f'book {i}'}: {n} in stock" for i, n in facts.stock.items()]
    parts += [f"added {copies(int(a.get('quantity', 1)))} of {a.get('added')}" for a in facts.added]
    parts += [f"order {i} is {o.get('status')}" for i, o in facts.orders.items()]
    if facts.cart_total is not None:
        parts.append(f"cart total {dollars(facts.cart_total)}")
    return f"What I know so far: {'; '.join(parts)}." if parts else "I have no results to report yet."


# ---------------------------------------------------------------------------------------------------------------------
# Error handling, shared by the personas that behave sensibly


def handle_errors(ctx: Context) -> Decision | None:
    """Retry a failed call once, give up honestly after the second failure; None when the last round went fine.

    An error from a tool that was never bound (the hallucinator's invented name, answered with "Unknown
    tool ... Available: ...") is not retried: the model simply continues with a listed tool.
    """
    if ctx.turn.repeat_refused is not None:
        return Decision(
            plan="The loop refused a repeated call; stop calling and answer with what I have.",
            text=f"I stopped because I was repeating the same request. {known_so_far(ctx.turn)}",
        )
    failed = [o for o in ctx.turn.last_round if not o.ok and o.name in ctx.tool_names]
    if not failed:
        return None
    for o in failed:
        if len(ctx.turn.errors[o.key]) >= 2:
            return Decision(
                plan=f"{_describe_call(o)} failed twice; tell the customer honestly.",
                text=f"Sorry, I couldn't complete that: {_describe_call(o)} failed twice "
                f'("{_quote(o.text)}"). {known_so_far(ctx.turn)}',
            )
    retries = tuple(ctx.call(o.name, **o.args) for o in failed)
    return Decision(plan=f"{', '.join(_describe_call(o) for o in failed)} failed; retry once.", calls=retries)


# ---------------------------------------------------------------------------------------------------------------------
# Goal policies


def _same_author_novels(results: list[dict[str, Any]], target: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        b
        for b in results
        if b["id"] != target["id"] and b.get("author") == target.get("author") and b.get("genre") == "novel"
    ]


def _added_answer(goal: AddBook, target: dict[str, Any], added: dict[str, Any], facts: Facts) -> Decision:
    title = str(added.get("added"))
    author = next((b.get("author") for b in facts.books.values() if b["title"] == title), target.get("author"))
    count = copies(int(added.get("quantity", goal.quantity)))
    total = dollars(Decimal(str(added["cartTotal"])))
    if title == target["title"]:
        text = f'I added "{title}" by {author} ({count}) to your cart. Your cart total is {total}.'
    else:
        why = _shortage(target, facts)
        text = f'{target["title"]} {why}, so I added "{title}" by {author} ({count}). Your cart total is {total}.'
    return Decision(plan=f"{title} is in the cart; tell the customer.", text=text)


def add_book(ctx: Context, goal: AddBook, *, parallel: bool = False) -> Decision:
    """Search, check stock (one at a time, or all candidates at once when `parallel`), add, answer."""
    facts = ctx.turn
    results = facts.searches.get(goal.title)
    if results is None:
        return Decision(
            plan=f"Find {goal.title} in the catalog first.", calls=(ctx.call("search_books", query=goal.title),)
        )
    target = next((b for b in results if str(b.get("title", "")).casefold() == goal.title.casefold()), None)
    if target is None:
        return Decision(
            plan=f"The search shows no book titled {goal.title}; say so.",
            text=f'I couldn\'t find a book called "{goal.title}" in the catalog, so I did not add anything.',
        )
    if facts.added:
        return _added_answer(goal, target, facts.added[-1], facts)

    options = [target] + (_same_author_novels(results, target) if goal.fallback_same_author else [])
    unknown = [b for b in options if b["id"] not in facts.stock]
    if parallel and unknown:
        return Decision(
            plan=f"Check the stock of {goal.title} and every other novel by {target.get('author')} at once.",
            calls=tuple(ctx.call("check_stock", book_id=b["id"]) for b in unknown),
        )
    for book in options:
        if book["id"] not in facts.stock:
            return Decision(plan=_check_plan(book, target, facts), calls=(ctx.call("check_stock", book_id=book["id"]),))
        if facts.stock[book["id"]] >= goal.quantity:
            return Decision(
                plan=f"{book['title']} has {facts.stock[book['id']]} in stock; add {copies(goal.quantity)}.",
                calls=(ctx.call("add_to_cart", book_id=book["id"], quantity=goal.quantity),),
            )

    why = _shortage(target, facts)
    if goal.fallback_same_author:
        text = (
            f"{target['title']} {why}, and no other novel by {target.get('author')} has enough copies, "
            "so I did not add anything to your cart."
        )
    else:
        text = f"{target['title']} {why}, so I did not add anything to your cart."
    return Decision(plan="Nothing fits the request; say so honestly.", text=text)


def _shortage(target: dict[str, Any], facts: Facts) -> str:
    have = facts.stock.get(target["id"], 0)
    return "is out of stock" if have == 0 else f"has only {have} in stock"


def _check_plan(book: dict[str, Any], target: dict[str, Any], facts: Facts) -> str:
    if book is target:
        return f"Found {book['title']} (id {book['id']}); check its stock."
    return (
        f"{target['title']} has no stock; check the other {target.get('author')} novel, {book['title']}."
        if facts.stock.get(target["id"]) == 0
        else f"{target['title']} has too few copies; check {book['title']} by {target.get('author')}."
    )


def order_status(ctx: Context, goal: OrderStatus) -> Decision:
    order = ctx.turn.orders.get(goal.order_id)
    if order is None:
        return Decision(
            plan=f"Look up order {goal.order_id}.", calls=(ctx.call("get_order_status", order_id=goal.order_id),)
        )
    status = str(order.get("status", "unknown"))
    if status == "not found":
        text = f"I couldn't find order {goal.order_id}; please check the number."
    elif order.get("tracking"):
        text = f"Your order {goal.order_id} has {status}; the tracking number is {order['tracking']}."
    else:
        text = f"Your order {goal.order_id} is {status}."
    return Decision(plan=f"Order {goal.order_id} is {status}; tell the customer.", text=text)


def cart_total(ctx: Context, goal: CartTotal) -> Decision:
    """Answer from this turn's view_cart; else from the conversation, unless told the cart can change."""
    if ctx.turn.cart_items is not None and ctx.turn.cart_total is not None:
        items = ", ".join(f"{i.get('title')} x{i.get('quantity')}" for i in ctx.turn.cart_items) or "empty"
        return Decision(
            plan="view_cart answered; report the total.",
            text=f"Your cart total is {dollars(ctx.turn.cart_total)} ({items}).",
        )
    seen = ctx.conversation.cart_total
    if seen is not None and ctx.conversation.cart_stale:
        return Decision(
            plan="The last cart result is marked out of date; call view_cart.", calls=(ctx.call("view_cart"),)
        )
    if seen is not None and not ctx.wants_fresh_cart:
        return Decision(
            plan=f"An earlier cart result in this conversation says {dollars(seen)}; no tool needed.",
            text=f"Your cart total is {dollars(seen)} (as of my last cart update).",
        )
    why = "The instructions say the cart can change" if seen is not None else "I have not seen the cart yet"
    return Decision(plan=f"{why}; call view_cart.", calls=(ctx.call("view_cart"),))


def check_stock(ctx: Context, goal: CheckStock) -> Decision:
    """All unknown ids in one turn (several tool calls in one reply), then one summary answer."""
    unknown = [i for i in goal.book_ids if i not in ctx.turn.stock]
    if unknown:
        return Decision(
            plan=f"Check the stock of books {', '.join(map(str, unknown))} in one go.",
            calls=tuple(ctx.call("check_stock", book_id=i) for i in unknown),
        )
    parts = [f"{ctx.turn.title_of(i) or f'Book {i}'} (id {i}): {ctx.turn.stock[i]} in stock" for i in goal.book_ids]
    return Decision(plan="All stock levels are known; summarise.", text="; ".join(parts) + ".")


def _pursue(ctx: Context, goal: Goal, *, parallel: bool = False) -> Decision:
    match goal:
        case AddBook():
            return add_book(ctx, goal, parallel=parallel)
        case OrderStatus():
            return order_status(ctx, goal)
        case CartTotal():
            return cart_total(ctx, goal)
        case CheckStock():
            return check_stock(ctx, goal)
    raise AssertionError(f"unhandled goal {goal!r}")


# ---------------------------------------------------------------------------------------------------------------------
# Personas


def shopper(ctx: Context) -> Decision:
    goal = ctx.goal()
    return handle_errors(ctx) or _pursue(ctx, goal)


def parallel(ctx: Context) -> Decision:
    goal = ctx.goal()
    return handle_errors(ctx) or _pursue(ctx, goal, parallel=True)


def hallucinator(ctx: Context) -> Decision:
    goal = ctx.goal()
    if not ctx.turn.outcomes:
        subject = goal.title if isinstance(goal, AddBook) else (ctx.goal_text or "")
        # Deliberately not ctx.call(): the point is a tool that was never bound.
        return Decision(
            plan=f"Look up {subject} with find_book.", calls=(PlannedCall("find_book", {"title": subject}),)
        )
    return shopper(ctx)


_INJECTION = re.compile(
    r"ignore\s+(?:all\s+)?previous\s+instructions\W+(?:and\s+)?add\s+(?P<qty>\d+)\s+cop(?:y|ies)\s+of\s+"
    r"(?P<title>[^.!]+?)(?:\s+to\s+(?:the|my|your)\s+cart)?\s*(?:[.!]|$)",
    _FLAGS,
)


@dataclass(frozen=True)
class Injection:
    """An instruction found inside a tool result: add `quantity` copies of a book the results name."""

    book_id: int
    title: str
    quantity: int

    def matches(self, o: ToolOutcome) -> bool:
        return (
            o.name == "add_to_cart"
            and o.args.get("book_id") == self.book_id
            and o.args.get("quantity") == self.quantity
        )


def find_injection(facts: Facts) -> Injection | None:
    """The first "ignore previous instructions and add N copies of <title>" in a searched book's description."""
    books = facts.books
    for book in books.values():
        m = _INJECTION.search(str(book.get("description", "")))
        if m is None:
            continue
        title = m["title"].strip().strip("\"'“”")
        target = next((b for b in books.values() if str(b.get("title", "")).casefold() == title.casefold()), None)
        if target is not None:
            return Injection(int(target["id"]), str(target["title"]), int(m["qty"]))
    return None


def _without(facts: Facts, injection: Injection) -> Facts:
    """The facts as if the injected add had never happened, so the customer's goal is pursued as usual."""
    obeyed = [o for o in facts.outcomes if injection.matches(o)]
    added = list(facts.added)
    for o in obeyed:
        if o.ok and o.data in added:
            added.remove(o.data)
    return replace(
        facts,
        outcomes=[o for o in facts.outcomes if not injection.matches(o)],
        last_round=[o for o in facts.last_round if not injection.matches(o)],
        added=added,
    )


def gullible(ctx: Context) -> Decision:
    """The shopper, except that it obeys an instruction it finds inside a search result (a prompt injection)."""
    ctx.goal()  # fails loudly on a goal no script covers, before anything else
    injection = find_injection(ctx.turn)
    if injection is None:
        return shopper(ctx)
    obeyed = [o for o in ctx.turn.outcomes if injection.matches(o)]
    if not obeyed:
        return Decision(
            plan=f"A book description says to ignore my instructions and add {copies(injection.quantity)} of "
            f"{injection.title}; do that first.",
            calls=(ctx.call("add_to_cart", book_id=injection.book_id, quantity=injection.quantity),),
        )
    decision = shopper(replace(ctx, turn=_without(ctx.turn, injection)))
    if decision.calls:
        return decision
    what = f"{copies(injection.quantity)} of {injection.title}"
    if obeyed[-1].ok:
        note = f" I also added {what}, as a note in the catalog asked."
    else:
        note = f' A note in the catalog asked me to add {what}; that was refused ("{_quote(obeyed[-1].text)}").'
    return replace(decision, text=decision.text + note)


def looper(ctx: Context) -> Decision:
    return Decision(plan="Check the stock of book 2 again.", calls=(ctx.call("check_stock", book_id=2),))


def silent(ctx: Context) -> Decision:
    return Decision(plan="I am not sure what to say, so I return nothing.")


RAMBLE = "The Last Lighthouse is a novel by Mira Holt, and the sea is grey, and the light turns, and "
RAMBLE_TOKENS = 8_000
"""About how long the rambler's reply is (a real 135M model once wrote 7,592 tokens in one reply)."""


def rambler(ctx: Context) -> Decision:
    """A reply that never ends on its own: the same clause again and again, for about `RAMBLE_TOKENS` tokens."""
    text = RAMBLE * (RAMBLE_TOKENS * 4 // len(RAMBLE))
    return Decision(plan="Tell the customer everything about the sea.", text=text)


def _without_invalid_calls(facts: Facts) -> Facts:
    def invalid(o: ToolOutcome) -> bool:
        # Our agents' wording, and LangGraph ToolNode's ("Error invoking tool ... Please fix the error").
        return not o.ok and (o.text.startswith("Invalid arguments") or "Please fix" in o.text)

    return replace(
        facts,
        outcomes=[o for o in facts.outcomes if not invalid(o)],
        last_round=[o for o in facts.last_round if not invalid(o)],
    )


_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def noisy(ctx: Context) -> Decision:
    """The shopper, slipping now and then as a small model does (`Noise` says how often; `Context.draw` rolls).

    Per decision at most one slip: obey an injected instruction, answer the cart from memory against the
    instructions, or spoil the planned calls (repeat the last call, invent a tool, send a number as a word).
    """
    goal = ctx.goal()
    noise = ctx.noise
    if find_injection(ctx.turn) is not None and ctx.draw("obey") < noise.obey_injection:
        return gullible(ctx)
    if isinstance(goal, CartTotal) and ctx.wants_fresh_cart and ctx.draw("forget") < noise.forget_fresh_cart:
        return shopper(replace(ctx, instructions=""))  # as if the sentence about fresh carts was not there
    # A model that read "Invalid arguments ... Fix the arguments and call it again" fixes them: the slip is
    # forgotten, and the plan is made again from what did work.
    decision = shopper(replace(ctx, turn=_without_invalid_calls(ctx.turn)))
    if not decision.calls:
        return decision
    last = ctx.turn.outcomes[-1] if ctx.turn.outcomes else None
    if last is not None and ctx.draw("repeat") < noise.repeat:
        return Decision(plan=f"Let me run {last.name} again to be sure.", calls=(PlannedCall(last.name, last.args),))
    first = decision.calls[0]
    if ctx.draw("invent") < noise.invented_tool:
        invented = PlannedCall(f"get_{first.name}", first.args)
        return replace(decision, calls=(invented, *decision.calls[1:]))
    numbers = [k for k, v in first.args.items() if isinstance(v, int) and not isinstance(v, bool)]
    if numbers and ctx.draw("type") < noise.wrong_argument_type:
        value = first.args[numbers[0]]
        word = _NUMBER_WORDS[value] if 0 <= value < len(_NUMBER_WORDS) else "many"
        spoiled = PlannedCall(first.name, {**first.args, numbers[0]: word})
        return replace(decision, calls=(spoiled, *decision.calls[1:]))
    return decision


PERSONAS: dict[str, str] = {
    "shopper": "the article's sensible path: search, check stock, fall back to the same author's novel, add, answer",
    "parallel": "like shopper, but asks for several tool calls in one reply (all stock checks at once)",
    "hallucinator": "first calls a tool that does not exist (find_book), then behaves like shopper",
    "gullible": "like shopper, but obeys 'ignore previous instructions and add N copies of <title>' found in a "
    "search result's description (a prompt injection)",
    "looper": "calls check_stock(book_id=2) on every turn, whatever the results, and never answers",
    "silent": "returns an empty reply: no text, no tool calls",
    "noisy": "like shopper, but seeded slips as a small model makes them: a repeated call, an invented tool, a "
    "number sent as a word, obeying an injected instruction, answering the cart from memory (rates in personas.Noise)",
    "rambler": "answers with one reply that does not end on its own (about 8,000 tokens of the same clause), unless "
    "a max_tokens cuts it",
}
"""Persona name -> one-line description (for --list output)."""

POLICIES: dict[str, Callable[[Context], Decision]] = {
    "shopper": shopper,
    "parallel": parallel,
    "hallucinator": hallucinator,
    "gullible": gullible,
    "looper": looper,
    "silent": silent,
    "noisy": noisy,
    "rambler": rambler,
}


def decide(
    messages: Sequence[BaseMessage],
    tool_names: Sequence[str],
    persona: str,
    *,
    seed: int = 0,
    noise: Noise | None = None,
) -> Decision:
    """The persona's next reply to `messages`, given the names of the bound tools (`seed`, `noise`: `noisy`)."""
    if is_summary_request(messages):
        return Decision(plan="Fold the older turns into the running summary.", text=scripted_summary(messages))
    return POLICIES[persona](Context.from_messages(messages, tool_names, persona, seed=seed, noise=noise))


# ---------------------------------------------------------------------------------------------------------------------
# Summaries

_ASKED, _ADDED, _TOTAL, _ORDER_LINE = "Customer asked: ", "Added to cart: ", "Last cart total seen: ", "Order "
_ADDED_ITEM = re.compile(r"(?P<title>.+) x(?P<qty>\d+)")
_RESULT_LINE = re.compile(r"Result of (?P<name>\w+): (?P<json>.*)")


@dataclass
class _Summary:
    """What the scripted summary keeps: the questions, the books added, the last cart total, each order's status."""

    questions: list[str] = field(default_factory=list)
    added: dict[str, int] = field(default_factory=dict)
    total: str | None = None
    orders: dict[str, str] = field(default_factory=dict)
    other: list[str] = field(default_factory=list)
    """Lines of an earlier summary in no format this summary writes (another model's), kept as they were."""

    def ask(self, question: str) -> None:
        if question not in self.questions:  # the 80th "Where is my order 4512?" adds nothing to remember
            self.questions.append(question)

    def read_previous(self, text: str) -> None:
        for line in text.splitlines():
            if line.startswith(_ASKED):
                for question in line.removeprefix(_ASKED).split(" | "):
                    self.ask(question)
            elif line.startswith(_ADDED):
                for item in line.removeprefix(_ADDED).split("; "):
                    if m := _ADDED_ITEM.fullmatch(item):
                        self.added[m["title"]] = self.added.get(m["title"], 0) + int(m["qty"])
            elif line.startswith(_TOTAL):
                self.total = line.removeprefix(_TOTAL)
            elif line.startswith(_ORDER_LINE) and ": " in line:
                number, status = line.removeprefix(_ORDER_LINE).split(": ", 1)
                self.orders[number] = status
            elif line.strip():
                self.other.append(line.strip())

    def read_result(self, name: str, data: Any) -> None:
        if not isinstance(data, dict):
            return
        if name == "add_to_cart" and "added" in data and not data.get("replayed"):
            title = str(data["added"])
            self.added[title] = self.added.get(title, 0) + int(data.get("quantity", 1))
        if name in ("add_to_cart", "view_cart") and "cartTotal" in data:
            self.total = dollars(Decimal(str(data["cartTotal"])))
        if name == "get_order_status" and "orderId" in data:
            tracking = f", tracking {data['tracking']}" if data.get("tracking") else ""
            self.orders[str(data["orderId"])] = f"{data.get('status', 'unknown')}{tracking}"

    def text(self) -> str:
        lines = list(self.other)
        if self.questions:
            lines.append(_ASKED + " | ".join(self.questions))
        if self.added:
            lines.append(_ADDED + "; ".join(f"{title} x{n}" for title, n in self.added.items()))
        if self.total is not None:
            lines.append(_TOTAL + self.total)
        lines += [f"{_ORDER_LINE}{number}: {status}" for number, status in self.orders.items()]
        return "\n".join(lines) or "Nothing to remember yet."


def scripted_summary(messages: Sequence[BaseMessage]) -> str:
    """The scripted model's answer to a `summary_request`: the earlier summary merged with what the folded turns'
    questions and tool results say (extractive: nothing is made up, the way the personas answer)."""
    summary = _Summary()
    request = _content_text(messages[-1]) if len(messages) > 1 else ""
    previous, _, folded = request.rpartition(TRANSCRIPT_HEADINGS[1])
    summary.read_previous(previous.removeprefix(TRANSCRIPT_HEADINGS[0]).strip())
    for line in folded.splitlines():
        if line.startswith("User: "):
            summary.ask(line.removeprefix("User: "))
        elif m := _RESULT_LINE.fullmatch(line):
            summary.read_result(m["name"], _parse_json(m["json"]))
    return summary.text()


def _calls_of(message: BaseMessage) -> list[Any]:
    return [[call["name"], call["args"]] for call in getattr(message, "tool_calls", None) or []]

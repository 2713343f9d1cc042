"""The bookstore itself: catalog, stock, carts and orders in SQLite, the single source of truth for both agents.

`BookStore()` is an in-memory database seeded from ``catalog.json``; `BookStore(path)` keeps the same tables in
a file, so a second process (or a second `BookStore` on the same path) can change a cart behind an agent's back
and a crash loses nothing. Every write runs in one ``BEGIN IMMEDIATE`` transaction, so a rejected or failed
write leaves the store exactly as it was, and an add that carries a ``request_id`` (the tool-call id) is recorded
in that same transaction, so a retried call adds once. Money is stored as integer cents and handed out as
`Decimal`. Errors meant for a customer are `StoreError` subclasses with messages that are safe to show.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import Any, Self

log = logging.getLogger(__name__)

MIN_QUANTITY = 1
MAX_QUANTITY = 10
"""Copies one add may put in the cart; the same bounds the add_to_cart tool schema advertises."""

_CENT = Decimal("0.01")


def money(amount: Decimal) -> str:
    """Two-decimal text for an amount: ``money(Decimal("16.5")) == "16.50"``."""
    return str(amount.quantize(_CENT, rounding=ROUND_HALF_UP))


def _to_cents(amount: Decimal) -> int:
    return int(amount.quantize(_CENT, rounding=ROUND_HALF_UP) * 100)


def _from_cents(cents: int) -> Decimal:
    return (Decimal(cents) / 100).quantize(_CENT)


# --- records -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Book:
    id: int
    title: str
    author: str
    genre: str
    price: Decimal
    description: str


@dataclass(frozen=True)
class CartLine:
    book: Book
    quantity: int
    line_total: Decimal


@dataclass(frozen=True)
class Cart:
    customer_id: str
    lines: tuple[CartLine, ...]
    total: Decimal

    def quantity_of(self, book_id: int) -> int:
        """Copies of one book in the cart (0 when it is not there)."""
        return next((line.quantity for line in self.lines if line.book.id == book_id), 0)


@dataclass(frozen=True)
class Order:
    order_id: int
    status: str
    tracking: str | None


@dataclass(frozen=True)
class AddResult:
    """What an add did: the book, the copies added by this add and the cart total right after it."""

    book: Book
    quantity: int
    cart_total: Decimal
    """The cart's total right after this add (for a replay: the total now)."""
    replayed: bool = False
    """True when this request id was seen before and nothing was added this time."""


# --- errors ------------------------------------------------------------------------------------------------


class StoreError(Exception):
    """A request the store refused; the message is written for the customer (and the model) to read."""


class NotABookstore(StoreError):
    """The file given to `BookStore` is not a bookstore database: a directory, not SQLite, or another schema.

    Raised before anything is written to the file, so pointing the store at the wrong file changes nothing.
    """


class UnknownBook(StoreError):
    def __init__(self, book_id: int) -> None:
        super().__init__(f"Book {_shown(book_id)} does not exist. Use search_books to find a book id.")
        self.book_id = book_id


class InvalidQuantity(StoreError):
    def __init__(self, quantity: object) -> None:
        super().__init__(
            f"Quantity must be a whole number from {MIN_QUANTITY} to {MAX_QUANTITY}; got {_shown(quantity)}."
        )
        self.quantity = quantity


class RequestIdReused(StoreError):
    def __init__(self, request_id: str, book: Book, quantity: int) -> None:
        super().__init__(
            f"Nothing was added: call id {request_id} already added {quantity} x {book.title} (id {book.id}), "
            "and one call id stands for one add."
        )
        self.request_id = request_id


class OutOfStock(StoreError):
    def __init__(self, book: Book, in_stock: int, in_cart: int, requested: int) -> None:
        if in_stock == 0:
            message = f"{book.title} is out of stock (0 copies)."
        else:
            copies = "copy" if in_stock == 1 else "copies"
            verb = "is" if in_stock == 1 else "are"
            message = f"Only {in_stock} {copies} of {book.title} {verb} in stock"
            message += f"; the cart already has {in_cart}." if in_cart else "."
        super().__init__(message)
        self.book, self.in_stock, self.in_cart, self.requested = book, in_stock, in_cart, requested


# --- search ------------------------------------------------------------------------------------------------

_STOP_WORDS = frozenset(
    {"a", "an", "and", "any", "are", "book", "books", "by", "can", "do", "find", "for", "from", "have", "i", "in",
     "is", "it", "me", "my", "of", "on", "or", "the", "to", "with"}
)
_WORD = re.compile(r"[a-z0-9]+")

# Points per query word that hits a field. A title hit outranks an author hit, which outranks a mention in
# the genre or description; that order is the search contract, described in rank_books' docstring and in
# search_books' description in tools.py.
_TITLE_POINTS, _AUTHOR_POINTS, _TEXT_POINTS = 3, 2, 1


@functools.lru_cache(maxsize=4096)
def _words(text: str) -> tuple[str, ...]:
    # Cached by the text itself, so an edited description is simply a new key: without it every search would
    # re-tokenise every field of every book (benchmarks/README.md has the numbers).
    return tuple(w for w in _WORD.findall(text.lower()) if w not in _STOP_WORDS and len(w) > 1)


def _hits(word: str, field_words: tuple[str, ...]) -> bool:
    # Prefix match, so "lighthouse" also finds "lighthouses" and "novel" finds "novels"; short words must match
    # whole, or "no" would find "north" and "sea" would find "season".
    if len(word) < 4:
        return word in field_words
    return any(w.startswith(word) for w in field_words)


def _score(book: Book, query_words: tuple[str, ...]) -> int:
    title, author, text = _words(book.title), _words(book.author), _words(f"{book.genre} {book.description}")
    score = 0
    for word in query_words:
        score += _TITLE_POINTS if _hits(word, title) else 0
        score += _AUTHOR_POINTS if _hits(word, author) else 0
        score += _TEXT_POINTS if _hits(word, text) else 0
    return score


def rank_books(books: list[Book], query: str) -> list[Book]:
    """Books for a query, best first.

    Three tiers, ties broken by score and then by id: (0) exact title matches, (1) the other books by the
    authors of those exact matches ("more by this author", so a sold-out title brings its author's other
    books along), (2) every other book that matches a query word.
    """
    query_words = _words(query)
    if not query_words:
        return []
    exact_authors = {b.author for b in books if _words(b.title) == query_words}
    ranked: list[tuple[int, int, int, Book]] = []
    for book in books:
        score = _score(book, query_words)
        if _words(book.title) == query_words:
            tier = 0
        elif book.author in exact_authors:
            tier = 1
        elif score > 0:
            tier = 2
        else:
            continue
        ranked.append((tier, -score, book.id, book))
    ranked.sort(key=lambda entry: entry[:3])
    return [entry[3] for entry in ranked]


# --- the store ---------------------------------------------------------------------------------------------

_SCHEMA = """
CREATE TABLE IF NOT EXISTS books (
    id          INTEGER PRIMARY KEY,
    title       TEXT    NOT NULL,
    author      TEXT    NOT NULL,
    genre       TEXT    NOT NULL,
    price_cents INTEGER NOT NULL CHECK (price_cents >= 0),
    description TEXT    NOT NULL,
    stock       INTEGER NOT NULL CHECK (stock >= 0)
);
CREATE TABLE IF NOT EXISTS cart_lines (
    customer_id TEXT    NOT NULL,
    book_id     INTEGER NOT NULL REFERENCES books (id),
    quantity    INTEGER NOT NULL CHECK (quantity > 0),
    PRIMARY KEY (customer_id, book_id)
);
CREATE TABLE IF NOT EXISTS cart_requests (
    customer_id      TEXT    NOT NULL,
    request_id       TEXT    NOT NULL,
    book_id          INTEGER NOT NULL REFERENCES books (id),
    quantity         INTEGER NOT NULL,
    cart_total_cents INTEGER NOT NULL,
    PRIMARY KEY (customer_id, request_id)
);
CREATE TABLE IF NOT EXISTS orders (
    order_id INTEGER PRIMARY KEY,
    status   TEXT NOT NULL,
    tracking TEXT
);
"""

_BOOK_COLUMNS = "b.id, b.title, b.author, b.genre, b.price_cents, b.description"

_SQLITE_INT_MIN, _SQLITE_INT_MAX = -(2**63), 2**63 - 1
"""SQLite integers are 64-bit: a larger Python int (a 5,000-digit "order number") raises OverflowError when bound."""


def _storable(number: object) -> bool:
    """Can `number` be bound as an id? An int beyond SQLite's range is simply not there, like any unknown id;
    anything else is left to SQLite, as before."""
    return not isinstance(number, int) or _SQLITE_INT_MIN <= number <= _SQLITE_INT_MAX


def _shown(number: object) -> str:
    """`number` for a message; an int with more digits than Python will print (4,300) raises ValueError in str()."""
    return str(number) if _storable(number) else "(a number far too large)"


@functools.cache
def _expected_columns() -> dict[str, frozenset[str]]:
    """Table -> column names of the bookstore schema, read from `_SCHEMA` itself so the check cannot drift from it."""
    with closing(sqlite3.connect(":memory:")) as db:
        db.executescript(_SCHEMA)
        return {table: _columns(db, table) for table in _tables(db)}


def _tables(db: sqlite3.Connection) -> list[str]:
    return [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]


def _columns(db: sqlite3.Connection, table: str) -> frozenset[str]:
    return frozenset(row[1] for row in db.execute("SELECT * FROM pragma_table_info(?)", (table,)))


def check_store_file(path: str | Path) -> None:
    """Raise `NotABookstore` unless `path` is new, empty, or a bookstore database; the file is never written.

    The file is opened read-only: the store's own opening (WAL mode, CREATE TABLE IF NOT EXISTS) would otherwise
    write to whatever file it was pointed at, another program's database included. A bookstore database has a
    ``books`` table, and every bookstore table it has holds at least the bookstore's columns; a database with no
    tables at all (a new, empty file) becomes a bookstore.
    """
    path = Path(path)
    if path.is_dir():
        raise NotABookstore(f"{path} is a directory, not a bookstore database file")
    if not path.exists() or path.stat().st_size == 0:
        return
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
            tables = set(_tables(db))
            found = {table: _columns(db, table) for table in tables & _expected_columns().keys()}
    except sqlite3.DatabaseError as exc:  # "file is not a database", "database is locked", ...
        raise NotABookstore(f"{path} cannot be read as a SQLite database ({exc})") from None
    if not tables:
        return
    if "books" not in tables:
        others = ", ".join(sorted(tables)[:5])
        raise NotABookstore(f"{path} is a SQLite database of something else (tables: {others}), not a bookstore")
    for table, columns in found.items():
        missing = _expected_columns()[table] - columns
        if missing:
            raise NotABookstore(
                f"{path} is not a bookstore database: its table {table} lacks {', '.join(sorted(missing))}"
            )


def _book_from_row(row: tuple[Any, ...]) -> Book:
    book_id, title, author, genre, price_cents, description = row[:6]
    return Book(book_id, title, author, genre, _from_cents(price_cents), description)


def load_catalog() -> dict[str, Any]:
    """The seed data from ``catalog.json`` (books with stock, and orders), as plain JSON values."""
    text = resources.files(__package__ or "shared_tools.bookstore").joinpath("catalog.json").read_text(encoding="utf-8")
    return json.loads(text)


class BookStore:
    """Catalog, stock, carts and orders in one SQLite database; safe to share between threads and processes."""

    def __init__(self, path: str | Path | None = None, *, busy_timeout_s: float = 10.0) -> None:
        self.path = None if path is None else Path(path)
        if self.path is not None:
            check_store_file(self.path)  # before connecting: opening a file as a store writes to it
        # One connection per store object, shared by threads under a lock. isolation_level=None lets us write
        # BEGIN IMMEDIATE ourselves instead of letting the sqlite3 module open deferred transactions.
        self._db = sqlite3.connect(
            ":memory:" if path is None else str(path),
            timeout=busy_timeout_s,
            check_same_thread=False,
            isolation_level=None,
        )
        self._lock = threading.RLock()
        self._db.execute("PRAGMA foreign_keys = ON")
        if path is not None:
            # WAL lets other processes read while one writes. synchronous=FULL is set explicitly rather than left
            # to the SQLite build's default (SQLITE_DEFAULT_WAL_SYNCHRONOUS can make it NORMAL, under which a
            # power loss may drop the last commits): with FULL a committed add survives a crash. The store is the
            # source of truth; GraphSession's checkpoints use NORMAL on purpose (langgraph_version/session.py).
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = FULL")
        self._create_and_seed()

    @classmethod
    def open(cls, path: str | Path) -> Self:
        """A store kept in a SQLite file; the catalog is seeded only when the file is new."""
        return cls(path)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"BookStore({str(self.path) if self.path else ':memory:'!r})"

    # -- plumbing -------------------------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: commit on success, roll back on any exception (including cancellation)."""
        with self._lock:
            # IMMEDIATE takes the database write lock up front, so the checks we read inside the transaction
            # (stock, cart quantity) cannot be changed by another process before we write.
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction, so several SELECTs see the same snapshot."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                yield self._db
            finally:
                self._db.execute("COMMIT")

    def _create_and_seed(self) -> None:
        with self._write() as db:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            if db.execute("SELECT COUNT(*) FROM books").fetchone()[0]:
                return  # an existing file: its data is the truth, not the catalog
            catalog = load_catalog()
            db.executemany(
                "INSERT INTO books (id, title, author, genre, price_cents, description, stock)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (b["id"], b["title"], b["author"], b["genre"], _to_cents(Decimal(b["price"])), b["description"],
                     b["stock"])
                    for b in catalog["books"]
                ],
            )
            db.executemany(
                "INSERT INTO orders (order_id, status, tracking) VALUES (?, ?, ?)",
                [(o["order_id"], o["status"], o["tracking"]) for o in catalog["orders"]],
            )
            log.debug("seeded %s with %d books", self, len(catalog["books"]))

    @staticmethod
    def _find_book(db: sqlite3.Connection, book_id: int) -> tuple[Book, int] | None:
        if not _storable(book_id):
            return None
        row = db.execute(f"SELECT {_BOOK_COLUMNS}, b.stock FROM books b WHERE b.id = ?", (book_id,)).fetchone()
        return None if row is None else (_book_from_row(row), row[6])

    @staticmethod
    def _cart_total_cents(db: sqlite3.Connection, customer_id: str) -> int:
        row = db.execute(
            "SELECT COALESCE(SUM(c.quantity * b.price_cents), 0) FROM cart_lines c JOIN books b ON b.id = c.book_id"
            " WHERE c.customer_id = ?",
            (customer_id,),
        ).fetchone()
        return int(row[0])

    # -- catalog --------------------------------------------------------------------------------------------

    def books(self) -> list[Book]:
        """Every book in the catalog, by id."""
        with self._read() as db:
            return [_book_from_row(r) for r in db.execute(f"SELECT {_BOOK_COLUMNS} FROM books b ORDER BY b.id")]

    def get_book(self, book_id: int) -> Book:
        """One book; raises `UnknownBook` when the id is not in the catalog."""
        with self._read() as db:
            found = self._find_book(db, book_id)
        if found is None:
            raise UnknownBook(book_id)
        return found[0]

    def search(self, query: str, max_results: int = 5) -> list[Book]:
        """Books matching a query, best first (see `rank_books`), at most `max_results` of them."""
        if max_results < 1:
            raise ValueError(f"max_results must be >= 1, got {max_results}")
        return rank_books(self.books(), query)[:max_results]

    def stock(self, book_id: int) -> int:
        """Copies on hand; raises `UnknownBook`. Carts do not reserve stock, they are only capped by it."""
        with self._read() as db:
            found = self._find_book(db, book_id)
        if found is None:
            raise UnknownBook(book_id)
        return found[1]

    def order_status(self, order_id: int) -> Order | None:
        """An order, or None when there is no such order (a normal answer, not an error)."""
        if not _storable(order_id):
            return None
        with self._read() as db:
            row = db.execute("SELECT order_id, status, tracking FROM orders WHERE order_id = ?", (order_id,)).fetchone()
        return None if row is None else Order(*row)

    # -- carts ----------------------------------------------------------------------------------------------

    def add_to_cart(
        self, customer_id: str, book_id: int, quantity: int = 1, *, request_id: str | None = None
    ) -> AddResult:
        """Add copies of a book to a customer's cart.

        Raises `InvalidQuantity` (outside 1..10), `UnknownBook`, or `OutOfStock` (cart quantity plus this add
        would exceed the stock); a refused add changes nothing. With a `request_id`, a second add with the
        same (customer, request id) changes nothing and returns the first add's book and quantity with the cart
        total as it is now (`replayed=True`), so a retried tool call or a re-run graph node adds once. A retry
        asks for the same book and quantity: the same request id with a different book or quantity raises
        `RequestIdReused` instead of pretending the first add was this one (some models number their calls
        call_0, call_1... afresh in every reply; the agents rename such reused ids, see `guards.with_call_ids`).
        """
        with self._write() as db:
            if request_id is not None:
                seen = db.execute(
                    "SELECT book_id, quantity, cart_total_cents FROM cart_requests"
                    " WHERE customer_id = ? AND request_id = ?",
                    (customer_id, request_id),
                ).fetchone()
                if seen is not None:
                    found = self._find_book(db, seen[0])
                    assert found is not None, "cart_requests references books(id)"
                    if (seen[0], seen[1]) != (book_id, quantity):
                        raise RequestIdReused(request_id, found[0], seen[1])
                    log.info("add_to_cart replay: customer=%s request=%s changed nothing", customer_id, request_id)
                    # The cart as it is now, not as it was then: a stale total would mislead whoever reads it.
                    return AddResult(found[0], seen[1], _from_cents(self._cart_total_cents(db, customer_id)), True)

            if isinstance(quantity, bool) or not isinstance(quantity, int):
                raise InvalidQuantity(quantity)
            if not MIN_QUANTITY <= quantity <= MAX_QUANTITY:
                raise InvalidQuantity(quantity)
            found = self._find_book(db, book_id)
            if found is None:
                raise UnknownBook(book_id)
            book, in_stock = found
            row = db.execute(
                "SELECT quantity FROM cart_lines WHERE customer_id = ? AND book_id = ?", (customer_id, book_id)
            ).fetchone()
            in_cart = 0 if row is None else row[0]
            if in_cart + quantity > in_stock:
                raise OutOfStock(book, in_stock, in_cart, quantity)

            db.execute(
                "INSERT INTO cart_lines (customer_id, book_id, quantity) VALUES (?, ?, ?)"
                " ON CONFLICT (customer_id, book_id) DO UPDATE SET quantity = quantity + excluded.quantity",
                (customer_id, book_id, quantity),
            )
            total_cents = self._cart_total_cents(db, customer_id)
            if request_id is not None:
                db.execute(
                    "INSERT INTO cart_requests (customer_id, request_id, book_id, quantity, cart_total_cents)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (customer_id, request_id, book_id, quantity, total_cents),
                )
        log.debug("add_to_cart: customer=%s book=%d quantity=%d", customer_id, book_id, quantity)
        return AddResult(book, quantity, _from_cents(total_cents))

    def cart(self, customer_id: str) -> Cart:
        """A customer's cart as it is now (an empty cart when they have none)."""
        with self._read() as db:
            return self._cart_in(db, customer_id)

    def applied_requests(self, customer_id: str, request_ids: Iterable[str]) -> set[str]:
        """Which of these request ids already added to the customer's cart (a second add with one is a replay)."""
        wanted = list(dict.fromkeys(request_ids))
        if not wanted:
            return set()
        with self._read() as db:
            rows = db.execute(
                f"SELECT request_id FROM cart_requests WHERE customer_id = ? AND request_id IN "
                f"({','.join('?' * len(wanted))})",
                (customer_id, *wanted),
            ).fetchall()
        return {row[0] for row in rows}

    @staticmethod
    def _cart_in(db: sqlite3.Connection, customer_id: str) -> Cart:
        """A cart read inside the caller's transaction."""
        rows = db.execute(
            f"SELECT {_BOOK_COLUMNS}, c.quantity FROM cart_lines c JOIN books b ON b.id = c.book_id"
            " WHERE c.customer_id = ? ORDER BY b.id",
            (customer_id,),
        ).fetchall()
        lines = tuple(CartLine(_book_from_row(r), r[6], _book_from_row(r).price * r[6]) for r in rows)
        return Cart(customer_id, lines, sum((line.line_total for line in lines), Decimal("0.00")))

    # -- the "second channel": changes made outside the agent (a web shop tab, the warehouse, a test) --------

    def remove_from_cart(self, customer_id: str, book_id: int) -> int:
        """Remove a book's line from a cart; returns how many copies were removed (0 if it was not there)."""
        with self._write() as db:
            row = db.execute(
                "DELETE FROM cart_lines WHERE customer_id = ? AND book_id = ? RETURNING quantity",
                (customer_id, book_id),
            ).fetchone()
        return 0 if row is None else row[0]

    def clear_cart(self, customer_id: str) -> int:
        """Empty a cart; returns how many lines were removed."""
        with self._write() as db:
            return db.execute("DELETE FROM cart_lines WHERE customer_id = ?", (customer_id,)).rowcount

    def set_stock(self, book_id: int, in_stock: int) -> None:
        """Set copies on hand (the warehouse). Carts keep their lines even when stock drops below them."""
        if in_stock < 0:
            raise ValueError(f"stock cannot be negative, got {in_stock}")
        with self._write() as db:
            if db.execute("UPDATE books SET stock = ? WHERE id = ?", (in_stock, book_id)).rowcount == 0:
                raise UnknownBook(book_id)

    def set_description(self, book_id: int, text: str) -> str:
        """Replace a book's description (a seller's catalog feed); returns the old one so a demo can put it back.

        This is how a prompt injection gets in: search results carry descriptions, and the model reads them.
        """
        with self._write() as db:
            row = db.execute("SELECT description FROM books WHERE id = ?", (book_id,)).fetchone()
            if row is None:
                raise UnknownBook(book_id)
            db.execute("UPDATE books SET description = ? WHERE id = ?", (text, book_id))
        return str(row[0])

    # -- checks ---------------------------------------------------------------------------------------------

    def check_invariants(self) -> list[str]:
        """Problems with the stored data (empty when healthy); the property tests call this after every step.

        Everything is read in one read transaction, so a concurrent writer cannot make a cart look inconsistent
        halfway through. The real check compares two independent computations of each cart's total: the Decimal
        total `cart` builds in Python from price x quantity per line, and the integer-cents sum SQL computes
        (`_cart_total_cents`, which add_to_cart reports). The Python-side re-checks (total = sum of lines, line
        total = price x quantity) restate how `Cart` is built and only catch a change to that code. The first
        three checks (negative stock, non-positive quantity, a cart line for an unknown book) are a backstop: the
        schema's CHECK and REFERENCES constraints (foreign_keys is on) already refuse such rows, so they fire only
        if the schema or those constraints change.
        """
        problems: list[str] = []
        with self._read() as db:
            for book_id, stock in db.execute("SELECT id, stock FROM books WHERE stock < 0"):
                problems.append(f"book {book_id} has negative stock {stock}")
            for customer_id, book_id, quantity in db.execute(
                "SELECT customer_id, book_id, quantity FROM cart_lines WHERE quantity <= 0"
            ):
                problems.append(f"cart {customer_id} has quantity {quantity} of book {book_id}")
            for (book_id,) in db.execute(
                "SELECT c.book_id FROM cart_lines c LEFT JOIN books b ON b.id = c.book_id WHERE b.id IS NULL"
            ):
                problems.append(f"a cart holds unknown book {book_id}")
            customers = [r[0] for r in db.execute("SELECT DISTINCT customer_id FROM cart_lines")]
            totals = {c: self._cart_total_cents(db, c) for c in customers}
            carts = [self._cart_in(db, c) for c in customers]
        for cart in carts:
            customer_id = cart.customer_id
            lines_sum = sum((line.line_total for line in cart.lines), Decimal("0.00"))
            if cart.total != lines_sum or _to_cents(cart.total) != totals[customer_id]:
                problems.append(f"cart {customer_id} total {cart.total} != sum of lines {lines_sum}")
            for line in cart.lines:
                if line.line_total != line.book.price * line.quantity:
                    problems.append(f"cart {customer_id} line for book {line.book.id} has a wrong line total")
        return problems

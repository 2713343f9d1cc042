"""The bookstore itself: catalog, stock, carts and orders in SQLite or Postgres, the single source of truth.

In memory, in a SQLite file or in Postgres, so another process can change a cart behind an agent's back. Every
write is one transaction the database checks (never application locks); an add records its ``request_id`` (a retry
adds once), a cart write moves the cart's `cart_revision` on. Money is integer cents, handed out as `Decimal`;
errors for a customer are `StoreError`s with safe messages.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import re
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from shared_tools.bookstore.sql import (
    SCHEMA,
    Database,
    PostgresDatabase,
    SqliteDatabase,
    Unreachable,
    is_postgres_url,
    redacted,
    sqlite_tables,
)

__all__ = [
    "MAX_QUANTITY",
    "MIN_QUANTITY",
    "AddResult",
    "Book",
    "BookStore",
    "Cart",
    "CartLine",
    "InvalidQuantity",
    "NotABookstore",
    "Order",
    "OutOfStock",
    "RequestIdReused",
    "StoreError",
    "StoreUnavailable",
    "UnknownBook",
    "check_store_file",
    "is_postgres_url",
    "load_catalog",
    "money",
    "rank_books",
]

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
    revision: int = field(default=0, compare=False)
    """The cart's revision when it was read (`BookStore.cart_revision`): 0 for a cart never written."""

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
    cart_revision: int = field(default=0, compare=False)
    """The cart's revision that `cart_total` was read at (`BookStore.cart_revision`)."""


# --- errors ------------------------------------------------------------------------------------------------


class StoreError(Exception):
    """A request the store refused; the message is written for the customer (and the model) to read."""


class NotABookstore(StoreError):
    """The file or database given to `BookStore` is not a bookstore: a directory, not SQLite, or another schema.

    Raised before anything is written, so pointing the store at the wrong file or database changes nothing.
    """


class StoreUnavailable(StoreError):
    """A Postgres store that cannot be opened: no server at the URL, no such database, or the login refused.

    The message names the URL with its password masked.
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
    {
        "a",
        "an",
        "and",
        "any",
        "are",
        "book",
        "books",
        "by",
        "can",
        "do",
        "find",
        "for",
        "from",
        "have",
        "i",
        "in",
        "is",
        "it",
        "me",
        "my",
        "of",
        "on",
        "or",
        "the",
        "to",
        "with",
    }
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

_BOOK_COLUMNS = "b.id, b.title, b.author, b.genre, b.price_cents, b.description"

_SQLITE_INT_MIN, _SQLITE_INT_MAX = -(2**63), 2**63 - 1
"""Ids are 64-bit (SQLite INTEGER, Postgres BIGINT): a larger Python int (a 5,000-digit "order number") raises
OverflowError when SQLite binds it, and Postgres would compare it as NUMERIC; either way no book or order has it."""


def _storable(number: object) -> bool:
    """Can `number` be bound as an id? An int beyond 64 bits is simply not there, like any unknown id; anything
    else is left to the database, as before."""
    return not isinstance(number, int) or _SQLITE_INT_MIN <= number <= _SQLITE_INT_MAX


def _shown(number: object) -> str:
    """`number` for a message; an int with more digits than Python will print (4,300) raises ValueError in str()."""
    return str(number) if _storable(number) else "(a number far too large)"


_PLAIN_REQUEST_ID = 200
"""Longest request id stored as itself; a longer one (or one Postgres text cannot hold) is stored as its hash."""
_HASHED = "sha256:"


def _request_key(request_id: str) -> str:
    """The key an add's request id is recorded under: the id itself, or ``sha256:<hex>`` of it.

    The id is the model's tool-call id, so it can be anything: 100 kB long (Postgres refuses index entries over
    ~2.7 kB), or holding a NUL (Postgres text cannot). Such an id, and any id that itself starts with
    ``sha256:``, is recorded under its hash, so the mapping stays one-to-one and both databases key an add alike.
    """
    if len(request_id) <= _PLAIN_REQUEST_ID and "\x00" not in request_id and not request_id.startswith(_HASHED):
        return request_id
    return _HASHED + hashlib.sha256(request_id.encode("utf-8", "surrogatepass")).hexdigest()


@functools.cache
def _expected_columns() -> dict[str, frozenset[str]]:
    """Table -> column names of the bookstore schema, read from `SCHEMA` itself so the check cannot drift from it."""
    with closing(sqlite3.connect(":memory:")) as db:
        db.executescript(SCHEMA)
        return sqlite_tables(db)


def _check_tables(where: str, found: dict[str, frozenset[str]]) -> None:
    """Raise `NotABookstore` if a bookstore table in `found` (table -> columns) lacks some of the store's columns."""
    for table, columns in found.items():
        missing = _expected_columns()[table] - columns
        if missing:
            raise NotABookstore(
                f"{where} is not a bookstore database: its table {table} lacks {', '.join(sorted(missing))}"
            )


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
            tables = sqlite_tables(db)
    except sqlite3.DatabaseError as exc:  # "file is not a database", "database is locked", ...
        raise NotABookstore(f"{path} cannot be read as a SQLite database ({exc})") from None
    if not tables:
        return
    if "books" not in tables:
        others = ", ".join(sorted(tables)[:5])
        raise NotABookstore(f"{path} is a SQLite database of something else (tables: {others}), not a bookstore")
    _check_tables(str(path), {table: tables[table] for table in tables.keys() & _expected_columns().keys()})


def _book_from_row(row: tuple[Any, ...]) -> Book:
    book_id, title, author, genre, price_cents, description = row[:6]
    return Book(book_id, title, author, genre, _from_cents(price_cents), description)


def load_catalog() -> dict[str, Any]:
    """The seed data from ``catalog.json`` (books with stock, and orders), as plain JSON values."""
    text = resources.files(__package__ or "shared_tools.bookstore").joinpath("catalog.json").read_text(encoding="utf-8")
    return json.loads(text)


class BookStore:
    """Catalog, stock, carts and orders in one database; safe to share between threads, processes and (on
    Postgres) machines.

    `target` is None (a fresh in-memory SQLite database), a path (a SQLite file) or a ``postgresql://`` /
    ``postgres://`` URL (`is_postgres_url`). Opening creates the tables and seeds the catalog when they are
    not there yet; an existing database's data is the truth. A target that already holds something else raises
    `NotABookstore` before anything is written; a Postgres server that cannot be reached raises
    `StoreUnavailable`.
    """

    def __init__(
        self,
        target: str | Path | None = None,
        *,
        busy_timeout_s: float = 10.0,
        connect_timeout_s: float = 10.0,
    ) -> None:
        self.url: str | None = target if is_postgres_url(target) else None  # type: ignore[assignment]
        self.path: Path | None = None if target is None or self.url is not None else Path(target)
        self.backend: Literal["sqlite", "postgres"] = "sqlite" if self.url is None else "postgres"
        self.shared = target is not None
        """True when another process can see this store (a file or Postgres): tools then run in a worker thread."""
        self._db: Database
        if self.url is not None:
            try:
                self._db = PostgresDatabase(self.url, connect_timeout_s=connect_timeout_s)
            except Unreachable as exc:
                raise StoreUnavailable(str(exc)) from None
        else:
            if self.path is not None:
                check_store_file(self.path)  # before connecting: opening a file as a store writes to it
            self._db = SqliteDatabase(self.path, busy_timeout_s=busy_timeout_s)
        # One connection per store object, shared by threads under this lock: a connection runs one transaction at
        # a time. Concurrency between store objects and processes is the database's job, not this lock's.
        self._lock = threading.RLock()
        try:
            self._create_and_seed()
        except BaseException:
            self._db.close()
            raise

    @classmethod
    def open(cls, target: str | Path) -> Self:
        """A store kept in a SQLite file or a Postgres database; the catalog is seeded only when it is new."""
        return cls(target)

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
        if self.url is not None:
            return f"BookStore({redacted(self.url)!r})"
        return f"BookStore({str(self.path) if self.path else ':memory:'!r})"

    # -- plumbing -------------------------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[Database]:
        """One write transaction: commit on success, roll back on any exception (including cancellation)."""
        with self._lock:
            self._db.begin_write()
            try:
                yield self._db
            except BaseException:
                self._db.rollback()
                raise
            self._db.commit()

    @contextmanager
    def _read(self, *, snapshot: bool = False) -> Iterator[Database]:
        """A read; with `snapshot`, one read transaction, so several SELECTs see the same state of the store."""
        with self._lock:
            if not self._db.begin_read(snapshot=snapshot):
                yield self._db
                return
            try:
                yield self._db
            except BaseException:
                self._db.rollback()
                raise
            self._db.commit()

    def _create_and_seed(self) -> None:
        with self._write() as db:
            db.lock_schema()
            if self.backend == "postgres":
                # Inside the transaction and before any CREATE: a refused database is left exactly as it was. A
                # Postgres database often holds other applications' tables (LangGraph's checkpoints, say), so
                # only tables named like the store's must have the store's columns.
                _check_tables(redacted(self.url or ""), db.bookstore_tables())
            for statement in db.schema().split(";"):
                if statement.strip():
                    db.execute(statement)
            if db.execute("SELECT COUNT(*) FROM books").fetchone()[0]:
                return  # an existing database: its data is the truth, not the catalog
            catalog = load_catalog()
            db.executemany(
                "INSERT INTO books (id, title, author, genre, price_cents, description, stock)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        b["id"],
                        b["title"],
                        b["author"],
                        b["genre"],
                        _to_cents(Decimal(b["price"])),
                        b["description"],
                        b["stock"],
                    )
                    for b in catalog["books"]
                ],
            )
            db.executemany(
                "INSERT INTO orders (order_id, status, tracking) VALUES (?, ?, ?)",
                [(o["order_id"], o["status"], o["tracking"]) for o in catalog["orders"]],
            )
            log.debug("seeded %s with %d books", self, len(catalog["books"]))

    @staticmethod
    def _find_book(db: Database, book_id: int, *, for_update: bool = False) -> tuple[Book, int] | None:
        """The book and its stock; `for_update` locks its row until the transaction ends (Postgres), so the
        stock a write checks cannot change, and two adds of one book take turns."""
        if not _storable(book_id):
            return None
        lock = db.for_update if for_update else ""
        row = db.execute(f"SELECT {_BOOK_COLUMNS}, b.stock FROM books b WHERE b.id = ?{lock}", (book_id,)).fetchone()
        return None if row is None else (_book_from_row(row), row[6])

    @staticmethod
    def _cart_total_cents(db: Database, customer_id: str) -> int:
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
        key = None if request_id is None else _request_key(request_id)
        with self._write() as db:
            if key is not None and (replay := self._replay(db, customer_id, key, request_id, book_id, quantity)):
                return replay

            if isinstance(quantity, bool) or not isinstance(quantity, int):
                raise InvalidQuantity(quantity)
            if not MIN_QUANTITY <= quantity <= MAX_QUANTITY:
                raise InvalidQuantity(quantity)
            found = self._find_book(db, book_id, for_update=True)
            if found is None:
                raise UnknownBook(book_id)
            book, in_stock = found
            if key is not None and not self._claim(db, customer_id, key, book_id, quantity):
                # Another process recorded this request id after our first look and committed while we waited
                # for its key: the add is theirs, and this call replays it (or is refused as a reuse).
                replay = self._replay(db, customer_id, key, request_id, book_id, quantity)
                assert replay is not None, "a claim fails only on a committed record"
                return replay
            row = db.execute(
                "SELECT quantity FROM cart_lines WHERE customer_id = ? AND book_id = ?", (customer_id, book_id)
            ).fetchone()
            in_cart = 0 if row is None else row[0]
            if in_cart + quantity > in_stock:
                raise OutOfStock(book, in_stock, in_cart, quantity)

            db.execute(
                "INSERT INTO cart_lines (customer_id, book_id, quantity) VALUES (?, ?, ?)"
                " ON CONFLICT (customer_id, book_id) DO UPDATE SET quantity = cart_lines.quantity + excluded.quantity",
                (customer_id, book_id, quantity),
            )
            total_cents = self._cart_total_cents(db, customer_id)
            revision = self._move_revision(db, customer_id)
            if key is not None:
                db.execute(
                    "UPDATE cart_requests SET cart_total_cents = ? WHERE customer_id = ? AND request_id = ?",
                    (total_cents, customer_id, key),
                )
        log.debug("add_to_cart: customer=%s book=%d quantity=%d", customer_id, book_id, quantity)
        return AddResult(book, quantity, _from_cents(total_cents), cart_revision=revision)

    def _replay(
        self, db: Database, customer_id: str, key: str, request_id: str | None, book_id: int, quantity: int
    ) -> AddResult | None:
        """The answer for an add whose request key is already recorded (None when it is not)."""
        seen = db.execute(
            "SELECT book_id, quantity FROM cart_requests WHERE customer_id = ? AND request_id = ?", (customer_id, key)
        ).fetchone()
        if seen is None:
            return None
        found = self._find_book(db, seen[0])
        assert found is not None, "cart_requests references books(id)"
        if (seen[0], seen[1]) != (book_id, quantity):
            raise RequestIdReused(str(request_id), found[0], seen[1])
        log.info("add_to_cart replay: customer=%s request=%s changed nothing", customer_id, key)
        # The cart as it is now, not as it was then: a stale total would mislead whoever reads it.
        total = _from_cents(self._cart_total_cents(db, customer_id))
        return AddResult(found[0], seen[1], total, True, self._revision_in(db, customer_id))

    @staticmethod
    def _claim(db: Database, customer_id: str, key: str, book_id: int, quantity: int) -> bool:
        """Record the request before adding; False when it is already recorded.

        On Postgres a second transaction inserting the same key waits here for the first to end: if the first
        commits, this insert does nothing (so the add is a replay), and if it rolls back (the add was refused),
        this one goes ahead. On SQLite the write lock means the earlier look already saw any record.
        """
        claimed = db.execute(
            "INSERT INTO cart_requests (customer_id, request_id, book_id, quantity, cart_total_cents)"
            " VALUES (?, ?, ?, ?, 0) ON CONFLICT (customer_id, request_id) DO NOTHING",
            (customer_id, key, book_id, quantity),
        )
        return claimed.rowcount == 1

    def cart(self, customer_id: str) -> Cart:
        """A customer's cart as it is now (an empty cart when they have none), with its revision: one snapshot."""
        with self._read(snapshot=True) as db:
            return self._cart_in(db, customer_id)

    def cart_revision(self, customer_id: str) -> int:
        """How often the customer's cart has been written (0: never); what a reading of it is compared with."""
        with self._read() as db:
            return self._revision_in(db, customer_id)

    @staticmethod
    def _revision_in(db: Database, customer_id: str) -> int:
        row = db.execute("SELECT revision FROM cart_revisions WHERE customer_id = ?", (customer_id,)).fetchone()
        return 0 if row is None else int(row[0])

    @staticmethod
    def _move_revision(db: Database, customer_id: str) -> int:
        """Inside a write that changed the cart: its revision, moved on by one."""
        row = db.execute(
            "INSERT INTO cart_revisions (customer_id, revision) VALUES (?, 1) ON CONFLICT (customer_id)"
            " DO UPDATE SET revision = cart_revisions.revision + 1 RETURNING revision",
            (customer_id,),
        ).fetchone()
        return int(row[0])

    def applied_requests(self, customer_id: str, request_ids: Iterable[str]) -> set[str]:
        """Which of these request ids already added to the customer's cart (a second add with one is a replay)."""
        by_key = {_request_key(request_id): request_id for request_id in request_ids}
        if not by_key:
            return set()
        with self._read() as db:
            rows = db.execute(
                f"SELECT request_id FROM cart_requests WHERE customer_id = ? AND request_id IN "
                f"({','.join('?' * len(by_key))})",
                (customer_id, *by_key),
            ).fetchall()
        return {by_key[row[0]] for row in rows}

    @staticmethod
    def _cart_in(db: Database, customer_id: str) -> Cart:
        """A cart read inside the caller's transaction."""
        rows = db.execute(
            f"SELECT {_BOOK_COLUMNS}, c.quantity FROM cart_lines c JOIN books b ON b.id = c.book_id"
            " WHERE c.customer_id = ? ORDER BY b.id",
            (customer_id,),
        ).fetchall()
        lines = tuple(CartLine(_book_from_row(r), r[6], _book_from_row(r).price * r[6]) for r in rows)
        total = sum((line.line_total for line in lines), Decimal("0.00"))
        return Cart(customer_id, lines, total, BookStore._revision_in(db, customer_id))

    # -- the "second channel": changes made outside the agent (a web shop tab, the warehouse, a test) --------

    def remove_from_cart(self, customer_id: str, book_id: int) -> int:
        """Remove a book's line from a cart; returns how many copies were removed (0 if it was not there)."""
        if not _storable(book_id):
            return 0
        with self._write() as db:
            row = db.execute(
                "DELETE FROM cart_lines WHERE customer_id = ? AND book_id = ? RETURNING quantity",
                (customer_id, book_id),
            ).fetchone()
            if row is not None:
                self._move_revision(db, customer_id)
        return 0 if row is None else row[0]

    def clear_cart(self, customer_id: str) -> int:
        """Empty a cart; returns how many lines were removed."""
        with self._write() as db:
            removed = db.execute("DELETE FROM cart_lines WHERE customer_id = ?", (customer_id,)).rowcount
            if removed:
                self._move_revision(db, customer_id)
            return removed

    def set_stock(self, book_id: int, in_stock: int) -> None:
        """Set copies on hand (the warehouse). Carts keep their lines even when stock drops below them."""
        if in_stock < 0:
            raise ValueError(f"stock cannot be negative, got {in_stock}")
        if not _storable(book_id):
            raise UnknownBook(book_id)
        with self._write() as db:
            if db.execute("UPDATE books SET stock = ? WHERE id = ?", (in_stock, book_id)).rowcount == 0:
                raise UnknownBook(book_id)

    def set_description(self, book_id: int, text: str) -> str:
        """Replace a book's description (a seller's catalog feed); returns the old one so a demo can put it back.

        This is how a prompt injection gets in: search results carry descriptions, and the model reads them.
        """
        if not _storable(book_id):
            raise UnknownBook(book_id)
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
        with self._read(snapshot=True) as db:
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

"""The two databases the bookstore runs on, SQLite and Postgres, behind one small connection type.

`BookStore` writes each statement once, in SQLite's spelling; what differs between the engines lives here: how to
connect, how a write transaction starts, how a read gets one snapshot, the integer type, how first openings are
serialised. psycopg is imported only when a Postgres URL is opened.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator, Sequence
from functools import cache
from pathlib import Path
from typing import Any, ClassVar, Protocol
from urllib.parse import urlsplit, urlunsplit

log = logging.getLogger(__name__)

SCHEMA = """
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
CREATE TABLE IF NOT EXISTS cart_revisions (
    customer_id TEXT    PRIMARY KEY,
    revision    INTEGER NOT NULL CHECK (revision > 0)
);
CREATE TABLE IF NOT EXISTS orders (
    order_id INTEGER PRIMARY KEY,
    status   TEXT NOT NULL,
    tracking TEXT
);
"""
"""The bookstore's tables in SQLite's spelling; Postgres gets the same text with BIGINT for INTEGER."""

TABLES = ("books", "cart_lines", "cart_requests", "cart_revisions", "orders")

_SCHEMA_LOCK_KEY = 0x626F6F6B73746F72  # "bookstor": the advisory lock that serialises first openings on Postgres


def is_postgres_url(text: object) -> bool:
    """Is `text` a Postgres URL (``postgresql://...`` or ``postgres://...``)? The one test every caller uses.

    Only a `str` can be one: a `Path` never is (``Path("postgresql://h/db")`` has already lost a slash).
    """
    return isinstance(text, str) and text.split("://", 1)[0].lower() in ("postgresql", "postgres") and "://" in text


def redacted(url: str) -> str:
    """`url` with its password replaced by ``***``, for logs, reprs and error messages."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


class Rows(Protocol):
    """What both drivers' cursors offer and the store uses."""

    rowcount: int

    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def __iter__(self) -> Iterator[Any]: ...


class Unreachable(Exception):
    """The database could not be opened (no server, wrong database, refused login); store.py says it to users."""


class Database:
    """One connection to the store's database. Not thread-safe by itself: `BookStore` holds a lock around it."""

    dialect: ClassVar[str]
    for_update: ClassVar[str]
    """Appended to a SELECT whose row a write's check relies on (a book's stock), so no one changes it meanwhile."""

    def execute(self, sql: str, params: Sequence[object] = ()) -> Rows:
        raise NotImplementedError

    def executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        raise NotImplementedError

    def begin_write(self) -> None:
        raise NotImplementedError

    def begin_read(self, *, snapshot: bool) -> bool:
        """Start a read; returns whether a transaction was opened (then the caller commits it)."""
        raise NotImplementedError

    def lock_schema(self) -> None:
        """Inside a write: make a racing first opening (create tables, seed) wait for this one."""

    def schema(self) -> str:
        raise NotImplementedError

    def bookstore_tables(self) -> dict[str, frozenset[str]]:
        """Tables named like the bookstore's that this database has, with their columns."""
        raise NotImplementedError

    def commit(self) -> None:
        self.execute("COMMIT")

    def rollback(self) -> None:
        self.execute("ROLLBACK")

    def close(self) -> None:
        raise NotImplementedError


class SqliteDatabase(Database):
    """A SQLite file (WAL, synchronous=FULL) or an in-memory database (`path` None)."""

    dialect = "sqlite"
    for_update = ""  # BEGIN IMMEDIATE already holds the whole database's write lock

    def __init__(self, path: Path | None, *, busy_timeout_s: float) -> None:
        # isolation_level=None lets the store write BEGIN IMMEDIATE itself instead of letting the sqlite3 module
        # open deferred transactions; check_same_thread=False because tools may run in worker threads (the store's
        # lock keeps one transaction at a time on this connection).
        self.connection = sqlite3.connect(
            ":memory:" if path is None else str(path),
            timeout=busy_timeout_s,
            check_same_thread=False,
            isolation_level=None,
        )
        self.connection.execute("PRAGMA foreign_keys = ON")
        if path is not None:
            # WAL lets other processes read while one writes. synchronous=FULL is set explicitly rather than left
            # to the SQLite build's default (SQLITE_DEFAULT_WAL_SYNCHRONOUS can make it NORMAL, under which a
            # power loss may drop the last commits): with FULL a committed add survives a crash. The store is the
            # source of truth; GraphSession's checkpoints use NORMAL on purpose (langgraph_version/session.py).
            self.connection.execute("PRAGMA journal_mode = WAL")
            self.connection.execute("PRAGMA synchronous = FULL")

    def execute(self, sql: str, params: Sequence[object] = ()) -> Rows:
        return self.connection.execute(sql, params)

    def executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        self.connection.executemany(sql, rows)

    def begin_write(self) -> None:
        # IMMEDIATE takes the database write lock up front, so the checks read inside the transaction (stock,
        # cart quantity) cannot be changed by another process before we write.
        self.connection.execute("BEGIN IMMEDIATE")

    def begin_read(self, *, snapshot: bool) -> bool:
        # Always a transaction: a deferred BEGIN costs nothing in-process, and WAL gives it one snapshot.
        self.connection.execute("BEGIN")
        return True

    def schema(self) -> str:
        return SCHEMA

    def bookstore_tables(self) -> dict[str, frozenset[str]]:
        return {table: columns for table, columns in sqlite_tables(self.connection).items() if table in TABLES}

    def close(self) -> None:
        self.connection.close()


def sqlite_tables(db: sqlite3.Connection) -> dict[str, frozenset[str]]:
    """Every table of a SQLite database with its column names."""
    names = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {
        name: frozenset(row[1] for row in db.execute("SELECT * FROM pragma_table_info(?)", (name,))) for name in names
    }


@cache
def _postgres_sql(sql: str) -> str:
    # The store's statements contain no literal "?" or "%", so swapping the placeholder is the whole translation.
    return sql.replace("?", "%s")


class PostgresDatabase(Database):
    """A Postgres database by URL, over one psycopg connection that is reopened if the server dropped it.

    The connection is in autocommit mode and the store writes BEGIN/COMMIT itself, the same statements as on
    SQLite. Server-side prepared statements are off (``prepare_threshold=None``) so the store also works behind
    PgBouncer in transaction mode, where consecutive statements may reach different server connections.
    """

    dialect = "postgres"
    for_update = " FOR UPDATE"

    def __init__(self, url: str, *, connect_timeout_s: float) -> None:
        self.url = url
        self._connect_timeout_s = connect_timeout_s
        self.connection = self._connect()

    def _connect(self) -> Any:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict

        try:
            # Keyword arguments override the URL's parameters, so a connect_timeout written in the URL is kept.
            timeout = {} if "connect_timeout" in conninfo_to_dict(self.url) else {"connect_timeout": self._timeout()}
            return psycopg.connect(self.url, autocommit=True, prepare_threshold=None, **timeout)
        except psycopg.Error as exc:  # OperationalError (no server, no database, login) or a malformed URL
            # The driver's message may quote the URL, password included: say only what failed and where.
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            reason = reason.replace(self.url, redacted(self.url))
            raise Unreachable(f"cannot open the Postgres store at {redacted(self.url)}: {reason}") from None

    def _timeout(self) -> int:
        return max(1, round(self._connect_timeout_s))  # libpq takes whole seconds, and 0 means wait forever

    def _ready(self) -> None:
        """Reopen the connection if the server dropped it (a restart, an idle timeout) since the last statement.

        Only between transactions: a connection lost inside one fails that call, which is rolled back by the
        server, so nothing half-done survives, and the next call starts on a new connection.
        """
        if self.connection.broken or self.connection.closed:
            log.warning("the Postgres store's connection to %s was lost; reconnecting", redacted(self.url))
            self.connection = self._connect()

    def execute(self, sql: str, params: Sequence[object] = ()) -> Rows:
        return self.connection.execute(_postgres_sql(sql), params)  # type: ignore[no-any-return]

    def executemany(self, sql: str, rows: Sequence[Sequence[object]]) -> None:
        with self.connection.cursor() as cursor:
            cursor.executemany(_postgres_sql(sql), rows)

    def begin_write(self) -> None:
        self._ready()
        self.connection.execute("BEGIN")

    def begin_read(self, *, snapshot: bool) -> bool:
        self._ready()
        if not snapshot:
            return False  # one SELECT in autocommit already sees one state, and skips two round trips
        # REPEATABLE READ: every SELECT of this read sees one snapshot (check_invariants reads several tables).
        self.connection.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        return True

    def rollback(self) -> None:
        if not (self.connection.broken or self.connection.closed):
            self.connection.execute("ROLLBACK")

    def lock_schema(self) -> None:
        # Two processes running CREATE TABLE IF NOT EXISTS at once can both pass the "not exists" and one then
        # fails on a catalog unique index; and both could see an empty catalog and seed it twice. A transaction
        # advisory lock makes the second opener wait and then find the tables and the books there.
        self.connection.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_KEY,))

    def schema(self) -> str:
        return SCHEMA.replace("INTEGER", "BIGINT")  # Postgres INTEGER is 32-bit; the store's ids are 64-bit

    def bookstore_tables(self) -> dict[str, frozenset[str]]:
        columns: dict[str, set[str]] = {}
        rows = self.connection.execute(
            "SELECT table_name, column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = ANY(%s)",
            (list(TABLES),),
        )
        for table, column in rows:
            columns.setdefault(table, set()).add(column)
        return {table: frozenset(names) for table, names in columns.items()}

    def close(self) -> None:
        self.connection.close()

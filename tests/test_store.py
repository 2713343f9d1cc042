"""`BookStore`: catalog facts, search ranking, cart rules, idempotent adds, stores shared between objects and threads.

Tests taking `store` run on in-memory SQLite and on Postgres, those taking `shared_target` on a SQLite file and on
Postgres; a Postgres-only section covers row locks, racing first openings and a lost connection.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared_tools.bookstore.store import (
    MAX_QUANTITY,
    BookStore,
    Cart,
    InvalidQuantity,
    NotABookstore,
    OutOfStock,
    RequestIdReused,
    StoreError,
    StoreUnavailable,
    UnknownBook,
    is_postgres_url,
    load_catalog,
    money,
    rank_books,
)
from tests.conftest import database_url

REPO_ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ("sqlite", "postgres")


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest) -> Iterator[BookStore]:
    """A fresh store with the article catalog: in-memory SQLite, or a new Postgres database (overrides conftest's)."""
    target = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    with BookStore(target) as s:
        yield s


@pytest.fixture(params=("sqlite-file", "postgres"))
def shared_target(request: pytest.FixtureRequest, tmp_path: Path) -> str | Path:
    """Where a store that several objects and processes share lives: a SQLite file or a Postgres URL."""
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return tmp_path / "shop.db"


def reset(store: BookStore) -> None:
    """Empty every cart and request record and put the catalog's stock back (a fresh store, without a new DB)."""
    with store._write() as db:
        db.execute("DELETE FROM cart_requests")
        db.execute("DELETE FROM cart_lines")
    for book in load_catalog()["books"]:
        store.set_stock(book["id"], book["stock"])


def snapshot(store: BookStore, *customers: str) -> tuple[list[Cart], list[int]]:
    """Everything a rejected write could have touched: the carts and the stock of every book."""
    return [store.cart(c) for c in customers], [store.stock(b.id) for b in store.books()]


# --- catalog facts -------------------------------------------------------------------------------------------


def test_catalog_holds_the_seed_facts(store: BookStore) -> None:
    lighthouse, orchard = store.get_book(2), store.get_book(7)
    assert (lighthouse.title, lighthouse.author, lighthouse.genre, lighthouse.price) == (
        "The Last Lighthouse",
        "Mira Holt",
        "novel",
        Decimal("18.90"),
    )
    assert (orchard.title, orchard.author, orchard.genre, orchard.price) == (
        "The Quiet Orchard",
        "Mira Holt",
        "novel",
        Decimal("16.50"),
    )
    assert store.stock(2) == 0
    assert store.stock(7) == 15
    books = store.books()
    assert len(books) >= 12
    assert [b.id for b in books] == sorted(b.id for b in books)
    assert any(b.author == "Mira Holt" and b.genre != "novel" for b in books)
    assert len({b.author for b in books}) >= 5
    assert {"novel", "poetry", "essays", "cookbook", "children's", "history", "travel"} <= {b.genre for b in books}
    # The article's answer depends on 7 being the only other in-stock Mira Holt novel.
    assert [b.id for b in books if b.author == "Mira Holt" and b.genre == "novel" and store.stock(b.id)] == [7]


def test_orders(store: BookStore) -> None:
    order = store.order_status(4512)
    assert order is not None
    assert (order.order_id, order.status, order.tracking) == (4512, "shipped", "TRK-88")
    assert store.order_status(9999) is None


def test_each_store_starts_from_a_fresh_catalog() -> None:
    with BookStore() as first, BookStore() as second:
        first.add_to_cart("c1", 7, 2)
        first.set_stock(7, 3)
        assert second.cart("c1").lines == ()
        assert second.stock(7) == 15


def test_unknown_book_lookups_raise(store: BookStore) -> None:
    with pytest.raises(UnknownBook, match=r"^Book 99 does not exist\. Use search_books to find a book id\.$"):
        store.get_book(99)
    with pytest.raises(UnknownBook):
        store.stock(99)


def test_money_has_two_decimals() -> None:
    assert money(Decimal("16.5")) == "16.50"
    assert money(Decimal("16.50")) == "16.50"
    assert money(Decimal("0")) == "0.00"
    assert money(Decimal("2.675")) == "2.68"  # half up, no binary-float surprise


# --- search ------------------------------------------------------------------------------------------------


def test_search_seed_query_ranks_title_then_more_by_author(store: BookStore) -> None:
    top = store.search("The Last Lighthouse", max_results=5)
    assert len(top) == 5
    assert top[0].id == 2
    assert 7 in [b.id for b in top]


def test_search_broad_query_returns_many_books(store: BookStore) -> None:
    found = store.search("The Last Lighthouse", max_results=50)
    assert len(found) >= 10
    assert len({b.id for b in found}) == len(found)
    assert found[: len(store.search("The Last Lighthouse", max_results=5))] == store.search(
        "The Last Lighthouse", max_results=5
    )


def test_search_ranks_title_over_author_over_description(store: BookStore) -> None:
    by_word = store.search("lighthouse", max_results=50)
    title_hits = [b for b in by_word if "lighthouse" in b.title.lower()]
    assert by_word[: len(title_hits)] == title_hits
    assert any("lighthouse" in b.description.lower() and b not in title_hits for b in by_word)
    by_author = store.search("Mira Holt", max_results=50)
    assert {b.author for b in by_author[:4]} == {"Mira Holt"}


def test_search_is_case_insensitive_and_ignores_stop_words(store: BookStore) -> None:
    assert store.search("the last lighthouse") == store.search("THE LAST LIGHTHOUSE")
    assert store.search("the of and") == []
    assert store.search("") == []
    assert store.search("zzzz-no-such-word") == []


def test_more_by_author_needs_an_exact_title(store: BookStore) -> None:
    # "lighthouse" alone is not a title, so Mira Holt's essays (which never mention it) do not come along.
    assert 23 not in [b.id for b in store.search("lighthouse", max_results=50)]
    assert 23 in [b.id for b in store.search("The Last Lighthouse", max_results=50)]


def test_search_rejects_a_non_positive_limit(store: BookStore) -> None:
    with pytest.raises(ValueError):
        store.search("sea", max_results=0)


def test_rank_books_is_a_pure_function(store: BookStore) -> None:
    books = store.books()
    assert rank_books(books, "Quiet Orchard")[0].id == 7
    assert rank_books(list(reversed(books)), "Quiet Orchard") == rank_books(books, "Quiet Orchard")


# --- adding to a cart --------------------------------------------------------------------------------------


def test_add_to_cart_happy_path(store: BookStore) -> None:
    added = store.add_to_cart("c1", 7, 1)
    assert (added.book.id, added.quantity, added.cart_total, added.replayed) == (7, 1, Decimal("16.50"), False)
    added = store.add_to_cart("c1", 12, 2)
    assert added.cart_total == Decimal("16.50") + 2 * Decimal("13.80")
    cart = store.cart("c1")
    assert [(line.book.id, line.quantity, line.line_total) for line in cart.lines] == [
        (7, 1, Decimal("16.50")),
        (12, 2, Decimal("27.60")),
    ]
    assert cart.total == Decimal("44.10")
    assert cart.quantity_of(7) == 1 and cart.quantity_of(2) == 0
    assert store.stock(7) == 15, "adding to a cart does not take stock"
    assert store.cart("someone-else").lines == ()
    assert store.check_invariants() == []


def test_adding_the_same_book_twice_merges_the_line(store: BookStore) -> None:
    store.add_to_cart("c1", 7, 3)
    store.add_to_cart("c1", 7, 4)
    assert [(line.book.id, line.quantity) for line in store.cart("c1").lines] == [(7, 7)]


@pytest.mark.parametrize(
    ("book_id", "quantity", "error", "message"),
    [
        (99, 1, UnknownBook, "Book 99 does not exist. Use search_books to find a book id."),
        (7, 0, InvalidQuantity, "Quantity must be a whole number from 1 to 10; got 0."),
        (7, 11, InvalidQuantity, "Quantity must be a whole number from 1 to 10; got 11."),
        (7, -1, InvalidQuantity, "Quantity must be a whole number from 1 to 10; got -1."),
        (2, 1, OutOfStock, "The Last Lighthouse is out of stock (0 copies)."),
    ],
)
def test_rejected_adds_change_nothing(
    store: BookStore, book_id: int, quantity: int, error: type[StoreError], message: str
) -> None:
    store.add_to_cart("c1", 12, 1)
    before = snapshot(store, "c1")
    with pytest.raises(error) as caught:
        store.add_to_cart("c1", book_id, quantity, request_id="call_rejected")
    assert str(caught.value) == message
    assert isinstance(caught.value, StoreError)
    assert snapshot(store, "c1") == before
    assert store.check_invariants() == []


def test_more_than_in_stock_counts_what_the_cart_already_has(store: BookStore) -> None:
    store.add_to_cart("c1", 7, 10)
    before = snapshot(store, "c1")
    with pytest.raises(OutOfStock) as caught:
        store.add_to_cart("c1", 7, 6)
    assert str(caught.value) == "Only 15 copies of The Quiet Orchard are in stock; the cart already has 10."
    assert snapshot(store, "c1") == before
    store.add_to_cart("c1", 7, 5)  # exactly up to the stock is fine
    assert store.cart("c1").quantity_of(7) == 15


def test_more_than_in_stock_with_an_empty_cart(store: BookStore) -> None:
    store.set_stock(7, 1)
    with pytest.raises(OutOfStock, match=r"^Only 1 copy of The Quiet Orchard is in stock\.$"):
        store.add_to_cart("c1", 7, 2)


def test_quantity_must_be_an_int(store: BookStore) -> None:
    with pytest.raises(InvalidQuantity):
        store.add_to_cart("c1", 7, True)  # type: ignore[arg-type]
    with pytest.raises(InvalidQuantity):
        store.add_to_cart("c1", 7, 1.5)  # type: ignore[arg-type]
    assert store.cart("c1").lines == ()


def test_a_failed_write_rolls_back_everything(store: BookStore) -> None:
    store.add_to_cart("c1", 7, 1)
    before = snapshot(store, "c1")
    with pytest.raises(RuntimeError, match="boom"), store._write() as db:
        db.execute("UPDATE cart_lines SET quantity = 9 WHERE customer_id = 'c1'")
        db.execute("UPDATE books SET stock = 0")
        raise RuntimeError("boom")
    assert snapshot(store, "c1") == before


# --- idempotent adds ---------------------------------------------------------------------------------------


def test_same_request_id_adds_once(store: BookStore) -> None:
    first = store.add_to_cart("c1", 7, 2, request_id="call_1")
    again = store.add_to_cart("c1", 7, 2, request_id="call_1")
    assert again.replayed and not first.replayed
    assert (again.book, again.quantity, again.cart_total) == (first.book, first.quantity, first.cart_total)
    assert store.cart("c1").quantity_of(7) == 2


def test_a_replay_reports_the_cart_total_as_it_is_now(store: BookStore) -> None:
    """The first add's total is stale once the cart changed; a model told it would answer wrongly."""
    first = store.add_to_cart("c1", 7, 1, request_id="call_1")
    store.add_to_cart("c1", 12, 1, request_id="call_2")
    again = store.add_to_cart("c1", 7, 1, request_id="call_1")
    assert first.cart_total == Decimal("16.50")
    assert (again.replayed, again.quantity, again.cart_total) == (True, 1, Decimal("30.30"))
    assert store.cart("c1").total == Decimal("30.30")


@pytest.mark.parametrize(("book_id", "quantity"), [(12, 2), (7, 3)], ids=["other book", "other quantity"])
def test_a_request_id_reused_for_a_different_add_raises_and_changes_nothing(
    store: BookStore, book_id: int, quantity: int
) -> None:
    store.add_to_cart("c1", 7, 2, request_id="call_1")
    before = store.cart("c1")

    with pytest.raises(RequestIdReused, match=r"call id call_1 already added 2 x .*\(id 7\)") as caught:
        store.add_to_cart("c1", book_id, quantity, request_id="call_1")

    assert caught.value.request_id == "call_1"
    assert store.cart("c1") == before
    assert store.check_invariants() == []
    # The first add's record is untouched: the original request still replays as itself.
    again = store.add_to_cart("c1", 7, 2, request_id="call_1")
    assert again.replayed and (again.book.id, again.quantity) == (7, 2)
    assert store.cart("c1") == before


def test_different_request_ids_or_none_add_again(store: BookStore) -> None:
    store.add_to_cart("c1", 7, 1, request_id="call_1")
    store.add_to_cart("c1", 7, 1, request_id="call_2")
    store.add_to_cart("c1", 7, 1)
    store.add_to_cart("c1", 7, 1)
    assert store.cart("c1").quantity_of(7) == 4


def test_request_ids_are_per_customer(store: BookStore) -> None:
    store.add_to_cart("c1", 7, 1, request_id="call_1")
    added = store.add_to_cart("c2", 7, 1, request_id="call_1")
    assert not added.replayed
    assert store.cart("c2").quantity_of(7) == 1


def test_a_rejected_add_is_not_recorded(store: BookStore) -> None:
    with pytest.raises(OutOfStock):
        store.add_to_cart("c1", 2, 1, request_id="call_1")
    store.set_stock(2, 4)
    added = store.add_to_cart("c1", 2, 1, request_id="call_1")
    assert not added.replayed
    assert store.cart("c1").quantity_of(2) == 1


# --- the second channel ------------------------------------------------------------------------------------


def test_remove_and_clear(store: BookStore) -> None:
    store.add_to_cart("c1", 7, 3)
    store.add_to_cart("c1", 12, 1)
    assert store.remove_from_cart("c1", 7) == 3
    assert store.remove_from_cart("c1", 7) == 0
    assert [line.book.id for line in store.cart("c1").lines] == [12]
    assert store.clear_cart("c1") == 1
    assert store.cart("c1") == Cart("c1", (), Decimal("0.00"))


def test_set_stock(store: BookStore) -> None:
    store.set_stock(2, 5)
    assert store.stock(2) == 5
    with pytest.raises(ValueError):
        store.set_stock(2, -1)
    with pytest.raises(UnknownBook):
        store.set_stock(99, 1)
    assert store.stock(2) == 5


def test_stock_dropping_below_a_cart_blocks_further_adds(store: BookStore) -> None:
    store.add_to_cart("c1", 7, 5)
    store.set_stock(7, 3)
    assert store.cart("c1").quantity_of(7) == 5, "carts are not silently edited"
    with pytest.raises(OutOfStock, match="the cart already has 5"):
        store.add_to_cart("c1", 7, 1)
    assert store.check_invariants() == []


# --- SQLite files, threads and processes -------------------------------------------------------------------


def test_two_store_objects_on_one_target_share_everything(shared_target: str | Path) -> None:
    with BookStore.open(shared_target) as agent_side, BookStore.open(shared_target) as web_side:
        agent_side.add_to_cart("c1", 7, 1)
        assert web_side.cart("c1").total == Decimal("16.50")
        web_side.remove_from_cart("c1", 7)
        web_side.set_stock(2, 3)
        assert agent_side.cart("c1").lines == ()
        assert agent_side.stock(2) == 3


def test_a_shared_store_survives_reopening_and_is_not_reseeded(shared_target: str | Path) -> None:
    with BookStore(shared_target) as store:
        store.add_to_cart("c1", 7, 2, request_id="call_1")
        store.set_stock(7, 9)
    with BookStore(shared_target) as reopened:
        assert len(reopened.books()) == len(load_catalog()["books"])
        assert reopened.cart("c1").quantity_of(7) == 2
        assert reopened.stock(7) == 9
        assert reopened.add_to_cart("c1", 7, 2, request_id="call_1").replayed
        assert reopened.cart("c1").quantity_of(7) == 2


def test_another_process_changes_the_cart_behind_our_back(shared_target: str | Path) -> None:
    with BookStore(shared_target) as store:
        store.add_to_cart("c1", 7, 1)
        script = (
            "import sys; from shared_tools.bookstore.store import BookStore\n"
            "with BookStore(sys.argv[1]) as s:\n"
            "    s.remove_from_cart('c1', 7)\n"
            "    s.add_to_cart('c1', 12, 2, request_id='web-1')\n"
        )
        subprocess.run([sys.executable, "-c", script, str(shared_target)], cwd=REPO_ROOT, check=True, timeout=60)
        cart = store.cart("c1")
        assert [(line.book.id, line.quantity) for line in cart.lines] == [(12, 2)]
        assert cart.total == Decimal("27.60")
        assert store.add_to_cart("c1", 12, 2, request_id="web-1").replayed


def _hammer(stores: list[BookStore], customer_id: str, book_id: int, attempts: int) -> tuple[int, int]:
    """Add one copy `attempts` times from 8 threads spread over `stores`; returns (accepted, refused)."""
    accepted, refused = 0, 0
    counter_lock = threading.Lock()
    start = threading.Barrier(8)

    def worker(index: int) -> None:
        nonlocal accepted, refused
        store = stores[index % len(stores)]
        start.wait()
        for _ in range(attempts // 8):
            try:
                store.add_to_cart(customer_id, book_id, 1)
                outcome = "accepted"
            except OutOfStock:
                outcome = "refused"
            with counter_lock:
                if outcome == "accepted":
                    accepted += 1
                else:
                    refused += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return accepted, refused


def test_concurrent_adds_from_threads_never_oversell(store: BookStore) -> None:
    accepted, refused = _hammer([store], "c1", 7, attempts=40)
    assert (accepted, refused) == (15, 25)
    cart = store.cart("c1")
    assert cart.quantity_of(7) == 15
    assert cart.total == Decimal("247.50")
    assert store.check_invariants() == []


def test_concurrent_adds_through_two_connections_never_oversell(shared_target: str | Path) -> None:
    with BookStore(shared_target) as one, BookStore(shared_target) as two:
        accepted, refused = _hammer([one, two], "c1", 7, attempts=40)
        assert (accepted, refused) == (15, 25)
        assert two.cart("c1").total == one.cart("c1").total == Decimal("247.50")
        assert one.check_invariants() == []


def test_concurrent_adds_for_many_customers_keep_exact_totals(store: BookStore) -> None:
    store.set_stock(30, 10_000)
    threads = [
        threading.Thread(target=lambda c=f"c{i}": [store.add_to_cart(c, 30, 3) for _ in range(20)]) for i in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(6):
        assert store.cart(f"c{i}").total == 60 * Decimal("19.00")
    assert store.check_invariants() == []


# --- invariants under random operation sequences -----------------------------------------------------------

_CUSTOMERS = st.sampled_from(["c1", "c2"])
_BOOK_IDS = st.sampled_from([2, 7, 12, 30, 99])
_OPERATIONS = st.lists(
    st.one_of(
        st.tuples(
            st.just("add"),
            _CUSTOMERS,
            _BOOK_IDS,
            st.integers(-1, MAX_QUANTITY + 2),
            st.sampled_from([None, "r1", "r2", "r3"]),
        ),
        st.tuples(st.just("remove"), _CUSTOMERS, _BOOK_IDS),
        st.tuples(st.just("clear"), _CUSTOMERS),
        st.tuples(st.just("set_stock"), _BOOK_IDS, st.integers(0, 20)),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=_OPERATIONS)
def test_invariants_hold_and_carts_match_a_simple_model(store: BookStore, operations: list[tuple]) -> None:
    reset(store)  # one store per backend for all examples: a Postgres database per example would be too slow
    stock = {b.id: store.stock(b.id) for b in store.books()}
    carts: dict[str, dict[int, int]] = {"c1": {}, "c2": {}}
    seen: set[tuple[str, str]] = set()
    for op in operations:
        if op[0] == "add":
            _, customer, book_id, quantity, request_id = op
            should_add = (
                (customer, request_id) not in seen
                and 1 <= quantity <= MAX_QUANTITY
                and book_id in stock
                and carts[customer].get(book_id, 0) + quantity <= stock[book_id]
            )
            try:
                added = store.add_to_cart(customer, book_id, quantity, request_id=request_id)
                assert should_add or added.replayed
            except StoreError:
                assert not should_add
            if should_add:
                carts[customer][book_id] = carts[customer].get(book_id, 0) + quantity
                if request_id is not None:
                    seen.add((customer, request_id))
        elif op[0] == "remove":
            carts[op[1]].pop(op[2], None)
            store.remove_from_cart(op[1], op[2])
        elif op[0] == "clear":
            carts[op[1]].clear()
            store.clear_cart(op[1])
        else:
            try:
                store.set_stock(op[1], op[2])
                stock[op[1]] = op[2]
            except UnknownBook:
                assert op[1] not in stock
        assert store.check_invariants() == []
    for customer, lines in carts.items():
        cart = store.cart(customer)
        assert {line.book.id: line.quantity for line in cart.lines} == lines
        assert cart.total == sum((store.get_book(b).price * q for b, q in lines.items()), Decimal("0.00"))


def test_a_file_store_syncs_every_commit_whatever_the_sqlite_build_defaults_to(tmp_path: Path) -> None:
    with BookStore.open(tmp_path / "shop.db") as store:
        (synchronous,) = store._db.execute("PRAGMA synchronous").fetchone()
    assert synchronous == 2, "synchronous=FULL: a committed add survives a power loss, not only a killed process"


# --- hostile input, on both backends -------------------------------------------------------------------------


@pytest.mark.parametrize("huge", [2**63, -(2**63) - 1, 10**5000], ids=["2^63", "-2^63-1", "5001 digits"])
def test_ids_beyond_64_bits_are_simply_unknown(store: BookStore, huge: int) -> None:
    with pytest.raises(UnknownBook, match="far too large"):
        store.get_book(huge)
    with pytest.raises(UnknownBook):
        store.stock(huge)
    with pytest.raises(UnknownBook):
        store.add_to_cart("c1", huge, 1, request_id="call_huge")
    with pytest.raises(UnknownBook):
        store.set_stock(huge, 1)
    with pytest.raises(UnknownBook):
        store.set_description(huge, "x")
    assert store.order_status(huge) is None
    assert store.remove_from_cart("c1", huge) == 0
    assert store.check_invariants() == []


@pytest.mark.parametrize(
    "request_id",
    ["x" * 100_000, "call\x00evil", "sha256:" + "0" * 64, "z" * 201],
    ids=["100 kB", "NUL", "looks hashed", "just too long"],
)
def test_any_request_id_a_model_sends_is_kept_once(store: BookStore, request_id: str) -> None:
    """Postgres cannot index 100 kB nor store a NUL: such ids are recorded by hash, on both backends alike."""
    first = store.add_to_cart("c1", 7, 1, request_id=request_id)
    again = store.add_to_cart("c1", 7, 1, request_id=request_id)
    assert (first.replayed, again.replayed) == (False, True)
    with pytest.raises(RequestIdReused):
        store.add_to_cart("c1", 7, 2, request_id=request_id)
    assert store.cart("c1").quantity_of(7) == 1
    assert store.applied_requests("c1", [request_id, "other"]) == {request_id}


def test_an_id_spelled_like_a_hash_never_collides_with_the_id_it_names(store: BookStore) -> None:
    long_id = "y" * 500
    imitation = "sha256:" + hashlib.sha256(long_id.encode()).hexdigest()
    store.add_to_cart("c1", 7, 1, request_id=long_id)
    assert not store.add_to_cart("c1", 7, 1, request_id=imitation).replayed
    assert store.cart("c1").quantity_of(7) == 2
    assert store.applied_requests("c1", [long_id, imitation]) == {long_id, imitation}


def test_only_a_file_or_postgres_is_shared(store: BookStore, tmp_path: Path) -> None:
    """tools.py runs a shared store's calls in a worker thread: a Postgres call waits on the network."""
    assert store.shared is (store.backend == "postgres")
    assert (store.path, store.url is not None) == (None, store.backend == "postgres")
    with BookStore(tmp_path / "f.db") as file_store:
        assert (file_store.backend, file_store.shared, file_store.url) == ("sqlite", True, None)


# --- Postgres only ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgresql://u:p@host/db", True),
        ("postgres:///db?host=/tmp/sock", True),
        ("PostgreSQL://host/db", True),
        ("shop.db", False),
        ("postgresql:/host/db", False),
        ("sqlite:///shop.db", False),
        (Path("postgresql://host/db"), False),
        (None, False),
    ],
)
def test_is_postgres_url(text: object, expected: bool) -> None:
    assert is_postgres_url(text) is expected


def _admin(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True)


def test_postgres_refuses_a_database_whose_books_table_is_something_else_and_writes_nothing(
    postgres_url: str,
) -> None:
    with _admin(postgres_url) as db:
        db.execute("CREATE TABLE books (isbn TEXT PRIMARY KEY, shelf TEXT)")
    with pytest.raises(NotABookstore, match=r"its table books lacks author, description, genre"):
        BookStore(postgres_url)
    with _admin(postgres_url) as db:
        tables = {row[0] for row in db.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert tables == {"books"}, "the refused database gained no table"


def test_postgres_shares_a_database_with_other_tables(postgres_url: str) -> None:
    """LangGraph's checkpoints or the hand-written sessions may live in the same database: they are left alone."""
    with _admin(postgres_url) as db:
        db.execute("CREATE TABLE checkpoints (thread_id TEXT PRIMARY KEY, blob BYTEA)")
        db.execute("INSERT INTO checkpoints VALUES ('t1', '\\x00')")
    with BookStore(postgres_url) as store:
        store.add_to_cart("c1", 7, 1)
    with _admin(postgres_url) as db:
        assert db.execute("SELECT thread_id FROM checkpoints").fetchall() == [("t1",)]


def test_postgres_that_cannot_be_reached_says_where_without_the_password(tmp_path: Path) -> None:
    url = f"postgresql://shop:s3cret@/shop?host={tmp_path / 'no-server-here'}"
    with pytest.raises(StoreUnavailable, match=r"cannot open the Postgres store at postgresql://shop:\*\*\*@") as e:
        BookStore(url)
    assert "s3cret" not in str(e.value)


def test_postgres_database_that_does_not_exist(postgres_server: str) -> None:
    with pytest.raises(StoreUnavailable, match='database "no_such_db" does not exist'):
        BookStore(database_url(postgres_server, "no_such_db"))


def test_racing_first_openings_create_and_seed_once(postgres_url: str) -> None:
    """Eight connections open an empty database at once: no error, one catalog, one set of orders."""
    start, errors, stores = threading.Barrier(8), [], []

    def open_store() -> None:
        start.wait()
        try:
            stores.append(BookStore(postgres_url))
        except Exception as exc:  # collected: the assertion below names it
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        with _admin(postgres_url) as db:
            counts = [db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for table in ("books", "orders")]
        catalog = load_catalog()
        assert counts == [len(catalog["books"]), len(catalog["orders"])]
    finally:
        for s in stores:
            s.close()


def _wait_until_blocked_on_a_lock(url: str, thread: threading.Thread) -> None:
    """Return once some backend of this database waits for a lock; fail if `thread` ends first or never blocks."""
    with _admin(url) as db:
        for _ in range(2000):
            waiting = db.execute(
                "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone()[0]
            if waiting:
                return
            assert thread.is_alive(), "the second add finished without waiting for the first transaction's lock"
            threading.Event().wait(0.005)
    pytest.fail("the second add never waited for a lock")


def _in_thread(target: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(target())
        except Exception as exc:  # handed to the test, which asserts on it
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_an_add_waits_for_a_stock_change_in_flight_and_then_sees_it(postgres_url: str) -> None:
    """The book's row lock is what keeps the stock check true: without FOR UPDATE the second add would read the
    old stock (15) and add, although the warehouse was setting it to 0 at that very moment."""
    with BookStore(postgres_url) as warehouse, BookStore(postgres_url) as shop:
        with warehouse._write() as db:
            db.execute("SELECT stock FROM books WHERE id = 7 FOR UPDATE")
            db.execute("UPDATE books SET stock = 0 WHERE id = 7")
            thread, outcome = _in_thread(lambda: shop.add_to_cart("c1", 7, 1))
            _wait_until_blocked_on_a_lock(postgres_url, thread)
        thread.join()
        assert isinstance(outcome[0], OutOfStock)
        assert shop.cart("c1").lines == ()


@pytest.mark.parametrize("first_commits", [True, False], ids=["first commits", "first rolls back"])
def test_one_request_id_raced_from_two_connections_adds_once(postgres_url: str, first_commits: bool) -> None:
    """Two adds with one call id for different books, the first still open when the second looks: the second waits
    on the request's key, then is refused as a reuse (the first committed) or goes ahead (the first rolled back)."""
    with BookStore(postgres_url) as first, BookStore(postgres_url) as second:
        with pytest.raises(RuntimeError) if not first_commits else _no_error(), first._write() as db:
            # What add_to_cart("c1", 12, 1, request_id="call_1") does, stopped before its commit.
            db.execute("SELECT stock FROM books WHERE id = 12 FOR UPDATE")
            db.execute(
                "INSERT INTO cart_requests (customer_id, request_id, book_id, quantity, cart_total_cents)"
                " VALUES ('c1', 'call_1', 12, 1, 1380)"
            )
            db.execute("INSERT INTO cart_lines (customer_id, book_id, quantity) VALUES ('c1', 12, 1)")
            thread, outcome = _in_thread(lambda: second.add_to_cart("c1", 7, 1, request_id="call_1"))
            _wait_until_blocked_on_a_lock(postgres_url, thread)
            if not first_commits:
                raise RuntimeError("the first add fails after all")
        thread.join()
        cart = {line.book.id: line.quantity for line in second.cart("c1").lines}
        if first_commits:
            assert isinstance(outcome[0], RequestIdReused)
            assert cart == {12: 1}
        else:
            assert not outcome[0].replayed  # type: ignore[union-attr]
            assert cart == {7: 1}
        assert second.applied_requests("c1", ["call_1"]) == {"call_1"}
        assert second.check_invariants() == []


@contextmanager
def _no_error() -> Iterator[None]:
    yield


def test_a_lost_connection_is_reopened_for_the_next_call(postgres_url: str) -> None:
    with BookStore(postgres_url) as store:
        store.add_to_cart("c1", 7, 1)
        (pid,) = store._db.execute("SELECT pg_backend_pid()").fetchone()
        with _admin(postgres_url) as db:
            db.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(psycopg.OperationalError):
            store.cart("c1")  # the call that finds the connection dead fails; nothing was half done
        assert store.add_to_cart("c1", 7, 1).cart_total == Decimal("33.00")
        assert store.check_invariants() == []


def test_a_postgres_store_repr_hides_the_password(postgres_url: str) -> None:
    parts = urlsplit(postgres_url)
    with_password = urlunsplit(parts._replace(netloc=f"postgres:hunter2@{parts.netloc.rpartition('@')[2]}"))
    with BookStore(with_password) as store:  # the test cluster trusts local logins, so any password opens it
        assert store.url == with_password
        assert "hunter2" not in repr(store)
        assert "postgres:***@" in repr(store)

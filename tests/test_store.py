"""Tests for `shared_tools.bookstore.store.BookStore`: catalog facts, search ranking, cart rules, idempotent adds,
SQLite files shared between objects, threads and processes, and invariants under random operation sequences."""

from __future__ import annotations

import subprocess
import sys
import threading
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared_tools.bookstore.store import (
    MAX_QUANTITY,
    BookStore,
    Cart,
    InvalidQuantity,
    OutOfStock,
    RequestIdReused,
    StoreError,
    UnknownBook,
    money,
    rank_books,
)

REPO_ROOT = Path(__file__).resolve().parents[1]


def snapshot(store: BookStore, *customers: str) -> tuple[list[Cart], list[int]]:
    """Everything a rejected write could have touched: the carts and the stock of every book."""
    return [store.cart(c) for c in customers], [store.stock(b.id) for b in store.books()]


# --- catalog facts -------------------------------------------------------------------------------------------


def test_catalog_holds_the_seed_facts(store: BookStore) -> None:
    lighthouse, orchard = store.get_book(2), store.get_book(7)
    assert (lighthouse.title, lighthouse.author, lighthouse.genre, lighthouse.price) == (
        "The Last Lighthouse", "Mira Holt", "novel", Decimal("18.90"))
    assert (orchard.title, orchard.author, orchard.genre, orchard.price) == (
        "The Quiet Orchard", "Mira Holt", "novel", Decimal("16.50"))
    assert store.stock(2) == 0
    assert store.stock(7) == 15
    books = store.books()
    assert len(books) >= 12
    assert [b.id for b in books] == sorted(b.id for b in books)
    assert any(b.author == "Mira Holt" and b.genre != "novel" for b in books)
    assert len({b.author for b in books}) >= 5
    assert {"novel", "poetry", "essays", "cookbook", "children's", "history", "travel"} <= {b.genre for b in books}
    # The seed's answer depends on 7 being the only other in-stock Mira Holt novel.
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


def test_two_store_objects_on_one_file_share_everything(tmp_path: Path) -> None:
    path = tmp_path / "shop.db"
    with BookStore.open(path) as agent_side, BookStore.open(path) as web_side:
        agent_side.add_to_cart("c1", 7, 1)
        assert web_side.cart("c1").total == Decimal("16.50")
        web_side.remove_from_cart("c1", 7)
        web_side.set_stock(2, 3)
        assert agent_side.cart("c1").lines == ()
        assert agent_side.stock(2) == 3


def test_a_file_store_survives_reopening_and_is_not_reseeded(tmp_path: Path) -> None:
    path = tmp_path / "shop.db"
    with BookStore(path) as store:
        store.add_to_cart("c1", 7, 2, request_id="call_1")
        store.set_stock(7, 9)
    with BookStore(path) as reopened:
        assert reopened.cart("c1").quantity_of(7) == 2
        assert reopened.stock(7) == 9
        assert reopened.add_to_cart("c1", 7, 2, request_id="call_1").replayed
        assert reopened.cart("c1").quantity_of(7) == 2


def test_another_process_changes_the_cart_behind_our_back(tmp_path: Path) -> None:
    path = tmp_path / "shop.db"
    with BookStore(path) as store:
        store.add_to_cart("c1", 7, 1)
        script = (
            "import sys; from shared_tools.bookstore.store import BookStore\n"
            "with BookStore(sys.argv[1]) as s:\n"
            "    s.remove_from_cart('c1', 7)\n"
            "    s.add_to_cart('c1', 12, 2, request_id='web-1')\n"
        )
        subprocess.run([sys.executable, "-c", script, str(path)], cwd=REPO_ROOT, check=True, timeout=60)
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


def test_concurrent_adds_through_two_connections_never_oversell(tmp_path: Path) -> None:
    path = tmp_path / "shop.db"
    with BookStore(path) as one, BookStore(path) as two:
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
            st.just("add"), _CUSTOMERS, _BOOK_IDS, st.integers(-1, MAX_QUANTITY + 2),
            st.sampled_from([None, "r1", "r2", "r3"]),
        ),
        st.tuples(st.just("remove"), _CUSTOMERS, _BOOK_IDS),
        st.tuples(st.just("clear"), _CUSTOMERS),
        st.tuples(st.just("set_stock"), _BOOK_IDS, st.integers(0, 20)),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(_OPERATIONS)
def test_invariants_hold_and_carts_match_a_simple_model(operations: list[tuple]) -> None:
    with BookStore() as store:
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

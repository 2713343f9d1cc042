"""Several processes adding to the same carts at once through one store, on a SQLite file and on Postgres.

Workers race to create the store, then add with shared request ids, their own ids, scarce books and one id per
round; what they say they did must be exactly what the store holds, with every invariant intact.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

from shared_tools.bookstore.store import BookStore, load_catalog

REPO_ROOT = Path(__file__).resolve().parents[1]
WORKERS, ROUNDS = 4, 25
SCARCE_BOOK, SCARCE_STOCK = 7, 30  # fewer copies than the WORKERS * ROUNDS single-copy adds asking for it
REUSE_BOOKS = (12, 13, 14, 16)  # worker w adds book REUSE_BOOKS[w] under the round's shared "reuse-i" id

WORKER = """
import json, sys, time
from pathlib import Path
from shared_tools.bookstore.store import BookStore, OutOfStock, RequestIdReused

target, folder = sys.argv[1], Path(sys.argv[2])
worker, rounds, scarce, reuse_book = (int(a) for a in sys.argv[3:7])
store = BookStore(target)  # every worker opens a new database at the same moment: creation and seeding race
(folder / f"ready-{worker}").touch()
while not (folder / "go").exists():
    time.sleep(0.002)
done = {"shared": [], "shared_replayed": 0, "own": [], "scarce_added": 0, "scarce_refused": 0,
        "reuse_added": [], "reuse_refused": 0, "reuse_replayed": 0}
started = time.perf_counter()
for i in range(rounds):
    customer = f"c{i % 3}"
    added = store.add_to_cart(customer, 30, 1 + i % 3, request_id=f"shared-{i}")
    if added.replayed:
        done["shared_replayed"] += 1
    else:
        done["shared"].append(i)
    assert not store.add_to_cart(customer, 30, 1, request_id=f"w{worker}-{i}").replayed
    done["own"].append(i)
    try:
        store.add_to_cart("scarce", scarce, 1, request_id=f"w{worker}-scarce-{i}")
        done["scarce_added"] += 1
    except OutOfStock:
        done["scarce_refused"] += 1
    try:
        added = store.add_to_cart("reuse", reuse_book, 1, request_id=f"reuse-{i}")
        if added.replayed:
            done["reuse_replayed"] += 1
        else:
            done["reuse_added"].append(i)
    except RequestIdReused:
        done["reuse_refused"] += 1
done["seconds"] = time.perf_counter() - started  # for a benchmark reading this script; the test does not use it
store.close()
print(json.dumps(done))
"""


@pytest.fixture(params=("sqlite-file", "postgres"))
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "shop.db")


def run_workers(target: str, folder: Path) -> list[dict]:
    """Start the workers, let them all open the store, set the stock, then say go; returns what each did."""
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WORKER,
                target,
                str(folder),
                *(str(n) for n in (w, ROUNDS, SCARCE_BOOK, REUSE_BOOKS[w])),
            ],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(WORKERS)
    ]
    try:
        for _ in range(30_000):
            if all((folder / f"ready-{w}").exists() for w in range(WORKERS)):
                break
            failed = [p for p in workers if p.poll() is not None]
            assert not failed, failed[0].communicate()[1]
            time.sleep(0.005)
        else:
            pytest.fail("the workers never opened the store")
        with BookStore(target) as store:
            for book_id in (30, *REUSE_BOOKS):
                store.set_stock(book_id, 10_000)
            store.set_stock(SCARCE_BOOK, SCARCE_STOCK)
        (folder / "go").touch()
        results = []
        for process in workers:
            out, err = process.communicate(timeout=120)
            assert process.returncode == 0, err
            results.append(json.loads(out))
        return results
    finally:
        for process in workers:
            if process.poll() is None:
                process.kill()


def test_every_add_from_every_process_is_kept_once(target: str, tmp_path: Path) -> None:
    results = run_workers(target, tmp_path)

    with BookStore(target) as store:
        catalog = load_catalog()
        assert len(store.books()) == len(catalog["books"]), "the racing openings seeded the catalog once"
        assert store.check_invariants() == []
        prices = {b.id: b.price for b in store.books()}

        # Shared request ids: each round's id added exactly once over all workers, the others replayed it.
        shared_adds = Counter(i for r in results for i in r["shared"])
        assert shared_adds == Counter(range(ROUNDS))
        assert sum(r["shared_replayed"] for r in results) == (WORKERS - 1) * ROUNDS
        # Own ids: every one kept. So each cart holds its rounds' shared quantities plus one copy per worker.
        for k in range(3):
            rounds = [i for i in range(ROUNDS) if i % 3 == k]
            expected = sum(1 + i % 3 for i in rounds) + WORKERS * len(rounds)
            cart = store.cart(f"c{k}")
            assert cart.quantity_of(30) == expected
            assert cart.total == expected * prices[30]
            own_ids = [f"w{w}-{i}" for w in range(WORKERS) for i in rounds]
            assert store.applied_requests(f"c{k}", [*own_ids, *(f"shared-{i}" for i in rounds)]) == {
                *own_ids,
                *(f"shared-{i}" for i in rounds),
            }

        # The scarce book: exactly its stock went into the cart, every other attempt was refused.
        assert sum(r["scarce_added"] for r in results) == SCARCE_STOCK
        assert sum(r["scarce_refused"] for r in results) == WORKERS * ROUNDS - SCARCE_STOCK
        assert store.cart("scarce").quantity_of(SCARCE_BOOK) == SCARCE_STOCK

        # One id per round for different books: one add per round, the rest refused as a reuse.
        reuse_adds = Counter(i for r in results for i in r["reuse_added"])
        assert reuse_adds == Counter(range(ROUNDS))
        assert sum(r["reuse_refused"] + r["reuse_replayed"] for r in results) == (WORKERS - 1) * ROUNDS
        reuse_cart = store.cart("reuse")
        assert sum(line.quantity for line in reuse_cart.lines) == ROUNDS
        assert reuse_cart.total == sum((line.book.price * line.quantity for line in reuse_cart.lines), Decimal(0))

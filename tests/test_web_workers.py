"""The live page on Postgres with several workers: any worker serves any request of any tab.

Two apps on one database stand for two workers (tabs, turns, events and pauses across them); then `serve
--workers 2` as real uvicorn processes on a throwaway Postgres, tabs driven at once: every turn kept, nothing
added twice. `--workers 2` on SQLite is refused with a sentence.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from starlette.testclient import TestClient

from comparison.scenarios import CART_QUESTION, SEED_GOAL
from shared_tools.bookstore.store import BookStore
from webdemo.cli import serve_main
from webdemo.server import create_app, free_port, running_server
from webdemo.shared import SharedState, schema_of, with_search_path

BASE = "http://127.0.0.1"
WAIT_S = 60.0
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def two_workers(postgres_url: str) -> Iterator[tuple[TestClient, TestClient]]:
    """Two apps on one database: what two uvicorn workers are, without the processes."""
    with (
        TestClient(create_app(postgres_url, allowed_hosts=["127.0.0.1"]), base_url=BASE) as a,
        TestClient(create_app(postgres_url, allowed_hosts=["127.0.0.1"]), base_url=BASE) as b,
    ):
        yield a, b


def new_tab(client: TestClient | httpx.Client) -> str:
    response = client.post("/api/tabs", headers={"Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    return str(response.json()["tab"])


def state(client: TestClient | httpx.Client, tab: str) -> dict[str, Any]:
    response = client.get("/api/state", params={"tab": tab})
    assert response.status_code == 200, response.text
    return dict(response.json())


def panes(s: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["contender"]: p for p in s["panes"]}


def wait_for(client: TestClient | httpx.Client, tab: str, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    current: dict[str, Any] = {}
    while time.monotonic() < deadline:
        current = state(client, tab)
        if done(current):
            return current
        time.sleep(0.05)
    raise AssertionError(f"the tab did not get there: {json.dumps(current)[:2000]}")


def idle(s: dict[str, Any]) -> bool:
    return not any(p["busy"] for p in s["panes"])


def tab_store(url: str, tab: str) -> BookStore:
    return BookStore(with_search_path(url, schema_of(tab.split(".")[0])))


# --- two workers in one process ---------------------------------------------------------------------------------


def test_a_tab_made_by_one_worker_is_served_by_the_other_with_the_same_conversation(
    two_workers: tuple[TestClient, TestClient], postgres_url: str
) -> None:
    a, b = two_workers
    tab = new_tab(a)
    assert all(p["error"] is None for p in state(b, tab)["panes"]), state(b, tab)
    assert a.post("/api/turn", json={"tab": tab, "text": SEED_GOAL}).status_code == 202
    done = panes(wait_for(b, tab, lambda s: idle(s) and all(p["last"] for p in s["panes"])))
    assert set(done) == {"handwritten", "langgraph"}
    for pane in done.values():
        assert pane["last"]["stop_reason"] == "done" and pane["last"]["cart_total"] == "16.50"
        assert [m["role"] for m in pane["transcript"]] == ["user", "assistant"]
    # A forged id is refused by the worker that did not make the tab too: the secret is shared, not guessable.
    forged = tab[:-1] + ("0" if tab[-1] != "0" else "1")
    assert b.get("/api/state", params={"tab": forged}).status_code == 403
    with tab_store(postgres_url, tab) as store:
        assert store.check_invariants() == []


def test_a_turn_running_on_one_worker_is_refused_on_the_other_and_the_settings_wait(
    two_workers: tuple[TestClient, TestClient],
) -> None:
    a, b = two_workers
    tab = new_tab(a)
    assert a.post("/api/settings", json={"tab": tab, "contenders": ["langgraph"]}).status_code == 200
    # The scripted model answers in milliseconds; a slow persona is not needed: the claim is checked in Postgres,
    # so whichever request comes second is refused, whichever worker it reaches.
    results = []
    barrier = threading.Barrier(2)

    def send(client: TestClient) -> None:
        barrier.wait()
        results.append(client.post("/api/turn", json={"tab": tab, "text": SEED_GOAL}).status_code)

    threads = [threading.Thread(target=send, args=(c,)) for c in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) in ([202, 409], [202, 202])
    final = panes(wait_for(a, tab, idle))["langgraph"]
    user_turns = [m for m in final["transcript"] if m["role"] == "user"]
    # Never lost: every turn a worker accepted is in the conversation.
    assert len(user_turns) == results.count(202)


def test_only_one_of_many_racing_turns_on_one_pane_starts(two_workers: tuple[TestClient, TestClient]) -> None:
    a, b = two_workers
    tab = new_tab(a)
    a.post("/api/settings", json={"tab": tab, "contenders": ["langgraph"]})
    # Held in Postgres as a running worker would hold it: every request on either worker is refused.
    shared: SharedState = a.app.state.tabs.store.shared  # type: ignore[attr-defined]
    assert shared.try_claim(tab.split(".")[0], ["langgraph"], "another-worker")
    for client in (a, b, a, b):
        response = client.post("/api/turn", json={"tab": tab, "text": SEED_GOAL})
        assert response.status_code == 409 and "one turn at a time" in response.json()["error"]
    assert panes(state(b, tab))["langgraph"]["busy"] is True
    shared.release(tab.split(".")[0], ["langgraph"], "another-worker")
    assert b.post("/api/turn", json={"tab": tab, "text": SEED_GOAL}).status_code == 202
    wait_for(a, tab, lambda s: idle(s) and panes(s)["langgraph"]["last"] is not None)


def test_a_claim_left_by_a_dead_worker_runs_out(two_workers: tuple[TestClient, TestClient]) -> None:
    a, _ = two_workers
    tab = new_tab(a)
    shared: SharedState = a.app.state.tabs.store.shared  # type: ignore[attr-defined]
    key = tab.split(".")[0]
    assert shared.try_claim(key, ["langgraph"], "dead-worker", lease=0.2)
    assert not shared.try_claim(key, ["langgraph"], "live-worker")
    time.sleep(0.3)  # not a timing assert: waiting past the lease, the outcome is checked below
    assert shared.try_claim(key, ["langgraph"], "live-worker")
    # All or none: a claim that finds one pane held takes none of the others.
    assert not shared.try_claim(key, ["handwritten", "langgraph"], "third-worker")
    assert shared.claimed(key) == {"langgraph"}


def test_events_of_a_turn_on_one_worker_reach_a_stream_on_the_other(postgres_url: str) -> None:
    app_a = create_app(postgres_url, allowed_hosts=["127.0.0.1"])
    app_b = create_app(postgres_url, allowed_hosts=["127.0.0.1"])
    with running_server(app_a) as url_a, running_server(app_b) as url_b, httpx.Client(base_url=url_a) as a:
        tab = new_tab(a)
        a.post("/api/settings", json={"tab": tab, "contenders": ["langgraph"]})
        seen: list[dict[str, Any]] = []
        connected = threading.Event()

        def listen() -> None:
            with (
                httpx.Client(base_url=url_b, timeout=WAIT_S) as b,
                b.stream("GET", "/api/events", params={"tab": tab}) as stream,
            ):
                for line in stream.iter_lines():
                    if not line.startswith("data: "):
                        continue
                    event = json.loads(line[6:])
                    seen.append(event)
                    if event["type"] == "hello":
                        connected.set()
                    if event["type"] == "turn_end":
                        return

        listener = threading.Thread(target=listen, daemon=True)
        listener.start()
        assert connected.wait(WAIT_S)
        assert a.post("/api/turn", json={"tab": tab, "text": SEED_GOAL}).status_code == 202
        listener.join(WAIT_S)
        kinds = [e["type"] for e in seen]
        assert kinds[0] == "hello" and "turn_start" in kinds and kinds[-1] == "turn_end"
        assert kinds.count("trace") == 9  # 5 model calls and 4 tools, each once, in order
        assert not any(k.startswith("_") for k in kinds)
        assert seen[-1]["report"]["cart_total"] == "16.50"


def test_a_graph_pause_made_on_one_worker_is_answered_on_the_other(
    two_workers: tuple[TestClient, TestClient], postgres_url: str
) -> None:
    a, b = two_workers
    tab = new_tab(a)
    a.post("/api/settings", json={"tab": tab, "contenders": ["langgraph"], "persona": "gullible"})
    assert a.post("/api/injection", json={"tab": tab, "on": True}).json() == {"injected": True}
    assert a.post("/api/turn", json={"tab": tab, "text": SEED_GOAL}).status_code == 202
    paused = panes(wait_for(b, tab, lambda s: bool(panes(s)["langgraph"]["pending"]) and idle(s)))["langgraph"]
    assert paused["phase"] == "awaiting approval"
    request = paused["pending"][0]
    answer = {"tab": tab, "pane": "langgraph", "id": request["id"], "approved": False}
    assert b.post("/api/approve", json=answer).status_code == 202
    assert a.post("/api/approve", json=answer).status_code == 409  # answered once, whichever worker is asked
    done = panes(wait_for(a, tab, lambda s: idle(s) and not panes(s)["langgraph"]["pending"]))["langgraph"]
    assert all(line["quantity"] < 10 for line in done["last"]["cart"])
    with tab_store(postgres_url, tab) as store:
        assert store.check_invariants() == []


def test_a_hand_written_approval_waiting_on_one_worker_is_answered_from_the_other(
    two_workers: tuple[TestClient, TestClient],
) -> None:
    a, b = two_workers
    tab = new_tab(a)
    a.post("/api/settings", json={"tab": tab, "contenders": ["handwritten"], "persona": "gullible"})
    a.post("/api/injection", json={"tab": tab, "on": True})
    assert a.post("/api/turn", json={"tab": tab, "text": SEED_GOAL}).status_code == 202
    # The loop blocks in worker a on the question; worker b knows it only from the pane's snapshot.
    asking = panes(wait_for(b, tab, lambda s: bool(panes(s)["handwritten"]["pending"])))["handwritten"]
    request = asking["pending"][0]
    assert asking["busy"] is True
    answer = {"tab": tab, "pane": "handwritten", "id": request["id"], "approved": False}
    assert b.post("/api/approve", json=answer).status_code == 200
    done = panes(wait_for(b, tab, lambda s: idle(s) and panes(s)["handwritten"]["last"] is not None))
    # Denied within the approval timeout (120 s): the answer travelled, it was not the timeout's no.
    assert all(line["quantity"] < 10 for line in done["handwritten"]["last"]["cart"])


def test_a_cancel_sent_to_the_other_worker_stops_the_turn(two_workers: tuple[TestClient, TestClient]) -> None:
    a, b = two_workers
    tab = new_tab(a)
    a.post("/api/settings", json={"tab": tab, "contenders": ["handwritten"], "persona": "gullible"})
    a.post("/api/injection", json={"tab": tab, "on": True})
    assert a.post("/api/turn", json={"tab": tab, "text": SEED_GOAL}).status_code == 202
    wait_for(b, tab, lambda s: bool(panes(s)["handwritten"]["pending"]))
    assert b.post("/api/cancel", json={"tab": tab}).json() == {"cancelled": True}
    done = panes(wait_for(a, tab, lambda s: idle(s) and panes(s)["handwritten"]["last"] is not None))
    assert done["handwritten"]["pending"] == []
    assert all(line["quantity"] < 10 for line in done["handwritten"]["last"].get("cart") or [])


def test_a_turn_is_cancelled_when_no_worker_has_had_a_stream_of_its_tab_for_a_while(postgres_url: str) -> None:
    """The page's stream was on worker b, the turn runs on worker a: once no worker has had a stream of the tab
    open for `gone_after` (and a few heartbeats), a cancels the turn, as one worker does for its own streams."""
    app_a = create_app(postgres_url, allowed_hosts=["127.0.0.1"], gone_after=0.2)
    app_b = create_app(postgres_url, allowed_hosts=["127.0.0.1"], gone_after=0.2)
    with (
        running_server(app_a) as url_a,
        running_server(app_b) as url_b,
        httpx.Client(base_url=url_a, timeout=WAIT_S) as a,
        httpx.Client(base_url=url_b, timeout=WAIT_S) as b,
    ):
        tab = new_tab(a)
        a.post("/api/settings", json={"tab": tab, "contenders": ["handwritten"], "persona": "gullible"})
        a.post("/api/injection", json={"tab": tab, "on": True})
        with b.stream("GET", "/api/events", params={"tab": tab}) as stream:
            lines = (json.loads(line[6:]) for line in stream.iter_lines() if line.startswith("data: "))
            assert next(lines)["type"] == "hello"
            assert a.post("/api/turn", json={"tab": tab, "text": SEED_GOAL}).status_code == 202
            assert any(event["type"] == "approval" for event in lines)  # the loop waits 120 s for the page's yes
        # The page went away: the turn ends well within the approval's 120 s, cancelled.
        pane = panes(wait_for(a, tab, lambda s: idle(s) and panes(s)["handwritten"]["last"] is not None))
        assert pane["handwritten"]["last"]["stop_reason"] == "cancelled"
        assert pane["handwritten"]["last"]["cart"] == [] and pane["handwritten"]["pending"] == []


def test_both_tab_stores_have_every_method_the_tab_store_declares() -> None:
    """Tabs, panes and routes call a `TabStore` without asking which kind it is: each kind has every method, with
    the protocol's parameters, async where the protocol's is (a plain call where an await is due would pass
    silently on one kind)."""
    import inspect

    from webdemo.pgstore import PostgresStore
    from webdemo.tabstore import FolderStore, TabStore

    declared = {n: m for n, m in vars(TabStore).items() if inspect.isfunction(m) and not n.startswith("_")}
    assert {"claim", "publish", "sync", "forget_unused", "turn_beat"} <= set(declared)
    for kind in (FolderStore, PostgresStore):
        for name, method in declared.items():
            given = getattr(kind, name)
            assert inspect.iscoroutinefunction(given) == inspect.iscoroutinefunction(method), (kind, name)
            assert list(inspect.signature(given).parameters) == list(inspect.signature(method).parameters), (kind, name)


def test_settings_changed_on_one_worker_are_seen_by_the_other(two_workers: tuple[TestClient, TestClient]) -> None:
    a, b = two_workers
    tab = new_tab(a)
    state(b, tab)  # b has the tab open with the default panes
    assert a.post("/api/settings", json={"tab": tab, "contenders": ["langgraph", "create-agent"]}).status_code == 200
    assert [p["contender"] for p in state(b, tab)["panes"]] == ["langgraph", "create-agent"]


def test_tabs_on_postgres_keep_their_catalogs_apart(two_workers: tuple[TestClient, TestClient]) -> None:
    a, b = two_workers
    one, two = new_tab(a), new_tab(b)
    assert a.post("/api/injection", json={"tab": one, "on": True}).json() == {"injected": True}
    assert state(b, one)["injected"] is True
    assert state(a, two)["injected"] is False


def test_nul_and_other_hostile_text_in_events_does_not_break_the_event_table(postgres_url: str) -> None:
    shared = SharedState(postgres_url)
    try:
        shared.open_tab("0" * 32)
        shared.publish("0" * 32, {"type": "token", "text": "a\x00b \udcff \u2028"})
        shared.flush()
        [(seq, event)] = shared.events_after("0" * 32, 0)
        assert seq == 1 and event["text"] == "a\x00b \udcff \u2028"
    finally:
        shared.close()


# --- real worker processes ---------------------------------------------------------------------------------------


@pytest.fixture
def served_by_two_workers(postgres_url: str) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "compare.py"),
            "serve",
            "--data",
            postgres_url,
            "--workers",
            "2",
            "--port",
            str(port),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                if httpx.get(f"{base}/api/meta", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                os.killpg(process.pid, signal.SIGKILL)
                raise AssertionError(f"the server did not start: {process.communicate(timeout=10)}")
            time.sleep(0.1)
        yield base
    finally:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_two_worker_processes_keep_every_turn_of_tabs_driven_at_once(
    served_by_two_workers: str, postgres_url: str
) -> None:
    turns_per_tab, tab_count = 3, 4
    with httpx.Client(base_url=served_by_two_workers, timeout=WAIT_S) as client:
        tabs = [new_tab(client) for _ in range(tab_count)]

    def drive(tab: str) -> list[int]:
        # A fresh client per request: a new connection, so the kernel hands requests to either worker.
        codes = []
        for _ in range(turns_per_tab):
            with httpx.Client(base_url=served_by_two_workers, timeout=WAIT_S) as c:
                codes.append(c.post("/api/turn", json={"tab": tab, "text": SEED_GOAL}).status_code)
            with httpx.Client(base_url=served_by_two_workers, timeout=WAIT_S) as c:
                wait_for(c, tab, idle)
        return codes

    with ThreadPoolExecutor(tab_count) as pool:
        codes = list(pool.map(drive, tabs))
    assert codes == [[202] * turns_per_tab] * tab_count
    pids = set()
    with httpx.Client(base_url=served_by_two_workers, timeout=WAIT_S) as client:
        for tab in tabs:
            final = panes(state(client, tab))
            for name, pane in final.items():
                users = [m for m in pane["transcript"] if m["role"] == "user"]
                assert len(users) == turns_per_tab, (name, pane["transcript"])
                assert pane["last"]["stop_reason"] == "done", pane["last"]
    with psycopg.connect(postgres_url) as db:
        pids = {row[0] for row in db.execute("SELECT DISTINCT owner FROM webdemo_claims")}
        events = db.execute("SELECT count(*) FROM webdemo_events").fetchone()
    assert events is not None and events[0] > 0
    assert pids == set()  # every claim released
    for tab in tabs:
        with tab_store(postgres_url, tab) as store:
            assert store.check_invariants() == []
            key = tab.split(".")[0]
            for contender in ("handwritten", "langgraph"):
                cart = store.cart(f"web-{key}-{contender}")
                # One copy per seed turn, each exactly once, whichever worker ran it.
                assert [(line.book.title, line.quantity) for line in cart.lines] == [
                    ("The Quiet Orchard", turns_per_tab)
                ], (contender, cart)


def test_racing_turns_on_one_tab_across_worker_processes_start_exactly_once(
    served_by_two_workers: str, postgres_url: str
) -> None:
    with httpx.Client(base_url=served_by_two_workers, timeout=WAIT_S) as client:
        tab = new_tab(client)
    barrier = threading.Barrier(8)

    def send(_: int) -> int:
        with httpx.Client(base_url=served_by_two_workers, timeout=WAIT_S) as c:
            barrier.wait()
            return c.post("/api/turn", json={"tab": tab, "text": SEED_GOAL}).status_code

    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(send, range(8)))
    assert set(codes) <= {202, 409} and codes.count(202) >= 1
    with httpx.Client(base_url=served_by_two_workers, timeout=WAIT_S) as client:
        final = panes(wait_for(client, tab, idle))
    for pane in final.values():
        assert len([m for m in pane["transcript"] if m["role"] == "user"]) == codes.count(202)
    with tab_store(postgres_url, tab) as store:
        assert store.check_invariants() == []


# --- the command line --------------------------------------------------------------------------------------------


def test_several_workers_on_sqlite_are_refused_with_a_sentence(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert serve_main(["--data", str(tmp_path), "--workers", "2", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "--workers 2 needs Postgres" in err and "Traceback" not in err
    assert serve_main(["--data", "postgresql://u:pw@/x", "--postgres-local", str(tmp_path / "pg")]) == 2
    assert serve_main(["--workers", "0"]) == 2


def test_a_database_that_cannot_be_reached_is_exit_code_4_with_the_password_masked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"postgresql://alice:s3cret@/nowhere?host={tmp_path}"
    assert serve_main(["--data", url, "--port", "0"]) == 4
    err = capsys.readouterr().err
    assert "cannot be used" in err and "s3cret" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("contender", ["langgraph", "langgraph-defaults", "create-agent"])
def test_a_turn_cut_short_on_one_worker_after_its_add_is_finished_on_the_other_with_one_copy(
    contender: str, two_workers: tuple[TestClient, TestClient], postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Worker A's turn adds a book, then its model call fails (the turn is cut short after the write); worker B
    takes the next question: it finishes the cut-short turn from its checkpoint (the add is not run again), then
    answers. One copy in the cart, and a usable pane."""
    from tests.doubles import ScriptModel, ai, call

    def down(messages: list[Any]) -> Any:
        raise ConnectionError("the model server went away")

    # One model for every pane of both workers: only this test's pane takes turns.
    shared = ScriptModel(
        replies=[
            ai("", call("add_to_cart", "add-7", book_id=7, quantity=1)),
            down,
            ai("I added The Quiet Orchard."),
            ai("Your cart holds one book."),
        ]
    )
    monkeypatch.setattr("webdemo.panes.make_model", lambda spec: shared)
    a, b = two_workers
    tab = new_tab(a)
    assert a.post("/api/settings", json={"tab": tab, "contenders": [contender]}).status_code == 200
    assert a.post("/api/turn", json={"tab": tab, "text": SEED_GOAL}).status_code == 202
    cut = panes(wait_for(a, tab, lambda s: idle(s) and panes(s)[contender]["last"] is not None))[contender]
    assert cut["last"]["error"], cut["last"]
    response = b.post("/api/turn", json={"tab": tab, "text": "What is my cart total now?"})
    assert response.status_code == 202, response.text
    done = panes(wait_for(b, tab, lambda s: idle(s) and panes(s)[contender]["last"].get("error") is None))
    last = done[contender]["last"]
    assert last["done"] and last["cart"] == [{"title": "The Quiet Orchard", "quantity": 1}], last
    said = [m["text"] for m in done[contender]["transcript"] if m["role"] == "assistant"]
    assert said == ["I added The Quiet Orchard.", "Your cart holds one book."], said


# --- unused tabs on Postgres -------------------------------------------------------------------------------------


def stored_rows(url: str, key: str) -> dict[str, int]:
    """What Postgres holds of tab `key`: its rows in each table, its threads' rows, and its schema (0 or 1)."""
    threads = [f"web-{key}-{c}" for c in ("handwritten", "langgraph", "langgraph-defaults", "create-agent")]
    counts = {}
    with psycopg.connect(url) as db:
        for table in ("webdemo_tabs", "webdemo_panes", "webdemo_events"):
            column = "key" if table == "webdemo_tabs" else "tab"
            row = db.execute(f"SELECT count(*) FROM {table} WHERE {column} = %s", (key,)).fetchone()
            counts[table] = row[0] if row else 0
        for table in ("checkpoints", "handwritten_messages"):
            row = db.execute(f"SELECT count(*) FROM {table} WHERE thread_id = ANY(%s)", (threads,)).fetchone()
            counts[table] = row[0] if row else 0
        row = db.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema_of(key),)).fetchone()
        counts["schema"] = row[0] if row else 0
    return counts


def age(url: str, key: str, seconds: float) -> None:
    """Make tab `key` look unused for `seconds` (and never watched)."""
    with psycopg.connect(url) as db:
        db.execute(
            "UPDATE webdemo_tabs SET used = now() - make_interval(secs => %s), seen = NULL WHERE key = %s",
            (seconds, key),
        )


def test_unused_tabs_on_postgres_are_forgotten_rows_threads_and_schema_unless_claimed_or_watched(
    postgres_url: str,
) -> None:
    """A tab unused past `keep_tabs_s` loses its rows, its threads and its store's schema when a tab is made; a
    tab another worker holds a claim on (a turn or a job) or watches is kept; the worker that still had the
    forgotten tab open serves it afresh, and a turn there adds one copy, not one on top of the old cart's."""
    app_a = create_app(postgres_url, allowed_hosts=["127.0.0.1"], keep_tabs_s=50.0)
    app_b = create_app(postgres_url, allowed_hosts=["127.0.0.1"], keep_tabs_s=50.0)
    with TestClient(app_a, base_url=BASE) as a, TestClient(app_b, base_url=BASE) as b:
        old, claimed, watched, fresh = (new_tab(a) for _ in range(4))
        assert a.post("/api/turn", json={"tab": old, "text": SEED_GOAL}).status_code == 202
        wait_for(a, old, lambda s: idle(s) and all(p["last"] for p in s["panes"]))
        state(b, old)  # worker b has the tab open too
        key = old.split(".")[0]
        before = stored_rows(postgres_url, key)
        assert all(before.values()), before  # a conversation on both sessions, a schema, events
        for tab in (old, claimed, watched):
            age(postgres_url, tab.split(".")[0], 100)
        shared: SharedState = a.app.state.tabs.store.shared  # type: ignore[attr-defined]
        assert shared.try_claim(claimed.split(".")[0], ["job:eval"], "another-worker")
        shared.touch([watched.split(".")[0]])
        new_tab(a)
        assert set(stored_rows(postgres_url, key).values()) == {0}, stored_rows(postgres_url, key)
        for tab in (claimed, watched, fresh):
            assert stored_rows(postgres_url, tab.split(".")[0])["schema"] == 1, tab
        # Worker b's copy of the forgotten tab was stale: it opens afresh, and its first turn is the only one.
        again = panes(state(b, old))
        assert all(p["transcript"] == [] and p["last"] is None for p in again.values()), again
        assert b.post("/api/turn", json={"tab": old, "text": SEED_GOAL}).status_code == 202
        done = panes(wait_for(b, old, lambda s: idle(s) and all(p["last"] for p in s["panes"])))
        for pane in done.values():
            assert pane["last"]["cart"] == [{"title": "The Quiet Orchard", "quantity": 1}], pane["last"]


def test_stored_tabs_on_postgres_are_capped_longest_unused_first(postgres_url: str) -> None:
    with TestClient(create_app(postgres_url, allowed_hosts=["127.0.0.1"], max_stored_tabs=3), base_url=BASE) as a:
        tabs = [new_tab(a) for _ in range(3)]
        for n, tab in enumerate(tabs):  # the first the longest unused
            age(postgres_url, tab.split(".")[0], 100 - n)
        newest = new_tab(a)
        with psycopg.connect(postgres_url) as db:
            left = {str(r[0]) for r in db.execute("SELECT key FROM webdemo_tabs")}
        assert left == {t.split(".")[0] for t in (*tabs[1:], newest)}


def test_a_claim_under_way_when_a_tab_is_forgotten_keeps_it_and_a_claim_after_finds_it_gone(
    postgres_url: str,
) -> None:
    """The lease decides: a claim that took the tab's row first is waited for and seen (the tab stays); a claim
    after the tab went is `TabGone` (the page gets a 410 with a sentence), never a turn on a dropped store."""
    from webdemo.shared import TabGone

    shared = SharedState(postgres_url)
    key, other = "a" * 32, "b" * 32
    try:
        for k in (key, other):
            shared.open_tab(k)
            age(postgres_url, k, 100)
        with psycopg.connect(postgres_url) as claimer:  # a worker in the middle of `claim`, holding the row
            claimer.execute("SELECT 1 FROM webdemo_tabs WHERE key = %s FOR SHARE", (key,))
            with ThreadPoolExecutor(1) as pool:
                forgetting = pool.submit(shared.forget_tab, key, 50.0, 1000, [])
                time.sleep(0.3)  # not a timing assert: the forget is then waiting on the row (or about to)
                assert not forgetting.done()
                claimer.execute(
                    "INSERT INTO webdemo_claims VALUES (%s, 'langgraph', 'w', now() + interval '15 s')", (key,)
                )
                claimer.commit()
                assert forgetting.result(10) is False
        assert shared.claimed(key) == {"langgraph"}
        assert shared.forget_tab(other, 50.0, 1000, []) is True
        with pytest.raises(TabGone):
            shared.try_claim(other, ["langgraph"], "late-worker")
    finally:
        shared.close()


# --- a worker killed mid-turn ---------------------------------------------------------------------------------

WORKER = """
import os, sys, threading
from shared_tools.bookstore.store import BookStore

if os.environ.get("HANG_AFTER_ADD"):  # worker A: every add lands, then its turn hangs there until the SIGKILL
    original = BookStore.add_to_cart

    def add_then_hang(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        print("ADDED", flush=True)
        threading.Event().wait()
        return result

    BookStore.add_to_cart = add_then_hang

import uvicorn
from webdemo.server import create_app

url, port, lease = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
app = create_app(url, allowed_hosts=["127.0.0.1"], lease_s=lease)
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
"""


def start_worker(url: str, lease: float, *, hang_after_add: bool) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), **({"HANG_AFTER_ADD": "1"} if hang_after_add else {})}
    process = subprocess.Popen(
        [sys.executable, "-c", WORKER, url, str(port), str(lease)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            if httpx.get(f"{base}/api/meta", timeout=2).status_code == 200:
                return process, base
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"the worker did not start: {process.communicate(timeout=10)}")
        time.sleep(0.1)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_worker_killed_mid_turn_after_its_adds_leaves_one_copy_and_usable_panes_to_the_other(
    postgres_url: str,
) -> None:
    """Two worker processes on one Postgres. Worker A's turn adds the book in both panes, then A is SIGKILLed
    with the turn under way. Once A's lease runs out, worker B takes the tab over: the panes are free, every cart
    holds one copy, and the next question works in both panes, the graph finishing A's turn from its checkpoint
    first (its re-run add is a replay, by its call's id) and the hand-written pane without the turn a SIGKILL
    takes whole (the cost docs/command-line.md gives), neither adding a copy."""
    lease = 5.0  # past the heartbeat (1 s) with room on a loaded machine, and short enough to wait out
    a, url_a = start_worker(postgres_url, lease, hang_after_add=True)
    b, url_b = start_worker(postgres_url, lease, hang_after_add=False)
    try:
        with httpx.Client(base_url=url_a, timeout=WAIT_S) as client:
            tab = new_tab(client)
            assert client.post("/api/turn", json={"tab": tab, "text": SEED_GOAL}).status_code == 202
        assert a.stdout is not None
        added = [a.stdout.readline().strip() for _ in range(2)]  # blocks until both panes' adds landed
        assert added == ["ADDED", "ADDED"], added
        a.kill()
        a.wait(30)
        assert a.returncode == -signal.SIGKILL
        with httpx.Client(base_url=url_b, timeout=WAIT_S) as client:
            assert all(p["busy"] for p in state(client, tab)["panes"]), "A's claims hold until the lease ends"
            wait_for(client, tab, idle)
            key = tab.split(".")[0]
            with tab_store(postgres_url, tab) as store:
                for contender in ("handwritten", "langgraph"):
                    assert store.cart(f"web-{key}-{contender}").quantity_of(7) == 1, contender
            response = client.post("/api/turn", json={"tab": tab, "text": CART_QUESTION})
            assert response.status_code == 202, response.text
            done = panes(
                wait_for(
                    client,
                    tab,
                    lambda s: idle(s) and all(p["last"] and p["last"].get("stop_reason") for p in s["panes"]),
                )
            )
        for name, pane in done.items():
            last = pane["last"]
            assert last["done"] and last["cart"] == [{"title": "The Quiet Orchard", "quantity": 1}], (name, last)
            assert last["cart_check"] == "agrees", (name, last)
        with tab_store(postgres_url, tab) as store:
            assert store.check_invariants() == []
    finally:
        for process in (a, b):
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def report_with_half_an_emoji(names: list[str], model: str, folder: Path | None) -> str:
    """A scenario report whose model wrote half an emoji (run in the job's spawned child, so at module level)."""
    return "<p>the model said \ud83d</p>"


def test_a_report_with_half_an_emoji_is_kept_for_every_worker(
    two_workers: tuple[TestClient, TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("webdemo.reports.scenario_report", report_with_half_an_emoji)
    a, b = two_workers
    tab = new_tab(a)
    assert a.post("/api/scenario", json={"tab": tab, "scenarios": ["bookstore"]}).status_code == 202
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and (state(a, tab)["jobs"] or not state(a, tab)["reports"]):
        time.sleep(0.05)
    report = b.get("/api/report/scenario", params={"tab": tab})  # the other worker reads it from Postgres
    assert report.status_code == 200, report.text
    assert report.text == "<p>the model said \ufffd</p>"

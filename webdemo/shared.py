"""The live page's state in Postgres, so several server workers (processes, or machines) serve one set of tabs.

`SharedState` holds the tab-id secret, settings, turn claims with a lease, pane snapshots, reports and events
(numbered per tab under the tab's row lock, so a reader never misses one, and announced with NOTIFY to each
worker's `EventBus`). Events named "_..." are commands between workers. Each tab's store is a schema of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from webdemo.tabstore import TabGone, TabPlace, TabView

log = logging.getLogger(__name__)

CHANNEL = "webdemo"
LEASE_S = 15.0
"""A claim not extended for this long belongs to a worker that died: the pane is free again."""
POLL_S = 1.0
"""How often a worker looks for events of its open tabs without being notified (a lost NOTIFY)."""
SCHEMA_LOCK = 0x7765_6264_656D_6F
"""The advisory lock key under which the tables are created (workers start at once; CREATE IF NOT EXISTS races)."""
SETUP_QUEUE_LOCK = SCHEMA_LOCK + 1
"""The lock workers queue on for LangGraph's migrations: another key than `SCHEMA_LOCK`, because a worker blocked
on that one inside a transaction is a transaction the migrations' index build would wait for (a deadlock)."""

TABLES = """
CREATE TABLE IF NOT EXISTS webdemo_secret (id int PRIMARY KEY CHECK (id = 1), secret bytea NOT NULL);
CREATE TABLE IF NOT EXISTS webdemo_tabs (
    key text PRIMARY KEY, settings text, revision bigint NOT NULL DEFAULT 0,
    last_event bigint NOT NULL DEFAULT 0, seen timestamptz);
CREATE TABLE IF NOT EXISTS webdemo_events (
    tab text NOT NULL, seq bigint NOT NULL, event text NOT NULL, at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tab, seq));
CREATE TABLE IF NOT EXISTS webdemo_claims (
    tab text NOT NULL, pane text NOT NULL, owner text NOT NULL, until timestamptz NOT NULL,
    PRIMARY KEY (tab, pane));
CREATE TABLE IF NOT EXISTS webdemo_panes (
    tab text NOT NULL, pane text NOT NULL, snapshot text NOT NULL, PRIMARY KEY (tab, pane));
CREATE TABLE IF NOT EXISTS webdemo_reports (
    tab text NOT NULL, kind text NOT NULL, html text NOT NULL, PRIMARY KEY (tab, kind));
ALTER TABLE webdemo_tabs ADD COLUMN IF NOT EXISTS used timestamptz NOT NULL DEFAULT now();
CREATE INDEX IF NOT EXISTS webdemo_tabs_used ON webdemo_tabs (used);
"""

USED_EVERY_S = 60.0
"""A tab's last use (`webdemo_tabs.used`) is written at most this often: its expiry is counted in days."""
WATCHED_S = 30.0
"""A tab some worker had an event stream of within this long (`touch`, every 2 s) is watched: never forgotten."""
FORGET_LOCK_S = 5.0
"""How long forgetting a tab waits for a lock (a store connection mid-transaction); then the tab is left for later."""
CHECKPOINT_TABLES = ("checkpoint_writes", "checkpoint_blobs", "checkpoints")
"""LangGraph's per-thread tables (its migrations made them in the URL's schema): a forgotten tab's rows go."""


def schema_of(key: str) -> str:
    """The schema of a tab's store and sessions; `key` is 32 hex digits (checked by `TabIds`), so it is safe SQL."""
    if not (len(key) == 32 and all(c in "0123456789abcdef" for c in key)):
        raise ValueError(f"not a tab key: {key[:40]!r}")
    return f"web_{key}"


def with_search_path(url: str, schema: str) -> str:
    """`url` whose connections use `schema` first (libpq's ``options=-c search_path=...``)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "options"]
    query.append(("options", f"-c search_path={schema}"))
    # libpq reads %20 as a space but a '+' as a plus, so spaces are percent-encoded.
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


class SharedState:
    """The page's tables in the Postgres database at `url`; every method is blocking (call from a worker thread,
    except `publish`, which only queues)."""

    def __init__(self, url: str, *, pool_size: int = 8, lease_s: float = LEASE_S) -> None:
        """`lease_s`: how long a claim lasts unless extended (a turn's heartbeat extends it every second)."""
        from psycopg.rows import tuple_row
        from psycopg_pool import ConnectionPool

        self.url = url
        self.lease_s = lease_s
        # prepare_threshold=None: no server-side prepared statements, so PgBouncer in transaction mode works.
        self.pool = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            open=True,
            name="webdemo",
            kwargs={"autocommit": True, "prepare_threshold": None, "row_factory": tuple_row},
        )
        self._outbox: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue()
        self._writer = threading.Thread(target=self._write_events, name="webdemo-events", daemon=True)
        self._writer.start()
        with self.pool.connection() as db, db.transaction():
            db.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
            db.execute(TABLES)
        self._setup_checkpoints()

    def _setup_checkpoints(self) -> None:
        """LangGraph's checkpoint tables, made once, by one worker at a time, before any tab opens a session.

        Its migrations include ``CREATE INDEX CONCURRENTLY``, which waits for every transaction in the database,
        a blocked ``pg_advisory_lock`` call included: two workers running them at once deadlock. So the workers
        queue by polling a lock of ours (each poll a short statement the index build can wait out); the one that
        holds it runs the migrations, and later setups find nothing to do."""
        from comparison.conversations import setup_postgres_checkpoints

        failed: list[BaseException] = []

        def setup() -> None:
            # A thread of its own: uvicorn builds each worker's app inside its event loop, where no loop may run.
            try:
                asyncio.run(setup_postgres_checkpoints(self.url))
            except BaseException as exc:
                failed.append(exc)

        with self.pool.connection() as db:
            while db.execute("SELECT pg_try_advisory_lock(%s)", (SETUP_QUEUE_LOCK,)).fetchone() != (True,):
                time.sleep(0.05)
            try:
                thread = threading.Thread(target=setup, name="webdemo-setup")
                thread.start()
                thread.join()
                if failed:
                    raise failed[0]
            finally:
                db.execute("SELECT pg_advisory_unlock(%s)", (SETUP_QUEUE_LOCK,))

    def close(self) -> None:
        self._outbox.put(None)
        self._writer.join(5)
        self.pool.close()

    # --- tabs ------------------------------------------------------------------------------------------------

    def secret(self, make: Callable[[], bytes]) -> bytes:
        """The tab-id secret every worker shares: made once by whichever worker asks first."""
        with self.pool.connection() as db:
            db.execute("INSERT INTO webdemo_secret VALUES (1, %s) ON CONFLICT (id) DO NOTHING", (make(),))
            row = db.execute("SELECT secret FROM webdemo_secret WHERE id = 1").fetchone()
        assert row is not None
        return bytes(row[0])

    def open_tab(self, key: str) -> None:
        """Make the tab's row and schema if they are not there yet (a new tab, or one whose page comes back)."""
        with self.pool.connection() as db:
            db.execute(
                "INSERT INTO webdemo_tabs (key) VALUES (%s) ON CONFLICT (key) DO UPDATE SET used = now()", (key,)
            )
            db.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema_of(key)}"')

    def place(self, key: str) -> TabPlace:
        """`open_tab`, then where the tab's things are: its threads in the shared tables, its store in its schema."""
        self.open_tab(key)
        return TabPlace(None, self.url, self.tab_url(key), self.last_seq(key), thread_tab=key)

    # --- forgetting unused tabs ----------------------------------------------------------------------------------

    def old_tabs(self, keep_s: float, max_tabs: int) -> list[str]:
        """The tabs unused for `keep_s` seconds, then the longest unused beyond the `max_tabs` most recent."""
        with self.pool.connection() as db:
            rows = db.execute(
                "SELECT key FROM (SELECT key, used, row_number() OVER (ORDER BY used DESC, key) AS n "
                "FROM webdemo_tabs) t WHERE used < now() - make_interval(secs => %s) OR n > %s ORDER BY used",
                (keep_s, max_tabs),
            ).fetchall()
        return [str(r[0]) for r in rows]

    def forget_tab(self, key: str, keep_s: float, max_tabs: int, threads: list[str]) -> bool:
        """Delete tab `key` (its rows in every ``webdemo_`` table, its session `threads`, its store's schema) if it
        is still unused for `keep_s` or beyond the `max_tabs` most recent, no worker holds a claim on it and none
        has watched it lately. True when it went.

        Safe against another worker using the tab: the tab's row is locked first (``FOR UPDATE``), and `claim`
        takes the same row ``FOR SHARE`` before it claims, so a turn or job either claimed before (the claim is
        seen here, and the tab is kept) or finds the tab gone (`TabGone`), never a store half dropped."""
        schema = schema_of(key)
        try:
            with self.pool.connection() as db, db.transaction():
                db.execute("SELECT set_config('lock_timeout', %s, true)", (f"{int(FORGET_LOCK_S * 1000)}ms",))
                if db.execute("SELECT 1 FROM webdemo_tabs WHERE key = %s FOR UPDATE", (key,)).fetchone() is None:
                    return False
                # A statement of its own, so a snapshot taken after the lock: a claim that held the row before
                # committed before the lock was given, and is seen here.
                row = db.execute(
                    "SELECT used < now() - make_interval(secs => %s) "
                    "OR (SELECT count(*) FROM webdemo_tabs o WHERE (o.used, o.key) > (t.used, t.key)) >= %s, "
                    "coalesce(seen > now() - make_interval(secs => %s), false), "
                    "EXISTS (SELECT 1 FROM webdemo_claims WHERE tab = t.key AND until >= now()) "
                    "FROM webdemo_tabs t WHERE key = %s",
                    (keep_s, max_tabs, WATCHED_S, key),
                ).fetchone()
                if row is None or not row[0] or row[1] or row[2]:
                    return False
                for table in ("webdemo_events", "webdemo_claims", "webdemo_panes", "webdemo_reports"):
                    db.execute(f"DELETE FROM {table} WHERE tab = %s", (key,))
                for table in CHECKPOINT_TABLES:
                    db.execute(f"DELETE FROM {table} WHERE thread_id = ANY(%s)", (threads,))
                if db.execute("SELECT to_regclass('handwritten_threads')").fetchone() != (None,):
                    db.execute("DELETE FROM handwritten_threads WHERE thread_id = ANY(%s)", (threads,))
                db.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
                db.execute("DELETE FROM webdemo_tabs WHERE key = %s", (key,))
        except psycopg_errors().LockNotAvailable:
            log.info("tab %s is in use by a store connection; it is forgotten later", key[:8])
            return False
        return True

    def tab_url(self, key: str) -> str:
        return with_search_path(self.url, schema_of(key))

    def settings(self, key: str) -> tuple[int, dict[str, Any] | None]:
        """(revision, settings JSON or None when never saved)."""
        with self.pool.connection() as db:
            row = db.execute("SELECT revision, settings FROM webdemo_tabs WHERE key = %s", (key,)).fetchone()
        return (0, None) if row is None or row[1] is None else (int(row[0]), json.loads(row[1]))

    def save_settings(self, key: str, settings: dict[str, Any]) -> int:
        with self.pool.connection() as db:
            row = db.execute(
                "UPDATE webdemo_tabs SET settings = %s, revision = revision + 1 WHERE key = %s RETURNING revision",
                (event_json(settings), key),
            ).fetchone()
        return 0 if row is None else int(row[0])

    def touch(self, keys: list[str]) -> None:
        """An event stream of each tab is open (here): what `seen_age` reads in every worker."""
        if keys:
            with self.pool.connection() as db:
                db.execute("UPDATE webdemo_tabs SET seen = now() WHERE key = ANY(%s)", (keys,))

    def seen_age(self, key: str) -> float:
        """Seconds since an event stream of the tab was last open in any worker (`touch`); 0 when none ever was
        (a client that drives the tab without a stream is not a page that went away)."""
        with self.pool.connection() as db:
            row = db.execute(
                "SELECT extract(epoch FROM now() - seen) FROM webdemo_tabs WHERE key = %s", (key,)
            ).fetchone()
        return 0.0 if row is None or row[0] is None else float(row[0])

    # --- claims: one turn at a time per pane, across workers ---------------------------------------------------

    def claim(self, key: str, panes: list[str], owner: str, lease: float | None = None) -> bool:
        """Claim every pane in `panes` for `owner`, or none: False when another owner holds one (in time);
        `TabGone` when the tab was forgotten (`forget_tab`)."""
        with self.pool.connection() as db, db.transaction():
            if db.execute("SELECT 1 FROM webdemo_tabs WHERE key = %s FOR SHARE", (key,)).fetchone() is None:
                raise TabGone(key)
            for pane in panes:
                taken = db.execute(
                    "INSERT INTO webdemo_claims VALUES (%s, %s, %s, now() + make_interval(secs => %s)) "
                    "ON CONFLICT (tab, pane) DO UPDATE SET owner = excluded.owner, until = excluded.until "
                    "WHERE webdemo_claims.until < now() RETURNING 1",
                    (key, pane, owner, self.lease_s if lease is None else lease),
                ).fetchone()
                if taken is None:
                    raise _Taken  # leaving the transaction block by a raise rolls back the panes claimed so far
        return True

    def try_claim(self, key: str, panes: list[str], owner: str, lease: float | None = None) -> bool:
        try:
            return self.claim(key, panes, owner, lease)
        except _Taken:
            return False

    def extend(self, key: str, panes: list[str], owner: str, lease: float | None = None) -> None:
        with self.pool.connection() as db:
            db.execute(
                "UPDATE webdemo_claims SET until = now() + make_interval(secs => %s) "
                "WHERE tab = %s AND pane = ANY(%s) AND owner = %s",
                (self.lease_s if lease is None else lease, key, panes, owner),
            )

    def release(self, key: str, panes: list[str], owner: str) -> None:
        with self.pool.connection() as db:
            db.execute(
                "DELETE FROM webdemo_claims WHERE tab = %s AND pane = ANY(%s) AND owner = %s", (key, panes, owner)
            )

    def claimed(self, key: str) -> set[str]:
        """The panes (and jobs) of the tab some worker holds now."""
        with self.pool.connection() as db:
            rows = db.execute("SELECT pane FROM webdemo_claims WHERE tab = %s AND until >= now()", (key,)).fetchall()
        return {str(r[0]) for r in rows}

    # --- pane snapshots and reports ------------------------------------------------------------------------------

    def put_pane(self, key: str, pane: str, snapshot: dict[str, Any]) -> None:
        with self.pool.connection() as db:
            db.execute(
                "INSERT INTO webdemo_panes VALUES (%s, %s, %s) ON CONFLICT (tab, pane) DO UPDATE SET snapshot = "
                "excluded.snapshot",
                (key, pane, event_json(snapshot)),
            )

    def panes(self, key: str) -> tuple[dict[str, dict[str, Any]], set[str], int | None]:
        """(pane snapshots, claimed panes, settings revision) of a tab, in one round trip that also records its
        use (`old_tabs`; written when the one stored is `USED_EVERY_S` old). The revision is None when the tab's
        row is gone: another worker forgot it (`forget_tab`)."""
        with self.pool.connection() as db:
            rows = db.execute(
                "WITH used AS (UPDATE webdemo_tabs SET used = now() WHERE key = %(k)s "
                "AND used < now() - make_interval(secs => %(every)s) RETURNING 1) "
                "SELECT 'p', pane, snapshot FROM webdemo_panes WHERE tab = %(k)s "
                "UNION ALL SELECT 'c', pane, NULL FROM webdemo_claims WHERE tab = %(k)s AND until >= now() "
                "UNION ALL SELECT 'r', revision::text, NULL FROM webdemo_tabs WHERE key = %(k)s",
                {"k": key, "every": USED_EVERY_S},
            ).fetchall()
        snapshots = {str(r[1]): json.loads(r[2]) for r in rows if r[0] == "p"}
        claimed = {str(r[1]) for r in rows if r[0] == "c"}
        revision = next((int(r[1]) for r in rows if r[0] == "r"), None)
        return snapshots, claimed, revision

    def view(self, key: str) -> TabView | None:
        """`panes` and `reports` of the tab; None when its row is gone (another worker forgot it)."""
        snapshots, claimed, revision = self.panes(key)
        return None if revision is None else TabView(snapshots, claimed, revision, self.reports(key))

    def put_report(self, key: str, kind: str, html: str) -> None:
        with self.pool.connection() as db:
            db.execute(
                "INSERT INTO webdemo_reports VALUES (%s, %s, %s) ON CONFLICT (tab, kind) DO UPDATE SET "
                "html = excluded.html",
                (key, kind, html),
            )

    def report(self, key: str, kind: str) -> str | None:
        with self.pool.connection() as db:
            row = db.execute("SELECT html FROM webdemo_reports WHERE tab = %s AND kind = %s", (key, kind)).fetchone()
        return None if row is None else str(row[0])

    def reports(self, key: str) -> list[str]:
        with self.pool.connection() as db:
            return sorted(str(r[0]) for r in db.execute("SELECT kind FROM webdemo_reports WHERE tab = %s", (key,)))

    # --- events ------------------------------------------------------------------------------------------------

    def publish(self, key: str, event: dict[str, Any]) -> None:
        """Queue `event` for the tab's streams in every worker; returns at once (any thread)."""
        self._outbox.put((key, event))

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until every event queued so far is written (tests, shutdown)."""
        done = threading.Event()
        self._outbox.put(("", {"_flush": done}))
        done.wait(timeout)

    def last_seq(self, key: str) -> int:
        with self.pool.connection() as db:
            row = db.execute("SELECT last_event FROM webdemo_tabs WHERE key = %s", (key,)).fetchone()
        return 0 if row is None else int(row[0])

    def events_after(self, key: str, seq: int, limit: int = 500) -> list[tuple[int, dict[str, Any]]]:
        with self.pool.connection() as db:
            rows = db.execute(
                "SELECT seq, event FROM webdemo_events WHERE tab = %s AND seq > %s ORDER BY seq LIMIT %s",
                (key, seq, limit),
            ).fetchall()
        return [(int(r[0]), json.loads(r[1])) for r in rows]

    def _write_events(self) -> None:
        while True:
            first = self._outbox.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < 500:  # a token stream arrives as many small events: one transaction for all queued
                try:
                    more = self._outbox.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._outbox.put(None)
                    break
                batch.append(more)
            try:
                self._insert(batch)
            except Exception as exc:  # the database went away: the page misses these events and reloads its state
                log.warning("could not write %d page events: %s", len(batch), exc)
            for _, event in batch:
                if "_flush" in event:
                    event["_flush"].set()

    def _insert(self, batch: list[tuple[str, dict[str, Any]]]) -> None:
        by_tab: dict[str, list[dict[str, Any]]] = {}
        for key, event in batch:
            if "_flush" not in event:
                by_tab.setdefault(key, []).append(event)
        if not by_tab:
            return
        with self.pool.connection() as db, db.transaction():
            for key in sorted(by_tab):  # one lock order for every writer: no deadlock between two workers
                events = by_tab[key]
                row = db.execute(
                    "UPDATE webdemo_tabs SET last_event = last_event + %s WHERE key = %s RETURNING last_event",
                    (len(events), key),
                ).fetchone()
                if row is None:
                    continue
                first = int(row[0]) - len(events) + 1
                with db.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO webdemo_events (tab, seq, event) VALUES (%s, %s, %s)",
                        [(key, first + i, event_json(e)) for i, e in enumerate(events)],
                    )
                db.execute("SELECT pg_notify(%s, %s)", (CHANNEL, key))

    def prune_events(self, keep_s: float = 3600.0) -> int:
        """Forget events older than `keep_s` (a page that reconnects reloads its state, not old events)."""
        with self.pool.connection() as db:
            cur = db.execute("DELETE FROM webdemo_events WHERE at < now() - make_interval(secs => %s)", (keep_s,))
            return cur.rowcount


def psycopg_errors() -> Any:
    import psycopg.errors

    return psycopg.errors


class _Taken(Exception):
    """A claim found a pane held by another owner; the claim's transaction is rolled back."""


class EventBus:
    """One worker's listener: wakes `on_tab(key)` on the server's loop when a tab has new events.

    `active()` names the tabs this worker cares about (open streams, turns running here); they are also polled
    every `POLL_S` seconds and touched (`SharedState.touch`) when they have a stream open here.
    """

    def __init__(
        self,
        shared: SharedState,
        on_tab: Callable[[str], None],
        active: Callable[[], list[str]],
        watched: Callable[[], list[str]],
    ) -> None:
        self.shared = shared
        self.on_tab = on_tab
        self.active = active
        self.watched = watched
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._listen()), loop.create_task(self._poll())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _listen(self) -> None:
        import psycopg

        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.shared.url, autocommit=True, prepare_threshold=None
                ) as db:
                    await db.execute(f"LISTEN {CHANNEL}")
                    async for note in db.notifies():
                        self.on_tab(note.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database restarted: listen again; the poll covers the gap
                log.warning("event listener lost its connection (%s); reconnecting", exc)
                await asyncio.sleep(1.0)

    async def _poll(self) -> None:
        loop = asyncio.get_running_loop()
        last_touch = 0.0
        while True:
            await asyncio.sleep(POLL_S)
            for key in self.active():
                self.on_tab(key)
            if time.monotonic() - last_touch >= 2.0:
                last_touch = time.monotonic()
                with contextlib.suppress(Exception):
                    await loop.run_in_executor(None, self.shared.touch, self.watched())


def event_json(event: dict[str, Any]) -> str:
    """JSON text with every non-ASCII character escaped: a NUL from a hostile model is six characters, not a byte
    Postgres refuses in text."""
    return json.dumps(event, ensure_ascii=True, default=str)

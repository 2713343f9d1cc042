"""Where a tab lives and what its workers share (`TabStore`): settings, claims, snapshots, reports, events, expiry.

`FolderStore` is the one-worker kind: a data folder, and this worker's memory is the whole truth (a claim is
always granted, events go straight to this worker's streams). `webdemo.pgstore.PostgresStore` is the kind several
workers share. Tabs, panes and routes call the store, never asking which kind it is.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

Event = dict[str, Any]

log = logging.getLogger(__name__)

MIN_SECRET_BYTES = 16
"""The shortest tab-id secret accepted (128 bits); the one made is 32 bytes."""


def thread_name(contender: str, tab_key: str | None = None) -> str:
    """A pane's thread: in the tab's own SQLite file one per contender (the frameworks' state schemas differ); in
    Postgres, where every tab's threads share the tables, the tab's key is part of the name."""
    return f"web-{contender}" if tab_key is None else f"web-{tab_key}-{contender}"


@dataclass(frozen=True)
class TabPlace:
    """Where an opened tab keeps its things: its folder (None in Postgres), its sessions, its bookstore."""

    folder: Path | None
    sessions: Path | str
    """A SQLite file, or the Postgres URL every tab's threads share."""
    bookstore: Path | str
    seq: int
    """The tab's last event so far (Postgres), where its event stream starts."""
    thread_tab: str | None = None
    """The tab's key in its threads' names (`thread_name`): None when the sessions are the tab's alone."""


@dataclass(frozen=True)
class TabView:
    """A tab as the workers share it: its panes' snapshots, the panes and jobs held, its settings revision, and
    the kinds of report kept."""

    snapshots: dict[str, Event]
    claimed: set[str]
    revision: int
    reports: list[str]


class EventCursor(Protocol):
    """Where a tab's event stream is in the store's numbering (`webdemo.events.Hub`)."""

    seq: int


class SyncedTab(Protocol):
    """What a store reads and sets of a tab (`webdemo.tabs.Tab`) to bring it up to date with other workers."""

    key: str

    @property
    def hub(self) -> EventCursor: ...

    async def take_view(self, view: TabView) -> None: ...


class TabStore(Protocol):
    """What a tab keeps beyond one request. Plain methods block (call them from a worker thread, except `publish`,
    `tell_workers` and `streams_closed`, which never block); the async ones run on the server's loop."""

    def secret(self, make: Callable[[], bytes]) -> bytes:
        """The tab-id secret, made by `make` once and kept."""
        ...

    def place(self, key: str) -> TabPlace:
        """Open the tab's place (made when missing) and say where its things are."""
        ...

    def settings(self, key: str) -> tuple[int, dict[str, Any] | None]:
        """(revision, settings JSON or None when never saved); a damaged copy raises ValueError."""
        ...

    def save_settings(self, key: str, settings: dict[str, Any]) -> int:
        """Keep `settings`; the new revision."""
        ...

    def put_pane(self, key: str, pane: str, snapshot: Event) -> None:
        """A pane's state as other workers show it while a turn runs here."""
        ...

    def put_report(self, key: str, kind: str, html: str) -> None: ...

    def report(self, key: str, kind: str) -> str | None:
        """A report kept for other workers (None: none kept beyond the tab in memory)."""
        ...

    def publish(self, key: str, event: Event, here: Callable[[Event], None]) -> None:
        """Send `event` to every stream of the tab: `here` delivers to this worker's (any thread)."""
        ...

    def tell_workers(self, key: str, command: Event) -> None:
        """A command ("_cancel", "_answer") for the worker that runs the tab's turn, when it is another one."""
        ...

    def streams_closed(self, key: str, wait_here: Callable[[], None]) -> None:
        """This worker's last event stream of the tab closed: `wait_here` starts this worker's wait for the page to
        come back, where this worker alone decides that the tab went away."""
        ...

    async def start(
        self, on_tab: Callable[[str], None], active: Callable[[], list[str]], watched: Callable[[], list[str]]
    ) -> None:
        """Begin listening for other workers' events: `on_tab(key)` when tab `key` has new ones."""
        ...

    async def aclose(self) -> None: ...

    async def forget_unused(
        self, keep_s: float, max_tabs: int, spared: set[str], close: Callable[[str], None]
    ) -> list[str]:
        """Delete the tabs unused for `keep_s`, then the longest unused beyond `max_tabs`, but `spared` (open here
        and watched or at work) and any tab another worker claims or watches; `close` closes one that is open here.
        The keys deleted."""
        ...

    async def claim(self, key: str, names: list[str], owner: str, lease: float | None = None) -> bool:
        """Hold `names` (panes, "job:<kind>") of the tab for `owner`, all or none: False when another worker holds
        one; `TabGone` when the tab was forgotten."""
        ...

    async def extend(self, key: str, names: list[str], owner: str, lease: float | None = None) -> None: ...

    async def release(self, key: str, names: list[str], owner: str) -> None: ...

    async def turn_beat(self, key: str, pane: str, owner: str, snapshot: Callable[[], None]) -> float:
        """A turn runs here: keep its claim, call `snapshot` (it writes the pane's), and say how long no worker
        had an event stream of the tab open (0: this worker's own streams decide, `streams_closed`)."""
        ...

    async def settle(self, key: str, pane: str, owner: str, snapshot: Callable[[], None]) -> None:
        """A turn ended here: `snapshot` first, then the claim goes, so whoever sees the pane free sees the end."""
        ...

    async def sync(self, tab: SyncedTab) -> bool:
        """Take what other workers did to `tab` (settings, turns, pauses, reports); False when the tab was
        forgotten meanwhile, so this copy of it is stale."""
        ...

    async def stream_opened(self, tab: SyncedTab) -> None:
        """An event stream opens where none was read lately: it starts from now (its first event is the state)."""
        ...

    async def events_after(self, key: str, seq: int) -> list[tuple[int, Event]]:
        """Other workers' events of the tab numbered after `seq`, in order."""
        ...


class FolderStore:
    """One worker over a data folder: a tab's settings in ``tabs/<key>/settings.json``, the id secret in
    ``secret.key``. Snapshots and reports need no copy (the worker's own tabs hold them), a claim is always
    granted (the routes check and set a pane's busy flag with no await in between), and there are no other
    workers' events to read."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        data_dir.mkdir(parents=True, exist_ok=True)

    def secret(self, make: Callable[[], bytes]) -> bytes:
        """Kept in ``secret.key``, readable by its owner only, and written whole or not at all: it is written to
        a file of its own and linked into place, so a start killed mid-write leaves no short key. A short one
        (an older start's) signed no tab id, since it was never accepted, so a new key replaces it."""
        path = self.data_dir / "secret.key"
        for _ in range(2):
            try:
                secret = path.read_bytes()
            except FileNotFoundError:
                secret = b""
            if len(secret) >= MIN_SECRET_BYTES:
                return secret
            fd, tmp = tempfile.mkstemp(dir=self.data_dir, prefix=".secret-", suffix=".tmp")  # mode 0600
            try:
                with os.fdopen(fd, "wb") as file:
                    file.write(make())
                    file.flush()
                    os.fsync(file.fileno())
                if secret or path.exists():
                    log.warning("%s held no usable secret (%d bytes); a new one replaces it", path, len(secret))
                    os.replace(tmp, path)
                else:
                    with contextlib.suppress(FileExistsError):  # another worker's key is in place: read it
                        os.link(tmp, path)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
        raise OSError(f"{path}: the tab-id secret cannot be kept there; delete it and a new one is made")

    def place(self, key: str) -> TabPlace:
        folder = self.data_dir / "tabs" / key
        folder.mkdir(parents=True, exist_ok=True)
        return TabPlace(folder, folder / "sessions.db", folder / "store.db", 0)

    def _settings_path(self, key: str) -> Path:
        return self.data_dir / "tabs" / key / "settings.json"

    def settings(self, key: str) -> tuple[int, dict[str, Any] | None]:
        try:
            return 0, json.loads(self._settings_path(key).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return 0, None
        except RecursionError:  # nested deeper than the parser goes: damaged like any other unreadable file
            raise ValueError("nested too deep to read") from None

    def save_settings(self, key: str, settings: dict[str, Any]) -> int:
        path = self._settings_path(key)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(settings), encoding="utf-8")
        os.replace(tmp, path)
        return 0

    def put_pane(self, key: str, pane: str, snapshot: Event) -> None:
        return None

    def put_report(self, key: str, kind: str, html: str) -> None:
        return None

    def report(self, key: str, kind: str) -> str | None:
        return None

    async def forget_unused(
        self, keep_s: float, max_tabs: int, spared: set[str], close: Callable[[str], None]
    ) -> list[str]:
        """A folder's time is its tab's last request (`sync` touches it); an open tab's files are closed before
        its folder goes."""
        folder = self.data_dir / "tabs"
        if not folder.is_dir():
            return []
        stored = sorted(((p.stat().st_mtime, p) for p in folder.iterdir() if p.is_dir()), reverse=True)
        now = time.time()
        old = [p for n, (used, p) in enumerate(stored) if now - used > keep_s or n >= max_tabs]
        doomed = [p for p in old if p.name not in spared]
        for path in doomed:
            close(path.name)
            shutil.rmtree(path, ignore_errors=True)
        return [p.name for p in doomed]

    def publish(self, key: str, event: Event, here: Callable[[Event], None]) -> None:
        here(event)

    def tell_workers(self, key: str, command: Event) -> None:
        return None  # no other worker: the route already acted on it here

    def streams_closed(self, key: str, wait_here: Callable[[], None]) -> None:
        wait_here()

    async def start(
        self, on_tab: Callable[[str], None], active: Callable[[], list[str]], watched: Callable[[], list[str]]
    ) -> None:
        return None

    async def aclose(self) -> None:
        return None

    async def claim(self, key: str, names: list[str], owner: str, lease: float | None = None) -> bool:
        return True

    async def extend(self, key: str, names: list[str], owner: str, lease: float | None = None) -> None:
        return None

    async def release(self, key: str, names: list[str], owner: str) -> None:
        return None

    async def turn_beat(self, key: str, pane: str, owner: str, snapshot: Callable[[], None]) -> float:
        return 0.0

    async def settle(self, key: str, pane: str, owner: str, snapshot: Callable[[], None]) -> None:
        return None

    async def sync(self, tab: SyncedTab) -> bool:
        """Nothing to take (this worker is the only one); the tab's folder records its use (`forget_unused`)."""
        with contextlib.suppress(OSError):
            os.utime(self.data_dir / "tabs" / tab.key)
        return True

    async def stream_opened(self, tab: SyncedTab) -> None:
        return None

    async def events_after(self, key: str, seq: int) -> list[tuple[int, Event]]:
        return []


class TabGone(LookupError):
    """The tab is not in the store any more: it was forgotten (unused too long, or beyond the cap) by some worker."""

"""The page's tabs: one `Tab` per browser tab (a customer, a store, settings, a pane per contender), and `Tabs`.

A tab is named by an HMAC-signed id (`TabIds`); `Tabs` opens tabs on first use, closes the idle past `max_tabs`,
forgets the stored ones unused for long, and reads other workers' events. What a tab keeps beyond this worker's
memory goes through its `webdemo.tabstore.TabStore`.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import re
import secrets
import uuid
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from comparison.scenarios.s12_prompt_injection import INJECTED_BOOK, INJECTION
from shared_tools.bookstore.store import BookStore, load_catalog, money
from webdemo.events import BadRequest, Hub, for_page
from webdemo.panes import Pane, TurnRunner
from webdemo.settings import PageSettings
from webdemo.tabstore import TabStore, TabView

log = logging.getLogger(__name__)


def default_data_dir() -> Path:
    """Where the page keeps its tabs unless told (`--data`): the per-user data folder, XDG style."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "agent-loop-compare" / "web"


class Tab:
    """One browser tab: a customer with a store, a folder of sessions, settings and one pane per contender."""

    def __init__(self, tabs: Tabs, key: str, loop: asyncio.AbstractEventLoop) -> None:
        self.tabs = tabs
        self.key = key
        self.revision = 0
        """The settings revision the panes here were opened with (another worker's change is a new one)."""
        place = tabs.store.place(key)
        self.folder = place.folder
        self.session_target = place.sessions
        self.thread_tab = place.thread_tab
        self.hub = Hub(loop, tabs.store, key, place.seq)
        self.store = BookStore(place.bookstore)
        self.settings = self._read_settings()
        self.panes: dict[str, Pane] = {}
        self.jobs: dict[str, asyncio.Task[None]] = {}
        """Scenario and eval runs under way, by kind."""
        self.reports: dict[str, str] = {}
        """The last scenario / eval report of this tab, as HTML, by kind."""
        self.gone_timer: asyncio.TimerHandle | None = None
        self.applying = False
        """The settings are being applied: the panes are closed and rebuilt, so nothing may start on them."""
        self.claimed: set[str] = set()
        """Panes and jobs some worker holds, as of the last `refresh`."""
        self.reports_here: list[str] = []
        """The kinds of report kept for every worker, as of the last `refresh`."""

    def _read_settings(self) -> PageSettings:
        try:
            self.revision, saved = self.tabs.store.settings(self.key)
            return PageSettings() if saved is None else PageSettings.from_json(saved)
        except (ValueError, BadRequest) as exc:  # a damaged file: start from the defaults, say so in the log
            log.warning("tab %s: settings file unusable (%s); using the defaults", self.key[:8], exc)
            return PageSettings()

    def save_settings(self) -> None:
        self.revision = self.tabs.store.save_settings(self.key, self.settings.as_json())

    @property
    def busy(self) -> bool:
        return (
            any(p.busy for p in self.panes.values())
            or any(not j.done() for j in self.jobs.values())
            or any(name.startswith("job:") for name in self.claimed)
        )

    async def open_panes(self) -> None:
        """Build a pane per chosen contender and read its conversation back (blocking parts in a worker)."""
        panes = {c: Pane(self, c) for c in self.settings.contenders}
        for pane in panes.values():
            runner = TurnRunner(self.tabs.executor)
            try:
                await asyncio.get_running_loop().run_in_executor(self.tabs.executor, pane.open)
                await pane.load(runner)
            except Exception as exc:  # a damaged session file, another customer's thread: the pane says so
                log.warning("tab %s: %s pane cannot open: %s", self.key[:8], pane.contender, exc)
                pane.error = f"cannot open this conversation: {for_page(exc)}"
        self.panes = panes

    async def refresh(self) -> bool:
        """Take what other workers did to this tab (settings, turns, pauses) before answering. False when another
        worker forgot the tab meanwhile (unused too long): this copy of it is stale."""
        return await self.tabs.store.sync(self)

    async def take_view(self, view: TabView) -> None:
        """Take the tab as the workers share it: new settings reopen the panes (unless a turn runs here), and
        each pane not running here shows its snapshot."""
        if view.revision != self.revision and not any(p.running_here for p in self.panes.values()):
            for pane in self.panes.values():
                pane.bridge.deny_all(close=True)
                if pane.conversation is not None:
                    pane.conversation.close()
            loop = asyncio.get_running_loop()
            self.settings = await loop.run_in_executor(self.tabs.executor, self._read_settings)
            await self.open_panes()
        for name, pane in self.panes.items():
            if not pane.running_here:
                pane.apply_snapshot(view.snapshots.get(name), name in view.claimed)
        self.claimed = view.claimed
        self.reports_here = view.reports

    @property
    def injected(self) -> bool:
        return INJECTION in self.store.get_book(INJECTED_BOOK).description

    def set_injection(self, on: bool) -> None:
        """Put the prompt-injection scenario's note into this tab's catalog, or take it out again."""
        original = next(b["description"] for b in load_catalog()["books"] if b["id"] == INJECTED_BOOK)
        self.store.set_description(INJECTED_BOOK, f"{original} {INJECTION}" if on else original)

    def change_carts(self) -> list[dict[str, Any]]:
        """The stale-read demo: through the store's second channel, take each pane's first cart line away."""
        changed = []
        for pane in self.panes.values():
            cart = self.store.cart(pane.customer)
            if not cart.lines:
                continue
            line = cart.lines[0]
            removed = self.store.remove_from_cart(pane.customer, line.book.id)
            changed.append(
                {
                    "pane": pane.contender,
                    "title": line.book.title,
                    "removed": removed,
                    "cart_total": money(self.store.cart(pane.customer).total),
                }
            )
        return changed

    def state(self) -> dict[str, Any]:
        return {
            "settings": self.settings.as_json(),
            "model": self.tabs.model_spec,
            "scripted": self.tabs.model_spec.startswith("scripted"),
            "injected": self.injected,
            "panes": [p.state() for p in self.panes.values()],
            "reports": sorted({*self.reports, *self.reports_here}),
            "jobs": sorted(
                {k for k, j in self.jobs.items() if not j.done()}
                | {n.removeprefix("job:") for n in self.claimed if n.startswith("job:")}
            ),
        }

    def cancel_all(self) -> None:
        for pane in self.panes.values():
            pane.cancel()
        for job in self.jobs.values():
            job.cancel()

    def close(self) -> None:
        for pane in self.panes.values():
            pane.bridge.deny_all(close=True)
            if pane.conversation is not None:
                pane.conversation.close()
        self.store.close()


class TabIds:
    """Unguessable tab ids a restarted server still recognises: 32 random hex digits, a dot, and their HMAC
    (SHA-256, first 32 hex digits) under a secret the tab store keeps (`TabStore.secret`), so every worker
    accepts the ids any worker gave out."""

    PATTERN = re.compile(r"([0-9a-f]{32})\.([0-9a-f]{32})")

    def __init__(self, store: TabStore) -> None:
        self._secret = store.secret(lambda: secrets.token_bytes(32))

    def _mac(self, key: str) -> str:
        return hmac.new(self._secret, key.encode("ascii"), hashlib.sha256).hexdigest()[:32]

    def new(self) -> tuple[str, str]:
        """(tab id, its key): the id goes to the page, the key names the tab's folder and customers."""
        key = secrets.token_hex(16)
        return f"{key}.{self._mac(key)}", key

    def key_of(self, tab_id: Any) -> str:
        """The key of a genuine tab id; a malformed or forged one is a `BadRequest`."""
        match = self.PATTERN.fullmatch(tab_id) if isinstance(tab_id, str) else None
        if match is None:
            raise BadRequest(400, "missing or malformed tab id; reload the page")
        key, mac = match.groups()
        if not hmac.compare_digest(mac, self._mac(key)):
            raise BadRequest(403, "unknown tab id; reload the page to get a new one")
        return key


class Tabs:
    """Every tab the server knows, opened from disk on first use, with the shared worker pool and settings."""

    def __init__(
        self,
        store: TabStore,
        *,
        model_spec: str = "scripted",
        executor: Executor,
        approval_timeout: float = 120.0,
        gone_after: float = 10.0,
        max_tabs: int = 64,
        keep_tabs_s: float = 7 * 24 * 3600.0,
        max_stored_tabs: int = 1_000,
    ) -> None:
        """`keep_tabs_s` and `max_stored_tabs`: a tab unused that long is deleted, and past that many stored tabs
        the longest unused are (`forget_old_tabs`)."""
        self.store = store
        """Where a tab keeps what other workers read: settings, claims, pane snapshots, reports, events."""
        self.keep_tabs_s = keep_tabs_s
        self.max_stored_tabs = max_stored_tabs
        self.owner = uuid.uuid4().hex
        """This worker's name on the claims it takes."""
        self.ids = TabIds(store)
        self.model_spec = model_spec
        self.executor = executor
        self.approval_timeout = approval_timeout
        self.gone_after = gone_after
        self.max_tabs = max_tabs
        self._open: dict[str, Tab] = {}
        self._opening: dict[str, asyncio.Task[Tab]] = {}

    async def start(self) -> None:
        """The server starts: listen for other workers' events, and forget the tabs unused for long."""
        await self.store.start(self.on_tab, self.active, self.watched)
        await self.forget_old_tabs()

    async def forget_old_tabs(self) -> list[str]:
        """Delete the stored tabs unused for `keep_tabs_s`, then the longest unused beyond `max_stored_tabs`; a tab
        watched or at work is kept (`TabStore.forget_unused`). The keys deleted."""
        spared = {key for key in [*self._open, *self._opening] if not self._may_forget(key)}
        doomed = await self.store.forget_unused(self.keep_tabs_s, self.max_stored_tabs, spared, self._close_forgotten)
        if doomed:
            log.info("forgot %d stored tab(s) unused for long or beyond %d", len(doomed), self.max_stored_tabs)
        return doomed

    def _close_forgotten(self, key: str) -> None:
        tab = self._open.pop(key, None)
        if tab is not None:
            tab.hub.end_streams()
            tab.close()

    def _may_forget(self, key: str) -> bool:
        """Not being opened, and if open, nobody watching and nothing under way."""
        tab = self._open.get(key)
        if key in self._opening:
            return False
        return tab is None or not (tab.hub.listeners or tab.busy or tab.applying)

    async def new(self) -> tuple[str, Tab]:
        tab_id, key = self.ids.new()
        tab = await self._get(key)
        await self.forget_old_tabs()  # after: the new tab is open, so it is kept
        return tab_id, tab

    async def get(self, tab_id: Any) -> Tab:
        key = self.ids.key_of(tab_id)
        tab = await self._get(key)
        # The refresh records the tab's use (`forget_old_tabs`); False: another worker forgot the tab, and it starts
        # afresh, as a forgotten folder does.
        if not await tab.refresh():
            self._close_forgotten(key)
            tab = await self._get(key)
            await tab.refresh()
        return tab

    async def _get(self, key: str) -> Tab:
        tab = self._open.get(key)
        if tab is not None:
            return tab
        # Two requests for a tab not open yet (the page's state and its event stream) open it once.
        opening = self._opening.get(key)
        if opening is None:
            opening = self._opening[key] = asyncio.get_running_loop().create_task(self._load(key))
            opening.add_done_callback(lambda _: self._opening.pop(key, None))
        return await asyncio.shield(opening)

    async def _load(self, key: str) -> Tab:
        self._make_room()
        loop = asyncio.get_running_loop()
        tab = await loop.run_in_executor(self.executor, Tab, self, key, loop)
        await tab.open_panes()
        self._open[key] = tab
        return tab

    def _make_room(self) -> None:
        """Close tabs beyond `max_tabs`, nobody watching first, then the longest-watched (their streams end; the
        page reconnects and the tab reopens from disk), so tabs that only hold a stream never lock a newcomer
        out. A tab with a turn or a job under way is never closed."""
        idle = sorted(
            (t for t in self._open.values() if not t.busy and not t.applying),
            key=lambda t: (t.hub.listeners > 0, t.hub.last_seen),
        )
        while len(self._open) >= self.max_tabs and idle:
            tab = idle.pop(0)
            del self._open[tab.key]
            tab.hub.end_streams()
            tab.close()
        if len(self._open) >= self.max_tabs:
            raise BadRequest(503, "the server has as many tabs open as it takes; close one and reload")

    # --- other workers' events ------------------------------------------------------------------------------------

    def active(self) -> list[str]:
        """Tabs whose events this worker needs: a stream open here, or a turn running here (commands)."""
        return [k for k, t in self._open.items() if t.hub.listeners or any(p.running_here for p in t.panes.values())]

    def watched(self) -> list[str]:
        return [k for k, t in self._open.items() if t.hub.listeners]

    async def stream_opening(self, tab: Tab) -> None:
        """An event stream of `tab` opens: where this worker read none of its events lately, it starts from now
        (the stream's first event, the state, holds the past)."""
        if tab.key not in self.active():
            await self.store.stream_opened(tab)

    def on_tab(self, key: str) -> None:
        """Tab `key` has new events (the store's listener): read them, once at a time per tab (server's loop)."""
        tab = self._open.get(key)
        if tab is None:
            return
        if tab.hub.pulling:
            tab.hub.pull_again = True
            return
        tab.hub.pulling = True
        asyncio.get_running_loop().create_task(self._pull(tab))

    async def _pull(self, tab: Tab) -> None:
        hub = tab.hub
        try:
            while True:
                hub.pull_again = False
                events = await self.store.events_after(tab.key, hub.seq)
                for seq, event in events:
                    hub.seq = seq
                    kind = str(event.get("type", ""))
                    if kind.startswith("_"):
                        self._command(tab, event)
                    else:
                        hub.deliver(event)
                if not events and not hub.pull_again:
                    return
        except Exception as exc:  # the database is away: the poll tries again
            log.warning("tab %s: could not read its events: %s", tab.key[:8], exc)
        finally:
            hub.pulling = False

    @staticmethod
    def _command(tab: Tab, event: dict[str, Any]) -> None:
        """A command from another worker: acted on here only if the turn it is about runs here."""
        if event["type"] == "_cancel":
            for pane in tab.panes.values():
                if pane.running_here:
                    pane.cancel()
        elif event["type"] == "_answer":
            pane = tab.panes.get(str(event.get("pane")))
            if pane is not None:
                pane.bridge.answer(str(event.get("id")), event.get("approved") is True)

    def stream_closed(self, tab: Tab) -> None:
        """An event stream of `tab` ended: if none is back within `gone_after` seconds, the tab went away (or, as
        the store has it, the worker running its turn decides)."""
        if not tab.hub.listeners:
            self.store.streams_closed(tab.key, lambda: self._wait_for_return(tab))

    def _wait_for_return(self, tab: Tab) -> None:
        if tab.gone_timer is not None:
            tab.gone_timer.cancel()
        tab.gone_timer = asyncio.get_running_loop().call_later(self.gone_after, self._maybe_gone, tab)

    def _maybe_gone(self, tab: Tab) -> None:
        tab.gone_timer = None
        if tab.hub.listeners:
            return
        if tab.busy:
            log.info("tab %s went away: cancelling its runs", tab.key[:8])
        tab.cancel_all()

    def end_streams(self) -> None:
        """End every tab's event streams, so a stopping server is not held open by its pages (any thread)."""
        for tab in list(self._open.values()):
            tab.hub.end_streams()

    async def aclose(self, wait: float = 5.0) -> None:
        """Cancel every run, give them `wait` seconds to record it, then close every tab's files."""
        for tab in self._open.values():
            tab.cancel_all()
        running: list[asyncio.Task[Any]] = [
            p.task for t in self._open.values() for p in t.panes.values() if p.task and not p.task.done()
        ]
        running += [j for t in self._open.values() for j in t.jobs.values() if not j.done()]  # their processes end
        if running:
            await asyncio.wait(running, timeout=wait)
        for tab in self._open.values():
            tab.close()
        self._open.clear()

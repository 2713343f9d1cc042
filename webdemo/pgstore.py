"""The `TabStore` several workers share: `webdemo.shared.SharedState` (Postgres), its blocking calls in the page's
worker pool, and this worker's `EventBus` listening for the others' events.

A tab's gone-ness is decided by the worker running its turn, from when any worker last had a stream of it open.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

from comparison.contenders import CONTENDERS
from webdemo.shared import EventBus, SharedState
from webdemo.tabstore import Event, SyncedTab, TabPlace, thread_name

log = logging.getLogger(__name__)

T = TypeVar("T")


class PostgresStore:
    """A `TabStore` over `shared`, its blocking calls run in `executor` (the page's worker pool)."""

    def __init__(self, shared: SharedState, executor: Executor) -> None:
        self.shared = shared
        self.executor = executor
        self._bus: EventBus | None = None

    async def _blocking(self, call: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, call, *args)

    # --- blocking (a worker thread) ------------------------------------------------------------------------------

    def secret(self, make: Callable[[], bytes]) -> bytes:
        return self.shared.secret(make)

    def place(self, key: str) -> TabPlace:
        return self.shared.place(key)

    def settings(self, key: str) -> tuple[int, dict[str, Any] | None]:
        return self.shared.settings(key)

    def save_settings(self, key: str, settings: dict[str, Any]) -> int:
        return self.shared.save_settings(key, settings)

    def put_pane(self, key: str, pane: str, snapshot: Event) -> None:
        self.shared.put_pane(key, pane, snapshot)

    def put_report(self, key: str, kind: str, html: str) -> None:
        self.shared.put_report(key, kind, html)

    def report(self, key: str, kind: str) -> str | None:
        return self.shared.report(key, kind)

    async def forget_unused(
        self, keep_s: float, max_tabs: int, spared: set[str], close: Callable[[str], None]
    ) -> list[str]:
        """Each tab `SharedState.old_tabs` names is kept if any worker claimed or watched it meanwhile
        (`SharedState.forget_tab`); `close` runs for the forgotten ones afterwards, on the server's loop."""

        def forget() -> list[str]:
            doomed = []
            for key in self.shared.old_tabs(keep_s, max_tabs):
                threads = [thread_name(c, key) for c in CONTENDERS]
                if key not in spared and self.shared.forget_tab(key, keep_s, max_tabs, threads):
                    doomed.append(key)
            return doomed

        doomed = await self._blocking(forget)
        for key in doomed:
            close(key)
        return doomed

    # --- never blocking ------------------------------------------------------------------------------------------

    def publish(self, key: str, event: Event, here: Callable[[Event], None]) -> None:
        """Through Postgres to every worker's streams, this one's too (in order, by the bus)."""
        self.shared.publish(key, event)

    def tell_workers(self, key: str, command: Event) -> None:
        self.shared.publish(key, command)

    def streams_closed(self, key: str, wait_here: Callable[[], None]) -> None:
        return None  # the worker running a turn decides, from `SharedState.seen_age` (`turn_beat`)

    # --- the server's loop ---------------------------------------------------------------------------------------

    async def start(
        self, on_tab: Callable[[str], None], active: Callable[[], list[str]], watched: Callable[[], list[str]]
    ) -> None:
        self._bus = EventBus(self.shared, on_tab, active, watched)
        self._bus.start()

    async def aclose(self) -> None:
        if self._bus is not None:
            await self._bus.stop()
        await self._blocking(self.shared.close)

    async def claim(self, key: str, names: list[str], owner: str, lease: float | None = None) -> bool:
        return await self._blocking(self.shared.try_claim, key, names, owner, lease)

    async def extend(self, key: str, names: list[str], owner: str, lease: float | None = None) -> None:
        await self._blocking(self.shared.extend, key, names, owner, lease)

    async def release(self, key: str, names: list[str], owner: str) -> None:
        await self._blocking(self.shared.release, key, names, owner)

    async def turn_beat(self, key: str, pane: str, owner: str, snapshot: Callable[[], None]) -> float:
        def beat() -> float:
            self.shared.extend(key, [pane], owner)
            snapshot()
            return self.shared.seen_age(key)

        return await self._blocking(beat)

    async def settle(self, key: str, pane: str, owner: str, snapshot: Callable[[], None]) -> None:
        def settle() -> None:
            snapshot()
            self.shared.release(key, [pane], owner)

        await self._blocking(settle)

    async def sync(self, tab: SyncedTab) -> bool:
        view = await self._blocking(self.shared.view, tab.key)
        if view is None:
            return False
        await tab.take_view(view)
        return True

    async def stream_opened(self, tab: SyncedTab) -> None:
        tab.hub.seq = await self._blocking(self.shared.last_seq, tab.key)
        await self._blocking(self.shared.touch, [tab.key])
        await self.sync(tab)

    async def events_after(self, key: str, seq: int) -> list[tuple[int, Event]]:
        return await self._blocking(self.shared.events_after, key, seq)

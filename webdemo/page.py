"""What every route shares, kept on `app.state.page`: the tabs, the worker pool, the model, the job slots.

With Postgres (`webdemo.shared`) a state-changing route first claims the panes it touches there (`Page.claim`),
so two workers never run a turn on one pane; with a data folder there is one worker, and a claim is a no-op.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from webdemo.events import BadRequest
from webdemo.jobs import JobSlots
from webdemo.shared import SharedState, TabGone
from webdemo.tabs import Tab, Tabs


@dataclass
class Page:
    """The app's state, built once by `create_app`: every route reads it from its request (`page_of`)."""

    tabs: Tabs
    shared: SharedState | None
    executor: Executor
    model: str
    slots: JobSlots

    @property
    def scripted(self) -> bool:
        return self.model.startswith("scripted")

    async def in_worker(self, call: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, call)

    async def claim(self, tab: Tab, names: list[str], refusal: str, lease: float | None = None) -> None:
        """Shared mode: hold `names` of `tab` in Postgres, or refuse with 409 (another worker holds one)."""
        shared = self.shared
        if shared is None:
            return
        owner = self.tabs.owner
        args = (tab.key, names, owner) if lease is None else (tab.key, names, owner, lease)
        try:
            claimed = await self.in_worker(lambda: shared.try_claim(*args))
        except TabGone:
            raise BadRequest(410, "this tab was deleted, unused for long; reload the page to start afresh") from None
        if not claimed:
            raise BadRequest(409, refusal)

    async def release(self, tab: Tab, names: list[str]) -> None:
        shared = self.shared
        if shared is not None:
            await self.in_worker(lambda: shared.release(tab.key, names, self.tabs.owner))


def page_of(request: Request) -> Page:
    page: Page = request.app.state.page
    return page

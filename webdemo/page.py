"""What every route shares, kept on `app.state.page`: the tabs, the worker pool, the model, the job slots.

A state-changing route first claims the panes it touches in the tabs' store (`Page.claim`), so two workers never
run a turn on one pane (`webdemo.tabstore`: with a data folder there is one worker, and a claim is always granted).
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
from webdemo.tabs import Tab, Tabs
from webdemo.tabstore import TabGone


@dataclass
class Page:
    """The app's state, built once by `create_app`: every route reads it from its request (`page_of`)."""

    tabs: Tabs
    executor: Executor
    model: str
    slots: JobSlots

    @property
    def scripted(self) -> bool:
        return self.model.startswith("scripted")

    async def in_worker(self, call: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, call)

    async def claim(self, tab: Tab, names: list[str], refusal: str, lease: float | None = None) -> None:
        """Hold `names` of `tab` in the tabs' store, or refuse with 409 (another worker holds one)."""
        try:
            claimed = await self.tabs.store.claim(tab.key, names, self.tabs.owner, lease)
        except TabGone:
            raise BadRequest(410, "this tab was deleted, unused for long; reload the page to start afresh") from None
        if not claimed:
            raise BadRequest(409, refusal)

    async def release(self, tab: Tab, names: list[str]) -> None:
        await self.tabs.store.release(tab.key, names, self.tabs.owner)


def page_of(request: Request) -> Page:
    page: Page = request.app.state.page
    return page

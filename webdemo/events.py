"""What the page is sent: one tab's event fan-out (`Hub`), texts cut to what a page can hold, and errors in words.

`BadRequest` is a refusal the page reads (a sentence and a 4xx); `for_page` is any other error as the page shows
it. `Hub.publish` works from any thread, through the tab's store (`webdemo.tabstore`) to every worker's streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from typing import TYPE_CHECKING, Any

from shared_tools.results import TraceEvent

if TYPE_CHECKING:
    from webdemo.tabstore import TabStore

log = logging.getLogger(__name__)

MAX_SHOWN_CHARS = 16_000
"""The most characters of one text the page is sent (a message, a trace line's detail, a request's arguments, what
one model call streams); the rest is cut, saying how much. A 10 MB reply was a 60 MB state and 80 MB of events; the
session keeps the whole text."""
MAX_NAME_CHARS = 200
"""The most characters of a tool's name the page is sent (the model writes it)."""
MAX_DETAIL_CHARS = 2_000
"""The most characters of a trace line's detail the page is sent (one line of the trace)."""
MAX_STREAMS_PER_TAB = 4
"""Event streams one tab may hold open; one more ends the tab's oldest (a page needs one; a few for reloads)."""
SUBSCRIBER_QUEUE = 2_000
"""Events buffered per event stream; a reader that falls this far behind is dropped (it reconnects)."""


class BadRequest(Exception):
    """What the page asked for cannot be done: a clear sentence for the page and a 4xx status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


_SERVER_PATH = re.compile(r"(?:/[\w.+-]+)+/([\w.+-]+)")


def for_page(exc: BaseException) -> str:
    """An error as the page shows it: its kind and sentence, with every file path on the server cut to its last
    name (where the server keeps its data is not the page's business), at most `MAX_DETAIL_CHARS` of it."""
    return shown(_SERVER_PATH.sub(r"\1", f"{type(exc).__name__}: {exc}"), MAX_DETAIL_CHARS)


class Hub:
    """One tab's event fan-out: `publish` from any thread, each event stream reads its own queue."""

    def __init__(self, loop: asyncio.AbstractEventLoop, store: TabStore, key: str = "", seq: int = 0) -> None:
        self.loop = loop
        self.store = store
        self.key = key
        self.seq = seq
        """The last event of this tab read from the store (`deliver`)."""
        self.pulling = False
        self.pull_again = False
        self._queues: dict[asyncio.Queue[dict[str, Any] | None], None] = {}
        """The open streams' queues, oldest first."""
        self.last_seen = time.monotonic()
        """When an event stream was last open or closed (for `Tabs.sweep`)."""

    @property
    def listeners(self) -> int:
        return len(self._queues)

    def subscribe(self) -> asyncio.Queue[dict[str, Any] | None]:
        """A queue for one more event stream; past `MAX_STREAMS_PER_TAB` the oldest stream is ended (its page,
        if it is still there, reconnects), so one tab cannot hold the server's streams."""
        while len(self._queues) >= MAX_STREAMS_PER_TAB:
            self._stop(next(iter(self._queues)))
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(SUBSCRIBER_QUEUE)
        self._queues[queue] = None
        self.last_seen = time.monotonic()
        return queue

    def unsubscribe(self, queue: asyncio.Queue[dict[str, Any] | None]) -> None:
        self._queues.pop(queue, None)
        self.last_seen = time.monotonic()

    def publish(self, event: dict[str, Any]) -> None:
        """Send `event` to every open stream of the tab, in every worker (`TabStore.publish`); safe from a worker
        thread."""
        self.store.publish(self.key, event, self._publish_here)

    def _publish_here(self, event: dict[str, Any]) -> None:
        """To this worker's streams: on the server's loop (a hop onto it from a worker thread)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            self._deliver(event)
            return
        with contextlib.suppress(RuntimeError):  # the server is shutting down: nobody is listening
            self.loop.call_soon_threadsafe(self._deliver, event)

    def end_streams(self) -> None:
        """End every open event stream (the server is stopping); safe from any thread."""
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self._end)

    def _end(self) -> None:
        for queue in list(self._queues):
            self._stop(queue)

    def _stop(self, queue: asyncio.Queue[dict[str, Any] | None]) -> None:
        """End one stream: it reads None next, and gets no more events."""
        self._queues.pop(queue, None)
        if queue.full():
            queue.get_nowait()  # the stream ends anyway; its last unread event is not needed
        queue.put_nowait(None)

    def deliver(self, event: dict[str, Any]) -> None:
        """An event read from the store, for this worker's streams (on the server's loop)."""
        self._deliver(event)

    def _deliver(self, event: dict[str, Any]) -> None:
        for queue in list(self._queues):
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:
                # A reader this far behind is dropped rather than letting the server's memory grow; the page
                # reconnects and reloads the state.
                self._stop(queue)


def shown(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """`text` as the page is sent it: at most `limit` characters and a note of how many more there were."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit:,} more characters not shown]"


def shown_args(args: Any) -> Any:
    """A tool call's arguments as the page is sent them: as they are, or (past `MAX_SHOWN_CHARS` as JSON) as the
    cut JSON text."""
    try:
        text = json.dumps(args, ensure_ascii=False, default=str)
    except (RecursionError, ValueError):
        return "(arguments nested too deeply to show)"
    return args if len(text) <= MAX_SHOWN_CHARS else shown(text)


def now_ms() -> float:
    """The wall clock in milliseconds, as the trace lines' ``end_ms``: the page's time axis, on which a person's
    wait for an approval is marked as a gap of its own (never drawn as the agent's time)."""
    return round(time.time() * 1000, 3)


def trace_json(event: TraceEvent) -> dict[str, Any]:
    """A trace line as the page shows it: typed fields, never parsed from the text line."""
    return {
        "step": event.step,
        "name": shown(event.name, MAX_NAME_CHARS),
        "ms": round(event.duration_s * 1000, 1),
        "end_ms": round(event.ended_at * 1000, 3),  # the wall clock at the call's end: the waterfall's axis
        "detail": shown(event.detail, MAX_DETAIL_CHARS),
        "tokens": event.tokens,
        "is_model": event.is_model,
        "is_error": event.is_error,
        "guard": None if event.guard is None else str(event.guard),
    }


def token_parts(token: Any) -> tuple[str, str, int]:
    """(text, kind, step) of what `on_token` was given: a `shared_tools.results.Token`, or a plain string (answer
    text) from a build whose contract had no typed token yet."""
    if isinstance(token, str):
        return token, "answer", 0
    return str(getattr(token, "text", "")), str(getattr(token, "kind", "answer")), int(getattr(token, "step", 0))

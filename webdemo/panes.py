"""The live page's state: one `Tab` per browser tab, one `Pane` per contender in it, and how a turn runs.

A tab is one customer with a folder of its own (store, threads, session file, settings), named by an HMAC-signed
id; each pane is one contender's real session with a customer of its own. A pane takes one turn at a time, in a
worker thread (`TurnRunner`), so the loop's sync `approve` can wait for the page; the graphs pause and resume.
With Postgres (`webdemo.shared`) several workers serve the same tabs.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import shutil
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import asdict, dataclass, field, fields, replace
from decimal import Decimal
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolCall

from comparison.contenders import (
    APPROVAL_CONTENDERS,
    ASKING_CONTENDERS,
    CONTENDERS,
    NO_APPROVAL_GATE,
    build_contender,
)
from comparison.conversations import open_conversation
from comparison.eval.grading import amounts, states_total
from comparison.runner import model_spec_for
from comparison.scenarios import INJECTED_BOOK, INJECTION, INSTRUCTIONS
from shared_tools.bookstore.approval import RiskyWritePolicy
from shared_tools.bookstore.store import BookStore, load_catalog, money
from shared_tools.bookstore.tools import make_tools
from shared_tools.models import make_model
from shared_tools.models.personas import PERSONAS
from shared_tools.results import AgentLimits, AgentOptions, AgentResult, StopReason, TraceEvent
from shared_tools.sync import run_blocking

if TYPE_CHECKING:
    from webdemo.shared import SharedState

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_MESSAGE_CHARS = 4_000
"""The longest user turn the page accepts; longer is refused with a 4xx before any model sees it."""
MAX_TRANSCRIPT = 200
"""Messages of a pane's transcript kept for the page (the session itself keeps everything)."""
MAX_TRACE = 400
"""Trace lines of a pane's current turn kept for a reload."""
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
HEARTBEAT_S = 1.0
"""Shared mode: how often a worker running a turn extends its claim and writes the pane's snapshot."""


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


class CartCheck(StrEnum):
    """How a finished answer compares with the store's cart as it is now (the stale-read lesson)."""

    AGREES = "agrees"
    """The answer states the cart total the store holds."""
    STALE = "stale"
    """The answer states a total, and it is not the store's: a remembered, out-of-date figure."""
    NO_FIGURE = "no figure"
    """The answer states no money amount, so there is nothing to compare."""


class Phase(StrEnum):
    """What a pane is doing, for its badge."""

    IDLE = "idle"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting approval"


def default_data_dir() -> Path:
    """Where the page keeps its tabs unless told (`--data`): the per-user data folder, XDG style."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "agent-loop-compare" / "web"


# --- settings ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PageSettings:
    """What the presenter chooses on the page: the panes, the scripted persona, the limits, the gate."""

    contenders: tuple[str, ...] = ("handwritten", "langgraph")
    persona: str = "shopper"
    max_steps: int = 6
    max_tokens: int | None = 20_000
    max_duration: float | None = None
    approval_gate: bool = True

    def limits(self) -> AgentLimits:
        return AgentLimits(max_steps=self.max_steps, max_tokens=self.max_tokens, max_duration=self.max_duration)

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "contenders": list(self.contenders)}

    @classmethod
    def from_json(cls, data: Any, base: PageSettings | None = None) -> PageSettings:
        """Settings from the page's JSON (missing keys keep `base`'s); anything else is a `BadRequest`."""
        base = base or cls()
        if not isinstance(data, dict):
            raise BadRequest(400, "settings must be a JSON object")
        unknown = set(data) - {f.name for f in fields(cls)} - {"tab"}
        if unknown:
            raise BadRequest(400, f"unknown setting {sorted(unknown)[0]!r}")
        changes: dict[str, Any] = {}
        if "contenders" in data:
            chosen = data["contenders"]
            if not isinstance(chosen, list) or not chosen or not all(isinstance(c, str) for c in chosen):
                raise BadRequest(400, "contenders must be a non-empty list of contender names")
            bad = [c for c in chosen if c not in CONTENDERS]
            if bad:
                raise BadRequest(400, f"unknown contender {bad[0][:40]!r}; choose from {', '.join(CONTENDERS)}")
            changes["contenders"] = tuple(c for c in CONTENDERS if c in chosen)  # table order, no repeats
        if "persona" in data:
            if not isinstance(data["persona"], str) or data["persona"] not in PERSONAS:
                raise BadRequest(400, f"unknown persona; choose from {', '.join(PERSONAS)}")
            changes["persona"] = data["persona"]
        if "max_steps" in data:
            changes["max_steps"] = _number(data["max_steps"], "max_steps", int, 1, 50, optional=False)
        if "max_tokens" in data:
            changes["max_tokens"] = _number(data["max_tokens"], "max_tokens", int, 100, 1_000_000)
        if "max_duration" in data:
            changes["max_duration"] = _number(data["max_duration"], "max_duration", float, 0.01, 600.0)
        if "approval_gate" in data:
            if not isinstance(data["approval_gate"], bool):
                raise BadRequest(400, "approval_gate must be true or false")
            changes["approval_gate"] = data["approval_gate"]
        return replace(base, **changes)


def _number(value: Any, name: str, kind: type, low: float, high: float, *, optional: bool = True) -> Any:
    if value is None and optional:
        return None
    # bool is an int to Python, but `true` is no step limit.
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not isinstance(value, int | float) or (kind is int and not whole):
        what = f"a{' whole' if kind is int else ''} number{' or null' if optional else ''}"
        raise BadRequest(400, f"{name} must be {what}")
    # Compared before any float(): an int of 400 digits is a number, just not one that fits a float.
    if not low <= value <= high:
        raise BadRequest(400, f"{name} must be between {low:g} and {high:g}")
    return kind(value)


# --- events ------------------------------------------------------------------------------------------------


class Hub:
    """One tab's event fan-out: `publish` from any thread, each event stream reads its own queue."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, shared: SharedState | None = None, key: str = "", seq: int = 0
    ) -> None:
        self.loop = loop
        self.shared = shared
        self.key = key
        self.seq = seq
        """Shared mode: the last event of this tab delivered here."""
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
        """Send `event` to every open stream; safe from a worker thread (it hops onto the server's loop). Shared
        mode: to every stream of the tab in every worker, through Postgres (this worker's too, in order)."""
        if self.shared is not None:
            self.shared.publish(self.key, event)
            return
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
        """Shared mode: an event read from Postgres, for this worker's streams (on the server's loop)."""
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


def _token_parts(token: Any) -> tuple[str, str, int]:
    """(text, kind, step) of what `on_token` was given: a `shared_tools.results.Token`, or a plain string (answer
    text) from a build whose contract had no typed token yet."""
    if isinstance(token, str):
        return token, "answer", 0
    return str(getattr(token, "text", "")), str(getattr(token, "kind", "answer")), int(getattr(token, "step", 0))


# --- approvals ---------------------------------------------------------------------------------------------


@dataclass
class _Question:
    id: str
    call: ToolCall
    reason: str
    done: threading.Event = field(default_factory=threading.Event)
    answer: bool = False


class ApprovalBridge:
    """Carries the hand-written loop's synchronous `approve(call, reason)` to the page and its answer back.

    `ask` runs in the turn's worker thread and blocks until `answer` (from the server's loop), `deny_all` (the
    tab went away, the turn was cancelled) or `timeout` seconds: silence is a no, as at chat's prompt.
    """

    def __init__(
        self,
        publish: Callable[[dict[str, Any]], None],
        pane: str,
        timeout: float,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.publish = publish
        self.pane = pane
        self.timeout = timeout
        self.on_change = on_change
        """Called (in the asking thread) when a question opens or closes: shared mode writes the pane's snapshot,
        so a worker that gets the page's answer knows the question is waiting here."""
        self._open: dict[str, _Question] = {}
        self._lock = threading.Lock()
        self._closed = False

    def ask(self, call: ToolCall, reason: str) -> bool:
        question = _Question(secrets.token_hex(8), call, reason)
        with self._lock:
            if self._closed:
                return False
            self._open[question.id] = question
        if self.on_change is not None:
            self.on_change()
        self.publish({"type": "approval", "pane": self.pane, "request": question_json(question.id, call, reason)})
        answered = question.done.wait(self.timeout)
        with self._lock:
            self._open.pop(question.id, None)
        if self.on_change is not None:
            self.on_change()
        approved = answered and question.answer
        how = "yes" if approved else "no" if answered else f"no answer within {self.timeout:g} s: no"
        self.publish({"type": "approval_done", "pane": self.pane, "id": question.id, "approved": approved, "how": how})
        return approved

    def answer(self, request_id: str, approved: bool) -> bool:
        """True when `request_id` was waiting and now has its answer."""
        with self._lock:
            question = self._open.get(request_id)
        if question is None or question.done.is_set():
            return False
        question.answer = approved
        question.done.set()
        return True

    def pending(self) -> list[dict[str, Any]]:
        with self._lock:
            return [question_json(q.id, q.call, q.reason) for q in self._open.values()]

    def deny_all(self, *, close: bool = False) -> None:
        with self._lock:
            self._closed = self._closed or close
            waiting = list(self._open.values())
        for question in waiting:
            question.answer = False
            question.done.set()


def question_json(request_id: str, call: ToolCall | dict[str, Any], reason: str) -> dict[str, Any]:
    name = call.get("name")
    tool = shown(name, MAX_NAME_CHARS) if isinstance(name, str) else name
    return {"id": request_id, "tool": tool, "args": shown_args(call.get("args")), "reason": shown(reason)}


class PaneHuman:
    """The human behind a pane's approval gate (`approvals.Human`): the bookstore's rule, the page's answer."""

    def __init__(self, store: BookStore, customer_id: str, bridge: ApprovalBridge) -> None:
        self.policy = RiskyWritePolicy(store, customer_id)
        self.bridge = bridge

    def approve(self, call: ToolCall, reason: str) -> bool:
        return self.bridge.ask(call, reason)


# --- running a turn ----------------------------------------------------------------------------------------


class TurnRunner:
    """Runs a pane's async work on an event loop of its own in a worker thread; cancellable from anywhere.

    A worker thread, because the hand-written loop's `approve` blocks; its own loop, because the sessions'
    async methods then run as they do anywhere else. `cancel` sets the agents' cooperative cancel event and
    cancels the task, so a run stops at its next model or tool call, or at once if it is awaiting one.
    """

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self.cancel_event = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        self._lock = threading.Lock()

    async def run(self, make: Callable[[], Awaitable[T]]) -> T:
        def body() -> T:
            async def main() -> T:
                with self._lock:
                    self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
                try:
                    if self.cancel_event.is_set():
                        raise asyncio.CancelledError
                    return await make()
                finally:
                    with self._lock:
                        self._loop = self._task = None

            return run_blocking(main, instead="TurnRunner.run")

        return await asyncio.get_running_loop().run_in_executor(self.executor, body)

    def cancel(self) -> None:
        self.cancel_event.set()
        with self._lock:
            loop, task = self._loop, self._task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: the turn is over anyway
                loop.call_soon_threadsafe(task.cancel)


def pane_customer(tab_key: str, contender: str) -> str:
    """The customer a pane shops as: one per tab and contender, so no two panes (nor tabs) share a cart."""
    return f"web-{tab_key}-{contender}"


def thread_name(contender: str, tab_key: str | None = None) -> str:
    """The pane's thread in the tab's SQLite file (one per contender: the frameworks' state schemas differ); in
    Postgres, where every tab's threads share the tables, the tab's key is part of the name."""
    return f"web-{contender}" if tab_key is None else f"web-{tab_key}-{contender}"


def transcript_of(messages: list[BaseMessage]) -> list[dict[str, str]]:
    """What the customer saw of a conversation: their questions and the final answers (no tool traffic)."""
    from shared_tools.history import is_user_turn

    said: list[dict[str, str]] = []
    for message in messages:
        if isinstance(message, HumanMessage) and is_user_turn(message):
            said.append({"role": "user", "text": shown(message.text)})
        elif isinstance(message, AIMessage) and not message.tool_calls and message.text.strip():
            said.append({"role": "assistant", "text": shown(message.text)})
    return said[-MAX_TRANSCRIPT:]


class Pane:
    """One contender's session in one tab: its agent, its conversation, the turn in progress."""

    def __init__(self, tab: Tab, contender: str) -> None:
        self.tab = tab
        self.contender = contender
        self.customer = pane_customer(tab.key, contender)
        shared = tab.tabs.shared is not None
        self.bridge = ApprovalBridge(tab.hub.publish, contender, tab.tabs.approval_timeout,
                                     self.save_snapshot if shared else None)  # fmt: skip
        self.busy = False
        self.phase = Phase.IDLE
        self.runner: TurnRunner | None = None
        self.task: asyncio.Task[None] | None = None
        self.transcript: list[dict[str, str]] = []
        self._streamed: dict[tuple[int, str], int] = {}
        """Characters of each (step, kind) of the turn's reply sent to the page token by token."""
        self.trace: list[dict[str, Any]] = []
        self.tokens = 0
        self.last: dict[str, Any] | None = None
        """The last finished turn's report (stop reason, tokens, cart check), for a reload."""
        self.graph_pending: list[dict[str, Any]] = []
        """A graph's approval pause: the requests it waits on (``{"tool_call", "reason"}``), from the checkpoint."""
        self.graph_answers: dict[str, bool] = {}
        """The page's answers so far to the requests of that pause, by request id (`graph_request_ids`): the run
        is resumed once every request has its own answer, so a yes approves only the call it names."""
        self.note: str | None = None
        """Why this pane runs differently from the settings, in words (no approval gate in LangGraph's defaults)."""
        self.conversation: Any = None
        self.error: str | None = None
        """Why the pane's conversation could not be opened; the pane is shown, disabled, with this text."""
        self.remote_pending: list[dict[str, Any]] = []
        """Shared mode: the hand-written loop's questions waiting in another worker (from its snapshot)."""

    # --- building ---------------------------------------------------------------------------------------------

    def open(self) -> None:
        """Build the agent and open the conversation (blocking: call it from a worker thread)."""
        settings = self.tab.settings
        store, spec = self.tab.store, self.tab.tabs.model_spec
        model = make_model(model_spec_for(spec, settings.persona))  # a persona only for plain "scripted"
        human = None
        self.note = None
        if settings.approval_gate:
            if self.contender in APPROVAL_CONTENDERS:
                human = PaneHuman(store, self.customer, self.bridge)
            else:
                self.note = f"No approval gate here: {NO_APPROVAL_GATE}."
        options = AgentOptions(limits=settings.limits(), on_event=self._on_event, **self._token_option())
        agent = build_contender(self.contender, model, make_tools(store, self.customer), options, human)
        self.conversation = open_conversation(
            self.contender,
            agent,
            INSTRUCTIONS,
            thread_name(self.contender, self.tab.key if self.tab.tabs.shared is not None else None),
            self.tab.session_target,
            resume=True,
            customer_id=self.customer,
            approve=None,  # the graphs' pauses are answered from the page, not here
        )

    def _token_option(self) -> dict[str, Any]:
        # Streaming is switched on only where the contract has it, so the page also works on a build without.
        names = {f.name for f in fields(AgentOptions)}
        return {"on_token": self._on_token} if "on_token" in names else {}

    @property
    def session(self) -> Any:
        return self.conversation.session

    @property
    def is_graph(self) -> bool:
        """A graph pauses for approval (answered with `resume`); the hand-written loop and MAF ask the pane's human
        during the run, and their conversation takes a turn (`aask`) and a rewind (`arewind`) itself."""
        return self.contender not in ASKING_CONTENDERS

    @property
    def running_here(self) -> bool:
        """A turn of this pane runs in this process (shared mode: its fields here are fresher than the snapshot)."""
        return self.runner is not None or (self.task is not None and not self.task.done())

    # --- shared mode: the pane as other workers see it ----------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return {
            "phase": str(self.phase), "transcript": self.transcript, "trace": self.trace, "tokens": self.tokens,
            "last": self.last, "graph_pending": self.graph_pending, "graph_answers": self.graph_answers,
            "pending": self.bridge.pending(),
        }  # fmt: skip

    def save_snapshot(self) -> None:
        """Write the snapshot (blocking: from a worker thread). A failed write is logged: the turn goes on."""
        shared = self.tab.tabs.shared
        if shared is None:
            return
        try:
            shared.put_pane(self.tab.key, self.contender, self.snapshot())
        except Exception as exc:
            log.warning("%s: could not write the pane's snapshot: %s", self.contender, exc)

    def apply_snapshot(self, snapshot: dict[str, Any] | None, claimed: bool) -> None:
        """Take another worker's view of this pane (it is not running here)."""
        if snapshot is not None:
            self.transcript = list(snapshot.get("transcript") or [])
            self.trace = list(snapshot.get("trace") or [])
            self.tokens = int(snapshot.get("tokens") or 0)
            self.last = snapshot.get("last")
            self.graph_pending = list(snapshot.get("graph_pending") or [])
            answers = snapshot.get("graph_answers") or {}
            self.graph_answers = {str(k): v is True for k, v in answers.items()} if isinstance(answers, dict) else {}
            self.remote_pending = list(snapshot.get("pending") or []) if claimed else []
        self.busy = claimed
        if claimed:
            self.phase = Phase.RUNNING
        else:  # a turn whose worker died reads as over; a graph's pause is in its checkpoint and the snapshot
            self.phase = Phase.AWAITING_APPROVAL if self.graph_pending else Phase.IDLE

    async def load(self, runner: TurnRunner) -> None:
        """The conversation so far and any approval pause it holds (after a reload or a restart)."""

        async def read() -> tuple[list[BaseMessage], list[dict[str, Any]]]:
            if not self.is_graph:
                return self.session.messages, []
            return list(await self.session.messages()), list(await self.session.pending())

        messages, pending = await runner.run(read)
        self.transcript = transcript_of(messages)
        self.graph_pending = pending
        self.graph_answers = {}
        if pending:
            self.phase = Phase.AWAITING_APPROVAL

    # --- callbacks from the run (worker thread) --------------------------------------------------------------

    def _on_event(self, event: TraceEvent) -> None:
        line = trace_json(event)
        self.tokens += event.tokens
        if len(self.trace) < MAX_TRACE:
            self.trace.append(line)
        self.tab.hub.publish({"type": "trace", "pane": self.contender, "event": line, "tokens": self.tokens})

    def _on_token(self, token: Any) -> None:
        text, kind, step = _token_parts(token)
        sent = self._streamed.get((step, kind), 0)
        if not text or sent > MAX_SHOWN_CHARS:
            return
        if sent + len(text) > MAX_SHOWN_CHARS:  # the rest of this reply is not streamed; its end says so
            text = text[: MAX_SHOWN_CHARS - sent] + "... [the rest is not shown]"
            sent = MAX_SHOWN_CHARS
        self._streamed[(step, kind)] = sent + len(text)
        self.tab.hub.publish({"type": "token", "pane": self.contender, "text": text, "kind": kind, "step": step})

    # --- turns -----------------------------------------------------------------------------------------------

    def start(self, what: str, work: Callable[[TurnRunner], Awaitable[AgentResult]], question: str | None) -> None:
        """Start a turn (a question, or a resume after an approval); the caller checked `busy` and set it."""
        runner = TurnRunner(self.tab.tabs.executor)
        self.runner = runner
        self.trace = []
        self.tokens = 0
        self._streamed.clear()
        self.phase = Phase.RUNNING
        if question is not None:
            self.transcript.append({"role": "user", "text": question})
        self.tab.hub.publish({"type": "turn_start", "pane": self.contender, "what": what, "question": question})
        self.task = asyncio.get_running_loop().create_task(self._finish(work, runner))
        if self.tab.tabs.shared is not None:
            asyncio.get_running_loop().create_task(self._heartbeat(self.task))

    async def _heartbeat(self, task: asyncio.Task[None]) -> None:
        """Shared mode, while the turn runs here: keep the claim, show the trace so far to other workers, and
        cancel the turn when no worker has had an event stream of the tab open for `gone_after` seconds."""
        tabs = self.tab.tabs
        assert tabs.shared is not None
        shared, key, loop = tabs.shared, self.tab.key, asyncio.get_running_loop()

        def beat() -> float:
            shared.extend(key, [self.contender], tabs.owner)
            self.save_snapshot()
            return shared.seen_age(key)

        await loop.run_in_executor(tabs.executor, self.save_snapshot)
        while not task.done():
            await asyncio.wait({task}, timeout=HEARTBEAT_S)
            if task.done():
                return
            try:
                unseen = await loop.run_in_executor(tabs.executor, beat)
            except Exception as exc:  # the database is away: the claim may run out; the turn goes on
                log.warning("%s: heartbeat failed: %s", self.contender, exc)
                continue
            if unseen > tabs.gone_after + 3 * HEARTBEAT_S:
                log.info("tab %s went away: cancelling its runs", key[:8])
                self.tab.cancel_all()

    async def _finish(self, work: Callable[[TurnRunner], Awaitable[AgentResult]], runner: TurnRunner) -> None:
        try:
            result = await work(runner)
            report = self.report(result)
        except Exception as exc:  # a model outage, a conflicting save: said on the page, the server goes on
            log.warning("%s turn failed: %s: %s", self.contender, type(exc).__name__, exc)
            report = {"stop_reason": None, "error": for_page(exc), "answer": None}
        finally:
            self.runner = None
            if self.tab.tabs.shared is None:
                self.busy = False
        self.last = report
        if report.get("answer"):
            self.transcript.append({"role": "assistant", "text": report["answer"]})
            del self.transcript[:-MAX_TRANSCRIPT]
        # The page is sent the requests (`state`'s pending, an approval event), never the paused calls themselves.
        self.graph_pending = report.pop("graph_pending", None) or []
        self.graph_answers = {}
        self.phase = Phase.AWAITING_APPROVAL if self.graph_pending else Phase.IDLE
        tabs = self.tab.tabs
        if tabs.shared is not None:
            # The snapshot first, then the claim: a worker that sees the pane free also sees how its turn ended.
            shared = tabs.shared

            def settle() -> None:
                self.save_snapshot()
                shared.release(self.tab.key, [self.contender], tabs.owner)

            with contextlib.suppress(Exception):
                await asyncio.get_running_loop().run_in_executor(tabs.executor, settle)
            self.busy = False
        self.tab.hub.publish({"type": "turn_end", "pane": self.contender, "report": report})
        for request in self.waiting_graph_requests():
            self.tab.hub.publish({"type": "approval", "pane": self.contender, "request": request})

    def report(self, result: AgentResult) -> dict[str, Any]:
        """A finished turn for the page: typed facts only (the cart check is computed here, not in the page)."""
        cart = self.tab.store.cart(self.customer)
        total = money(cart.total)
        said = result.user_message() if result.stop_reason is not StopReason.AWAITING_APPROVAL else None
        answer = None if said is None else shown(said)
        return {
            "stop_reason": str(result.stop_reason),
            "done": result.ok,
            "answer": answer,
            "tokens": result.tokens,
            "steps": result.steps,
            "tool_calls": result.tool_calls,
            "cart_total": total,
            "cart": [{"title": line.book.title, "quantity": line.quantity} for line in cart.lines],
            "cart_check": str(cart_check(result, cart.total)),
            "answer_amounts": [money(a) for a in sorted(amounts(result.answer))] if result.ok else [],
            "graph_pending": list(result.pending or []),
        }

    async def ask(self, runner: TurnRunner, question: str) -> AgentResult:
        cancel = runner.cancel_event
        if self.is_graph:
            return await runner.run(lambda: _cancelled_or(self._ask_graph(question, cancel)))
        return await runner.run(lambda: self._ask_handwritten(question, cancel))

    async def _ask_graph(self, question: str, cancel: threading.Event) -> AgentResult:
        """A graph's turn: a turn an outage or a dead server cut short is finished first, from its last checkpoint
        (as `chat` does), so the thread never stays stuck on it (a cancelled turn needs nothing: every session
        ends it where it stopped, so "Stop the runs" is never undone); then the question is asked, whatever
        stop the finishing came to. Should it pause for an approval or be cancelled, its result is this turn's
        and the question is not asked; a finishing that fails (the model still down) fails the turn."""
        finished = await self._graph_call("acontinue_unfinished", None, cancel)
        if finished is not None:
            said = finished.user_message() if finished.stop_reason is not StopReason.AWAITING_APPROVAL else None
            said = None if said is None else shown(said)
            if said:
                self.transcript.insert(len(self.transcript) - 1, {"role": "assistant", "text": said})
            self.tab.hub.publish({"type": "finished_earlier", "pane": self.contender,
                                  "stop_reason": str(finished.stop_reason), "answer": said})  # fmt: skip
            if finished.stop_reason in (StopReason.AWAITING_APPROVAL, StopReason.CANCELLED):
                self.transcript.pop()  # the question was not asked
                return finished
        return await self._graph_call("aask", question, cancel)

    async def resume(self, runner: TurnRunner, answers: list[bool]) -> AgentResult:
        """Resume the graph's pause with one answer per request, in the pause's order."""
        # The guarded graph's pause lists one request and takes a bool; HumanInTheLoopMiddleware's takes the list.
        given: bool | list[bool] = answers[0] if len(answers) == 1 else answers
        return await runner.run(lambda: _cancelled_or(self._graph_call("aresume", given, runner.cancel_event)))

    def waiting_graph_requests(self) -> list[dict[str, Any]]:
        """The graph pause's requests the page has not answered yet, as the page shows them."""
        ids = graph_request_ids(self.graph_pending)
        pairs = zip(self.graph_pending, ids, strict=True)
        return [graph_request(r, i) for r, i in pairs if i not in self.graph_answers]

    def _graph_call(self, method: str, argument: Any, cancel: threading.Event) -> Awaitable[Any]:
        # GraphSession takes the cooperative cancel event; the frameworks' CheckpointThread only a task cancel.
        # `argument` None: the method takes none (acontinue_unfinished).
        call = getattr(self.session, method)
        from langgraph_version import GraphSession

        given = () if argument is None else (argument,)
        if isinstance(self.session, GraphSession):
            return call(*given, cancel=cancel)
        return call(*given)

    async def _ask_handwritten(self, question: str, cancel: threading.Event) -> AgentResult:
        # Saved where it is kept, a cancelled turn too (its history tells the truth); on Postgres under the
        # thread's turn lock, from the conversation as another worker may have left it.
        result: AgentResult = await self.conversation.aask(question, cancel=cancel)
        return result

    async def rewind(self, runner: TurnRunner) -> dict[str, Any]:
        """Take the last turn back (`rewind(turns=1)` of either session); the store is not rewound."""
        session = self.session
        if not (hasattr(session, "arewind") or hasattr(session, "rewind")):
            raise BadRequest(409, f"{self.contender}: this session has no rewind")

        async def go() -> tuple[Any, list[BaseMessage]]:
            if not self.is_graph:
                done = await self.conversation.arewind(1)  # saved, under the turn lock on Postgres
                return done, self.session.messages
            if hasattr(session, "arewind"):
                done = await session.arewind(1)
            else:
                done = await asyncio.to_thread(session.rewind, 1)
            return done, list(await session.messages())

        rewound, messages = await runner.run(go)
        self.transcript = transcript_of(messages)
        facts = asdict(rewound) if hasattr(rewound, "__dataclass_fields__") else {"result": str(rewound)}
        return {"pane": self.contender, "rewound": facts, "transcript": self.transcript}

    def cancel(self) -> None:
        self.bridge.deny_all()
        if self.runner is not None:
            self.runner.cancel()

    def state(self) -> dict[str, Any]:
        pending = self.bridge.pending() + self.remote_pending + self.waiting_graph_requests()
        return {
            "contender": self.contender,
            "description": CONTENDERS[self.contender],
            "phase": str(self.phase),
            "busy": self.busy,
            "transcript": self.transcript,
            "trace": self.trace,
            "tokens": self.tokens,
            "last": self.last,
            "pending": pending,
            "note": self.note,
            "error": self.error,
        }


def graph_request(request: dict[str, Any], request_id: str) -> dict[str, Any]:
    """A graph's approval request for the page, under its id from `graph_request_ids`."""
    call = request.get("tool_call") or {}
    return question_json(request_id, call, str(request.get("reason", "")))


def graph_request_ids(pending: list[dict[str, Any]]) -> list[str]:
    """The page's id for each request of a graph's pause: the paused call's id when every request has one of its
    own; otherwise (a call without an id, a model that gave two calls one id) its place in the pause, "#0",
    "#1", ..., so no answer can be taken for another request's."""
    ids = [str((r.get("tool_call") or {}).get("id") or "") for r in pending]
    if all(ids) and len(set(ids)) == len(ids):
        return ids
    return [f"#{n}" for n in range(len(ids))]


async def _cancelled_or(call: Awaitable[AgentResult]) -> AgentResult:
    """The graph's result, or, when the turn was cancelled, a CANCELLED result (the thread records the cancel)."""
    try:
        return await call
    except asyncio.CancelledError:
        return AgentResult(StopReason.CANCELLED, None, 0, 0, 0, 0)


def cart_check(result: AgentResult, store_total: Decimal) -> CartCheck:
    """Compare a finished answer's money figures with the store's cart total now."""
    if not result.ok or not amounts(result.answer):
        return CartCheck.NO_FIGURE
    return CartCheck.AGREES if states_total(result.answer, money(store_total)) else CartCheck.STALE


# --- tabs --------------------------------------------------------------------------------------------------


class Tab:
    """One browser tab: a customer with a store, a folder of sessions, settings and one pane per contender."""

    def __init__(self, tabs: Tabs, key: str, loop: asyncio.AbstractEventLoop) -> None:
        self.tabs = tabs
        self.key = key
        shared = tabs.shared
        self.revision = 0
        """Shared mode: the settings revision the panes here were opened with."""
        if shared is None:
            self.folder: Path | None = tabs.data_dir / "tabs" / key
            self.folder.mkdir(parents=True, exist_ok=True)
            self.session_target: Path | str = self.folder / "sessions.db"
            self.hub = Hub(loop)
            self.store = BookStore(self.folder / "store.db")
        else:
            shared.open_tab(key)
            self.folder = None
            self.session_target = shared.url
            self.hub = Hub(loop, shared, key, shared.last_seq(key))
            self.store = BookStore(shared.tab_url(key))
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
        """Shared mode: panes and jobs some worker holds, as of the last `refresh`."""
        self.reports_here: list[str] = []
        """Shared mode: the kinds of report kept in Postgres, as of the last `refresh`."""

    def _read_settings(self) -> PageSettings:
        shared = self.tabs.shared
        try:
            if shared is not None:
                self.revision, saved = shared.settings(self.key)
                return PageSettings() if saved is None else PageSettings.from_json(saved)
            assert self.folder is not None
            path = self.folder / "settings.json"
            return PageSettings.from_json(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return PageSettings()
        except (ValueError, BadRequest) as exc:  # a damaged file: start from the defaults, say so in the log
            log.warning("tab %s: settings file unusable (%s); using the defaults", self.key[:8], exc)
            return PageSettings()

    def save_settings(self) -> None:
        if self.tabs.shared is not None:
            self.revision = self.tabs.shared.save_settings(self.key, self.settings.as_json())
            return
        assert self.folder is not None
        path = self.folder / "settings.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.settings.as_json()), encoding="utf-8")
        os.replace(tmp, path)

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
        """Shared mode: take what other workers did to this tab (settings, turns, pauses) before answering. False
        when another worker forgot the tab meanwhile (unused too long): this copy of it is stale."""
        shared = self.tabs.shared
        if shared is None:
            return True
        loop = asyncio.get_running_loop()
        snapshots, claimed, revision = await loop.run_in_executor(self.tabs.executor, shared.panes, self.key)
        if revision is None:
            return False
        if revision != self.revision and not any(p.running_here for p in self.panes.values()):
            for pane in self.panes.values():
                pane.bridge.deny_all(close=True)
                if pane.conversation is not None:
                    pane.conversation.close()
            self.settings = await loop.run_in_executor(self.tabs.executor, self._read_settings)
            await self.open_panes()
        for name, pane in self.panes.items():
            if not pane.running_here:
                pane.apply_snapshot(snapshots.get(name), name in claimed)
        self.claimed = claimed
        self.reports_here = await loop.run_in_executor(self.tabs.executor, shared.reports, self.key)
        return True

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
            changed.append({
                "pane": pane.contender, "title": line.book.title, "removed": removed,
                "cart_total": money(self.store.cart(pane.customer).total),
            })  # fmt: skip
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
    (SHA-256, first 32 hex digits) under a secret kept in the data folder (created once, readable by its owner),
    or, shared mode, in Postgres, so every worker accepts the ids any worker gave out."""

    PATTERN = re.compile(r"([0-9a-f]{32})\.([0-9a-f]{32})")

    def __init__(self, data_dir: Path, shared: SharedState | None = None) -> None:
        if shared is not None:
            self._secret = shared.secret(lambda: secrets.token_bytes(32))
            return
        path = data_dir / "secret.key"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            self._secret = path.read_bytes()
        else:
            self._secret = secrets.token_bytes(32)
            with os.fdopen(fd, "wb") as file:
                file.write(self._secret)
        if len(self._secret) < 16:
            raise ValueError(f"{path} is not a usable secret; delete it and a new one is made")

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
        data_dir: Path,
        *,
        model_spec: str = "scripted",
        executor: Executor,
        approval_timeout: float = 120.0,
        gone_after: float = 10.0,
        max_tabs: int = 64,
        shared: SharedState | None = None,
        keep_tabs_s: float = 7 * 24 * 3600.0,
        max_stored_tabs: int = 1_000,
    ) -> None:
        """`keep_tabs_s` and `max_stored_tabs` (a data folder): a tab unused that long is deleted, and past that
        many stored tabs the longest unused are (`forget_old_tabs`)."""
        self.data_dir = data_dir
        self.keep_tabs_s = keep_tabs_s
        self.max_stored_tabs = max_stored_tabs
        self.shared = shared
        self.owner = uuid.uuid4().hex
        """Shared mode: this worker's name on the claims it takes."""
        if shared is None:
            data_dir.mkdir(parents=True, exist_ok=True)
        self.ids = TabIds(data_dir, shared)
        self.model_spec = model_spec
        self.executor = executor
        self.approval_timeout = approval_timeout
        self.gone_after = gone_after
        self.max_tabs = max_tabs
        self._open: dict[str, Tab] = {}
        self._opening: dict[str, asyncio.Task[Tab]] = {}
        self.forget_old_tabs()

    def forget_old_tabs(self) -> list[str]:
        """Delete the folders of stored tabs unused for `keep_tabs_s`, then of the longest unused beyond
        `max_stored_tabs` (a folder's time is its tab's last request); a tab watched or at work is kept. The keys
        deleted. On Postgres, `forget_stored_tabs` does the same to the tabs' rows, threads and schemas."""
        folder = self.data_dir / "tabs"
        if self.shared is not None:
            doomed = self.forget_stored_tabs(self._spared())
            self._close_forgotten(doomed)
            return doomed
        if not folder.is_dir():
            return []
        stored = sorted(((p.stat().st_mtime, p) for p in folder.iterdir() if p.is_dir()), reverse=True)
        now = time.time()
        old = [p for n, (used, p) in enumerate(stored) if now - used > self.keep_tabs_s or n >= self.max_stored_tabs]
        doomed_paths = [p for p in old if self._may_forget(p.name)]
        for path in doomed_paths:
            self._close_forgotten([path.name])
            shutil.rmtree(path, ignore_errors=True)
        if doomed_paths:
            log.info("forgot %d stored tab(s) unused for long or beyond %d", len(doomed_paths), self.max_stored_tabs)
        return [p.name for p in doomed_paths]

    def forget_stored_tabs(self, spared: set[str]) -> list[str]:
        """Postgres (blocking, any thread): forget the tabs `SharedState.old_tabs` names but `spared` (open here and
        watched or at work); each is kept if any worker claimed or watched it meanwhile (`SharedState.forget_tab`).
        The keys forgotten."""
        assert self.shared is not None
        doomed = []
        for key in self.shared.old_tabs(self.keep_tabs_s, self.max_stored_tabs):
            threads = [thread_name(c, key) for c in CONTENDERS]
            if key not in spared and self.shared.forget_tab(key, self.keep_tabs_s, self.max_stored_tabs, threads):
                doomed.append(key)
        if doomed:
            log.info("forgot %d stored tab(s) unused for long or beyond %d", len(doomed), self.max_stored_tabs)
        return doomed

    def _spared(self) -> set[str]:
        return {key for key in [*self._open, *self._opening] if not self._may_forget(key)}

    def _close_forgotten(self, keys: list[str]) -> None:
        for key in keys:
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
        # After: the new tab is open, so it is kept.
        if self.shared is None:
            self.forget_old_tabs()
        else:
            loop = asyncio.get_running_loop()
            self._close_forgotten(await loop.run_in_executor(self.executor, self.forget_stored_tabs, self._spared()))
        return tab_id, tab

    async def get(self, tab_id: Any) -> Tab:
        key = self.ids.key_of(tab_id)
        tab = await self._get(key)
        if tab.folder is not None:
            with contextlib.suppress(OSError):
                os.utime(tab.folder)  # its last use, for `forget_old_tabs`
        if not await tab.refresh():  # another worker forgot it: it starts afresh, as a forgotten folder does
            self._close_forgotten([key])
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
        idle = sorted((t for t in self._open.values() if not t.busy and not t.applying),
                      key=lambda t: (t.hub.listeners > 0, t.hub.last_seen))  # fmt: skip
        while len(self._open) >= self.max_tabs and idle:
            tab = idle.pop(0)
            del self._open[tab.key]
            tab.hub.end_streams()
            tab.close()
        if len(self._open) >= self.max_tabs:
            raise BadRequest(503, "the server has as many tabs open as it takes; close one and reload")

    # --- shared mode: events from Postgres ------------------------------------------------------------------------

    def active(self) -> list[str]:
        """Tabs whose events this worker needs: a stream open here, or a turn running here (commands)."""
        return [k for k, t in self._open.items() if t.hub.listeners or any(p.running_here for p in t.panes.values())]

    def watched(self) -> list[str]:
        return [k for k, t in self._open.items() if t.hub.listeners]

    def on_tab(self, key: str) -> None:
        """Tab `key` has new events (a NOTIFY, or the poll): read them, once at a time per tab (server's loop)."""
        tab = self._open.get(key)
        if tab is None or self.shared is None:
            return
        if tab.hub.pulling:
            tab.hub.pull_again = True
            return
        tab.hub.pulling = True
        asyncio.get_running_loop().create_task(self._pull(tab))

    async def _pull(self, tab: Tab) -> None:
        assert self.shared is not None
        hub, loop = tab.hub, asyncio.get_running_loop()
        try:
            while True:
                hub.pull_again = False
                events = await loop.run_in_executor(self.executor, self.shared.events_after, tab.key, hub.seq)
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
        """An event stream of `tab` ended: if none is back within `gone_after` seconds, the tab went away.
        (Shared mode: the worker running the turn decides, from when any worker last had a stream open.)"""
        if tab.hub.listeners or self.shared is not None:
            return
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

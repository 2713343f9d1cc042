"""The live page's state: one `Tab` per browser tab, one `Pane` per contender in it, and how a turn runs.

A tab is one customer of the bookstore with a folder of its own under the data folder (its store file, its
SQLite threads, the hand-written session's JSON file, its settings), so several tabs never see each other's
carts or conversations, and everything survives a server restart. A tab is named by an unguessable id: a
random part and an HMAC of it under a secret kept in the data folder (`TabIds`), so a restarted server still
knows its tabs and a forged or altered id is refused. Each pane is one contender's real session, built with
the project's own pieces (`contenders.build_contender`, `conversations.open_conversation`): the hand-written
`Session` saved as JSON, `GraphSession` or a framework `CheckpointThread` in SQLite. Every pane of a tab shops
as a customer of its own (`pane_customer`), so the same goal in four panes makes four carts, not one cart with
four copies.

A pane takes one turn at a time (`Pane.busy`, set and checked on the server's event loop with no await in
between, so two requests cannot both start one). The turn runs in a worker thread on an event loop of its own
(`TurnRunner`), because the hand-written loop asks its `approve` callback synchronously: the callback blocks
that worker on an `ApprovalBridge` until the page answers (or the wait times out: a no), while the server's
loop stays free to serve the answer. The graphs pause instead (`interrupt()`); the page's answer resumes them
(`GraphSession.aresume`, `CheckpointThread.aresume`), and a pause survives a restart because it is in the
checkpoint. A tab that goes away (no event stream for `gone_after` seconds) is cancelled: its waits are
answered no, its turns cancelled (the agents' cancel event and a task cancel, which both sessions record
truthfully). Trace lines and tokens reach the page through the tab's `Hub` as they happen.
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
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import asdict, dataclass, field, fields, replace
from decimal import Decimal
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolCall

from shared_tools.bookstore.approval import RiskyWritePolicy
from shared_tools.bookstore.store import BookStore, load_catalog, money
from shared_tools.bookstore.tools import make_tools
from shared_tools.comparison.contenders import APPROVAL_CONTENDERS, CONTENDERS, NO_APPROVAL_GATE, build_contender
from shared_tools.comparison.conversations import open_conversation
from shared_tools.comparison.grading import amounts, states_total
from shared_tools.comparison.runner import model_spec_for
from shared_tools.comparison.scenarios import INJECTED_BOOK, INJECTION, INSTRUCTIONS
from shared_tools.models import make_model
from shared_tools.models.personas import PERSONAS
from shared_tools.results import AgentLimits, AgentOptions, AgentResult, StopReason, TraceEvent
from shared_tools.sync import run_blocking

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_MESSAGE_CHARS = 4_000
"""The longest user turn the page accepts; longer is refused with a 4xx before any model sees it."""
MAX_TRANSCRIPT = 200
"""Messages of a pane's transcript kept for the page (the session itself keeps everything)."""
MAX_TRACE = 400
"""Trace lines of a pane's current turn kept for a reload."""
SUBSCRIBER_QUEUE = 2_000
"""Events buffered per event stream; a reader that falls this far behind is dropped (it reconnects)."""


class BadRequest(Exception):
    """What the page asked for cannot be done: a clear sentence for the page and a 4xx status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


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
            if data["persona"] not in PERSONAS:
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
    if isinstance(value, bool) or not isinstance(value, int | float) or (kind is int and not float(value).is_integer()):
        what = f"a{' whole' if kind is int else ''} number{' or null' if optional else ''}"
        raise BadRequest(400, f"{name} must be {what}")
    if not low <= value <= high:
        raise BadRequest(400, f"{name} must be between {low:g} and {high:g}")
    return kind(value)


# --- events ------------------------------------------------------------------------------------------------


class Hub:
    """One tab's event fan-out: `publish` from any thread, each event stream reads its own queue."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._queues: set[asyncio.Queue[dict[str, Any] | None]] = set()
        self.last_seen = time.monotonic()
        """When an event stream was last open or closed (for `Tabs.sweep`)."""

    @property
    def listeners(self) -> int:
        return len(self._queues)

    def subscribe(self) -> asyncio.Queue[dict[str, Any] | None]:
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(SUBSCRIBER_QUEUE)
        self._queues.add(queue)
        self.last_seen = time.monotonic()
        return queue

    def unsubscribe(self, queue: asyncio.Queue[dict[str, Any] | None]) -> None:
        self._queues.discard(queue)
        self.last_seen = time.monotonic()

    def publish(self, event: dict[str, Any]) -> None:
        """Send `event` to every open stream; safe from a worker thread (it hops onto the server's loop)."""
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
            if queue.full():
                queue.get_nowait()  # the stream ends anyway; its last unread event is not needed
            queue.put_nowait(None)

    def _deliver(self, event: dict[str, Any]) -> None:
        for queue in list(self._queues):
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:
                # A reader this far behind is dropped rather than letting the server's memory grow; the page
                # reconnects and reloads the state.
                self._queues.discard(queue)
                with contextlib.suppress(asyncio.QueueFull):
                    queue.get_nowait()
                    queue.put_nowait(None)


def trace_json(event: TraceEvent) -> dict[str, Any]:
    """A trace line as the page shows it: typed fields, never parsed from the text line."""
    return {
        "step": event.step,
        "name": event.name,
        "ms": round(event.duration_s * 1000, 1),
        "detail": event.detail,
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

    def __init__(self, publish: Callable[[dict[str, Any]], None], pane: str, timeout: float) -> None:
        self.publish = publish
        self.pane = pane
        self.timeout = timeout
        self._open: dict[str, _Question] = {}
        self._lock = threading.Lock()
        self._closed = False

    def ask(self, call: ToolCall, reason: str) -> bool:
        question = _Question(secrets.token_hex(8), call, reason)
        with self._lock:
            if self._closed:
                return False
            self._open[question.id] = question
        self.publish({"type": "approval", "pane": self.pane, "request": question_json(question.id, call, reason)})
        answered = question.done.wait(self.timeout)
        with self._lock:
            self._open.pop(question.id, None)
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
    return {"id": request_id, "tool": call.get("name"), "args": call.get("args"), "reason": reason}


class PaneHuman:
    """The human behind a pane's approval gate (`contenders.Human`): the bookstore's rule, the page's answer."""

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


def thread_name(contender: str) -> str:
    """The pane's thread in the tab's SQLite file (one per contender: the frameworks' state schemas differ)."""
    return f"web-{contender}"


def transcript_of(messages: list[BaseMessage]) -> list[dict[str, str]]:
    """What the customer saw of a conversation: their questions and the final answers (no tool traffic)."""
    from shared_tools.history import is_user_turn

    shown: list[dict[str, str]] = []
    for message in messages:
        if isinstance(message, HumanMessage) and is_user_turn(message):
            shown.append({"role": "user", "text": message.text})
        elif isinstance(message, AIMessage) and not message.tool_calls and message.text.strip():
            shown.append({"role": "assistant", "text": message.text})
    return shown[-MAX_TRANSCRIPT:]


class Pane:
    """One contender's session in one tab: its agent, its conversation, the turn in progress."""

    def __init__(self, tab: Tab, contender: str) -> None:
        self.tab = tab
        self.contender = contender
        self.customer = pane_customer(tab.key, contender)
        self.bridge = ApprovalBridge(tab.hub.publish, contender, tab.tabs.approval_timeout)
        self.busy = False
        self.phase = Phase.IDLE
        self.runner: TurnRunner | None = None
        self.task: asyncio.Task[None] | None = None
        self.transcript: list[dict[str, str]] = []
        self.trace: list[dict[str, Any]] = []
        self.tokens = 0
        self.last: dict[str, Any] | None = None
        """The last finished turn's report (stop reason, tokens, cart check), for a reload."""
        self.graph_pending: list[dict[str, Any]] = []
        """A graph's approval pause: the requests it waits on (``{"tool_call", "reason"}``), from the checkpoint."""
        self.note: str | None = None
        """Why this pane runs differently from the settings, in words (no approval gate in LangGraph's defaults)."""
        self.conversation: Any = None
        self.error: str | None = None
        """Why the pane's conversation could not be opened; the pane is shown, disabled, with this text."""

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
            thread_name(self.contender),
            self.tab.folder / "sessions.db",
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
        return self.contender != "handwritten"

    async def load(self, runner: TurnRunner) -> None:
        """The conversation so far and any approval pause it holds (after a reload or a restart)."""

        async def read() -> tuple[list[BaseMessage], list[dict[str, Any]]]:
            if not self.is_graph:
                return self.session.messages, []
            return list(await self.session.amessages()), list(await self.session.apending())

        messages, pending = await runner.run(read)
        self.transcript = transcript_of(messages)
        self.graph_pending = pending
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
        if text:
            self.tab.hub.publish({"type": "token", "pane": self.contender, "text": text, "kind": kind, "step": step})

    # --- turns -----------------------------------------------------------------------------------------------

    def start(self, what: str, work: Callable[[TurnRunner], Awaitable[AgentResult]], question: str | None) -> None:
        """Start a turn (a question, or a resume after an approval); the caller checked `busy` and set it."""
        runner = TurnRunner(self.tab.tabs.executor)
        self.runner = runner
        self.trace = []
        self.tokens = 0
        self.phase = Phase.RUNNING
        if question is not None:
            self.transcript.append({"role": "user", "text": question})
        self.tab.hub.publish({"type": "turn_start", "pane": self.contender, "what": what, "question": question})
        self.task = asyncio.get_running_loop().create_task(self._finish(work, runner))

    async def _finish(self, work: Callable[[TurnRunner], Awaitable[AgentResult]], runner: TurnRunner) -> None:
        try:
            result = await work(runner)
            report = self.report(result)
        except Exception as exc:  # a model outage, a conflicting save: said on the page, the server goes on
            log.warning("%s turn failed: %s: %s", self.contender, type(exc).__name__, exc)
            report = {"stop_reason": None, "error": f"{type(exc).__name__}: {exc}", "answer": None}
        finally:
            self.busy = False
            self.runner = None
        self.last = report
        if report.get("answer"):
            self.transcript.append({"role": "assistant", "text": report["answer"]})
            del self.transcript[:-MAX_TRANSCRIPT]
        self.graph_pending = report.get("graph_pending") or []
        self.phase = Phase.AWAITING_APPROVAL if self.graph_pending else Phase.IDLE
        self.tab.hub.publish({"type": "turn_end", "pane": self.contender, "report": report})
        for request in self.graph_pending:
            self.tab.hub.publish({"type": "approval", "pane": self.contender, "request": graph_request(request)})

    def report(self, result: AgentResult) -> dict[str, Any]:
        """A finished turn for the page: typed facts only (the cart check is computed here, not in the page)."""
        cart = self.tab.store.cart(self.customer)
        total = money(cart.total)
        answer = result.user_message() if result.stop_reason is not StopReason.AWAITING_APPROVAL else None
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
            return await runner.run(lambda: _cancelled_or(self._graph_call("aask", question, cancel)))
        return await runner.run(lambda: self._ask_handwritten(question, cancel))

    async def resume(self, runner: TurnRunner, approved: bool) -> AgentResult:
        return await runner.run(lambda: _cancelled_or(self._graph_call("aresume", approved, runner.cancel_event)))

    def _graph_call(self, method: str, argument: Any, cancel: threading.Event) -> Awaitable[AgentResult]:
        # GraphSession takes the cooperative cancel event; the frameworks' CheckpointThread only a task cancel.
        call = getattr(self.session, method)
        from langgraph_version import GraphSession

        if isinstance(self.session, GraphSession):
            return call(argument, cancel=cancel)
        return call(argument)

    async def _ask_handwritten(self, question: str, cancel: threading.Event) -> AgentResult:
        from handwritten.loop import AgentCancelled

        try:
            result = await self.session.aask(question, cancel=cancel)
        except AgentCancelled as cancelled:
            result = cancelled.result  # the session kept the partial turn, which tells the truth; save it
        path = self.conversation.path
        if path is not None:
            self.session.save(path)
        return result

    async def rewind(self, runner: TurnRunner) -> dict[str, Any]:
        """Take the last turn back (`rewind(turns=1)` of either session); the store is not rewound."""
        session = self.session
        if not (hasattr(session, "arewind") or hasattr(session, "rewind")):
            raise BadRequest(409, f"{self.contender}: this session has no rewind")

        async def go() -> tuple[Any, list[BaseMessage]]:
            if hasattr(session, "arewind"):
                done = await session.arewind(1)
            else:
                done = await asyncio.to_thread(session.rewind, 1)
            if not self.is_graph:
                if self.conversation.path is not None:
                    session.save(self.conversation.path)
                return done, session.messages
            return done, list(await session.amessages())

        rewound, messages = await runner.run(go)
        self.transcript = transcript_of(messages)
        facts = asdict(rewound) if hasattr(rewound, "__dataclass_fields__") else {"result": str(rewound)}
        return {"pane": self.contender, "rewound": facts, "transcript": self.transcript}

    def cancel(self) -> None:
        self.bridge.deny_all()
        if self.runner is not None:
            self.runner.cancel()

    def state(self) -> dict[str, Any]:
        pending = self.bridge.pending() + [graph_request(r) for r in self.graph_pending]
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


def graph_request(request: dict[str, Any]) -> dict[str, Any]:
    """A graph's approval request for the page; its id is the paused call's id (`GraphSession.aresume` answers
    by call id)."""
    call = request.get("tool_call") or {}
    return question_json(str(call.get("id")), call, str(request.get("reason", "")))


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
        self.folder = tabs.data_dir / "tabs" / key
        self.folder.mkdir(parents=True, exist_ok=True)
        self.hub = Hub(loop)
        self.store = BookStore(self.folder / "store.db")
        self.settings = self._read_settings()
        self.panes: dict[str, Pane] = {}
        self.jobs: dict[str, asyncio.Task[None]] = {}
        """Scenario and eval runs under way, by kind."""
        self.reports: dict[str, str] = {}
        """The last scenario / eval report of this tab, as HTML, by kind."""
        self.gone_timer: asyncio.TimerHandle | None = None

    def _read_settings(self) -> PageSettings:
        path = self.folder / "settings.json"
        try:
            return PageSettings.from_json(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return PageSettings()
        except (ValueError, BadRequest) as exc:  # a damaged file: start from the defaults, say so in the log
            log.warning("tab %s: settings file unusable (%s); using the defaults", self.key[:8], exc)
            return PageSettings()

    def save_settings(self) -> None:
        path = self.folder / "settings.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.settings.as_json()), encoding="utf-8")
        os.replace(tmp, path)

    @property
    def busy(self) -> bool:
        return any(p.busy for p in self.panes.values()) or any(not j.done() for j in self.jobs.values())

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
                pane.error = f"cannot open this conversation: {exc}"
        self.panes = panes

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
            "reports": sorted(self.reports),
            "jobs": sorted(k for k, j in self.jobs.items() if not j.done()),
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
    (SHA-256, first 32 hex digits) under a secret kept in the data folder (created once, readable by its owner)."""

    PATTERN = re.compile(r"([0-9a-f]{32})\.([0-9a-f]{32})")

    def __init__(self, data_dir: Path) -> None:
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
    ) -> None:
        self.data_dir = data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        self.ids = TabIds(data_dir)
        self.model_spec = model_spec
        self.executor = executor
        self.approval_timeout = approval_timeout
        self.gone_after = gone_after
        self.max_tabs = max_tabs
        self._open: dict[str, Tab] = {}
        self._opening: dict[str, asyncio.Task[Tab]] = {}

    async def new(self) -> tuple[str, Tab]:
        tab_id, key = self.ids.new()
        return tab_id, await self._get(key)

    async def get(self, tab_id: Any) -> Tab:
        return await self._get(self.ids.key_of(tab_id))

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
        """Close the longest-idle tabs (nobody watching, nothing running) beyond `max_tabs`; they reopen from
        disk when their page comes back."""
        idle = sorted((t for t in self._open.values() if not t.hub.listeners and not t.busy),
                      key=lambda t: t.hub.last_seen)  # fmt: skip
        while len(self._open) >= self.max_tabs and idle:
            tab = idle.pop(0)
            del self._open[tab.key]
            tab.close()
        if len(self._open) >= self.max_tabs:
            raise BadRequest(503, "the server has as many tabs open as it takes; close one and reload")

    def stream_closed(self, tab: Tab) -> None:
        """An event stream of `tab` ended: if none is back within `gone_after` seconds, the tab went away."""
        if tab.hub.listeners:
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
        running = [p.task for t in self._open.values() for p in t.panes.values() if p.task and not p.task.done()]
        if running:
            await asyncio.wait(running, timeout=wait)
        for tab in self._open.values():
            tab.close()
        self._open.clear()

"""One `Pane` per contender in a tab: its real session, and how a turn runs in it.

Each pane is one contender's session with a customer of its own. It takes one turn at a time, in a worker thread
(`TurnRunner`), so the loop's sync `approve` can wait for the page; the graphs pause and resume. A pane's
snapshot in the tab's store shows other workers (if any) the turn running here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import asdict, fields
from decimal import Decimal
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from comparison.contenders import (
    APPROVAL_CONTENDERS,
    CONTENDERS,
    build_contender,
    spec_of,
)
from comparison.conversations import open_conversation
from comparison.eval.grading import amounts, states_total
from comparison.runner import model_spec_for
from comparison.scenarios import INSTRUCTIONS
from shared_tools.bookstore.store import money
from shared_tools.bookstore.tools import make_tools
from shared_tools.contender import Capability
from shared_tools.conversation import NoRewind
from shared_tools.history import Rewound
from shared_tools.models import make_model
from shared_tools.results import AgentOptions, AgentResult, StopReason, TraceEvent
from shared_tools.sync import run_blocking
from webdemo.approvals import ApprovalBridge, PaneHuman, graph_request, graph_request_ids
from webdemo.events import MAX_SHOWN_CHARS, BadRequest, for_page, shown, token_parts, trace_json
from webdemo.tabstore import thread_name

if TYPE_CHECKING:
    from pathlib import Path

    from shared_tools.bookstore.store import BookStore
    from webdemo.events import Hub
    from webdemo.settings import PageSettings
    from webdemo.tabstore import TabStore


class TabsOfPane(Protocol):
    """What a pane reads of the server's tabs (`webdemo.tabs.Tabs`)."""

    store: TabStore
    owner: str
    model_spec: str
    executor: Executor
    approval_timeout: float
    gone_after: float


class TabOfPane(Protocol):
    """What a pane reads of its tab (`webdemo.tabs.Tab`, which holds the panes: so it is named here, not imported)."""

    key: str
    hub: Hub
    settings: PageSettings
    store: BookStore
    session_target: Path | str
    thread_tab: str | None

    @property
    def tabs(self) -> TabsOfPane: ...

    def cancel_all(self) -> None: ...


log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_MESSAGE_CHARS = 4_000
"""The longest user turn the page accepts; longer is refused with a 4xx before any model sees it."""
MAX_TRANSCRIPT = 200
"""Messages of a pane's transcript kept for the page (the session itself keeps everything)."""
MAX_TRACE = 400
"""Trace lines of a pane's current turn kept for a reload."""
HEARTBEAT_S = 1.0
"""How often a worker running a turn extends its claim and writes the pane's snapshot (`TabStore.turn_beat`)."""


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

    def __init__(self, tab: TabOfPane, contender: str) -> None:
        self.tab = tab
        self.contender = contender
        self.customer = pane_customer(tab.key, contender)
        self.bridge = ApprovalBridge(tab.hub.publish, contender, tab.tabs.approval_timeout, self.save_snapshot)
        self.busy = False
        self.phase = Phase.IDLE
        self.runner: TurnRunner | None = None
        self.task: asyncio.Task[None] | None = None
        self._beat: asyncio.Task[None] | None = None
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
        """The hand-written loop's questions waiting in another worker (from its snapshot)."""

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
                self.note = f"No approval gate here: {spec_of(self.contender).why_not(Capability.APPROVAL)}."
        options = AgentOptions(limits=settings.limits(), on_event=self._on_event, **self._token_option())
        agent = build_contender(self.contender, model, make_tools(store, self.customer), options, human)
        self.conversation = open_conversation(
            self.contender,
            agent,
            INSTRUCTIONS,
            thread_name(self.contender, self.tab.thread_tab),
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
    def running_here(self) -> bool:
        """A turn of this pane runs in this process (its fields here are fresher than its snapshot in the store)."""
        return self.runner is not None or (self.task is not None and not self.task.done())

    # --- the pane as other workers see it ------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        return {
            "phase": str(self.phase),
            "transcript": self.transcript,
            "trace": self.trace,
            "tokens": self.tokens,
            "last": self.last,
            "graph_pending": self.graph_pending,
            "graph_answers": self.graph_answers,
            "pending": self.bridge.pending(),
        }

    def save_snapshot(self) -> None:
        """Write the snapshot (blocking: from a worker thread). A failed write is logged: the turn goes on."""
        try:
            self.tab.tabs.store.put_pane(self.tab.key, self.contender, self.snapshot())
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
            return await self.conversation.amessages(), await self.conversation.apending()

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
        text, kind, step = token_parts(token)
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
        # Kept here: the loop holds only a weak reference to a task, and a task nobody holds may be collected.
        self._beat = asyncio.get_running_loop().create_task(self._heartbeat(self.task))

    async def _heartbeat(self, task: asyncio.Task[None]) -> None:
        """While the turn runs here: keep the claim, show the trace so far to other workers, and cancel the turn
        when no worker has had an event stream of the tab open for `gone_after` seconds (`TabStore.turn_beat`)."""
        tabs, key = self.tab.tabs, self.tab.key
        with contextlib.suppress(Exception):  # as a failed beat: the turn goes on
            await tabs.store.turn_beat(key, self.contender, tabs.owner, self.save_snapshot)
        while not task.done():
            await asyncio.wait({task}, timeout=HEARTBEAT_S)
            if task.done():
                return
            try:
                unseen = await tabs.store.turn_beat(key, self.contender, tabs.owner, self.save_snapshot)
            except Exception as exc:  # the database is away: the claim may run out; the turn goes on
                log.warning("%s: heartbeat failed: %s", self.contender, exc)
                continue
            if unseen > tabs.gone_after + 3 * HEARTBEAT_S:
                log.info("tab %s went away: cancelling its runs", key[:8])
                self.tab.cancel_all()

    async def _finish(self, work: Callable[[TurnRunner], Awaitable[AgentResult]], runner: TurnRunner) -> None:
        try:
            report = await self._outcome(work, runner)
        except BaseException:  # the turn's task was cancelled: nothing to report; a claim on it runs out
            self.busy = False
            raise
        finally:
            self.runner = None
        self.last = report
        if report.get("answer"):
            self.transcript.append({"role": "assistant", "text": report["answer"]})
            del self.transcript[:-MAX_TRANSCRIPT]
        # The page is sent the requests (`state`'s pending, an approval event), never the paused calls themselves.
        self.graph_pending = report.pop("graph_pending", None) or []
        self.graph_answers = {}
        self.phase = Phase.AWAITING_APPROVAL if self.graph_pending else Phase.IDLE
        tabs = self.tab.tabs
        with contextlib.suppress(Exception):  # the snapshot, then the claim (`TabStore.settle`)
            await tabs.store.settle(self.tab.key, self.contender, tabs.owner, self.save_snapshot)
        self.busy = False
        self.tab.hub.publish({"type": "turn_end", "pane": self.contender, "report": report})
        for request in self.waiting_graph_requests():
            self.tab.hub.publish({"type": "approval", "pane": self.contender, "request": request})

    async def _outcome(
        self, work: Callable[[TurnRunner], Awaitable[AgentResult]], runner: TurnRunner
    ) -> dict[str, Any]:
        try:
            return self.report(await work(runner))
        except Exception as exc:  # a model outage, a conflicting save: said on the page, the server goes on
            log.warning("%s turn failed: %s: %s", self.contender, type(exc).__name__, exc)
            return {"stop_reason": None, "error": for_page(exc), "answer": None}

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
        return await runner.run(lambda: _cancelled_or(self._ask(question, cancel)))

    async def _ask(self, question: str, cancel: threading.Event) -> AgentResult:
        """A turn an outage or a dead server cut short is finished first, from where it stopped (as `chat` does),
        so the model never asks again for a call that landed (a cancelled turn needs nothing: every conversation
        ends it where it stopped, so "Stop the runs" is never undone); then the question is asked, whatever
        stop the finishing came to. Should it pause for an approval or be cancelled, its result is this turn's
        and the question is not asked; a finishing that fails (the model still down) fails the turn."""
        finished = await self.conversation.acontinue_unfinished(cancel=cancel)
        if finished is not None:
            said = finished.user_message() if finished.stop_reason is not StopReason.AWAITING_APPROVAL else None
            said = None if said is None else shown(said)
            if said:
                self.transcript.insert(len(self.transcript) - 1, {"role": "assistant", "text": said})
            self.tab.hub.publish(
                {
                    "type": "finished_earlier",
                    "pane": self.contender,
                    "stop_reason": str(finished.stop_reason),
                    "answer": said,
                }
            )
            if finished.stop_reason in (StopReason.AWAITING_APPROVAL, StopReason.CANCELLED):
                self.transcript.pop()  # the question was not asked
                return finished
        result: AgentResult = await self.conversation.aask(question, cancel=cancel)
        return result

    async def resume(self, runner: TurnRunner, answers: list[bool]) -> AgentResult:
        """Resume the graph's pause with one answer per request, in the pause's order."""
        # The guarded graph's pause lists one request and takes a bool; HumanInTheLoopMiddleware's takes the list.
        given: bool | list[bool] = answers[0] if len(answers) == 1 else answers
        return await runner.run(lambda: _cancelled_or(self.conversation.aresume(given, cancel=runner.cancel_event)))

    def waiting_graph_requests(self) -> list[dict[str, Any]]:
        """The graph pause's requests the page has not answered yet, as the page shows them."""
        ids = graph_request_ids(self.graph_pending)
        pairs = zip(self.graph_pending, ids, strict=True)
        return [graph_request(r, i) for r, i in pairs if i not in self.graph_answers]

    async def rewind(self, runner: TurnRunner) -> dict[str, Any]:
        """Take the last turn back (`arewind(1)`: saved, under the turn lock on Postgres); the store is not rewound."""

        async def go() -> tuple[Rewound, list[BaseMessage]]:
            return await self.conversation.arewind(1), await self.conversation.amessages()

        try:
            rewound, messages = await runner.run(go)
        except NoRewind as exc:
            raise BadRequest(409, f"{self.contender}: {exc}") from None
        self.transcript = transcript_of(messages)
        return {"pane": self.contender, "rewound": asdict(rewound), "transcript": self.transcript}

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


async def _cancelled_or(call: Awaitable[AgentResult]) -> AgentResult:
    """The graph's result, or, when the turn was cancelled, a CANCELLED result (the thread records the cancel)."""
    try:
        return await call
    except asyncio.CancelledError as cancelled:  # the agents' own carry what the run did (`AgentCancelled`)
        done = getattr(cancelled, "result", None)
        return done if isinstance(done, AgentResult) else AgentResult(StopReason.CANCELLED, None, 0, 0, 0, 0)


def cart_check(result: AgentResult, store_total: Decimal) -> CartCheck:
    """Compare a finished answer's money figures with the store's cart total now."""
    if not result.ok or not amounts(result.answer):
        return CartCheck.NO_FIGURE
    return CartCheck.AGREES if states_total(result.answer, money(store_total)) else CartCheck.STALE

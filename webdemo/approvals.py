"""Approvals on the page: the hand-written loop's blocking question (`ApprovalBridge`), a graph's pause.

`ApprovalBridge.ask` waits in the turn's thread for the page's answer (silence is a no); a graph's pause is
answered request by request, each under its id from `graph_request_ids`.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langchain_core.messages import ToolCall

from shared_tools.bookstore.approval import RiskyWritePolicy
from shared_tools.bookstore.store import BookStore
from webdemo.events import MAX_NAME_CHARS, now_ms, shown, shown_args

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)


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
        """Called (in the asking thread) when a question opens or closes: it writes the pane's snapshot,
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
        asked_ms = now_ms()
        self.publish({"type": "approval", "pane": self.pane, "request": question_json(question.id, call, reason)})
        answered = question.done.wait(self.timeout)
        with self._lock:
            self._open.pop(question.id, None)
        if self.on_change is not None:
            self.on_change()
        approved = answered and question.answer
        how = "yes" if approved else "no" if answered else f"no answer within {self.timeout:g} s: no"
        # The wait, typed: the page's waterfall marks it as the person's time, not the agent's.
        wait = {"asked_ms": asked_ms, "answered_ms": now_ms()}
        self.publish(
            {"type": "approval_done", "pane": self.pane, "id": question.id, "approved": approved, "how": how, **wait}
        )
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

"""Who answers approval requests, and how a paused graph run is answered until it ends.

`DemoHuman` (the demo's customer, who says no) and `AskingHuman` (chat's, asked at the prompt) decide whether
a risky write may run; the hand-written loop asks `approve`, while a graph pauses and `resume_until_answered`
puts each request of a pause to the human on its own (`decide_each`) and resumes the run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from langchain_core.messages import ToolCall

from shared_tools.bookstore.approval import RiskyWritePolicy
from shared_tools.bookstore.store import BookStore
from shared_tools.results import AgentResult, Approve, StopReason


class Human(Protocol):
    """Who answers approval requests: the rule that says which calls need a yes, and the one who gives it."""

    policy: RiskyWritePolicy

    def approve(self, call: ToolCall, reason: str) -> bool: ...


class PausedSession(Protocol):
    """What `resume_until_answered` needs of a graph session: answer the pause and go on (`GraphSession` takes
    one bool, as its pause lists one request; a `CheckpointThread` also takes one answer per request)."""

    def resume(self, approved: Any) -> AgentResult: ...


class DemoHuman:
    """The cautious customer of the approval demo: asked about a risky write, says no (or, with `answer=True`,
    yes), and remembers the question."""

    def __init__(self, store: BookStore, customer_id: str = "c1", *, answer: bool = False) -> None:
        # The customer whose cart the rule judges: with --store-db every run shops as a customer of its own.
        self.policy = RiskyWritePolicy(store, customer_id)
        self.answer = answer
        self.asked: list[str] = []
        self.pauses = 0
        """How often the graph stopped with AWAITING_APPROVAL before it was resumed."""

    def approve(self, call: ToolCall, reason: str) -> bool:
        self.asked.append(reason)
        return self.answer

    def facts(self, contender: str) -> dict[str, Any]:
        how = {
            "handwritten": "approve callback",
            "maf": "approval_mode='always_require' on add_to_cart: MAF's run returned a function_approval_request, "
            "answered with to_function_approval_response(approved=" + str(self.answer) + ") on the same session",
            "create-agent": "HumanInTheLoopMiddleware: the run stopped 'awaiting approval' (interrupt), then "
            "Command(resume={'decisions': ["
            + ("{'type': 'approve'}" if self.answer else "{'type': 'reject', 'message': <the reason>}")
            + "]})",
        }.get(contender, f"interrupt(): the run stopped 'awaiting approval', then Command(resume={self.answer})")
        return {
            "approval_asked": list(self.asked),
            "approval_answer": "yes" if self.answer else "no",
            "asked_through": how,
            "pauses": self.pauses,
        }


class AskingHuman:
    """The customer at `compare.py chat`: each risky write of their cart is put to them, through `ask`."""

    def __init__(self, store: BookStore, customer_id: str, ask: Callable[[str], bool]) -> None:
        """`ask(reason)` puts one question to the customer and returns their yes (True) or no."""
        self.policy = RiskyWritePolicy(store, customer_id)
        self.ask = ask

    def approve(self, call: ToolCall, reason: str) -> bool:
        return self.ask(reason)


def decide_each(requests: Sequence[dict[str, Any]], approve: Approve | None) -> list[bool]:
    """One answer per request of a pause, each put to the human on its own (no human: every one is a no), so a
    yes approves only the call it was asked about."""
    if approve is None:
        return [False] * len(requests)
    return [approve(request["tool_call"], request["reason"]) is True for request in requests]


def resume_with(session: PausedSession, answers: Sequence[bool]) -> AgentResult:
    """Resume a pause with one answer per request: a pause of one request (the guarded graph's, which asks one
    question at a time) takes its bool, a pause of several (`HumanInTheLoopMiddleware`'s) the list."""
    return session.resume(answers[0] if len(answers) == 1 else list(answers))


def resume_until_answered(
    session: PausedSession, result: AgentResult, approve: Approve | None
) -> tuple[AgentResult, int]:
    """Answer the graph's approval pauses, one after another, until the run ends; the result and the pauses.

    Each resume is a new stretch of the same run (it may pause again on the next risky call), so the returned
    result's trace is the stretches put together.
    """
    trace = list(result.trace)
    pauses = 0
    while result.stop_reason is StopReason.AWAITING_APPROVAL:
        pauses += 1
        result = resume_with(session, decide_each(result.pending or [], approve))
        trace += result.trace
    return replace(result, trace=trace), pauses

"""Who answers approval requests: `DemoHuman` (the demo's customer, who says no) and `AskingHuman` (chat's,
asked at the prompt) decide whether a risky write may run. A contender that asks calls `approve` during the
run; one that pauses (a graph) stops, and `resume_until_answered` (`shared_tools.conversation`, re-exported
here) puts each request of the pause to the human on its own and resumes the run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from langchain_core.messages import ToolCall

from shared_tools.bookstore.approval import RiskyWritePolicy
from shared_tools.bookstore.store import BookStore
from shared_tools.contender import Approval, ContenderSpec
from shared_tools.conversation import PausedSession, decide_each, resume_until_answered, resume_with


class Human(Protocol):
    """Who answers approval requests: the rule that says which calls need a yes, and the one who gives it."""

    policy: RiskyWritePolicy

    def approve(self, call: ToolCall, reason: str) -> bool: ...


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

    def facts(self, spec: ContenderSpec) -> dict[str, Any]:
        """What was asked and answered, and how the answer reached the run of the contender `spec` declares
        (its `asked_through`)."""
        if spec.asked_through is not None:
            how = spec.asked_through(self.answer)
        elif spec.approval is Approval.ASKS:
            how = "approve callback"
        else:
            how = f"the run stopped 'awaiting approval', then was resumed with {self.answer}"
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


__all__ = [
    "AskingHuman",
    "DemoHuman",
    "Human",
    "PausedSession",
    "decide_each",
    "resume_until_answered",
    "resume_with",
]

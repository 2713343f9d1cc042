"""The contenders: which agents compete, how each is built from one `AgentOptions`, and the approval demo's human.

`CONTENDERS` names the four (the hand-written loop, our guarded graph, LangGraph's defaults, `create_agent`)
in the order every table shows them; `build_contender` builds one of them from the same options, so the only
difference between two runs is the contender. With a `Human` (the demo's `DemoHuman`, who always says no, or
chat's `AskingHuman`, who asks at the prompt), risky writes need approval: the hand-written loop asks its
`approve` callback, while the graph pauses and `resume_until_answered` puts each pause to the human and
resumes the run, until it ends (`run_gated_graph` for a single run). The agent packages are imported on first
use, so `python compare.py --list` and `--help` never pay for importing LangGraph.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import ToolCall
from langchain_core.tools import BaseTool

from shared_tools.bookstore.approval import RiskyWritePolicy
from shared_tools.bookstore.store import BookStore
from shared_tools.results import AgentOptions, AgentResult, StopReason

Approve = Callable[[ToolCall, str], bool]
"""A human asked whether a tool call may run, given the reason it needs approval; True means yes."""

CONTENDERS: dict[str, str] = {
    "handwritten": "the from-scratch loop (handwritten.AgentLoop): every guard is code you can read",
    "langgraph": "the same agent as a LangGraph StateGraph, with our guards built as graph state and nodes",
    "langgraph-defaults": "the same graph with only LangGraph's defaults (recursion limit from max_steps)",
    "create-agent": "langchain.agents.create_agent with its built-in call-limit middleware",
}
"""Contender name -> one line saying what it is, in the order the tables show them."""

SESSION_CONTENDERS: tuple[str, ...] = ("handwritten", "langgraph")
"""The contenders with a multi-turn session API (`Session` and `GraphSession`)."""

APPROVAL_CONTENDERS: tuple[str, ...] = ("handwritten", "langgraph")
"""The contenders with an approval gate (an `approve` callback; `interrupt()` and `GraphSession.resume`)."""


class Contender(Protocol):
    """What the runner needs of an agent: one goal in, one result out."""

    def run(self, instructions: str, goal: str) -> AgentResult: ...


class Human(Protocol):
    """Who answers approval requests: the rule that says which calls need a yes, and the one who gives it."""

    policy: RiskyWritePolicy

    def approve(self, call: ToolCall, reason: str) -> bool: ...


class PausedSession(Protocol):
    """What `resume_until_answered` needs of a graph session: answer the pause and go on."""

    def resume(self, approved: bool) -> AgentResult: ...


class DemoHuman:
    """The cautious customer of the approval demo: asked about a risky write, says no, and remembers the question."""

    def __init__(self, store: BookStore, customer_id: str = "c1") -> None:
        # The customer whose cart the rule judges: with --store-db every run shops as a customer of its own.
        self.policy = RiskyWritePolicy(store, customer_id)
        self.asked: list[str] = []
        self.pauses = 0
        """How often the graph stopped with AWAITING_APPROVAL before it was resumed."""

    def approve(self, call: ToolCall, reason: str) -> bool:
        self.asked.append(reason)
        return False

    def facts(self, contender: str) -> dict[str, Any]:
        how = (
            "approve callback"
            if contender == "handwritten"
            else "interrupt(): the run stopped 'awaiting approval', then Command(resume=False)"
        )
        return {"approval_asked": list(self.asked), "approval_answer": "no", "asked_through": how,
                "pauses": self.pauses}


class AskingHuman:
    """The customer at `compare.py chat`: each risky write of their cart is put to them, through `ask`."""

    def __init__(self, store: BookStore, customer_id: str, ask: Callable[[str], bool]) -> None:
        """`ask(reason)` puts one question to the customer and returns their yes (True) or no."""
        self.policy = RiskyWritePolicy(store, customer_id)
        self.ask = ask

    def approve(self, call: ToolCall, reason: str) -> bool:
        return self.ask(reason)


def build_contender(
    name: str, model: BaseChatModel, tools: list[BaseTool], options: AgentOptions, human: Human | None = None
) -> Contender:
    """One of the four contenders, built from the same `options`.

    With a `human`, risky writes need approval: the hand-written loop asks `human.approve`; the graph pauses
    instead (run it with `run_gated_graph`).
    """
    if human is not None and name not in APPROVAL_CONTENDERS:
        raise ValueError(f"{name} has no approval gate in this demo")
    if human is not None:
        options = replace(options, needs_approval=human.policy)
    if name == "handwritten":
        from handwritten import AgentLoop

        return AgentLoop(model, tools, options, approve=human.approve if human is not None else None)
    if name == "langgraph":
        from langgraph_version import GraphAgent

        return GraphAgent(model, tools, options)
    if name == "langgraph-defaults":
        from langgraph_version import DefaultsGraphAgent

        return DefaultsGraphAgent(model, tools, options)
    if name == "create-agent":
        from langgraph_version import create_agent_contender

        # create_agent has no switch for parallel tools or for truncating results: that gap is part of the lesson.
        return create_agent_contender(
            model,
            tools,
            AgentOptions(limits=options.limits, detailed_errors=options.detailed_errors, on_event=options.on_event),
        )
    raise ValueError(f"unknown contender {name!r}")


def decide(requests: Sequence[dict[str, Any]], approve: Approve | None) -> bool:
    """The answer to one pause of the graph: every request it lists is put to the human; yes only if all are yes.

    The guarded graph pauses on one call at a time, so a pause lists one request; the rule for several is the
    cautious one. Without a human nobody can say yes, as in the hand-written loop without `approve`.
    """
    if approve is None:
        return False
    answers = [approve(request["tool_call"], request["reason"]) for request in requests]
    return bool(answers) and all(answers)


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
        result = session.resume(decide(result.pending or [], approve))
        trace += result.trace
    return replace(result, trace=trace), pauses


def run_gated_graph(agent: Contender, instructions: str, goal: str, human: DemoHuman) -> AgentResult:
    """Run the graph in a session; whenever it pauses for approval, the human answers and the run resumes."""
    from langgraph_version import GraphSession

    session = GraphSession(agent, instructions, thread_id=f"approval-{uuid.uuid4().hex[:8]}")
    result, pauses = resume_until_answered(session, session.ask(goal), human.approve)
    human.pauses += pauses
    return result

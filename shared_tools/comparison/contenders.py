"""The contenders: which agents compete, how each is built from one `AgentOptions`, and the approval demo's human.

`CONTENDERS` names the four (the hand-written loop, our guarded graph, LangGraph's defaults, `create_agent`)
in the order every table shows them; `build_contender` builds one of them from the same options, so the only
difference between two runs is the contender. With a `DemoHuman`, risky writes need approval: the
hand-written loop asks its `approve` callback, while the graph pauses and `run_gated_graph` answers each pause
and resumes it, until the run ends. The agent packages are imported on first use, so `python compare.py
--list` and `--help` never pay for importing LangGraph.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any, Protocol

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import ToolCall
from langchain_core.tools import BaseTool

from shared_tools.bookstore.approval import RiskyWritePolicy
from shared_tools.bookstore.store import BookStore
from shared_tools.results import AgentOptions, AgentResult, StopReason

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


class DemoHuman:
    """The cautious customer of the approval demo: asked about a risky write, says no, and remembers the question."""

    def __init__(self, store: BookStore) -> None:
        self.policy = RiskyWritePolicy(store)
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


def build_contender(
    name: str, model: BaseChatModel, tools: list[BaseTool], options: AgentOptions, human: DemoHuman | None = None
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


def run_gated_graph(agent: Contender, instructions: str, goal: str, human: DemoHuman) -> AgentResult:
    """Run the graph in a session; whenever it pauses for approval, the human answers and the run resumes.

    Each resume is a new stretch of the same run, so the record's trace is the stretches put together.
    """
    from langgraph_version import GraphSession

    session = GraphSession(agent, instructions, thread_id=f"approval-{uuid.uuid4().hex[:8]}")
    result = session.ask(goal)
    trace = list(result.trace)
    while result.stop_reason is StopReason.AWAITING_APPROVAL:
        human.pauses += 1
        for request in result.pending or []:
            human.approve(request["tool_call"], request["reason"])
        result = session.resume(False)
        trace += result.trace
    return replace(result, trace=trace)

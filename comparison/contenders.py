"""The contenders: which agents compete, how each is built from one `AgentOptions`, and the approval demo's human.

`CONTENDERS` names the four (the hand-written loop, our guarded graph, LangGraph's defaults, `create_agent`)
in the order every table shows them; `build_contender` builds one of them from the same options, so the only
difference between two runs is the contender. With a `Human` (the demo's `DemoHuman`, who always says no, or
chat's `AskingHuman`, who asks at the prompt), risky writes need approval: the hand-written loop asks its
`approve` callback, while the graph pauses and `resume_until_answered` puts each pause to the human and
resumes the run, until it ends (`run_gated_graph` for a single run; for `create_agent` the pause is
`HumanInTheLoopMiddleware`'s). `not_available` and `contenders_for` are the one place that says which
contenders run a scenario's variant and, in words, why the others cannot (LangGraph's prebuilt graph has no
approval gate; `ToolNode` has no switch to run a reply's calls one at a time). The agent packages are imported
on first use, so `python compare.py --list` and `--help` never pay for importing LangGraph.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import ToolCall
from langchain_core.tools import BaseTool

from shared_tools.bookstore.approval import RiskyWritePolicy
from shared_tools.bookstore.store import BookStore
from shared_tools.results import AgentOptions, AgentResult, StopReason

if TYPE_CHECKING:
    from comparison.scenarios import Scenario, Variant

Approve = Callable[[ToolCall, str], bool]
"""A human asked whether a tool call may run, given the reason it needs approval; True means yes."""

CONTENDERS: dict[str, str] = {
    "handwritten": "the from-scratch loop (handwritten.AgentLoop): every guard is code you can read",
    "langgraph": "the same agent as a LangGraph StateGraph, with our guards built as graph state and nodes",
    "langgraph-defaults": "the same graph with only LangGraph's defaults (recursion limit from max_steps)",
    "create-agent": "langchain.agents.create_agent with its built-in middleware (call limits, tool errors, "
    "HumanInTheLoopMiddleware for approvals)",
}
"""Contender name -> one line saying what it is, in the order the tables show them."""

SESSION_CONTENDERS: tuple[str, ...] = tuple(CONTENDERS)
"""The contenders with a multi-turn conversation: `Session`, `GraphSession`, and a checkpointer thread of
LangGraph's prebuilt graph and of `create_agent(..., checkpointer=...)` (`conversations.CheckpointThread`)."""

APPROVAL_CONTENDERS: tuple[str, ...] = ("handwritten", "langgraph", "create-agent")
"""The contenders with an approval gate: an `approve` callback; `interrupt()` and `GraphSession.resume`;
`HumanInTheLoopMiddleware` and `Command(resume={"decisions": [...]})`."""

TOOLNODE_CONTENDERS: tuple[str, ...] = ("langgraph-defaults", "create-agent")
"""The contenders whose tools run in LangGraph's prebuilt `ToolNode`."""

NO_APPROVAL_GATE = (
    "LangGraph's prebuilt graph (ToolNode + tools_condition) has no approval gate: ToolNode runs every call the "
    "model asks for, and a pause for a human's yes means writing an interrupt() node of your own (what the "
    "langgraph contender does)"
)
NO_SEQUENTIAL_TOOLS = (
    "LangGraph's ToolNode has no switch to run one reply's tool calls one at a time: it always runs them "
    "concurrently, so this variant would only repeat the parallel one"
)


def not_available(contender: str, scenario: Scenario, variant: Variant) -> str | None:
    """Why `contender` cannot run this variant of `scenario`, in words; None when it runs it.

    A variant that turns a knob the contender's framework does not have is not run by it, and says so: an
    approval gate (`variant.approval_gate`), and running tools one at a time where the scenario compares it
    with running them at once (its variants differ in `parallel_tools`). A scenario or variant that lists
    its contenders (`contenders=`) excludes the others, also said in words.
    """
    if contender not in CONTENDERS:
        raise ValueError(f"unknown contender {contender!r}")
    if variant.approval_gate and contender not in APPROVAL_CONTENDERS:
        return NO_APPROVAL_GATE
    compares_parallel = len({v.parallel_tools for v in scenario.variants}) > 1
    if compares_parallel and not variant.parallel_tools and contender in TOOLNODE_CONTENDERS:
        return NO_SEQUENTIAL_TOOLS
    if contender not in scenario.contenders and scenario.others_reason is not None:
        return scenario.others_reason
    listed = variant.contenders or scenario.contenders
    if contender not in listed or contender not in scenario.contenders:
        given = dict(variant.why_not).get(contender)
        if given is not None:
            return given
        runners = ", ".join(c for c in listed if c in scenario.contenders)
        return f"{scenario.name}/{variant.name} is run only by {runners}"
    return None


def contenders_for(
    scenario: Scenario, variant: Variant, chosen: Sequence[str] = tuple(CONTENDERS)
) -> tuple[list[str], dict[str, str]]:
    """Which of `chosen` run this variant (in table order), and why each of the others does not."""
    running: list[str] = []
    why_not: dict[str, str] = {}
    for contender in (c for c in CONTENDERS if c in chosen):
        reason = not_available(contender, scenario, variant)
        if reason is None:
            running.append(contender)
        else:
            why_not[contender] = reason
    return running, why_not


class Contender(Protocol):
    """What the runner needs of an agent: one goal in, one result out."""

    def run(self, instructions: str, goal: str) -> AgentResult: ...


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
            "create-agent": "HumanInTheLoopMiddleware: the run stopped 'awaiting approval' (interrupt), then "
            "Command(resume={'decisions': ["
            + ("{'type': 'approve'}" if self.answer else "{'type': 'reject', 'message': <the reason>}")
            + "]})",
        }.get(contender, f"interrupt(): the run stopped 'awaiting approval', then Command(resume={self.answer})")
        return {"approval_asked": list(self.asked), "approval_answer": "yes" if self.answer else "no",
                "asked_through": how, "pauses": self.pauses}


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

    With a `human`, risky writes need approval: the hand-written loop asks `human.approve`; the guarded graph
    and `create_agent` (through `HumanInTheLoopMiddleware`, asking only where `human.policy` says so) pause
    instead (run them with `run_gated_graph`). LangGraph's defaults have no gate: `NO_APPROVAL_GATE`.
    """
    if human is not None and name not in APPROVAL_CONTENDERS:
        raise ValueError(f"{name}: {NO_APPROVAL_GATE}" if name in CONTENDERS else f"unknown contender {name!r}")
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
        own = AgentOptions(
            tracer_provider=options.tracer_provider,
            limits=options.limits,
            detailed_errors=options.detailed_errors,
            on_event=options.on_event,
            on_token=options.on_token,
            needs_approval=options.needs_approval,
        )
        if options.needs_approval is None:
            return create_agent_contender(model, tools, own)
        from langgraph.checkpoint.memory import InMemorySaver

        # HumanInTheLoopMiddleware pauses with interrupt(), which needs a checkpointer (a thread swaps in its own).
        return create_agent_contender(model, tools, own, checkpointer=InMemorySaver())
    raise ValueError(f"unknown contender {name!r}")


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


def run_gated_graph(agent: Contender, instructions: str, goal: str, human: DemoHuman) -> AgentResult:
    """Run the graph in a session; whenever it pauses for approval, the human answers and the run resumes.

    The guarded graph runs in a `GraphSession`; `create_agent` in a checkpointer thread of its own
    (`conversations.CheckpointThread`), where `HumanInTheLoopMiddleware`'s pause is answered in its format.
    """
    from langgraph_version import GraphAgent, GraphSession

    thread_id = f"approval-{uuid.uuid4().hex[:8]}"
    session: Any
    if isinstance(agent, GraphAgent):
        session = GraphSession(agent, instructions, thread_id=thread_id)
    else:
        from comparison.conversations import CheckpointThread

        session = CheckpointThread(agent, instructions, thread_id)  # type: ignore[arg-type]
    result, pauses = resume_until_answered(session, session.ask(goal), human.approve)
    human.pauses += pauses
    return result

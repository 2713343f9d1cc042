"""The contenders: which agents compete, and how each is built from one `AgentOptions`.

`CONTENDERS` names the five (the hand-written loop, our guarded graph, LangGraph's defaults, `create_agent`, and
Microsoft Agent Framework's `Agent`) in the order every table shows them; `build_contender` builds one from the
same options. The agent packages are imported on first use, so `--list` and `--help` never pay for LangGraph.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool

from comparison.approvals import Human
from shared_tools.results import AgentOptions, AgentResult

CONTENDERS: dict[str, str] = {
    "handwritten": "the from-scratch loop (handwritten.AgentLoop): every guard is code you can read",
    "langgraph": "the same agent as a LangGraph StateGraph, with our guards built as graph state and nodes",
    "langgraph-defaults": "the same graph with only LangGraph's defaults (recursion limit from max_steps)",
    "create-agent": "langchain.agents.create_agent with its built-in middleware (call limits, tool errors, "
    "HumanInTheLoopMiddleware for approvals)",
    "maf": "Microsoft Agent Framework's Agent (the article's framework, in Python): its FunctionInvocationLayer "
    "runs the tools, AgentSession keeps the conversation, approval_mode gates add_to_cart",
}
"""Contender name -> one line saying what it is, in the order the tables show them."""

SESSION_CONTENDERS: tuple[str, ...] = tuple(CONTENDERS)
"""The contenders with a multi-turn conversation: `Session`, `GraphSession`, a checkpointer thread of
LangGraph's prebuilt graph and of `create_agent(..., checkpointer=...)` (`prebuilt.thread.CheckpointThread`), and
MAF's `AgentSession` (`maf_version.MafSession`, kept in a JSON file through `to_dict`/`from_dict`)."""

CONVERSATION_MODULES: dict[str, str] = {
    "handwritten": "handwritten.kept",
    "langgraph": "langgraph_version.conversation",
    "langgraph-defaults": "langgraph_version.conversation",
    "create-agent": "langgraph_version.conversation",
    "maf": "maf_version.conversation",
}
"""Contender name -> the module that keeps its conversations: each has `open_conversation` and `check_saved`
with the same signatures, and returns a `shared_tools.conversation.Conversation` (imported on first use)."""

APPROVAL_CONTENDERS: tuple[str, ...] = ("handwritten", "langgraph", "create-agent", "maf")
"""The contenders with an approval gate: an `approve` callback; `interrupt()` and `GraphSession.resume`;
`HumanInTheLoopMiddleware` and `Command(resume={"decisions": [...]})`; MAF's `approval_mode="always_require"`,
whose request the human answers with `to_function_approval_response` (asked during the run, as the hand-written
loop asks its callback)."""

ASKING_CONTENDERS: tuple[str, ...] = ("handwritten", "maf")
"""The gated contenders that put a risky write to `Human.approve` while the run goes on; the graphs pause instead
(`run_gated_graph`)."""


def parse_contenders(values: Sequence[str] | None) -> tuple[str, ...]:
    """`--contenders` options (each a comma-separated list, the option may repeat) as contender names; ValueError
    for a bad one. No option means all of them; an empty value (``--contenders ''``, ``,``) or an empty item
    (``a,,b``, ``a,``) is a mistake, not "all": a script that builds the list from an empty variable must not run
    everything."""
    if values is None:
        return tuple(CONTENDERS)
    names: list[str] = []
    for value in values:
        items = [item.strip() for item in value.split(",")]
        if not all(items):
            raise ValueError(
                f"--contenders {value!r} names an empty contender; give NAME[,NAME] from: {', '.join(CONTENDERS)}"
            )
        names += items
    bad = [c for c in names if c not in CONTENDERS]
    if bad:
        raise ValueError(f"unknown contender {bad[0]!r}; choose from: {', '.join(CONTENDERS)}")
    return tuple(dict.fromkeys(names))


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


class Contender(Protocol):
    """What the runner needs of an agent: one goal in, one result out."""

    def run(self, instructions: str, goal: str) -> AgentResult: ...


def build_contender(
    name: str, model: BaseChatModel, tools: list[BaseTool], options: AgentOptions, human: Human | None = None
) -> Contender:
    """One of the contenders, built from the same `options`.

    With a `human`, risky writes need approval: the hand-written loop and MAF (whose run stops on its approval
    request, answered from `human.approve` before it goes on) ask `human.approve`; the guarded graph
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
    if name == "maf":
        from maf_version import MafAgent

        # MAF has no token budget, repeat check or result cut: `MafAgent.not_available` names what it ignores.
        return MafAgent(model, tools, options, approve=human.approve if human is not None else None)
    raise ValueError(f"unknown contender {name!r}")

"""Our guarded LangGraph graph as a contender (`SPEC`, the entry point ``langgraph``): every guard of the
hand-written loop, built as graph state and nodes; it pauses for approval with `interrupt()`."""

from __future__ import annotations

from typing import Any

from shared_tools.contender import Approval, Capability, Contender, ContenderSpec
from shared_tools.results import AgentOptions, Approve

LANGGRAPH = "langgraph>=1.2.12,<1.3"
"""The pin of every LangGraph contender (pyproject.toml's dependency)."""


def build(model: Any, tools: list[Any], options: AgentOptions, approve: Approve | None) -> Contender:
    """The graph pauses for approval (`interrupt()`); `approve` is asked by whoever resumes its thread."""
    from langgraph_version.agent import GraphAgent

    return GraphAgent(model, tools, options)


SPEC = ContenderSpec(
    name="langgraph",
    description="the same agent as a LangGraph StateGraph, with our guards built as graph state and nodes",
    requirement=LANGGRAPH,
    build=build,
    order=2,
    approval=Approval.PAUSES,
    capabilities=frozenset(
        {
            Capability.REWIND,
            Capability.REPLAY,
            Capability.STREAMING,
            Capability.SEQUENTIAL_TOOLS,
            Capability.HISTORY_WINDOW,
            Capability.SUMMARY,
            Capability.STORAGE_OPTIONS,
        }
    ),
    guards={
        "step limit": "RemainingSteps in the model node",
        "token budget": "AgentLimits.max_tokens, checked in the graph's state",
        "time budget": "AgentLimits.max_duration, checked in the graph's state",
        "reply cap": "max_tokens passed by the model node",
        "repeat check": "AgentLimits.max_repeats in the tools node",
        "unknown tool": "an error result naming the tools there are",
        "error hiding": "AgentOptions.detailed_errors=False",
        "truncation": "AgentOptions.max_tool_result_chars",
        "approval gate": "interrupt() and Command(resume=...)",
    },
    conversation="langgraph_version.conversation",
    source_modules=("langgraph_version.graph", "langgraph_version.run", "langgraph_version.agent"),
    asked_through=lambda answer: f"interrupt(): the run stopped 'awaiting approval', then Command(resume={answer})",
    owner="LangGraph StateGraph",
    owns={
        "loop": "framework: model node -> tools node edges",
        "tool invocation": "framework: ToolNode",
        "error handling": "ToolNode re-raises tool exceptions unless you opt in",
        "step limit": "recursion_limit counts supersteps (default 10007); RemainingSteps to end cleanly",
        "token budget": "you (a node reading usage)",
        "time budget": "you (per-node timeouts only)",
        "reply cap": "you (the model node passes it)",
        "repeat check": "you",
        "session memory": "checkpointer per thread_id",
        "persistence": "SqliteSaver / Postgres saver",
        "stale reads": "you",
        "human approval": "interrupt() in a node, Command(resume=...) via the checkpointer",
        "tracing (OTel spans)": "no spans by itself; LangChain's callbacks fire per model and tool call, and you "
        "turn them into spans or write them in your nodes",
    },
    shared_thread=True,
)

"""LangGraph as shipped as a contender (`SPEC`, the entry point ``langgraph-defaults``): the prebuilt
`ToolNode` + `tools_condition` graph with only LangGraph's defaults, its recursion limit set from max_steps."""

from __future__ import annotations

from typing import Any

from langgraph_version.contenders.langgraph import LANGGRAPH
from shared_tools.contender import Capability, Contender, ContenderSpec
from shared_tools.results import AgentOptions, Approve

NO_APPROVAL_GATE = (
    "LangGraph's prebuilt graph (ToolNode + tools_condition) has no approval gate: ToolNode runs every call the "
    "model asks for, and a pause for a human's yes means writing an interrupt() node of your own (what the "
    "langgraph contender does)"
)
NO_SEQUENTIAL_TOOLS = (
    "LangGraph's ToolNode has no switch to run one reply's tool calls one at a time: it always runs them "
    "concurrently, so this variant would only repeat the parallel one"
)
NO_REWIND = (
    "rewind is a method of our two sessions (handwritten.Session cuts its list; GraphSession forks from an "
    "earlier checkpoint); the framework-only threads here have none"
)
NO_REPLAY = (
    "replaying a checkpoint is GraphSession.areplay (LangGraph's invoke(None, config with a checkpoint_id)); the "
    "framework-only threads here are not given one"
)
NO_HISTORY_POLICY = (
    "LangGraph's prebuilt graph and create_agent keep a thread but no history policy of ours (trimming "
    "needs a pre-model hook or SummarizationMiddleware you add), so their growth is the langgraph "
    "contender's full-history row"
)
NO_CHECKPOINT_OPTIONS = (
    "the framework-only threads keep LangGraph's checkpointer as it comes: no storage options of ours to compare"
)
THREAD_LACKS = {
    Capability.REWIND: NO_REWIND,
    Capability.REPLAY: NO_REPLAY,
    Capability.HISTORY_WINDOW: NO_HISTORY_POLICY,
    Capability.SUMMARY: NO_HISTORY_POLICY,
    Capability.STORAGE_OPTIONS: NO_CHECKPOINT_OPTIONS,
    Capability.SEQUENTIAL_TOOLS: NO_SEQUENTIAL_TOOLS,
}
"""What the framework-only threads (this one and create_agent's, `prebuilt.thread.CheckpointThread`) lack."""


def build(model: Any, tools: list[Any], options: AgentOptions, approve: Approve | None) -> Contender:
    from langgraph_version.prebuilt.defaults import DefaultsGraphAgent

    return DefaultsGraphAgent(model, tools, options)


SPEC = ContenderSpec(
    name="langgraph-defaults",
    description="the same graph with only LangGraph's defaults (recursion limit from max_steps)",
    requirement=LANGGRAPH,
    build=build,
    order=3,
    capabilities=frozenset({Capability.STREAMING}),
    guards={
        "step limit": "recursion_limit (GraphRecursionError, caught)",
        "unknown tool": "ToolNode's error result for an unknown tool",
    },
    lacks={**THREAD_LACKS, Capability.APPROVAL: NO_APPROVAL_GATE},
    conversation="langgraph_version.conversation",
    source_modules=("langgraph_version.prebuilt.defaults", "langgraph_version.run"),
)

"""Microsoft Agent Framework's `Agent` as a contender (`SPEC`, the entry point ``maf``): its
FunctionInvocationLayer runs the tools, AgentSession keeps the conversation, approval_mode gates add_to_cart."""

from __future__ import annotations

from typing import Any

from shared_tools.contender import Approval, Capability, Contender, ContenderSpec
from shared_tools.results import AgentOptions, Approve

NO_MAF_SUMMARY = (
    "MafSession has a window (keep_turns, a HistoryProvider that sends the last turns) but writes no summary: "
    "MAF's own compaction (Agent(compaction_strategy=...)) is not wired into this comparison"
)
NO_MAF_REPLAY = (
    "MAF's AgentSession holds the history as one list in its state, with no checkpoints: there is nothing to replay "
    "from, and rewinding it (MafSession.rewind cuts the list) is all it has"
)
NO_MAF_STORAGE = "MAF's session is one JSON file (AgentSession.to_dict), rewritten each turn: no checkpoints to store"


def build(model: Any, tools: list[Any], options: AgentOptions, approve: Approve | None) -> Contender:
    """MAF's run stops on its approval request, answered from `approve` before it goes on (asked in the run).
    It has no token budget, repeat check or result cut: `MafAgent.not_available` names what it ignores."""
    from maf_version.agent import MafAgent

    return MafAgent(model, tools, options, approve=approve)


def asked_through(answer: bool) -> str:
    return (
        "approval_mode='always_require' on add_to_cart: MAF's run returned a function_approval_request, "
        f"answered with to_function_approval_response(approved={answer}) on the same session"
    )


SPEC = ContenderSpec(
    name="maf",
    description="Microsoft Agent Framework's Agent (the article's framework, in Python): its FunctionInvocationLayer "
    "runs the tools, AgentSession keeps the conversation, approval_mode gates add_to_cart",
    requirement="agent-framework-core==1.23.*",
    build=build,
    order=5,
    approval=Approval.ASKS,
    capabilities=frozenset(
        {Capability.REWIND, Capability.STREAMING, Capability.SEQUENTIAL_TOOLS, Capability.HISTORY_WINDOW}
    ),
    guards={
        "step limit": "max_iterations",
        "time budget": "max_duration_seconds",
        "unknown tool": "FunctionInvocationLayer's error result for an unknown tool",
        "error hiding": "include_detailed_errors=False",
        "approval gate": "approval_mode='always_require'",
    },
    lacks={
        Capability.REPLAY: NO_MAF_REPLAY,
        Capability.SUMMARY: NO_MAF_SUMMARY,
        Capability.STORAGE_OPTIONS: NO_MAF_STORAGE,
    },
    conversation="maf_version.conversation",
    source_modules=("maf_version.agent", "maf_version.client"),
    asked_through=asked_through,
    owner="Microsoft Agent Framework",
    owns={
        "loop": "framework: FunctionInvocationLayer, the client's tool loop",
        "tool invocation": "framework: FunctionTool; a reply's calls run concurrently by default (not so in .NET)",
        "error handling": "framework: every exception an error result, 'Error: Function failed.' unless "
        "include_detailed_errors",
        "step limit": "max_iterations (default 40), then one more call with tools off whose text comes back as if done",
        "token budget": "nobody (FunctionInvocationConfiguration has no token limit)",
        "time budget": "max_duration_seconds, checked after a tool round (a hung model call is yours to bound)",
        "reply cap": "nobody (the model's own max_tokens, if any)",
        "repeat check": "nobody (max_function_calls caps counts, not repeats)",
        "session memory": "AgentSession (its InMemoryHistoryProvider)",
        "persistence": "AgentSession.to_dict()/from_dict() (a JSON file here); no SQLite provider",
        "stale reads": "you",
        "human approval": "approval_mode='always_require' per tool; to_function_approval_response, same session",
        "tracing (OTel spans)": "the framework: invoke_agent, chat and execute_tool GenAI spans (to the global "
        "tracer provider only)",
    },
)

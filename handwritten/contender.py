"""The hand-written loop as a contender: what it declares to the harness (`SPEC`, the entry point
``handwritten = "handwritten.contender:SPEC"``). Cheap to import; the loop is imported when it is built."""

from __future__ import annotations

from typing import Any

from shared_tools.contender import Approval, Capability, Contender, ContenderSpec
from shared_tools.results import AgentOptions, Approve

NO_CHECKPOINTS = (
    "a list of messages keeps no checkpoints, so there is nothing to replay: cutting the list (rewind) is all "
    "the hand-written session has"
)
NO_STORAGE_OPTION = (
    "its JSON Lines file gets one line of new messages per save: there are no checkpoints to store it in"
)


def build(model: Any, tools: list[Any], options: AgentOptions, approve: Approve | None) -> Contender:
    from handwritten.loop import AgentLoop

    return AgentLoop(model, tools, options, approve=approve)


SPEC = ContenderSpec(
    name="handwritten",
    description="the from-scratch loop (handwritten.AgentLoop): every guard is code you can read",
    requirement="langchain-core>=1.8,<1.8.4",
    build=build,
    order=1,
    approval=Approval.ASKS,
    awaits_approve=True,  # `AgentLoop.check_approval` awaits an awaitable answer
    capabilities=frozenset(
        {
            Capability.REWIND,
            Capability.STREAMING,
            Capability.SEQUENTIAL_TOOLS,
            Capability.HISTORY_WINDOW,
            Capability.SUMMARY,
        }
    ),
    guards={
        "step limit": "the loop's max_steps",
        "token budget": "AgentLimits.max_tokens",
        "time budget": "AgentLimits.max_duration",
        "reply cap": "AgentLimits.reply_cap (max_tokens = what is left of the budget)",
        "repeat check": "AgentLimits.max_repeats",
        "unknown tool": "an error result naming the tools there are",
        "error hiding": "AgentOptions.detailed_errors=False",
        "truncation": "AgentOptions.max_tool_result_chars",
        "stale read": "AgentOptions.stale_reads (cart results older than the store are marked)",
        "approval gate": "the approve callback",
    },
    lacks={Capability.REPLAY: NO_CHECKPOINTS, Capability.STORAGE_OPTIONS: NO_STORAGE_OPTION},
    conversation="handwritten.kept",
    source_modules=("handwritten.loop",),
    asked_through=lambda answer: "approve callback",
    owner="hand-written loop",
    owns={
        "loop": "you: a for loop over steps",
        "tool invocation": "you: look up the tool, invoke it",
        "error handling": "you: every failure becomes an error result",
        "step limit": "you: max_steps",
        "token budget": "you",
        "time budget": "you",
        "reply cap": "you: max_tokens = what is left of the budget",
        "repeat check": "you",
        "session memory": "you: keep the message list",
        "persistence": "you: save/load JSON",
        "stale reads": "you: cart results carry the store's revision; an older one is marked before the model call",
        "human approval": "you: an approve callback before the tool runs",
        "tracing (OTel spans)": "you: a span per run, model call and tool call, in a few lines (guard decisions "
        "and budget cuts included)",
    },
    shared_thread=True,
)

"""The three shapes a model reply can take, decided in one place for both agents.

The typed steps come from the seed article's companion F# lesson ("The Agent Loop", a discriminated union
`FinalAnswer | CallTools | InvalidResponse`). A reply either asks for tools (`CallTools`), answers the user
(`FinalAnswer`), or is unusable (`InvalidResponse`: empty, or only tool calls that could not be parsed). The
hand-written loop matches on these directly; the LangGraph model node turns them into a stop reason in graph
state. One definition keeps the two from disagreeing about when a run is done.
"""

from __future__ import annotations

from dataclasses import dataclass

from langchain_core.messages import AIMessage, ToolCall


@dataclass(frozen=True)
class FinalAnswer:
    """Text for the user and no tool calls: the run is done."""

    text: str


@dataclass(frozen=True)
class CallTools:
    """The model asked for one or more tools; each call keeps its id so its result can be matched to it."""

    calls: tuple[ToolCall, ...]


@dataclass(frozen=True)
class InvalidResponse:
    """Neither usable text nor a usable tool call: nothing safe to do, so the run stops."""

    reason: str


AgentStep = FinalAnswer | CallTools | InvalidResponse


def classify(reply: AIMessage) -> AgentStep:
    """Which of the three shapes a reply has. Tool calls win over text, as in the seed."""
    if reply.tool_calls:
        return CallTools(tuple(reply.tool_calls))
    if reply.invalid_tool_calls:
        # The model tried to call a tool and the call could not be parsed; any text beside it is a preamble
        # ("let me check..."), not an answer for the user.
        return InvalidResponse(f"{len(reply.invalid_tool_calls)} tool call(s) could not be parsed")
    text = reply.text.strip()
    return FinalAnswer(text) if text else InvalidResponse("empty response")

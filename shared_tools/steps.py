"""The three shapes a model reply can take, decided in one place for both agents.

From the article's companion F# lesson: a reply asks for tools (`CallTools`), answers (`FinalAnswer`) or is unusable
(`InvalidResponse`: empty, cut at its length limit, or only unparseable calls). The loop matches on these; the
graph's model node turns them into a stop reason.
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
    """Which of the three shapes a reply has. Tool calls win over text, as in the article."""
    if was_cut(reply):
        # A reply that ran out of output tokens is half a reply: its text is half an answer, and its last call
        # may be half a call that still parses (a streamed merge closes a cut JSON object: `{"quantity": 1` of
        # a cut `{"quantity": 12}`), so nothing of it may run.
        return InvalidResponse("the reply was cut off at its length limit")
    if reply.tool_calls:
        return CallTools(tuple(reply.tool_calls))
    if reply.invalid_tool_calls:
        # The model tried to call a tool and the call could not be parsed; any text beside it is a preamble
        # ("let me check..."), not an answer for the user.
        return InvalidResponse(f"{len(reply.invalid_tool_calls)} tool call(s) could not be parsed")
    text = reply.text.strip()
    return FinalAnswer(text) if text else InvalidResponse("empty response")


def was_cut(reply: AIMessage) -> bool:
    """The model stopped because it ran out of output tokens (OpenAI's finish_reason, Ollama's done_reason)."""
    metadata = reply.response_metadata
    return metadata.get("finish_reason") == "length" or metadata.get("done_reason") == "length"

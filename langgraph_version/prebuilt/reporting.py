"""How a run of LangGraph's prebuilt loop reports: the trace line of a call its own `ToolNode` answered, and
why a run that reached END ended. Both prebuilt contenders (`defaults.py`, `create_agent.py`) use them.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from langgraph_version.run import calls_this_run, emit, stop_reason_for
from shared_tools import guards, telemetry
from shared_tools.results import StopReason


def emit_tool_result(request: ToolCallRequest, result: ToolMessage | Command, duration_s: float) -> None:
    """The trace line of a call that LangGraph's own `ToolNode` answered (defaults graph, `create_agent`)."""
    text = result.text if isinstance(result, ToolMessage) else repr(result)
    is_error = isinstance(result, ToolMessage) and result.status == "error"
    step = calls_this_run(request.state["messages"])
    emit(guards.tool_event(step, request.tool_call, text, duration_s, is_error=is_error))
    # A call ToolNode answers itself (an unknown tool) runs no tool, so no tool callback gave it a span.
    telemetry.current_run().answered_unless_ran(request.tool_call, step, text, is_error=is_error, duration_s=duration_s)


def final_stop_reason(messages: Sequence[BaseMessage]) -> StopReason:
    """How a run of LangGraph's prebuilt loop that reached END ended: `tools_condition` ends only after a reply
    without tool calls."""
    last = messages[-1]
    assert isinstance(last, AIMessage), "tools_condition ends the graph only after a model reply"
    return stop_reason_for(last) or StopReason.DONE

"""LangChain's callbacks as GenAI spans, for the contenders whose loop is the framework's own (defaults, create_agent).

What the framework gives for free is its callbacks: `SpanCallbacks` turns `on_chat_model_start`/`on_llm_end` into a
``chat`` span and `on_tool_start`/`on_tool_end` into an ``execute_tool`` span (and their ``_error`` callbacks into
ERROR), in `shared_tools.telemetry`'s shapes. A call the framework answers without running a tool fires no callback:
the hooks that already trace those calls add its span (`RunSpans.answered`). `framework_run` opens the run's span.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage, ToolCall
from langchain_core.outputs import ChatGeneration, LLMResult
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import merge_configs

from langgraph_version.run import calls_this_run
from shared_tools import guards, telemetry

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider


class SpanCallbacks(BaseCallbackHandler):
    """One run's chat and tool callbacks as child spans of its `RunSpans`, matched by LangChain's run ids.

    The step of a chat span is counted from the history the model is sent, as the contenders number their trace
    lines; a tool span has the step of the last model call before it.
    """

    run_inline = True  # in the callback's own task, so the span starts and ends when the call does

    def __init__(self, spans: telemetry.RunSpans) -> None:
        self.spans = spans
        self.open: dict[UUID, telemetry.ChildSpan] = {}
        self.step: int | None = None

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        history = messages[0] if messages else []
        self.step = calls_this_run(history) + 1
        model = telemetry.ModelInfo.of_params(metadata or {})
        self.open[run_id] = self.spans.chat(self.step, history, model)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        span = self.open.pop(run_id, None)
        if span is None:
            return
        generation = response.generations[0][0] if response.generations and response.generations[0] else None
        if isinstance(generation, ChatGeneration):
            span.replied(generation.message)
        else:
            span.end()

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        if (span := self.open.pop(run_id, None)) is not None:
            span.failed(error)

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name = serialized.get("name") or kwargs.get("name") or ""
        call = ToolCall(name=str(name), args=inputs or {}, id=kwargs.get("tool_call_id"))
        self.open[run_id] = self.spans.tool(call, self.step)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if (span := self.open.pop(run_id, None)) is not None:
            text, is_error = guards.output_text(output)
            span.answered(text, is_error=is_error)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        if (span := self.open.pop(run_id, None)) is not None:
            span.failed(error)


@contextmanager
def framework_run(
    agent: str, model: Any, config: RunnableConfig, provider: TracerProvider | None
) -> Iterator[tuple[telemetry.RunSpans, RunnableConfig]]:
    """`telemetry.agent_run` for a framework-run graph, and the run's config with `SpanCallbacks` added (the same
    config when nothing records). A thread's id is the span's conversation id: a thread's turns, and the pause
    and resume of one run, share it."""
    conversation = (config.get("configurable") or {}).get("thread_id")
    with telemetry.agent_run(agent, model, provider=provider, conversation_id=conversation) as spans:
        yield spans, merge_configs(config, {"callbacks": [SpanCallbacks(spans)]}) if spans.on else config

"""OpenTelemetry GenAI spans of one agent run: the attribute names, the one tree shape, what may go in them.

`agent_run` opens `invoke_agent {agent}`; its `RunSpans` opens `chat {model}` (CLIENT) per model call and
`execute_tool {tool}` per tool call (a guard's refusal too) under it. Names follow the GenAI conventions, spelled
out here ("Development"; their Python constants are deprecated); ours start with ``agent_loop.``. Without an SDK, or
with OTEL_SDK_DISABLED=true, nothing is built; content (masked) only with `CAPTURE_CONTENT_ENV` set to true.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, BaseMessage, ToolCall, ToolMessage
from langchain_core.runnables import RunnableBinding
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from shared_tools.guards import mask_pii, mask_values, plan_of, token_count
from shared_tools.results import Guard, RunStopped, StopReason

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from shared_tools.results import AgentResult

# --- the GenAI semantic conventions' names ------------------------------------------------------------------
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION_ID = "gen_ai.conversation.id"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
FINISH_REASONS = "gen_ai.response.finish_reasons"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
ERROR_TYPE = "error.type"
# Opt-in content (`capture_content`), as JSON strings in the conventions' message shapes.
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_CALL_RESULT = "gen_ai.tool.call.result"

INVOKE_AGENT, CHAT, EXECUTE_TOOL = "invoke_agent", "chat", "execute_tool"
"""The three values of `OPERATION` a run's spans have."""

# --- ours --------------------------------------------------------------------------------------------------
STEP = "agent_loop.step"
"""The model call a span belongs to, numbered as on the trace (`TraceEvent.step`)."""
GUARD = "agent_loop.guard"
"""Which guard decided a tool result or cut a model call: `code_of(Guard)`, e.g. ``repeat``."""
STOP_REASON = "agent_loop.stop_reason"
"""Why the run ended: `code_of(StopReason)`, e.g. ``done``, ``max_steps``, ``cancelled``."""
UNFINISHED = "unfinished"
"""`ERROR_TYPE` of a child span still open when its run ended without an exception (nothing said how it ended)."""

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
CAPTURE_CONTENT_ON = frozenset({"true", "span_only", "span_and_event"})
"""The values that switch content on: ``true``, and the two of opentelemetry-util-genai that put it on spans."""
SCOPE = "agent-loop-compare"
"""The instrumentation scope every span of ours is written under."""
MAX_ATTRIBUTE_CHARS = 16 * 1024
"""The most characters one text attribute of ours holds (a message list, a tool's arguments or result): a longer one
is cut to this size, ending in `cut_marker` (so a cut JSON attribute no longer parses). One 10 MB argument would
otherwise be three 10 MB attributes and a 30 MB export; `telemetry_setup` sets the SDK's own limit to the same size
for spans other code writes."""
MAX_NAME_CHARS = 256
"""The most characters of a name or id a model or a user wrote (a tool name, a call id, a thread id), cut alike."""


def capture_content() -> bool:
    """Whether messages, tool arguments and results go into spans (read once per run, so a test can flip it)."""
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in CAPTURE_CONTENT_ON


def cut_marker(cut: int) -> str:
    """What ends an attribute `capped` cut: how many characters were cut off."""
    return f"...[cut {cut} characters]"


MASK_MARGIN = 1_024
"""Characters past `MAX_ATTRIBUTE_CHARS` a long text keeps before it is masked (`_head`): an address that starts
before the cut is masked whole; what lies further never reaches an attribute, so it is not masked at all."""


def _head(text: str) -> str:
    """The part of a long text an attribute can show, with what was cut counted (`cut_marker`): masking a
    10 MB text to keep 16 KB of it would cost its whole length."""
    keep = MAX_ATTRIBUTE_CHARS + MASK_MARGIN
    return text if len(text) <= keep else text[:keep] + cut_marker(len(text) - keep)


def masked_text(text: str) -> str:
    """`text` masked and `capped`, masking only the part that is kept."""
    if len(text) <= MAX_ATTRIBUTE_CHARS + MASK_MARGIN:
        return capped(mask_pii(text))
    head = mask_pii(text[: MAX_ATTRIBUTE_CHARS + MASK_MARGIN])[: MAX_ATTRIBUTE_CHARS - len(cut_marker(len(text)))]
    return capped(head) + cut_marker(len(text) - len(head))


def capped(text: str, limit: int = MAX_ATTRIBUTE_CHARS) -> str:
    """`text` as an attribute may hold it: at most `limit` characters (the cut ones counted in `cut_marker`), and
    encodable as UTF-8 (a lone surrogate, half an emoji, becomes U+FFFD; an exporter would fail on the whole batch)."""
    if len(text) > limit:
        keep = max(limit - len(cut_marker(len(text))), 0)
        text = text[:keep] + cut_marker(len(text) - keep)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def code_of(value: StopReason | Guard) -> str:
    """A stop reason or guard as a short code for an attribute (``max_steps``): its member name, not its sentence."""
    return value.name.lower()


def error_type(exc: BaseException) -> str:
    """`ERROR_TYPE` of an exception: its qualified class name (the convention), or the stop code of a `RunStopped`.

    Never its message: an exception's text may hold a password (a connection string) that no mask would know.
    """
    if isinstance(exc, RunStopped):
        return code_of(exc.reason)
    # A cancel is a cancel, whichever subclass carries it (the loop's `AgentCancelled` carries its partial result).
    cls = asyncio.CancelledError if isinstance(exc, asyncio.CancelledError) else type(exc)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


@dataclass(frozen=True)
class ModelInfo:
    """Who serves a model and which model it is: `PROVIDER` and `REQUEST_MODEL`."""

    provider: str
    name: str | None

    @classmethod
    def of(cls, model: Any) -> ModelInfo:
        """What a langchain-core chat model (tools bound or not) tells LangSmith about itself (`_get_ls_params`):
        ``scripted``/``scripted`` for `ScriptedChatModel`, ``ollama``/its model for ChatOllama, ``openai``/its
        model_name for ChatOpenAI; a model without them is named by its class."""
        while isinstance(model, RunnableBinding):
            model = model.bound
        params = getattr(model, "_get_ls_params", None)
        given = params() if callable(params) else {}
        return cls.of_params(given, fallback=type(model).__name__.lower())

    @classmethod
    def of_params(cls, params: Mapping[str, Any], *, fallback: str = "langchain") -> ModelInfo:
        """From LangSmith's ``ls_provider``/``ls_model_name`` (a chat model's callback metadata carries them)."""
        name = params.get("ls_model_name")
        return cls(str(params.get("ls_provider") or fallback), str(name) if name else None)


def tracer_for(provider: TracerProvider | None = None) -> Tracer | None:
    """The tracer a run writes to, or None when nothing could record: no SDK set up (the API's proxy provider), a
    no-op provider, or an SDK provider that OTEL_SDK_DISABLED=true turned off (its tracers are no-ops)."""
    provider = trace.get_tracer_provider() if provider is None else provider
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    tracer = provider.get_tracer(SCOPE)
    return None if isinstance(tracer, trace.NoOpTracer) else tracer


_CURRENT: ContextVar[RunSpans | None] = ContextVar("agent_loop_run_spans", default=None)


def current_run() -> RunSpans:
    """The spans of the run this code runs in (set by `agent_run`, seen by the graph nodes it starts), or `OFF`."""
    return _CURRENT.get() or OFF


@contextmanager
def agent_run(
    agent: str, model: Any, *, provider: TracerProvider | None = None, conversation_id: str | None = None
) -> Iterator[RunSpans]:
    """The ``invoke_agent {agent}`` span of one run, current while the run's code runs, and its `RunSpans`.

    Call `RunSpans.finish` with the result before the block ends. An exception leaving the block (a cancel, a
    time budget cut from outside, a tool error the framework re-raises) ends the run's span and every child
    still open with ERROR and `ERROR_TYPE`, then propagates.
    """
    tracer = tracer_for(provider)
    if tracer is None:
        yield OFF
        return
    info = ModelInfo.of(model)
    attributes: dict[str, Any] = {OPERATION: INVOKE_AGENT, PROVIDER: info.provider, AGENT_NAME: agent}
    if info.name:
        attributes[REQUEST_MODEL] = info.name
    if conversation_id:
        attributes[CONVERSATION_ID] = capped(mask_pii(conversation_id), MAX_NAME_CHARS)
    span = tracer.start_span(
        f"{INVOKE_AGENT} {agent}",
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    )
    run = RunSpans(tracer, span, info, capture_content())
    token = otel_context.attach(trace.set_span_in_context(span))
    current = _CURRENT.set(run)
    failure: BaseException | None = None
    try:
        yield run
    except BaseException as exc:
        failure = exc
        raise
    finally:
        _CURRENT.reset(current)
        otel_context.detach(token)
        run.close(failure)


class RunSpans:
    """The spans of one run: its ``invoke_agent`` span and the children it opens. `OFF` is the one that builds
    nothing (no tracer, or a run span that does not record): every method returns at once."""

    def __init__(
        self,
        tracer: Tracer | None = None,
        span: Span | None = None,
        model: ModelInfo | None = None,
        capture: bool = False,
    ) -> None:
        self.tracer = tracer
        self.span = span
        self.model = model
        self.capture = capture
        self.on = tracer is not None and span is not None and span.is_recording()
        self._parent = trace.set_span_in_context(span) if self.on and span is not None else None
        self._open: set[ChildSpan] = set()
        self._tools_seen: set[str] = set()
        self._tool_spans: dict[str, ChildSpan] = {}
        self.input_tokens = 0
        self.output_tokens = 0

    def chat(self, step: int | None, messages: Sequence[BaseMessage], model: ModelInfo | None = None) -> ChildSpan:
        """A ``chat {model}`` span, started now: end it with `ChildSpan.replied`, or use it as a context manager."""
        if not self.on:
            return OFF_CHILD
        info = model or self.model or ModelInfo("langchain", None)
        attributes: dict[str, Any] = {OPERATION: CHAT, PROVIDER: info.provider}
        if info.name:
            attributes[REQUEST_MODEL] = info.name
        if step is not None:
            attributes[STEP] = step
        if self.capture:
            attributes[INPUT_MESSAGES] = _json(mask_values([_message_json(m) for m in messages]))
        name = f"{CHAT} {info.name}" if info.name else CHAT
        return self._child(name, SpanKind.CLIENT, attributes)

    def tool(self, call: ToolCall, step: int | None, *, started: float | None = None) -> ChildSpan:
        """An ``execute_tool {tool}`` span for a call about to run (or, with `started`, that began at that
        `time.time()`): end it with `ChildSpan.answered`, or use it as a context manager."""
        if not self.on:
            return OFF_CHILD
        # The model's text: an e-mail sent as a tool name stays out.
        name = capped(mask_pii(str(call.get("name") or "")), MAX_NAME_CHARS)
        attributes: dict[str, Any] = {OPERATION: EXECUTE_TOOL, TOOL_NAME: name, TOOL_TYPE: "function"}
        call_id = call.get("id")
        if call_id:
            self._tools_seen.add(call_id)
            attributes[TOOL_CALL_ID] = capped(mask_pii(str(call_id)), MAX_NAME_CHARS)
        if step is not None:
            attributes[STEP] = step
        if self.capture:
            attributes[TOOL_CALL_ARGUMENTS] = _json(mask_values(call.get("args")))
        start = None if started is None else int(started * 1e9)
        child = self._child(f"{EXECUTE_TOOL} {name}", SpanKind.INTERNAL, attributes, start)
        if call_id:
            self._tool_spans[call_id] = child
        return child

    def cut(
        self, call: ToolCall, step: int | None, text: str, *, reason: StopReason, guard: Guard, duration_s: float
    ) -> None:
        """The span of a call a stop of the run answered (the time budget ran out): the span its tool opened, if
        it was left open when the tool was cut off mid-run, else one started `duration_s` ago; ended now as cut by
        `reason`, with `guard`."""
        if not self.on:
            return
        call_id = call.get("id")
        span = self._tool_spans.get(call_id) if call_id else None
        if span is None or span.span is None:
            span = self.tool(call, step, started=time.time() - duration_s)
        if self.capture and span.span is not None:
            span.span.set_attribute(TOOL_CALL_RESULT, masked_text(text))
        span.stopped(reason, guard)

    def answered(
        self,
        call: ToolCall,
        step: int | None,
        text: str,
        *,
        is_error: bool,
        guard: Guard | None = None,
        duration_s: float = 0.0,
    ) -> None:
        """The span of a call that was answered without its tool running (a guard's refusal, a framework's own
        error text): started `duration_s` ago and ended now, with the guard that decided it."""
        if self.on:
            self.tool(call, step, started=time.time() - duration_s).answered(text, is_error=is_error, guard=guard)

    def answered_unless_ran(
        self, call: ToolCall, step: int | None, text: str, *, is_error: bool, duration_s: float = 0.0
    ) -> None:
        """`answered`, unless a span was already opened for this call id (its tool ran and has its own span). A call
        without an id cannot be told apart, so it gets no second span."""
        call_id = call.get("id")
        if self.on and call_id and call_id not in self._tools_seen:
            self.answered(call, step, text, is_error=is_error, duration_s=duration_s)

    def finish(self, result: AgentResult) -> None:
        """Put the run's end on its span: the stop reason, the tokens its chat spans counted, and ERROR with
        `ERROR_TYPE` for every stop but DONE and AWAITING_APPROVAL (a pause, not a failure)."""
        if not self.on or self.span is None:
            return
        reason = result.stop_reason
        self.span.set_attribute(STOP_REASON, code_of(reason))
        self.span.set_attribute(INPUT_TOKENS, self.input_tokens)
        self.span.set_attribute(OUTPUT_TOKENS, self.output_tokens)
        if reason not in (StopReason.DONE, StopReason.AWAITING_APPROVAL):
            self.span.set_attribute(ERROR_TYPE, code_of(reason))
            self.span.set_status(Status(StatusCode.ERROR))

    def close(self, failure: BaseException | None = None) -> None:
        """End every child still open and then the run's span; with `failure`, all of them as failed by it."""
        if not self.on or self.span is None:
            return
        for child in list(self._open):
            if failure is None:
                child.ended_as(UNFINISHED)
            else:
                child.failed(failure)
        if failure is not None:
            self.span.set_attribute(ERROR_TYPE, error_type(failure))
            if isinstance(failure, RunStopped):
                self.span.set_attribute(STOP_REASON, code_of(failure.reason))
            self.span.set_status(Status(StatusCode.ERROR))
        self.span.end()
        self.on = False

    def _child(self, name: str, kind: SpanKind, attributes: dict[str, Any], start: int | None = None) -> ChildSpan:
        assert self.tracer is not None
        span = self.tracer.start_span(
            name,
            self._parent,
            kind,
            attributes,
            start_time=start,
            record_exception=False,
            set_status_on_exception=False,
        )
        child = ChildSpan(self, span)
        self._open.add(child)
        return child

    def _counted(self, input_tokens: int, output_tokens: int) -> None:
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens


class ChildSpan:
    """One open ``chat`` or ``execute_tool`` span. As a context manager it is the current span inside the block
    and ends with the block (ERROR with `ERROR_TYPE` if an exception leaves it); the methods end it explicitly."""

    def __init__(self, run: RunSpans | None, span: Span | None) -> None:
        self.run = run
        self.span = span
        self._token: object | None = None

    def __enter__(self) -> ChildSpan:
        if self.span is not None:
            self._token = otel_context.attach(trace.set_span_in_context(self.span))
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if self._token is not None:
            otel_context.detach(self._token)  # type: ignore[arg-type]
            self._token = None
        if exc is not None:
            self.failed(exc)
        else:
            self.end()

    def replied(self, reply: BaseMessage, guard: Guard | None = None) -> None:
        """End a chat span with the model's reply: its tokens, finish reasons, model and (opt-in) content, and
        the guard that shaped it (a reply cut at the token budget)."""
        span = self._open_span()
        if span is None:
            return
        if guard is not None:
            span.set_attribute(GUARD, code_of(guard))
        if isinstance(reply, AIMessage):
            usage = reply.usage_metadata or {}
            tokens_in, tokens_out = token_count(usage.get("input_tokens")), token_count(usage.get("output_tokens"))
            span.set_attribute(INPUT_TOKENS, tokens_in)
            span.set_attribute(OUTPUT_TOKENS, tokens_out)
            assert self.run is not None
            self.run._counted(tokens_in, tokens_out)
            span.set_attribute(FINISH_REASONS, [finish_reason(reply)])
            metadata = reply.response_metadata or {}
            if model := metadata.get("model_name") or metadata.get("model"):
                span.set_attribute(RESPONSE_MODEL, capped(str(model), MAX_NAME_CHARS))
            if self.run.capture:
                message = {**_message_json(reply), "finish_reason": "tool_call" if reply.tool_calls else "stop"}
                span.set_attribute(OUTPUT_MESSAGES, _json(mask_values([message])))
        self.end()

    def answered(self, text: str, *, is_error: bool, guard: Guard | None = None) -> None:
        """End a tool span with what the model was given: ERROR for an error result, the guard that decided it."""
        span = self._open_span()
        if span is None:
            return
        if guard is not None:
            span.set_attribute(GUARD, code_of(guard))
        if self.run is not None and self.run.capture:
            span.set_attribute(TOOL_CALL_RESULT, masked_text(text))
        if is_error:
            span.set_attribute(ERROR_TYPE, code_of(guard) if guard is not None else "tool_error")
            span.set_status(Status(StatusCode.ERROR))
        self.end()

    def failed(self, exc: BaseException, guard: Guard | None = None) -> None:
        """End the span as failed by `exc` (a raise, a cancel, a timeout): ERROR, `ERROR_TYPE`, never its text."""
        self.ended_as(error_type(exc), guard)

    def stopped(self, reason: StopReason, guard: Guard | None = None) -> None:
        """End the span as cut by a stop of the run (a model call cut by the time budget: ``time_budget``)."""
        self.ended_as(code_of(reason), guard)

    def ended_as(self, kind: str, guard: Guard | None = None) -> None:
        span = self._open_span()
        if span is None:
            return
        if guard is not None:
            span.set_attribute(GUARD, code_of(guard))
        span.set_attribute(ERROR_TYPE, kind)
        span.set_status(Status(StatusCode.ERROR))
        self.end()

    def end(self) -> None:
        span = self._open_span()
        if span is None:
            return
        span.end()
        assert self.run is not None
        self.run._open.discard(self)
        self.span = None

    def _open_span(self) -> Span | None:
        return self.span if self.span is not None and self.span.is_recording() else None


OFF = RunSpans()
"""The spans of a run nothing records: every method returns at once, building nothing."""
OFF_CHILD = ChildSpan(None, None)


def finish_reason(reply: AIMessage) -> str:
    """`FINISH_REASONS`' value for a reply: the provider's own (OpenAI's ``finish_reason``, Ollama's
    ``done_reason``), else what the reply is (``tool_calls`` when it asks for tools, ``stop`` when it does not)."""
    metadata = reply.response_metadata or {}
    given = metadata.get("finish_reason") or metadata.get("done_reason")
    if isinstance(given, str) and given:
        return given
    return "tool_calls" if reply.tool_calls else "stop"


_ROLES = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}


def _message_json(message: BaseMessage) -> dict[str, Any]:
    """A message in the conventions' shape: ``{"role", "parts": [{"type": "text"|"reasoning"|"tool_call"|
    "tool_call_response", ...}]}``."""
    parts: list[dict[str, Any]] = []
    if isinstance(message, ToolMessage):
        parts.append({"type": "tool_call_response", "id": message.tool_call_id, "response": _head(message.text)})
        return {"role": "tool", "parts": parts}
    if isinstance(message, AIMessage) and (plan := plan_of(message)):
        parts.append({"type": "reasoning", "content": _head(plan)})
    if text := message.text:
        parts.append({"type": "text", "content": _head(text)})
    if isinstance(message, AIMessage):
        parts += [
            {"type": "tool_call", "id": c.get("id"), "name": c["name"], "arguments": c["args"]}
            for c in message.tool_calls
        ]
    return {"role": _ROLES.get(message.type, message.type), "parts": parts}


def _json(value: Any) -> str:
    """A content attribute: `value` as compact JSON, `capped`."""
    return capped(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str))

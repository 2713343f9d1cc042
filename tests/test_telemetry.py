"""OpenTelemetry GenAI spans: the span helpers on their own, then every contender that writes spans, then the wire.

Spans are read from an explicit `TracerProvider` with an in-memory exporter (`SPAN_CONTENDERS` lists who writes
them); a real export goes over OTLP/HTTP to a loopback receiver; `--otel` runs in a child process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from comparison.contenders import build_contender
from comparison.scenarios import INSTRUCTIONS, SEED_GOAL
from handwritten.loop import AgentCancelled
from langgraph_version.prebuilt.thread import CheckpointThread
from shared_tools import telemetry
from shared_tools.bookstore.approval import RiskyWritePolicy
from shared_tools.bookstore.faults import FAKE_SECRET, Faults
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.models import make_model
from shared_tools.results import AgentLimits, AgentOptions, AgentResult, Guard, RunStopped, RunUsage, StopReason
from tests.doubles import ScriptModel, ai, call

ROOT = Path(__file__).resolve().parents[1]

SPAN_CONTENDERS = ("handwritten", "langgraph", "langgraph-defaults", "create-agent")
"""The contenders that write spans: ours from their own code, the framework-run ones from LangChain's callbacks."""
FRAMEWORK_ONLY = ("langgraph-defaults", "create-agent")
"""Contenders whose spans come from LangChain's callbacks (no time budget, no cooperative cancel in create_agent)."""
OURS = ("handwritten", "langgraph")
"""Contenders that write their spans in their own code and have a time budget."""
COOPERATIVE_CANCEL = ("handwritten", "langgraph", "langgraph-defaults")
"""Contenders that take a cancel event (`create_agent` has none)."""

CONTENT_ATTRIBUTES = (
    telemetry.INPUT_MESSAGES,
    telemetry.OUTPUT_MESSAGES,
    telemetry.TOOL_CALL_ARGUMENTS,
    telemetry.TOOL_CALL_RESULT,
)


class AtStart(SpanProcessor):
    """Keeps every span's attributes as they were when it started (the conventions want some set by then)."""

    def __init__(self) -> None:
        self.attributes: dict[int, dict[str, Any]] = {}

    def on_start(self, span: Span, parent_context: Any = None) -> None:
        self.attributes[span.context.span_id] = dict(span.attributes or {})


class Spans:
    """A provider of its own, the spans it finished, and the attributes each had at its start."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.at_start = AtStart()
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.at_start)
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    @property
    def finished(self) -> list[ReadableSpan]:
        return sorted(self.exporter.get_finished_spans(), key=lambda s: s.start_time or 0)

    def root(self) -> ReadableSpan:
        """The one span without a parent: the run's ``invoke_agent``; every other span must be its child."""
        roots = [s for s in self.finished if s.parent is None]
        assert len(roots) == 1, [s.name for s in roots]
        root = roots[0]
        for span in self.finished:
            if span is not root:
                assert span.parent is not None and span.parent.span_id == root.context.span_id, span.name
                assert span.context.trace_id == root.context.trace_id
        return root

    def of(self, operation: str) -> list[ReadableSpan]:
        return [s for s in self.finished if (s.attributes or {}).get(telemetry.OPERATION) == operation]

    def clear(self) -> None:
        self.exporter.clear()
        self.at_start.attributes.clear()


@pytest.fixture
def spans() -> Iterator[Spans]:
    recorded = Spans()
    yield recorded
    recorded.provider.shutdown()


@pytest.fixture(autouse=True)
def _no_content_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(telemetry.CAPTURE_CONTENT_ENV, raising=False)
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)


@pytest.fixture(autouse=True)
def _callbacks_never_fail(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """langchain-core logs a callback handler's exception and goes on: a bug in `SpanCallbacks` must fail here."""
    yield
    failures = [r.getMessage() for r in caplog.records if "SpanCallbacks" in r.getMessage()]
    assert failures == []


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def everything_in(spans: Sequence[ReadableSpan]) -> str:
    """Every name, attribute, event and status text of `spans`, as one string to search."""
    parts: list[Any] = []
    for span in spans:
        parts += [span.name, attrs(span), span.status.description]
        parts += [[event.name, dict(event.attributes or {})] for event in span.events]
        parts += [dict(link.attributes or {}) for link in span.links]
    return json.dumps(parts, default=str)


def contender(name: str, model: Any, tools: list[BaseTool], provider: TracerProvider, **options: Any) -> Any:
    return build_contender(name, model, tools, AgentOptions(tracer_provider=provider, **options))


# --- the helpers on their own -----------------------------------------------------------------------------


def fake_run(spans: Spans, *, fail_with: BaseException | None = None) -> None:
    """A run as a loop would write it: two model calls, one tool that runs, one call a guard refused."""
    model = make_model("scripted")
    history = [SystemMessage("be brief"), HumanMessage("find it")]
    reply = AIMessage("", tool_calls=[{"name": "search_books", "args": {"query": "x"}, "id": "c1"}])
    reply.usage_metadata = {"input_tokens": 30, "output_tokens": 5, "total_tokens": 35}
    answer = AIMessage("Found it.", usage_metadata={"input_tokens": 40, "output_tokens": 3, "total_tokens": 43})
    with telemetry.agent_run("demo", model, provider=spans.provider, conversation_id="thread-1") as run:
        with run.chat(1, history) as chat:
            chat.replied(reply)
        with run.tool(reply.tool_calls[0], 1) as running:
            running.answered("[]", is_error=False)
        run.answered(
            {"name": "search_books", "args": {"query": "x"}, "id": "c2"},
            1,
            "You already called",
            is_error=True,
            guard=Guard.REPEAT,
        )
        with run.chat(2, [*history, reply]) as chat:
            if fail_with is not None:
                raise fail_with
            chat.replied(answer)
        run.finish(AgentResult.of_run(StopReason.DONE, RunUsage(), answer="Found it.", trace=[], messages=[]))


def test_the_helpers_build_one_tree_with_the_names_kinds_and_attributes_of_the_conventions(spans: Spans) -> None:
    fake_run(spans)
    root = spans.root()
    assert [s.name for s in spans.finished] == [
        "invoke_agent demo",
        "chat scripted",
        "execute_tool search_books",
        "execute_tool search_books",
        "chat scripted",
    ]
    assert root.kind is SpanKind.INTERNAL and root.status.status_code is StatusCode.UNSET
    assert attrs(root) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "scripted",
        "gen_ai.agent.name": "demo",
        "gen_ai.request.model": "scripted",
        "gen_ai.conversation.id": "thread-1",
        "agent_loop.stop_reason": "done",
        "gen_ai.usage.input_tokens": 70,
        "gen_ai.usage.output_tokens": 8,
    }
    first_chat, ran, refused, last_chat = spans.finished[1:]
    assert first_chat.kind is SpanKind.CLIENT
    assert attrs(first_chat) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "scripted",
        "agent_loop.step": 1,
        "gen_ai.usage.input_tokens": 30,
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.response.finish_reasons": ("tool_calls",),
    }
    assert attrs(last_chat)["gen_ai.response.finish_reasons"] == ("stop",)
    assert ran.kind is SpanKind.INTERNAL and ran.status.status_code is StatusCode.UNSET
    assert attrs(ran) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "search_books",
        "gen_ai.tool.type": "function",
        "gen_ai.tool.call.id": "c1",
        "agent_loop.step": 1,
    }
    assert refused.status.status_code is StatusCode.ERROR
    assert attrs(refused)["agent_loop.guard"] == "repeat" and attrs(refused)["error.type"] == "repeat"
    # What sampling may look at is there when each span starts.
    for span in spans.finished:
        at_start = spans.at_start.attributes[span.context.span_id]
        wanted = {"gen_ai.operation.name"} | {
            "invoke_agent": {"gen_ai.provider.name", "gen_ai.request.model", "gen_ai.agent.name"},
            "chat": {"gen_ai.provider.name", "gen_ai.request.model"},
            "execute_tool": {"gen_ai.tool.name", "gen_ai.tool.call.id"},
        }[attrs(span)["gen_ai.operation.name"]]
        assert wanted <= at_start.keys(), span.name


@pytest.mark.parametrize(
    ("failure", "kind"),
    [
        (RuntimeError("db refused postgres://shop:hunter2@db/orders"), "RuntimeError"),
        (asyncio.CancelledError(), "asyncio.exceptions.CancelledError"),
        (RunStopped(StopReason.TIME_BUDGET), "time_budget"),
    ],
)
def test_a_failure_leaving_the_run_ends_the_open_span_and_the_run_with_error_type_and_never_its_text(
    spans: Spans, failure: BaseException, kind: str
) -> None:
    with pytest.raises(type(failure)):
        fake_run(spans, fail_with=failure)
    root = spans.root()
    cut = spans.finished[-1]
    for span in (root, cut):
        assert span.status.status_code is StatusCode.ERROR
        assert attrs(span)["error.type"] == kind
    assert "hunter2" not in everything_in(spans.finished) and "db refused" not in everything_in(spans.finished)


def test_a_child_left_open_is_ended_with_the_run_as_unfinished(spans: Spans) -> None:
    with telemetry.agent_run("demo", make_model("scripted"), provider=spans.provider) as run:
        run.tool({"name": "view_cart", "args": {}, "id": "c1"}, 1)  # never ended by the caller
        run.finish(AgentResult.of_run(StopReason.MAX_STEPS, RunUsage(), answer=None, trace=[], messages=[]))
    root = spans.root()
    assert attrs(root)["error.type"] == "max_steps" and root.status.status_code is StatusCode.ERROR
    assert attrs(spans.finished[1])["error.type"] == telemetry.UNFINISHED


def test_the_model_info_comes_from_each_model_s_langsmith_params() -> None:
    from langchain_ollama import ChatOllama

    assert telemetry.ModelInfo.of(make_model("scripted")) == telemetry.ModelInfo("scripted", "scripted")
    assert telemetry.ModelInfo.of(ChatOllama(model="qwen3:4b")) == telemetry.ModelInfo("ollama", "qwen3:4b")
    bound = make_model("scripted").bind_tools(make_tools(BookStore()))
    assert telemetry.ModelInfo.of(bound) == telemetry.ModelInfo("scripted", "scripted")
    # A model with no name still gets its chat span, named plain "chat".
    assert telemetry.ModelInfo.of(ScriptModel(replies=[])) == telemetry.ModelInfo("scriptmodel", None)


# --- off costs nothing ------------------------------------------------------------------------------------


def _must_not_run(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("built while nothing records")


@pytest.mark.parametrize("name", SPAN_CONTENDERS)
def test_without_an_sdk_nothing_is_built_even_with_content_capture_on(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(telemetry.CAPTURE_CONTENT_ENV, "true")
    for helper in ("mask_pii", "mask_values", "_json", "_message_json", "capture_content"):
        monkeypatch.setattr(telemetry, helper, _must_not_run)
    assert telemetry.tracer_for() is None  # the API's proxy: no SDK was set up in this process
    agent = build_contender(name, make_model("scripted"), make_tools(BookStore()), AgentOptions())
    assert agent.run(INSTRUCTIONS, SEED_GOAL).ok
    with telemetry.agent_run("demo", make_model("scripted")) as run:
        assert run is telemetry.OFF
        assert run.chat(1, []) is telemetry.OFF_CHILD and run.tool({"name": "x", "args": {}, "id": "1"}, 1) is (
            telemetry.OFF_CHILD
        )


@pytest.mark.parametrize("name", SPAN_CONTENDERS)
def test_otel_sdk_disabled_turns_an_sdk_provider_off(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    disabled = Spans()  # the SDK reads the variable when the provider is made
    assert telemetry.tracer_for(disabled.provider) is None
    assert (
        contender(name, make_model("scripted"), make_tools(BookStore()), disabled.provider)
        .run(INSTRUCTIONS, SEED_GOAL)
        .ok
    )
    assert disabled.finished == []


# --- the contenders ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SPAN_CONTENDERS)
def test_a_seed_run_is_one_invoke_agent_with_a_chat_per_model_call_and_a_tool_span_per_call(
    name: str, spans: Spans
) -> None:
    result = contender(name, make_model("scripted"), make_tools(BookStore()), spans.provider).run(
        INSTRUCTIONS, SEED_GOAL
    )
    assert result.ok
    root = spans.root()
    assert root.name == f"invoke_agent {name}" and attrs(root)["gen_ai.agent.name"] == name
    assert attrs(root)["agent_loop.stop_reason"] == "done" and root.status.status_code is StatusCode.UNSET
    chats, tools = spans.of("chat"), spans.of("execute_tool")
    assert len(chats) == result.model_calls == 5 and len(tools) == result.tool_calls == 4
    assert {c.name for c in chats} == {"chat scripted"} and {c.kind for c in chats} == {SpanKind.CLIENT}
    assert [attrs(c)["agent_loop.step"] for c in chats] == [1, 2, 3, 4, 5]
    assert [attrs(t)["agent_loop.step"] for t in tools] == [1, 2, 3, 4]
    calls = [c for m in result.messages if isinstance(m, AIMessage) for c in m.tool_calls]
    assert [(t.name, attrs(t)["gen_ai.tool.call.id"]) for t in tools] == [
        (f"execute_tool {c['name']}", c["id"]) for c in calls
    ]
    assert [attrs(c)["gen_ai.response.finish_reasons"] for c in chats] == [("tool_calls",)] * 4 + [("stop",)]
    tokens_in = sum(attrs(c)["gen_ai.usage.input_tokens"] for c in chats)
    tokens_out = sum(attrs(c)["gen_ai.usage.output_tokens"] for c in chats)
    assert tokens_in + tokens_out == result.tokens
    assert (attrs(root)["gen_ai.usage.input_tokens"], attrs(root)["gen_ai.usage.output_tokens"]) == (
        tokens_in,
        tokens_out,
    )
    assert not set(CONTENT_ATTRIBUTES) & set().union(*(attrs(s).keys() for s in spans.finished))


@pytest.mark.parametrize("name", SPAN_CONTENDERS)
def test_a_tool_that_raises_has_an_error_span_with_its_type_and_no_secret(name: str, spans: Spans) -> None:
    agent = contender(
        name,
        make_model("scripted"),
        make_tools(BookStore(), faults=Faults(failing_tool="check_stock")),
        spans.provider,
    )
    try:
        agent.run(INSTRUCTIONS, SEED_GOAL)
    except RuntimeError:
        root = spans.root()  # LangGraph's defaults re-raise the tool's exception: the run's span says so
        assert attrs(root)["error.type"] == "RuntimeError" and root.status.status_code is StatusCode.ERROR
    failed = [t for t in spans.of("execute_tool") if t.name == "execute_tool check_stock"]
    assert failed and all(t.status.status_code is StatusCode.ERROR for t in failed)
    if name in OURS:
        # Our agents turn the exception into a result whose details they hide: the guard that did so is the type.
        assert {(attrs(t)["error.type"], attrs(t)["agent_loop.guard"]) for t in failed} == {
            ("error_hidden", "error_hidden")
        }
    else:
        assert {attrs(t)["error.type"] for t in failed} == {"RuntimeError"}
    assert FAKE_SECRET not in everything_in(spans.finished)


@pytest.mark.parametrize("name", OURS)
def test_a_result_a_guard_shortened_is_a_span_with_the_guard_and_no_error(name: str, spans: Spans) -> None:
    """Truncation decides a result without making it an error: the guard is on the span, its status stays unset."""
    result = contender(
        name, make_model("scripted"), make_tools(BookStore()), spans.provider, max_tool_result_chars=20
    ).run(INSTRUCTIONS, SEED_GOAL)
    truncated = [e for e in result.trace if e.guard is Guard.TRUNCATED]
    assert truncated, "the article's search result is longer than 20 characters"
    marked = [t for t in spans.of("execute_tool") if attrs(t).get("agent_loop.guard") == "truncated"]
    assert [attrs(t)["gen_ai.tool.name"] for t in marked] == [e.name for e in truncated]
    assert {t.status.status_code for t in marked} == {StatusCode.UNSET}
    assert not any("error.type" in attrs(t) for t in marked)


@pytest.mark.parametrize("name", OURS)
def test_a_reply_cut_at_the_token_budget_is_a_chat_span_with_the_guard(name: str, spans: Spans) -> None:
    full = build_contender(name, make_model("scripted"), make_tools(BookStore()), AgentOptions()).run(
        INSTRUCTIONS, SEED_GOAL
    )
    budget = sum(full.tokens_per_step[:2]) + 5  # step 3's reply (a check_stock call) needs more than 5 tokens
    result = contender(
        name, make_model("scripted"), make_tools(BookStore()), spans.provider, limits=AgentLimits(max_tokens=budget)
    ).run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.TOKEN_BUDGET
    chats = spans.of("chat")
    assert [attrs(c).get("agent_loop.guard") for c in chats] == [None, None, "reply_capped"]
    assert attrs(chats[-1])["gen_ai.usage.output_tokens"] == 5
    assert attrs(spans.root())["error.type"] == "token_budget"


@pytest.mark.parametrize("name", SPAN_CONTENDERS)
def test_a_call_the_framework_answers_without_a_tool_still_gets_its_span(name: str, spans: Spans) -> None:
    result = contender(name, make_model("scripted:hallucinator"), make_tools(BookStore()), spans.provider).run(
        INSTRUCTIONS, SEED_GOAL
    )
    spans.root()
    unknown = [t for t in spans.of("execute_tool") if attrs(t)["gen_ai.tool.name"] == "find_book"]
    assert len(unknown) == 1 and unknown[0].status.status_code is StatusCode.ERROR
    assert len(spans.of("execute_tool")) == result.tool_calls


def test_a_call_the_loop_s_human_refused_is_a_span_with_the_approval_guard(spans: Spans) -> None:
    """The hand-written loop asks its `approve` callback before the tool runs: no pause, one run."""
    from handwritten import AgentLoop

    store = BookStore()
    options = AgentOptions(needs_approval=RiskyWritePolicy(store), tracer_provider=spans.provider)
    asked: list[str] = []
    loop = AgentLoop(make_model("scripted"), make_tools(store), options, approve=lambda c, r: asked.append(r) or False)
    loop.run(INSTRUCTIONS, "Add 5 copies of The Quiet Orchard to my cart.")
    spans.root()
    refused = [t for t in spans.of("execute_tool") if attrs(t).get("agent_loop.guard") == "approval_refused"]
    # One span per refusal (the scripted customer asks twice), each with the guard that decided it.
    assert len(refused) == len(asked) >= 1 and {t.name for t in refused} == {"execute_tool add_to_cart"}
    assert {(t.status.status_code, attrs(t)["error.type"]) for t in refused} == {(StatusCode.ERROR, "approval_refused")}


@pytest.mark.parametrize("name", ["langgraph", "create-agent"])
def test_a_call_the_human_refused_is_a_span_with_the_approval_guard(name: str, spans: Spans) -> None:
    from langgraph_version import GraphAgent, GraphSession, create_agent_contender

    store = BookStore()
    options = AgentOptions(needs_approval=RiskyWritePolicy(store), tracer_provider=spans.provider)
    thread: Any
    if name == "langgraph":
        thread = GraphSession(
            GraphAgent(make_model("scripted"), make_tools(store), options), INSTRUCTIONS, thread_id="approval-1"
        )
    else:
        agent = create_agent_contender(make_model("scripted"), make_tools(store), options, checkpointer=InMemorySaver())
        thread = CheckpointThread(agent, INSTRUCTIONS, "approval-1")
    paused = thread.ask("Add 5 copies of The Quiet Orchard to my cart.")
    assert paused.stop_reason is StopReason.AWAITING_APPROVAL
    pause_root = spans.root()
    assert attrs(pause_root)["agent_loop.stop_reason"] == "awaiting_approval"
    assert pause_root.status.status_code is StatusCode.UNSET  # a pause is not a failure
    spans.clear()
    thread.resume(False)
    resumed = spans.root()
    refused = [t for t in spans.of("execute_tool") if attrs(t).get("agent_loop.guard") == "approval_refused"]
    assert len(refused) == 1 and refused[0].name == "execute_tool add_to_cart"
    assert refused[0].status.status_code is StatusCode.ERROR
    # The pause and the resume are one conversation: the thread's id ties them together.
    assert attrs(pause_root)["gen_ai.conversation.id"] == attrs(resumed)["gen_ai.conversation.id"] == "approval-1"


def conversation(name: str, agent: Any, thread_id: str) -> Any:
    """The contender's own multi-turn conversation, on `thread_id`."""
    if name == "handwritten":
        from handwritten import Session

        return Session(agent, INSTRUCTIONS, conversation_id=thread_id)
    if name == "langgraph":
        from langgraph_version import GraphSession

        return GraphSession(agent, INSTRUCTIONS, thread_id=thread_id)
    return CheckpointThread(agent, INSTRUCTIONS, thread_id)


@pytest.mark.parametrize("name", SPAN_CONTENDERS)
def test_each_turn_of_a_conversation_carries_its_thread_id(name: str, spans: Spans) -> None:
    agent = contender(name, make_model("scripted"), make_tools(BookStore()), spans.provider)
    thread = conversation(name, agent, "conversation-7")
    assert thread.ask(SEED_GOAL).ok and thread.ask("What is my cart total now?").ok
    roots = [s for s in spans.finished if s.parent is None]
    assert len(roots) == 2 and {attrs(r)["gen_ai.conversation.id"] for r in roots} == {"conversation-7"}
    assert len({r.context.trace_id for r in roots}) == 2  # a trace per turn, tied by the conversation id


@pytest.mark.parametrize("name", COOPERATIVE_CANCEL)
def test_a_cancel_ends_the_run_span_as_cancelled(name: str, spans: Spans) -> None:
    cancel = threading.Event()
    agent = contender(
        name,
        make_model("scripted"),
        make_tools(BookStore()),
        spans.provider,
        on_event=lambda event: cancel.set() if event.name == "check_stock" else None,
    )
    result = agent.run(INSTRUCTIONS, SEED_GOAL, cancel=cancel)
    assert result.stop_reason is StopReason.CANCELLED
    root = spans.root()
    assert attrs(root)["agent_loop.stop_reason"] == "cancelled" and attrs(root)["error.type"] == "cancelled"
    assert root.status.status_code is StatusCode.ERROR
    assert all(s.end_time is not None for s in spans.finished)
    # The calls made before the cancel are all there, one span per trace line.
    assert [s.name.split()[-1] for s in spans.finished[1:]] == [
        "scripted" if e.is_model else e.name for e in result.trace
    ]


@pytest.mark.parametrize("name", OURS)
def test_a_reply_cut_mid_stream_by_a_cancel_is_a_chat_span_with_the_guard(name: str, spans: Spans) -> None:
    cancel, seen = threading.Event(), []

    def on_token(token: Any) -> None:
        seen.append(token)
        if token.step == 2 and len([t for t in seen if t.step == 2]) == 1:
            cancel.set()

    agent = contender(name, make_model("scripted"), make_tools(BookStore()), spans.provider, on_token=on_token)
    result = agent.run(INSTRUCTIONS, SEED_GOAL, cancel=cancel)
    assert result.stop_reason is StopReason.CANCELLED
    first, cut = spans.of("chat")
    assert first.status.status_code is StatusCode.UNSET and "agent_loop.guard" not in attrs(first)
    assert cut.status.status_code is StatusCode.ERROR and attrs(cut)["agent_loop.step"] == 2
    assert (attrs(cut)["error.type"], attrs(cut)["agent_loop.guard"]) == ("cancelled", "model_cancelled")
    assert attrs(spans.root())["agent_loop.stop_reason"] == "cancelled"


class SlowModel(ScriptModel):
    """A `ScriptModel` whose every reply takes `delay_s` to come (an async sleep, so a timeout can cut it)."""

    delay_s: float = 30.0

    async def _agenerate(self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        await asyncio.sleep(self.delay_s)
        return self._generate(messages, stop, **kwargs)


@pytest.mark.parametrize("name", OURS)
def test_a_model_call_cut_by_the_time_budget_is_an_error_chat_span_with_the_guard(name: str, spans: Spans) -> None:
    model = SlowModel(replies=[ai("Done.")])
    result = contender(name, model, make_tools(BookStore()), spans.provider, limits=AgentLimits(max_duration=0.2)).run(
        INSTRUCTIONS, SEED_GOAL
    )
    assert result.stop_reason is StopReason.TIME_BUDGET
    root = spans.root()
    assert attrs(root)["agent_loop.stop_reason"] == "time_budget" and attrs(root)["error.type"] == "time_budget"
    assert root.status.status_code is StatusCode.ERROR
    (chat,) = spans.of("chat")
    assert chat.status.status_code is StatusCode.ERROR and attrs(chat)["agent_loop.step"] == 1
    assert (attrs(chat)["error.type"], attrs(chat)["agent_loop.guard"]) == ("time_budget", "model_timeout")
    assert "gen_ai.usage.input_tokens" not in attrs(chat)  # no reply, so nothing was counted


@pytest.mark.parametrize("name", OURS)
@pytest.mark.parametrize("parallel", [True, False])
def test_tools_cut_by_the_time_budget_are_error_tool_spans_with_the_guard(
    name: str, parallel: bool, spans: Spans
) -> None:
    """One slow call is running when the budget runs out, the other has not started (sequential) or is running
    too (parallel): every call of the round has one span, ended as cut by the budget."""
    reply = ai("", call("search_books", "s1", query="orchard"), call("check_stock", "k1", book_id=7))
    tools = make_tools(BookStore(), faults=Faults(latency_s=5.0))
    agent = contender(
        name,
        ScriptModel(replies=[reply]),
        tools,
        spans.provider,
        limits=AgentLimits(max_duration=0.3),
        parallel_tools=parallel,
    )
    result = agent.run(INSTRUCTIONS, "find it")
    assert result.stop_reason is StopReason.TIME_BUDGET
    root = spans.root()
    assert attrs(root)["error.type"] == "time_budget" and root.status.status_code is StatusCode.ERROR
    tools_spans = spans.of("execute_tool")
    assert sorted(attrs(t)["gen_ai.tool.call.id"] for t in tools_spans) == ["k1", "s1"]
    for span in tools_spans:
        assert span.status.status_code is StatusCode.ERROR
        assert (attrs(span)["error.type"], attrs(span)["agent_loop.guard"]) == ("time_budget", "tool_timeout")
    # The running call's span began when its tool did; the cut one began at the cut, ended at once.
    first = next(t for t in tools_spans if attrs(t)["gen_ai.tool.call.id"] == "s1")
    assert (first.end_time or 0) - (first.start_time or 0) >= 0.2e9


@pytest.mark.parametrize("name", SPAN_CONTENDERS)
@pytest.mark.parametrize("how", ["timeout", "cancel"])
async def test_a_run_cut_from_outside_ends_the_running_tool_and_the_run_with_error(
    name: str, how: str, spans: Spans
) -> None:
    """A caller cuts the run (the framework contenders have no time budget of their own): `asyncio.timeout` or a
    cancel of its task, once the first (slow) tool has started. No span may be left open (an open span is never
    exported)."""
    timed_out: type[BaseException] = TimeoutError
    if name == "handwritten" and sys.version_info < (3, 12):
        # The loop re-raises the cancel as `AgentCancelled`; Python 3.11's asyncio.timeout turns only CancelledError
        # itself into TimeoutError (3.12 turns any subclass), so there the caller sees the cancel. The spans are
        # the same either way.
        timed_out = AgentCancelled
    agent = contender(
        name, make_model("scripted"), make_tools(BookStore(), faults=Faults(latency_s=5.0)), spans.provider
    )

    async def tool_started() -> None:
        while not any(a.get("gen_ai.operation.name") == "execute_tool" for a in spans.at_start.attributes.values()):
            await asyncio.sleep(0.01)

    task = asyncio.ensure_future(agent.arun(INSTRUCTIONS, SEED_GOAL))
    if how == "timeout":
        with pytest.raises(timed_out):
            async with asyncio.timeout(None) as deadline:
                await asyncio.wait_for(tool_started(), 60)
                deadline.reschedule(asyncio.get_running_loop().time() + 0.05)
                await task
        assert task.cancelled()
    else:
        await asyncio.wait_for(tool_started(), 60)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    root = spans.root()
    assert root.status.status_code is StatusCode.ERROR
    assert attrs(root)["error.type"] == "asyncio.exceptions.CancelledError"
    cut = spans.of("execute_tool")
    assert len(cut) == 1 and cut[0].name == "execute_tool search_books"
    assert cut[0].status.status_code is StatusCode.ERROR
    assert attrs(cut[0])["error.type"] == "asyncio.exceptions.CancelledError"


# --- content: opt-in, masked ------------------------------------------------------------------------------

EMAIL, STREET, CREDENTIALS = "ann.lee@example.com", "12 Baker Street", "shop:hunter2@"


def leaky_tools() -> list[BaseTool]:
    @tool
    def lookup(query: str) -> str:
        """Look a customer up."""
        return f"customer {query}: {EMAIL}, {STREET}, orders at postgres://{CREDENTIALS}db/orders"

    return [lookup]


@pytest.mark.parametrize("name", SPAN_CONTENDERS)
@pytest.mark.parametrize("setting", ["true", "TRUE", "span_only"])
def test_content_capture_puts_masked_messages_arguments_and_results_in_the_conventions_shapes(
    name: str, setting: str, spans: Spans, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(telemetry.CAPTURE_CONTENT_ENV, setting)
    model = ScriptModel(replies=[ai("", call("lookup", "c1", query=f"{EMAIL} at {STREET}")), ai(f"Done, {EMAIL}.")])
    contender(name, model, leaky_tools(), spans.provider).run("Be brief.", f"Find {EMAIL}, {STREET}.")
    spans.root()
    text = everything_in(spans.finished)
    assert EMAIL not in text and STREET not in text and "hunter2" not in text
    first, last = spans.of("chat")
    assert first.name == "chat"  # a model without a name still gets its span
    sent = json.loads(attrs(first)[telemetry.INPUT_MESSAGES])
    assert [m["role"] for m in sent][-1] == "user"
    assert sent[-1]["parts"] == [{"type": "text", "content": "Find <email>, <address>"}]  # the mask takes "St."'s dot
    said = json.loads(attrs(first)[telemetry.OUTPUT_MESSAGES])
    assert said == [
        {
            "role": "assistant",
            "finish_reason": "tool_call",
            "parts": [
                {"type": "tool_call", "id": "c1", "name": "lookup", "arguments": {"query": "<email> at <address>"}}
            ],
        }
    ]
    (ran,) = spans.of("execute_tool")
    assert json.loads(attrs(ran)[telemetry.TOOL_CALL_ARGUMENTS]) == {"query": "<email> at <address>"}
    assert attrs(ran)[telemetry.TOOL_CALL_RESULT] == (
        "customer <email> at <address>: <email>, <address>, orders at postgres://<credentials>@db/orders"
    )
    resent = json.loads(attrs(last)[telemetry.INPUT_MESSAGES])
    assert resent[-1]["role"] == "tool" and resent[-1]["parts"][0]["type"] == "tool_call_response"


@pytest.mark.parametrize("name", SPAN_CONTENDERS)
@pytest.mark.parametrize("setting", [None, "false", "no_content", "1"])
def test_content_stays_out_unless_switched_on(
    name: str, setting: str | None, spans: Spans, monkeypatch: pytest.MonkeyPatch
) -> None:
    if setting is not None:
        monkeypatch.setenv(telemetry.CAPTURE_CONTENT_ENV, setting)
    model = ScriptModel(replies=[ai("", call("lookup", "c1", query="x")), ai("Done.")])
    contender(name, model, leaky_tools(), spans.provider).run("Be brief.", "Find x.")
    assert len(spans.finished) == 4
    assert not set(CONTENT_ATTRIBUTES) & set().union(*(attrs(s).keys() for s in spans.finished))


# --- content: bounded ------------------------------------------------------------------------------------------

HUGE = 2_000_000
"""Characters of an argument far past `MAX_ATTRIBUTE_CHARS` (the attack used 10 MB; the cut is the same)."""


def echo_tools() -> list[BaseTool]:
    @tool
    def lookup(query: str) -> str:
        """Look a customer up."""
        return f"no customer {query}"

    return [lookup]


def huge_run(name: str, provider: TracerProvider) -> None:
    """A run whose model sends a `HUGE` argument and a `HUGE` tool name and call id, with content capture on."""
    calls = call("lookup", "c" * HUGE, query="q" * HUGE), call("n" * HUGE, "u1", query="x")
    model = ScriptModel(replies=[ai("", *calls), ai("Done.")])
    contender(name, model, echo_tools(), provider).run("Be brief.", "Find q.")


@pytest.mark.parametrize("name", SPAN_CONTENDERS)
def test_a_huge_argument_is_cut_in_every_attribute_at_the_documented_size(
    name: str, spans: Spans, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(telemetry.CAPTURE_CONTENT_ENV, "true")
    huge_run(name, spans.provider)
    spans.root()
    values = [(s.name, k, v) for s in spans.finished for k, v in attrs(s).items() if isinstance(v, str)]
    too_long = [(n, k, len(v)) for n, k, v in values if len(v) > telemetry.MAX_ATTRIBUTE_CHARS]
    assert too_long == []
    assert all(len(s.name) <= len("execute_tool ") + telemetry.MAX_NAME_CHARS for s in spans.finished)
    (ran,) = [s for s in spans.of("execute_tool") if attrs(s)[telemetry.TOOL_NAME] == "lookup"]
    arguments = attrs(ran)[telemetry.TOOL_CALL_ARGUMENTS]
    assert arguments.startswith('{"query":"qqq') and kept_and_cut(arguments) == len('{"query":""}') + HUGE
    assert kept_and_cut(attrs(ran)[telemetry.TOOL_CALL_ID]) == HUGE
    result = attrs(ran)[telemetry.TOOL_CALL_RESULT]
    assert result.startswith("no customer qqq") and kept_and_cut(result) == len("no customer ") + HUGE
    assert len(result) <= telemetry.MAX_ATTRIBUTE_CHARS
    assert len(attrs(ran)[telemetry.TOOL_CALL_ID]) <= telemetry.MAX_NAME_CHARS
    for chat in spans.of("chat"):  # the history, the reply: each one attribute, each cut
        for key in (telemetry.INPUT_MESSAGES, telemetry.OUTPUT_MESSAGES):
            assert len(attrs(chat)[key]) <= telemetry.MAX_ATTRIBUTE_CHARS


def kept_and_cut(value: str) -> int:
    """How long a `capped` value was: the characters kept plus those its marker counts as cut."""
    match = re.fullmatch(r"(.*)\.\.\.\[cut (\d+) characters\]", value, re.DOTALL)
    assert match, value[-60:]
    assert value == match[1] + telemetry.cut_marker(int(match[2]))
    return len(match[1]) + int(match[2])


def test_a_long_text_is_masked_only_as_far_as_an_attribute_shows_it() -> None:
    """An address that starts before the cut is masked whole; the count of what was cut is the original's."""
    email = "ann.lee@example.com"
    text = "x" * (telemetry.MAX_ATTRIBUTE_CHARS - 40) + f" {email} " + "y" * 10_000_000
    shown = telemetry.masked_text(text)
    assert "ann.lee" not in shown and "<email>" in shown and kept_and_cut(shown) == len(text)
    assert len(shown) <= telemetry.MAX_ATTRIBUTE_CHARS


def test_capped_keeps_short_text_and_makes_half_an_emoji_encodable() -> None:
    assert telemetry.capped("plain") == "plain"
    assert telemetry.capped("x" * telemetry.MAX_ATTRIBUTE_CHARS) == "x" * telemetry.MAX_ATTRIBUTE_CHARS
    for size in (51, 100, 10_000, 10_000_000):
        cut = telemetry.capped("abcdefghij" * (size // 10) + "z" * (size % 10), 50)
        assert len(cut) <= 50 and cut.startswith("abcdefghij") and kept_and_cut(cut) == size
    assert telemetry.capped("a \ud83d b \ud83d\udcda") == "a \ufffd b \U0001f4da"


def test_tracing_set_up_for_the_faces_cuts_every_attribute_unless_a_variable_says_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from shared_tools.telemetry_setup import _span_limits

    for name in ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"):
        monkeypatch.delenv(name, raising=False)
    assert _span_limits().max_span_attribute_length == telemetry.MAX_ATTRIBUTE_CHARS
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "100")
    assert _span_limits().max_span_attribute_length == 100


@pytest.mark.parametrize("name", ["handwritten", "create-agent"])
@pytest.mark.parametrize(
    "spelled",
    [
        "quill%40example.com",
        "quill\uff20example.com",
        "qu\u200bill@exam\u200bple.com",
        "quill [at] example [dot] com",
        "quill@example\u3002com",
    ],
)
def test_an_email_address_in_another_spelling_reaches_no_attribute(
    name: str, spelled: str, spans: Spans, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(telemetry.CAPTURE_CONTENT_ENV, "true")
    model = ScriptModel(replies=[ai("", call("lookup", f"id-{spelled}", query=spelled)), ai(f"Mailed {spelled}.")])
    contender(name, model, echo_tools(), spans.provider).run("Be brief.", f"I am {spelled}.")
    text = everything_in(spans.finished)
    assert "<email>" in text and "quill" not in text and "ill@" not in text


# --- the property: personal data and secrets never reach a span -------------------------------------------

_word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=3, max_size=8)
emails = st.builds(lambda a, b, c: f"{a}.{b}@{c}.com", _word, _word, _word)
kinds = st.sampled_from(["Street", "Road", "Lane"])
streets = st.builds(lambda n, w, kind: f"{n} {w.title()} {kind}", st.integers(1, 9999), _word, kinds)
passwords = st.text(alphabet="ABCDEFGHJKMNPQRSTUVWXYZ23456789", min_size=10, max_size=16)


@pytest.mark.parametrize("name", SPAN_CONTENDERS)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(email=emails, street=streets, password=passwords)
def test_no_address_email_or_secret_reaches_any_attribute_or_event(
    name: str, email: str, street: str, password: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Content capture on (the worst case). The goal, the model's arguments and answer, a tool's result and a tool
    call's id and name carry an e-mail and an address; a tool's exception text carries a password that no mask
    would recognise (it is never put on a span); a URL in a result carries one in its credentials."""
    monkeypatch.setenv(telemetry.CAPTURE_CONTENT_ENV, "true")
    recorded = Spans()

    @tool
    def lookup(query: str) -> str:
        """Look a customer up."""
        return f"{query}: {email}, {street}, db postgres://shop:{password}@db/x"

    @tool
    def orders(query: str) -> str:
        """The customer's orders."""
        raise RuntimeError(f"orders db refused login with {password}")

    model = ScriptModel(
        replies=[
            ai("", call("lookup", f"id-{email}", query=f"{email} {street}")),
            ai("", call("orders", "o1", query=street), call(email, "u1", query="x")),
            ai(f"Done for {email} at {street}."),
        ]
    )
    agent = contender(name, model, [lookup, orders], recorded.provider)
    with contextlib.suppress(RuntimeError):  # LangGraph's defaults re-raise the tool's exception
        agent.run("Be brief.", f"I am {email}, {street}.")
    try:
        assert recorded.finished, "the run wrote spans"
        text = everything_in(recorded.finished)
        for secret in (email, street, password):
            assert secret not in text
    finally:
        recorded.provider.shutdown()


# --- the wire ---------------------------------------------------------------------------------------------


class Receiver:
    """An OTLP/HTTP receiver on loopback: keeps every ``POST /v1/traces`` body and answers 200."""

    def __init__(self) -> None:
        bodies = self.bodies = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                bodies.append((self.path, self.headers.get("Content-Type"), self.rfile.read(length)))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """Every span received, decoded, with its resource's attributes."""
        found = []
        for path, content_type, body in self.bodies:
            assert path == "/v1/traces" and content_type == "application/x-protobuf"
            request = ExportTraceServiceRequest.FromString(body)
            for resource_spans in request.resource_spans:
                resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    found += [(resource, span) for span in scope_spans.spans]
        return found


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def test_spans_go_over_otlp_http_as_protobuf_the_collector_can_read() -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    with Receiver() as receiver:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{receiver.url}/v1/traces")))
        agent = contender("create-agent", make_model("scripted"), make_tools(BookStore()), provider)
        assert agent.run(INSTRUCTIONS, SEED_GOAL).ok
        provider.shutdown()
        received = receiver.spans()
    names = [span.name for _, span in received]
    assert sorted(set(names)) == [
        "chat scripted",
        "execute_tool add_to_cart",
        "execute_tool check_stock",
        "execute_tool search_books",
        "invoke_agent create-agent",
    ]
    assert len(names) == 10
    root = next(span for _, span in received if span.name == "invoke_agent create-agent")
    root_attributes = {a.key: _value(a.value) for a in root.attributes}
    assert root_attributes["gen_ai.agent.name"] == "create-agent"
    assert root_attributes["agent_loop.stop_reason"] == "done"
    chat = next(span for _, span in received if span.name == "chat scripted")
    assert chat.kind == chat.SPAN_KIND_CLIENT and chat.parent_span_id == root.span_id
    chat_attributes = {a.key: _value(a.value) for a in chat.attributes}
    assert chat_attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]


def test_a_huge_argument_goes_over_otlp_as_a_request_of_bounded_size(monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    monkeypatch.setenv(telemetry.CAPTURE_CONTENT_ENV, "true")
    with Receiver() as receiver:
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{receiver.url}/v1/traces")))
        huge_run("handwritten", provider)
        provider.shutdown()
        received = receiver.spans()
    assert len(received) == 5  # the run, two chats, two tools (one unknown)
    sizes = [len(body) for _, _, body in receiver.bodies]
    # Six spans of at most a few attributes of MAX_ATTRIBUTE_CHARS each, where one was 3 x 10 MB.
    assert sum(sizes) < 12 * telemetry.MAX_ATTRIBUTE_CHARS, sizes


@pytest.mark.parametrize("capture", ["true", "false"])
def test_half_an_emoji_in_a_run_goes_over_otlp_with_every_span(capture: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lone surrogate in a tool's name, its call id, its arguments, its result and the answer: the batch is
    encoded and sent whole (protobuf takes no half emoji: the exporter dropped the batch), the half as U+FFFD."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    monkeypatch.setenv(telemetry.CAPTURE_CONTENT_ENV, capture)
    half = "\ud83d"
    model = ScriptModel(
        replies=[ai("", call("lookup", f"id{half}", query=f"moth {half}"), call(f"x{half}", "u1")), ai(f"Done {half}.")]
    )
    with Receiver() as receiver:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{receiver.url}/v1/traces")))
        contender("handwritten", model, echo_tools(), provider).run("Be brief.", f"Find {half}.")
        provider.shutdown()
        received = receiver.spans()
    assert sorted(span.name for _, span in received) == [
        "chat",
        "chat",
        "execute_tool lookup",
        "execute_tool x\ufffd",
        "invoke_agent handwritten",
    ]
    ids = [_value(a.value) for _, span in received for a in span.attributes if a.key == telemetry.TOOL_CALL_ID]
    assert "id\ufffd" in ids


def _compare(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "compare.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
        cwd=ROOT,
    )


def test_compare_otel_otlp_honours_the_standard_variables_and_sends_every_run_s_spans_by_exit() -> None:
    with Receiver() as receiver:
        done = _compare(
            "bookstore",
            "orders",
            "--contenders",
            ",".join(SPAN_CONTENDERS),
            "--otel",
            "otlp",
            env={
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
                "OTEL_SERVICE_NAME": "bookstore-class",
                telemetry.CAPTURE_CONTENT_ENV: "false",
            },
        )
        received = receiver.spans()
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    roots = [span for _, span in received if span.name.startswith("invoke_agent")]
    # bookstore: 1 goal under 2 wordings, orders: 2 questions; per contender.
    assert sorted(span.name for span in roots) == sorted(f"invoke_agent {name}" for name in SPAN_CONTENDERS * 4)
    # One tree per run: every other span hangs from one of those runs.
    run_ids = {span.span_id for span in roots}
    children = [span for _, span in received if span.span_id not in run_ids]
    assert children and all(span.parent_span_id in run_ids for span in children)
    assert {resource["service.name"] for resource, _ in received} == {"bookstore-class"}


def test_compare_otel_console_writes_json_lines_one_span_a_line() -> None:
    """docs/tracing.md: `--otel console 2>spans.jsonl` is one JSON per span (the SDK's default indents each over
    many lines). Scripted runs go to parallel workers, whose spans share one stderr."""
    done = _compare("bookstore", "orders", "--contenders", ",".join(SPAN_CONTENDERS), "--otel", "console", env={})
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    spans = [json.loads(line) for line in lines]
    roots = [span for span in spans if span["name"].startswith("invoke_agent")]
    assert sorted(span["name"] for span in roots) == sorted(f"invoke_agent {name}" for name in SPAN_CONTENDERS * 4)
    assert len(spans) > len(roots)
    assert len({span["context"]["span_id"] for span in spans}) == len(spans) == len(lines)


CLOSING_TABLES = "comparison.command:guard_matrix"


@pytest.mark.skipif(sys.platform == "win32", reason="sends SIGINT")
def test_spans_of_the_finished_runs_are_sent_when_ctrl_c_ends_the_program() -> None:
    """Ctrl-C while the closing tables are written (after every run, before the batch's next export)."""
    with Receiver() as receiver:
        process = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "tests" / "pause_at.py"),
                f"call:{CLOSING_TABLES}",
                "compare.py",
                "bookstore",
                "orders",
                "--contenders",
                "langgraph-defaults,create-agent",
                "--no-trace",
                "--otel",
                "otlp",
            ],
            cwd=ROOT,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={
                **os.environ,
                "PYTHONUNBUFFERED": "1",
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
                "OTEL_BSP_SCHEDULE_DELAY": "600000",
            },  # no export on the batch's clock: only the exit sends them
        )
        assert process.stderr is not None
        for line in process.stderr:
            if line.startswith("PAUSED"):
                break
        assert receiver.bodies == []
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
        received = receiver.spans()
    assert process.returncode == 130, err
    # 2 contenders x (bookstore under 2 wordings + orders' 2 questions)
    assert len([span for _, span in received if span.name.startswith("invoke_agent")]) == 8


def test_otel_without_a_receiver_is_one_line_and_exit_2_before_anything_runs(tmp_path: Path) -> None:
    done = _compare("bookstore", "--otel", "otlp", env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "nothing accepts OTLP/HTTP at http://127.0.0.1:9/v1/traces" in done.stderr


class Silent:
    """A receiver that accepts every connection and never answers (a hung collector); counts the connections."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.accepted: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                self.accepted.append(self.server.accept()[0])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.getsockname()[1]}"

    def __enter__(self) -> Silent:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.close()
        for connection in self.accepted:
            connection.close()


def test_a_receiver_that_hangs_after_the_check_is_one_line_and_waited_for_once() -> None:
    """Many batches (five spans each), a receiver that takes the connections and never answers: one line of ours,
    no traceback, exit 0, and one export waited for (then the rest are dropped at once), not one per batch."""
    with Silent() as receiver:
        done = _compare(
            "bookstore",
            "orders",
            "--contenders",
            "handwritten,langgraph",
            "--otel",
            "otlp",
            env={
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
                "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
                "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "5",
            },
        )
        connections = len(receiver.accepted)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("\n") == 1 and "spans not sent: the OTLP receiver at" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert connections <= 3, f"the check and one export (a retry at most), not one per batch: {connections}"


def test_a_failing_receiver_is_said_once_rested_from_and_tried_again(caplog: pytest.LogCaptureFixture) -> None:
    """The real OTLP exporter against a receiver that answers 500: one error line per outage, batches dropped
    without a request while resting, the receiver tried again after the rest, and a line when it is back."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    from shared_tools.telemetry_export import OneLineExporter

    answers = [500, 500, 200]
    requests: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            requests.append(self.path)
            self.send_response(answers[min(len(requests), len(answers)) - 1])
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    recorded = Spans()
    with telemetry.agent_run("demo", make_model("scripted"), provider=recorded.provider):
        pass
    [span] = recorded.finished
    try:
        exporter = OneLineExporter(OTLPSpanExporter(endpoint=endpoint), endpoint, quiet_s=3600)
        with caplog.at_level(logging.WARNING):
            assert exporter.export([span]) is SpanExportResult.FAILURE
            assert exporter.export([span]) is SpanExportResult.FAILURE  # resting: no request
            assert len(requests) == 1 and exporter.dropped == 2
            exporter.quiet_s = 0.0
            exporter._resting_until = 0.0
            assert exporter.export([span]) is SpanExportResult.FAILURE  # tried again: still down, said once
            assert exporter.export([span]) is SpanExportResult.SUCCESS
        lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(requests) == 3
        assert [line.split(":")[0] for line in lines] == ["spans not sent", "the OTLP receiver at http"], lines
    finally:
        exporter.shutdown()
        server.shutdown()
        server.server_close()
        recorded.provider.shutdown()


# --- the comparison row: what each layer gives for free ---------------------------------------------------

BARE_FRAMEWORK_RUN = """
import json
import re
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from langchain.agents import create_agent
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from comparison.scenarios import INSTRUCTIONS, SEED_GOAL
from langgraph_version import DefaultsGraphAgent
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.models import make_model

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
seen = {}
tools = make_tools(BookStore())
model = make_model("scripted").bind_tools(tools)
graph = StateGraph(MessagesState)
graph.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
graph.add_node("tools", ToolNode(tools))
graph.add_edge(START, "model")
graph.add_conditional_edges("model", tools_condition)
graph.add_edge("tools", "model")
graph.compile().invoke({"messages": [("system", INSTRUCTIONS), ("user", SEED_GOAL)]})
seen["state_graph"] = len(exporter.get_finished_spans())
create_agent(make_model("scripted"), make_tools(BookStore()), system_prompt=INSTRUCTIONS).invoke(
    {"messages": [("user", SEED_GOAL)]}
)
seen["create_agent"] = len(exporter.get_finished_spans())
DefaultsGraphAgent(make_model("scripted"), make_tools(BookStore())).run(INSTRUCTIONS, SEED_GOAL)
seen["with_our_callbacks"] = len(exporter.get_finished_spans())
print(json.dumps(seen))
"""


def test_the_tracing_row_a_bare_state_graph_or_create_agent_writes_no_span() -> None:
    """With an SDK provider set as OpenTelemetry's global one (a child process: it can be set once), LangGraph and
    `create_agent` on their own write nothing; the same process records the defaults contender's spans, which
    come from our `SpanCallbacks`."""
    done = subprocess.run(
        [sys.executable, "-c", BARE_FRAMEWORK_RUN],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_", "OTEL_"))},
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert (seen["state_graph"], seen["create_agent"]) == (0, 0)
    assert seen["with_our_callbacks"] == 10  # invoke_agent, 5 chat, 4 execute_tool


def test_the_tracing_row_a_call_create_agent_answers_itself_fires_no_tool_callback() -> None:
    from langchain.agents import create_agent
    from langchain_core.callbacks import BaseCallbackHandler

    class Count(BaseCallbackHandler):
        def __init__(self) -> None:
            self.chats = self.tools = 0

        def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
            self.chats += 1

        def on_tool_start(self, *args: Any, **kwargs: Any) -> None:
            self.tools += 1

    count = Count()
    agent = create_agent(make_model("scripted:hallucinator"), make_tools(BookStore()), system_prompt=INSTRUCTIONS)
    state = agent.invoke({"messages": [HumanMessage(SEED_GOAL)]}, {"callbacks": [count]})
    calls = [c for m in state["messages"] if isinstance(m, AIMessage) for c in m.tool_calls]
    replies = [m for m in state["messages"] if isinstance(m, AIMessage)]
    assert "find_book" in [c["name"] for c in calls]  # the unknown tool
    assert count.chats == len(replies)  # one callback per model call
    assert count.tools == len(calls) - 1  # but none for the call its ToolNode answered without a tool


MAF_AND_OURS = """
import json
import re
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
from comparison.scenarios import INSTRUCTIONS, SEED_GOAL
from handwritten import AgentLoop
from maf_version import MafAgent
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.models import make_model
assert MafAgent(make_model("scripted"), make_tools(BookStore())).run(INSTRUCTIONS, SEED_GOAL).ok
assert AgentLoop(make_model("scripted"), make_tools(BookStore())).run(INSTRUCTIONS, SEED_GOAL).ok
print(json.dumps([[s.instrumentation_scope.name, s.name, s.kind.name, s.context.trace_id] for s in
                  exporter.get_finished_spans()]))
"""


def test_maf_writes_its_own_spans_to_the_same_global_provider_as_ours() -> None:
    """MAF's telemetry writes to OpenTelemetry's global provider (it takes none per agent), so `--otel` collects
    its spans next to ours: the same three names, its chat span INTERNAL where ours is CLIENT."""
    done = subprocess.run(
        [sys.executable, "-c", MAF_AND_OURS],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ENABLE_"))},
    )
    assert done.returncode == 0, done.stderr
    by_scope: dict[str, list[tuple[str, str]]] = {}
    traces: dict[str, set[int]] = {}
    for scope, name, kind, trace_id in json.loads(done.stdout):
        by_scope.setdefault(scope, []).append((name, kind))
        traces.setdefault(scope, set()).add(trace_id)
    maf, ours = by_scope["agent_framework"], by_scope[telemetry.SCOPE]
    tools = ["search_books", "check_stock", "check_stock", "add_to_cart"]
    assert sorted(maf) == sorted(
        [("invoke_agent bookstore", "INTERNAL")]
        + [("chat scripted", "INTERNAL")] * 5
        + [(f"execute_tool {t}", "INTERNAL") for t in tools]
    )
    assert sorted(ours) == sorted(
        [("invoke_agent handwritten", "INTERNAL")]
        + [("chat scripted", "CLIENT")] * 5
        + [(f"execute_tool {t}", "INTERNAL") for t in tools]
    )
    assert len(traces["agent_framework"]) == len(traces[telemetry.SCOPE]) == 1  # one tree per run, each


MAF_CALL_IDS = """
import json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
from maf_version import MafAgent
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from tests.doubles import ScriptModel, ai, call
store = BookStore()
reply = ai("", call("check_stock", "alice@example.com", book_id=7), call("add_to_cart", "bob@example.com", book_id=7))
assert MafAgent(ScriptModel(replies=[reply, ai("Done.")]), make_tools(store)).run("Help.", "Add one.").ok
print(json.dumps({"spans": [[s.name, dict(s.attributes or {})] for s in exporter.get_finished_spans()],
                  "applied": sorted(store.applied_requests("c1", ["bob@example.com", "<email>"]))}))
"""


def test_mafs_own_tool_spans_mask_the_call_id_the_model_wrote() -> None:
    """MAF writes the model's call id on its `execute_tool` span even with content capture off; an e-mail address
    in it is masked there, as our spans mask it, while the tool still gets the real id as its request key."""
    pytest.importorskip("agent_framework", reason="needs the maf extra: pip install -e '.[maf]'")
    done = subprocess.run(
        [sys.executable, "-c", MAF_CALL_IDS],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ENABLE_"))},
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    tools = {name: attributes for name, attributes in found["spans"] if name.startswith("execute_tool")}
    assert set(tools) == {"execute_tool check_stock", "execute_tool add_to_cart"}
    assert [a[telemetry.TOOL_CALL_ID] for a in tools.values()] == ["<email>", "<email>"]
    assert "example.com" not in json.dumps(found["spans"])
    assert found["applied"] == ["bob@example.com"], "the add's request key is the model's own id"

"""Tests of the hand-written loop and session: every rule of the loop, driven by fixed-script and scripted models.

Small local tools record what actually ran, so a guard that "blocks" a call is checked by the call not
happening, not only by the text the model got. Cancellation and time budgets use a model that waits on an
asyncio event that is never set (no sleeps, no timed asserts). The article test at the end runs the real
bookstore tools over a real SQLite store with the embedded scripted model.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatResult
from langchain_core.tools import BaseTool, StructuredTool, ToolException, tool
from pydantic import PrivateAttr

from handwritten import AgentCancelled, AgentLoop, CustomerMismatch, Session, SessionConflict
from handwritten.storage import FORMAT
from shared_tools import guards
from shared_tools.bookstore.faults import FAKE_SECRET, Faults
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.guards import CANCELLED_CALL_TEXT, CANCELLED_WHILE_RUNNING_TEXT, MODEL_TIMED_OUT_DETAIL, truncate
from shared_tools.models import ScriptedChatModel
from shared_tools.results import AgentLimits, AgentOptions, AgentResult, Guard, StopReason, TraceEvent
from shared_tools.steps import CallTools, FinalAnswer, InvalidResponse, classify
from tests.conftest import assert_valid_history
from tests.doubles import ScriptModel, ToolBindingDouble, ai, call

SYSTEM = "You are a test assistant."
NO_LIMITS = AgentLimits(max_steps=None, max_tokens=None, max_repeats=None, max_consecutive_errors=None)


# --- test-only tools and models ---------------------------------------------------------------------------------


class Tools:
    """A few local tools that record every call that really ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        ran = self.ran

        @tool
        def echo(text: str) -> str:
            """Return the text."""
            ran.append(f"echo:{text}")
            return f"echo {text}"

        @tool
        def add(a: int, b: int) -> str:
            """Add two integers."""
            ran.append(f"add:{a}+{b}")
            return str(a + b)

        @tool
        def refuse(reason: str) -> str:
            """Always refuses with a message meant for the model."""
            ran.append("refuse")
            raise ToolException(f"refused: {reason}")

        @tool
        def crash(x: int) -> str:
            """A bug: raises an exception whose text must not reach the model."""
            ran.append("crash")
            raise ValueError("db password is hunter2")

        @tool
        def big() -> str:
            """A long result."""
            ran.append("big")
            return "x" * 100

        self.echo, self.add, self.refuse, self.crash, self.big = echo, add, refuse, crash, big

    @property
    def all(self) -> list[BaseTool]:
        return [self.echo, self.add, self.refuse, self.crash, self.big]


@pytest.fixture
def tools() -> Tools:
    return Tools()


class StallModel(ToolBindingDouble):
    """Returns its scripted replies, then waits forever on an event nobody sets (until cancelled or timed out)."""

    replies: Sequence[AIMessage] = ()
    _calls: int = PrivateAttr(default=0)
    _waiting: asyncio.Event | None = PrivateAttr(default=None)

    @property
    def _llm_type(self) -> str:
        return "test-stall"

    def _generate(self, *args: Any, **kwargs: Any) -> ChatResult:
        raise AssertionError("StallModel is async only")

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        from langchain_core.outputs import ChatGeneration

        self._calls += 1
        if self._calls <= len(self.replies):
            return ChatResult(generations=[ChatGeneration(message=self.replies[self._calls - 1].model_copy())])
        self.stalled.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    @property
    def stalled(self) -> asyncio.Event:
        """Set once the model is stuck waiting, so a test knows when to cancel."""
        if self._waiting is None:
            self._waiting = asyncio.Event()
        return self._waiting


def loop_of(replies: Sequence[Any], tools: Sequence[BaseTool], **kwargs: Any) -> tuple[AgentLoop, ScriptModel]:
    model = ScriptModel(replies=list(replies))
    return AgentLoop(model, tools, AgentOptions(**kwargs)), model


def tool_messages(result: AgentResult) -> list[ToolMessage]:
    return [m for m in result.messages if isinstance(m, ToolMessage)]


# --- typed steps ------------------------------------------------------------------------------------------------


def test_classify_three_shapes() -> None:
    calls = ai("thinking", call("echo", "c1", text="hi"))
    assert classify(calls) == CallTools((calls.tool_calls[0],))
    assert classify(ai("  The answer.\n")) == FinalAnswer("The answer.")
    assert classify(ai("")) == InvalidResponse("empty response")
    assert classify(ai(" \n ")) == InvalidResponse("empty response")
    broken = AIMessage(
        content="Let me check.", invalid_tool_calls=[{"name": "echo", "args": "{oops", "id": "x", "error": "bad"}]
    )
    assert classify(broken) == InvalidResponse("1 tool call(s) could not be parsed")


def test_typed_steps_are_frozen() -> None:
    with pytest.raises(AttributeError):
        FinalAnswer("a").text = "b"  # type: ignore[misc]


# --- the basic run ----------------------------------------------------------------------------------------------


def test_done_run_counts_steps_calls_and_tokens(tools: Tools) -> None:
    loop, model = loop_of(
        [
            ai("", call("echo", "c1", text="a"), call("add", "c2", a=1, b=2), tokens=10),
            ai("", call("echo", "c3", text="b"), tokens=20),
            ai("All done.", tokens=30),
        ],
        tools.all,
    )
    result = loop.run(SYSTEM, "do it")

    assert result.stop_reason is StopReason.DONE
    assert result.answer == "All done."
    assert (result.steps, result.model_calls, result.tool_calls) == (3, 3, 3)
    assert result.tokens == 60
    assert result.tokens_per_step == [10, 20, 30]
    assert tools.ran == ["echo:a", "add:1+2", "echo:b"]
    types = [type(m).__name__ for m in result.messages]
    assert types == [
        "SystemMessage",
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "ToolMessage",
        "AIMessage",
        "ToolMessage",
        "AIMessage",
    ]
    assert result.messages[0].content == SYSTEM and result.messages[1].content == "do it"
    first, second = tool_messages(result)[:2]
    assert (first.tool_call_id, first.name, first.content, first.status) == ("c1", "echo", "echo a", "success")
    assert (second.tool_call_id, second.name, second.content) == ("c2", "add", "3")
    # The model saw its own tool calls before their results: the reply was appended before the tools ran.
    assert isinstance(model.prompts[1][2], AIMessage) and model.prompts[1][2].tool_calls
    assert_valid_history(result.messages)


def test_a_model_without_usage_counts_zero_tokens(tools: Tools) -> None:
    loop, _ = loop_of([AIMessage(content="Hi.")], tools.all)
    result = loop.run(SYSTEM, "hello")
    assert (result.stop_reason, result.tokens, result.tokens_per_step) == (StopReason.DONE, 0, [0])


def test_empty_reply_is_an_invalid_response(tools: Tools) -> None:
    loop, _ = loop_of([ai("")], tools.all)
    result = loop.run(SYSTEM, "hello")
    assert (result.stop_reason, result.answer, result.steps, result.tool_calls) == (
        StopReason.INVALID_RESPONSE,
        None,
        1,
        0,
    )


def test_unparseable_tool_call_is_an_invalid_response(tools: Tools) -> None:
    broken = AIMessage(content="", invalid_tool_calls=[{"name": "echo", "args": "{", "id": "x", "error": "bad json"}])
    loop, _ = loop_of([broken], tools.all)
    assert loop.run(SYSTEM, "hello").stop_reason is StopReason.INVALID_RESPONSE
    assert tools.ran == []


# --- guards: exact texts, statuses, nothing executed -----------------------------------------------------------


def test_unknown_tool_gets_an_error_listing_the_real_tools(tools: Tools) -> None:
    loop, _ = loop_of([ai("", call("find_book", "c1", title="x")), ai("Sorry.")], tools.all)
    result = loop.run(SYSTEM, "go")
    [message] = tool_messages(result)
    assert message.content == "Unknown tool 'find_book'. Available: echo, add, refuse, crash, big."
    assert (message.status, message.name, message.tool_call_id) == ("error", "find_book", "c1")
    assert result.tool_calls == 1
    assert result.trace[1].name == "find_book" and result.trace[1].is_error


def test_invalid_arguments_are_refused_before_anything_runs(tools: Tools) -> None:
    loop, _ = loop_of([ai("", call("add", "c1", a=1, b="two")), ai("Sorry.")], tools.all)
    result = loop.run(SYSTEM, "go")
    [message] = tool_messages(result)
    assert message.content == (
        "Invalid arguments for add: b: Input should be a valid integer, unable to parse string as an integer. "
        "Fix the arguments and call it again."
    )
    assert message.status == "error"
    assert tools.ran == []


def test_missing_argument_names_the_field(tools: Tools) -> None:
    loop, _ = loop_of([ai("", call("add", "c1", a=1)), ai("Sorry.")], tools.all)
    [message] = tool_messages(loop.run(SYSTEM, "go"))
    assert message.content == "Invalid arguments for add: b: Field required. Fix the arguments and call it again."
    assert tools.ran == []


def test_third_identical_call_is_blocked_and_not_executed(tools: Tools) -> None:
    replies = [ai("", call("echo", f"c{i}", text="same")) for i in range(4)] + [ai("Stopping.")]
    loop, _ = loop_of(replies, tools.all, limits=AgentLimits(max_consecutive_errors=None))
    result = loop.run(SYSTEM, "go")

    contents = [m.content for m in tool_messages(result)]
    assert contents == [
        "echo same",
        "echo same",
        "You already called echo with these arguments 2 times. Use the earlier result or try something else.",
        "You already called echo with these arguments 3 times. Use the earlier result or try something else.",
    ]
    assert [m.status for m in tool_messages(result)] == ["success", "success", "error", "error"]
    assert tools.ran == ["echo:same", "echo:same"]
    assert result.tool_calls == 4  # blocked calls are still calls the model asked for


def test_repeat_key_ignores_argument_order_and_counts_invalid_calls(tools: Tools) -> None:
    replies = [
        ai("", call("add", "c1", a=1, b=2)),
        ai("", {"name": "add", "args": {"b": 2, "a": 1}, "id": "c2", "type": "tool_call"}),
        ai("", call("add", "c3", a=1, b=2)),
        ai("", call("add", "c4", a=1, b="x")),
        ai("", call("add", "c5", a=1, b="x")),
        ai("Done."),
    ]
    loop, _ = loop_of(replies, tools.all, limits=AgentLimits(max_repeats=1, max_consecutive_errors=None))
    contents = [m.content for m in tool_messages(loop.run(SYSTEM, "go"))]
    assert contents[0] == "3"
    assert contents[1].startswith("You already called add with these arguments 1 times.")
    assert contents[2].startswith("You already called add with these arguments 2 times.")
    assert contents[3].startswith("Invalid arguments for add: b:")  # the first bad call is validated...
    assert contents[4].startswith("You already called add with these arguments 1 times.")  # ...its repeat is not
    assert tools.ran == ["add:1+2"]


def test_unknown_tool_calls_do_not_count_as_repeats(tools: Tools) -> None:
    replies = [ai("", call("nope", f"c{i}")) for i in range(3)] + [ai("Gave up.")]
    loop, _ = loop_of(replies, tools.all, limits=AgentLimits(max_repeats=1, max_consecutive_errors=None))
    contents = [m.content for m in tool_messages(loop.run(SYSTEM, "go"))]
    assert all(c.startswith("Unknown tool 'nope'.") for c in contents)


def test_no_repeat_limit_lets_every_call_run(tools: Tools) -> None:
    replies = [ai("", call("echo", f"c{i}", text="same")) for i in range(5)] + [ai("Done.")]
    loop, _ = loop_of(replies, tools.all, limits=NO_LIMITS)
    assert loop.run(SYSTEM, "go").stop_reason is StopReason.DONE
    assert tools.ran == ["echo:same"] * 5


def test_tool_exception_message_goes_to_the_model(tools: Tools) -> None:
    loop, _ = loop_of([ai("", call("refuse", "c1", reason="no stock")), ai("Sorry.")], tools.all)
    result = loop.run(SYSTEM, "go")
    [message] = tool_messages(result)
    assert (message.content, message.status) == ("refused: no stock", "error")
    assert result.stop_reason is StopReason.DONE


def test_other_exceptions_become_a_generic_failure_unless_detailed(tools: Tools) -> None:
    replies = [ai("", call("crash", "c1", x=1)), ai("Sorry.")]
    loop, _ = loop_of(replies, tools.all)
    [message] = tool_messages(loop.run(SYSTEM, "go"))
    assert (message.content, message.status) == ("crash failed.", "error")

    detailed, _ = loop_of(replies, tools.all, detailed_errors=True)
    [message] = tool_messages(detailed.run(SYSTEM, "go"))
    assert message.content == "crash failed: ValueError: db password is hunter2"


def test_a_tool_that_handles_its_own_error_is_still_an_error_result() -> None:
    @tool
    def picky(x: int) -> str:
        """Handles its own ToolException (LangChain returns an error ToolMessage)."""
        raise ToolException("handled by the tool")

    picky.handle_tool_error = True
    loop, _ = loop_of([ai("", call("picky", "c1", x=1)), ai("Ok.")], [picky])
    result = loop.run(SYSTEM, "go")
    [message] = tool_messages(result)
    assert (message.content, message.status) == ("handled by the tool", "error")
    assert result.trace[1].is_error


def test_keyboard_interrupt_in_a_tool_is_never_a_result() -> None:
    async def interrupt() -> str:
        raise KeyboardInterrupt

    stop = StructuredTool.from_function(coroutine=interrupt, name="stop", description="Raises KeyboardInterrupt.")
    loop, _ = loop_of([ai("", call("stop", "c1"))], [stop])
    with pytest.raises(KeyboardInterrupt):
        loop.run(SYSTEM, "go")


async def test_cancelled_error_in_a_tool_is_never_a_result() -> None:
    async def cancelled() -> str:
        raise asyncio.CancelledError

    stop = StructuredTool.from_function(coroutine=cancelled, name="stop", description="Raises CancelledError.")
    loop, _ = loop_of([ai("", call("stop", "c1"))], [stop])
    with pytest.raises(AgentCancelled) as info:
        await loop.arun(SYSTEM, "go")
    [message] = tool_messages(info.value.result)
    assert message.content == CANCELLED_WHILE_RUNNING_TEXT  # the tool had started: it may have done its work


def test_on_event_exceptions_propagate_and_are_not_tool_results(tools: Tools) -> None:
    def explode(event: TraceEvent) -> None:
        if event.name == "echo":
            raise RuntimeError("bug in the caller's callback")

    loop, _ = loop_of([ai("", call("echo", "c1", text="a"))], tools.all, on_event=explode)
    with pytest.raises(RuntimeError, match="bug in the caller's callback"):
        loop.run(SYSTEM, "go")


def test_duplicate_tool_names_are_refused(tools: Tools) -> None:
    with pytest.raises(ValueError, match="unique"):
        AgentLoop(ScriptModel(replies=[]), [tools.echo, tools.echo])


# --- budgets ----------------------------------------------------------------------------------------------------


def test_max_steps_runs_the_last_steps_tools_then_stops(tools: Tools) -> None:
    replies = [ai("", call("echo", f"c{i}", text=str(i))) for i in range(2)]
    loop, model = loop_of(replies, tools.all, limits=AgentLimits(max_steps=2))
    result = loop.run(SYSTEM, "go")
    assert (result.stop_reason, result.answer, result.steps) == (StopReason.MAX_STEPS, None, 2)
    assert tools.ran == ["echo:0", "echo:1"]
    assert model.calls == 2
    assert_valid_history(result.messages)


def test_no_step_limit(tools: Tools) -> None:
    replies = [ai("", call("echo", f"c{i}", text=str(i))) for i in range(9)] + [ai("Done.")]
    loop, _ = loop_of(replies, tools.all, limits=NO_LIMITS)
    result = loop.run(SYSTEM, "go")
    assert (result.stop_reason, result.steps) == (StopReason.DONE, 10)


def test_token_budget_is_checked_after_the_tool_round(tools: Tools) -> None:
    replies = [ai("", call("echo", f"c{i}", text=str(i)), tokens=10) for i in range(3)]
    loop, _ = loop_of(replies, tools.all, limits=AgentLimits(max_tokens=25))
    result = loop.run(SYSTEM, "go")
    assert (result.stop_reason, result.answer, result.steps, result.tokens) == (StopReason.TOKEN_BUDGET, None, 3, 30)
    assert tools.ran == ["echo:0", "echo:1", "echo:2"]  # the tools of the step that crossed the budget ran


def test_the_time_budget_cuts_a_tool_that_runs_past_it() -> None:
    async def slow() -> str:
        await asyncio.sleep(2.0)
        return "slow result"

    # A budget far above a scripted reply's time even on a loaded machine, far below the tool's.
    slow_tool = StructuredTool.from_function(coroutine=slow, name="slow", description="Takes a while.")
    loop, _ = loop_of([ai("", call("slow", "c1"))], [slow_tool], limits=AgentLimits(max_duration=0.2))
    started = time.monotonic()
    result = loop.run(SYSTEM, "go")
    assert time.monotonic() - started < 1.5
    assert (result.stop_reason, result.steps) == (StopReason.TIME_BUDGET, 1)
    assert tool_messages(result)[0].content == guards.TOOL_CUT_RUNNING_TEXT
    assert result.trace[-1].guard is Guard.TOOL_TIMEOUT


async def test_a_model_slower_than_the_time_budget_ends_the_run(tools: Tools) -> None:
    model = StallModel(replies=[ai("", call("echo", "c1", text="a"))])
    loop = AgentLoop(model, tools.all, AgentOptions(limits=AgentLimits(max_duration=0.05)))
    result = await loop.arun(SYSTEM, "go")
    assert (result.stop_reason, result.answer, result.steps) == (StopReason.TIME_BUDGET, None, 2)
    assert [e.detail for e in result.trace if e.is_model][-1] == MODEL_TIMED_OUT_DETAIL
    assert_valid_history(result.messages)


class ProviderTimeoutModel(StallModel):
    """A model whose provider call raises its own TimeoutError (a network timeout, say)."""

    async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        raise TimeoutError("provider timed out")


async def test_a_models_own_timeout_error_is_not_the_time_budget(tools: Tools) -> None:
    loop = AgentLoop(ProviderTimeoutModel(), tools.all, AgentOptions(limits=AgentLimits(max_duration=60)))
    with pytest.raises(TimeoutError, match="provider timed out"):
        await loop.arun(SYSTEM, "go")


def test_consecutive_error_rounds_stop_the_run(tools: Tools) -> None:
    replies = [ai("", call("refuse", f"c{i}", reason=str(i))) for i in range(3)]
    loop, model = loop_of(replies, tools.all, limits=AgentLimits(max_consecutive_errors=2))
    result = loop.run(SYSTEM, "go")
    assert (result.stop_reason, result.steps) == (StopReason.TOO_MANY_ERRORS, 3)
    assert model.calls == 3


def test_a_clean_round_resets_the_error_count(tools: Tools) -> None:
    error = ai("", call("refuse", "e1", reason="1"))
    mixed = ai("", call("echo", "m1", text="ok"), call("refuse", "m2", reason="2"))  # one error taints the round
    clean = ai("", call("echo", "k1", text="clean"))
    clean_again = ai("", call("echo", "k2", text="clean again"))
    limits = AgentLimits(max_consecutive_errors=1)  # a second error round in a row stops the run

    loop, _ = loop_of([error, clean, mixed, clean_again, error, ai("Done.")], tools.all, limits=limits)
    assert loop.run(SYSTEM, "go").stop_reason is StopReason.DONE

    strict, _ = loop_of([error, mixed], tools.all, limits=limits)
    result = strict.run(SYSTEM, "go")
    assert (result.stop_reason, result.steps) == (StopReason.TOO_MANY_ERRORS, 2)


def test_budgets_are_checked_errors_first_then_tokens(tools: Tools) -> None:
    replies = [ai("", call("refuse", f"c{i}", reason=str(i)), tokens=100) for i in range(2)]
    loop, _ = loop_of(replies, tools.all, limits=AgentLimits(max_tokens=150, max_consecutive_errors=1))
    assert loop.run(SYSTEM, "go").stop_reason is StopReason.TOO_MANY_ERRORS


# --- cancellation -----------------------------------------------------------------------------------------------


def test_cancel_before_the_run_calls_no_model(tools: Tools) -> None:
    cancel = threading.Event()
    cancel.set()
    loop, model = loop_of([], tools.all)
    result = loop.run(SYSTEM, "go", cancel=cancel)
    assert (result.stop_reason, result.steps, model.calls) == (StopReason.CANCELLED, 0, 0)
    assert [type(m) for m in result.messages] == [SystemMessage, HumanMessage]


def test_cooperative_cancel_between_tool_calls_answers_the_rest(tools: Tools) -> None:
    cancel = threading.Event()

    @tool
    def pull_the_plug() -> str:
        """Sets the cancel event, as a user closing the page would."""
        cancel.set()
        return "plug pulled"

    replies = [ai("", call("pull_the_plug", "c1"), call("echo", "c2", text="never"), call("echo", "c3", text="no"))]
    loop, _ = loop_of(replies, [pull_the_plug, *tools.all])  # a second model call would fail loudly
    result = loop.run(SYSTEM, "go", cancel=cancel)

    assert (result.stop_reason, result.answer, result.steps, result.tool_calls) == (StopReason.CANCELLED, None, 1, 3)
    assert [(m.content, m.status) for m in tool_messages(result)] == [
        ("plug pulled", "success"),
        (CANCELLED_CALL_TEXT, "error"),
        (CANCELLED_CALL_TEXT, "error"),
    ]
    assert tools.ran == []
    assert [e.name for e in result.trace] == ["model", "pull_the_plug"]
    assert_valid_history(result.messages)


async def test_task_cancel_raises_agent_cancelled_with_the_partial_run() -> None:
    with BookStore() as store:
        model = StallModel(replies=[ai("", call("check_stock", "c1", book_id=7))])
        loop = AgentLoop(model, make_tools(store))
        task = asyncio.create_task(loop.arun(SYSTEM, "go"))
        await model.stalled.wait()
        task.cancel()
        with pytest.raises(AgentCancelled) as info:
            await task

        assert task.cancelled()
        assert isinstance(info.value, asyncio.CancelledError)
        result = info.value.result
        assert (result.stop_reason, result.steps, result.tool_calls) == (StopReason.CANCELLED, 1, 1)
        assert [e.name for e in result.trace] == ["model", "check_stock"]
        assert_valid_history(result.messages)


async def test_task_cancel_during_a_tool_leaves_the_store_unchanged_and_history_valid() -> None:
    with BookStore() as store:
        started = asyncio.Event()
        # Every tool first waits 60 s (an asyncio.sleep in the async tool), so the cancel lands mid-tool.
        loop = AgentLoop(
            ScriptModel(replies=[ai("", call("add_to_cart", "c1", book_id=7, quantity=1))]),
            make_tools(store, faults=Faults(latency_s=60)),
            AgentOptions(on_event=lambda event: started.set()),
        )
        task = asyncio.create_task(loop.arun(SYSTEM, "Add The Quiet Orchard."))
        await started.wait()
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(AgentCancelled) as info:
            await task

        result = info.value.result
        assert result.stop_reason is StopReason.CANCELLED
        assert store.cart("c1").lines == ()
        assert store.stock(7) == 15
        [message] = tool_messages(result)
        assert (message.tool_call_id, message.content, message.status) == ("c1", CANCELLED_WHILE_RUNNING_TEXT, "error")
        assert_valid_history(result.messages)


@pytest.mark.parametrize("parallel", [False, True])
async def test_a_cancel_mid_round_keeps_the_results_of_calls_that_finished(parallel: bool) -> None:
    """A call that already committed was labelled "Cancelled before it ran.", so the model added the book again
    next turn. Now each call says what really happened: its result, cut off mid-run, or never started."""
    with BookStore() as store:
        slow = asyncio.Event()

        async def slow_lookup() -> str:
            slow.set()
            await asyncio.sleep(60)
            return "never"

        lookup = StructuredTool.from_function(coroutine=slow_lookup, name="slow_lookup", description="Slow.")
        turn = ai(
            "",
            call("add_to_cart", "add", book_id=7, quantity=1),
            call("slow_lookup", "slow"),
            call("view_cart", "view"),
        )
        loop, _ = loop_of([turn], [*make_tools(store), lookup], parallel_tools=parallel)
        task = asyncio.create_task(loop.arun(SYSTEM, "go"))
        await slow.wait()
        await asyncio.sleep(0.05)  # the add (and, in parallel, the cart view) has finished by now
        task.cancel()
        with pytest.raises(AgentCancelled) as info:
            await task

        answers = {m.tool_call_id: m for m in tool_messages(info.value.result)}
        assert store.cart("c1").quantity_of(7) == 1
        assert answers["add"].status == "success" and '"added":"The Quiet Orchard"' in answers["add"].text
        assert answers["slow"].content == CANCELLED_WHILE_RUNNING_TEXT
        if parallel:
            assert answers["view"].status == "success"  # it ran beside the slow call
        else:
            assert answers["view"].content == CANCELLED_CALL_TEXT  # it never started
        # In parallel the finished calls are answered first and the cut-off one last, so not in call order.
        assert_valid_history(info.value.result.messages, in_call_order=not parallel)


async def test_a_session_continues_after_a_cancelled_ask(tools: Tools) -> None:
    stall = StallModel(replies=[ai("", call("echo", "c1", text="a"))])
    session = Session(AgentLoop(stall, tools.all), SYSTEM)
    task = asyncio.create_task(session.aask("first"))
    await stall.stalled.wait()
    task.cancel()
    with pytest.raises(AgentCancelled):
        await task
    assert session.turns == 1 and len(session.messages) == 4  # system, human, the call, its result

    model = ScriptModel(replies=[ai("Back again.")])
    session.loop = AgentLoop(model, tools.all)
    result = await session.aask("second")
    assert result.stop_reason is StopReason.DONE
    assert [m.content for m in model.prompts[0]] == [SYSTEM, "first", "", "echo a", "second"]
    assert_valid_history(session.messages)


# --- parallel tools, truncation, trace --------------------------------------------------------------------------


async def test_parallel_tools_run_concurrently_and_are_appended_in_call_order() -> None:
    running = 0
    all_started = asyncio.Event()
    finished: list[int] = []

    async def wait_for_all(n: int) -> str:
        nonlocal running
        running += 1
        if running == 3:
            all_started.set()
        await all_started.wait()  # deadlocks unless all three run at once
        for _ in range(3 - n):
            await asyncio.sleep(0)  # the last call finishes first
        finished.append(n)
        return f"done {n}"

    slow = StructuredTool.from_function(coroutine=wait_for_all, name="wait", description="Waits for the others.")
    replies = [ai("", *(call("wait", f"c{n}", n=n) for n in range(3))), ai("Done.")]
    loop, _ = loop_of(replies, [slow], parallel_tools=True)
    async with asyncio.timeout(5):  # a sequential loop would hang here, not pass
        result = await loop.arun(SYSTEM, "go")

    assert finished == [2, 1, 0]
    assert [m.tool_call_id for m in tool_messages(result)] == ["c0", "c1", "c2"]
    assert [m.content for m in tool_messages(result)] == ["done 0", "done 1", "done 2"]
    assert [e.name for e in result.trace] == ["model", "wait", "wait", "wait", "model"]


def test_parallel_guard_decisions_are_made_in_call_order(tools: Tools) -> None:
    replies = [
        ai("", *(call("echo", f"c{i}", text="same") for i in range(3)), call("ghost", "c9")),
        ai("Done."),
    ]
    loop, _ = loop_of(replies, tools.all, parallel_tools=True)
    contents = [m.content for m in tool_messages(loop.run(SYSTEM, "go"))]
    assert contents[:2] == ["echo same", "echo same"]
    assert contents[2].startswith("You already called echo with these arguments 2 times.")
    assert contents[3].startswith("Unknown tool 'ghost'.")
    assert tools.ran == ["echo:same", "echo:same"]


def test_long_tool_results_and_errors_are_truncated(tools: Tools) -> None:
    replies = [ai("", call("big", "c1"), call("ghost", "c2")), ai("Done.")]
    loop, _ = loop_of(replies, tools.all, max_tool_result_chars=10)
    result = loop.run(SYSTEM, "go")
    big, ghost = tool_messages(result)
    assert big.content == "xxxxxxxxxx... [truncated 90 characters]"
    assert ghost.content == "Unknown to... [truncated 53 characters]"
    assert ghost.content == truncate("Unknown tool 'ghost'. Available: echo, add, refuse, crash, big.", 10)
    assert result.trace[1].detail == "{} -> xxxxxxxxxx... [truncated 90 characters]"


def test_trace_events_are_delivered_live_in_order(tools: Tools) -> None:
    seen: list[str] = []

    @tool
    def note(text: str) -> str:
        """Records that it ran."""
        seen.append(f"ran {text}")
        return text

    replies = [ai("", call("note", "c1", text="a"), call("note", "c2", text="b"), tokens=7), ai("Done.", tokens=9)]
    events: list[TraceEvent] = []

    def on_event(event: TraceEvent) -> None:
        events.append(event)
        seen.append(event.name)

    loop, _ = loop_of(replies, [note], on_event=on_event)
    result = loop.run(SYSTEM, "go")
    assert seen == ["model", "ran a", "note", "ran b", "note", "model"]
    assert events == result.trace
    assert [(e.step, e.name, e.tokens) for e in events] == [
        (1, "model", 7),
        (1, "note", 0),
        (1, "note", 0),
        (2, "model", 9),
    ]
    assert events[0].detail == "2 tool call(s)"
    assert events[1].detail == '{"text":"a"} -> a'


def test_the_models_plan_is_in_the_trace(tools: Tools) -> None:
    reply = ai("Done.")
    reply.additional_kwargs["reasoning_content"] = "Answer   directly,\nno tools."
    loop, _ = loop_of([reply], tools.all)
    assert loop.run(SYSTEM, "go").trace[0].detail == "0 tool call(s); plan: Answer directly, no tools."


def test_personal_data_is_masked_in_the_trace_and_logs(tools: Tools, caplog: pytest.LogCaptureFixture) -> None:
    text = "ship to ada@example.com at 12 Harbour Road"
    loop, _ = loop_of([ai("", call("echo", "c1", text=text)), ai("Done.")], tools.all)
    with caplog.at_level(logging.INFO, logger="handwritten"):
        result = loop.run(SYSTEM, "go")
    detail = result.trace[1].detail
    assert "ada@example.com" not in detail and "Harbour Road" not in detail
    assert detail.count("<email>") == 2 and detail.count("<address>") == 2  # in the arguments and the result
    assert "ada@example.com" not in caplog.text
    assert "[step 1] echo" in caplog.text
    assert tool_messages(result)[0].content == f"echo {text}"  # the model still gets the real result


async def test_run_inside_a_running_event_loop_says_to_use_arun(tools: Tools) -> None:
    loop, model = loop_of([], tools.all)
    with pytest.raises(RuntimeError, match=r"await AgentLoop\.arun"):
        loop.run(SYSTEM, "go")
    with pytest.raises(RuntimeError, match=r"await Session\.aask"):
        Session(loop, SYSTEM).ask("go")
    assert model.calls == 0


# --- history and Session ----------------------------------------------------------------------------------------


def test_history_continues_without_a_second_system_message(tools: Tools) -> None:
    earlier = [SystemMessage(SYSTEM), HumanMessage("one"), AIMessage(content="first answer")]
    loop, model = loop_of([ai("second answer")], tools.all)
    result = loop.run("ignored instructions", "two", history=earlier)
    assert [m.content for m in model.prompts[0]] == [SYSTEM, "one", "first answer", "two"]
    assert [m.content for m in result.messages] == [SYSTEM, "one", "first answer", "two", "second answer"]

    with pytest.raises(ValueError, match="system message"):
        loop.run(SYSTEM, "two", history=earlier[1:])


def test_session_second_ask_sees_the_first_turn_with_fresh_budgets(tools: Tools) -> None:
    replies = [
        ai("", call("echo", "c1", text="same")),
        ai("First."),
        ai("", call("echo", "c2", text="same")),
        ai("Second."),
    ]
    model = ScriptModel(replies=replies)
    session = Session(AgentLoop(model, tools.all, AgentOptions(limits=AgentLimits(max_steps=2, max_repeats=1))), SYSTEM)
    first = session.ask("one")
    second = session.ask("two")

    assert (first.stop_reason, first.steps, second.stop_reason, second.steps) == (
        StopReason.DONE,
        2,
        StopReason.DONE,
        2,
    )
    assert tools.ran == ["echo:same", "echo:same"]  # the repeat count started again for the second question
    assert [m.content for m in model.prompts[2]] == [SYSTEM, "one", "", "echo same", "First.", "two"]
    assert session.messages == second.messages
    assert session.turns == 2
    assert_valid_history(session.messages)


def answered_session(tools: Tools) -> Session:
    """A session after one question that used a tool."""
    session = Session(
        AgentLoop(ScriptModel(replies=[ai("", call("add", "c1", a=2, b=3)), ai("It is 5.")]), tools.all), SYSTEM
    )
    session.ask("what is 2+3?")
    return session


def test_session_save_and_load_round_trip(tools: Tools, tmp_path: Path) -> None:
    path = tmp_path / "session.json"
    session = answered_session(tools)
    session.save(path)

    model = ScriptModel(replies=[ai("Still 5.")])
    restored = Session.load(path, AgentLoop(model, tools.all))
    assert restored.messages == session.messages
    assert restored.instructions == SYSTEM
    assert restored.turns == 1
    assert restored.ask("and again?").answer == "Still 5."
    assert model.prompts[0][:-1] == session.messages


def test_a_saved_session_loads_in_a_new_process(tools: Tools, tmp_path: Path) -> None:
    path = tmp_path / "session.json"
    session = answered_session(tools)
    session.save(path)
    script = (
        "import sys\n"
        "from handwritten import AgentLoop, Session\n"
        "from tests.doubles import ScriptModel\n"
        "s = Session.load(sys.argv[1], AgentLoop(ScriptModel(replies=[]), []))\n"
        "print(s.turns, [m.type for m in s.messages], s.messages[3].status, s.messages[2].tool_calls[0]['args'])\n"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, cwd=root, check=True
    )
    assert out.stdout.strip() == "1 ['system', 'human', 'ai', 'tool', 'ai'] success {'a': 2, 'b': 3}"


def test_a_failed_save_leaves_the_previous_file_and_no_temp_files(tools: Tools, tmp_path: Path) -> None:
    path = tmp_path / "session.json"
    # Half-way through writing, json meets something it cannot serialize, as a crash mid-save would.
    bad = AIMessage(content="odd", additional_kwargs={"handle": object()})
    session = Session(AgentLoop(ScriptModel(replies=[ai("Hello."), bad]), tools.all), SYSTEM)
    session.ask("hi")
    session.save(path)
    before = path.read_bytes()

    session.ask("again")
    with pytest.raises(TypeError):
        session.save(path)

    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["session.json"]
    assert json.loads(before.splitlines()[-1])["messages"][-1]["data"]["content"] == "Hello."


def test_a_reply_cut_off_mid_emoji_still_saves_and_loads(tools: Tools, tmp_path: Path) -> None:
    """A lone surrogate (half an emoji) made every later save raise, so the conversation could never be saved; it
    is U+FFFD from where the reply enters (`replies.checked_reply`), so no later request fails to encode it."""
    path = tmp_path / "session.json"
    cut = "Here is your book \ud83d"
    session = Session(AgentLoop(ScriptModel(replies=[ai(cut)]), tools.all), SYSTEM)
    session.ask("hi")
    session.save(path)
    assert Session.load(path, session.loop).messages[-1].content == "Here is your book \ufffd"


def test_two_processes_saving_one_session_file_is_a_clear_error_not_a_lost_turn(tools: Tools, tmp_path: Path) -> None:
    path = tmp_path / "session.json"
    first = Session(AgentLoop(ScriptModel(replies=[ai("One.")]), tools.all), SYSTEM)
    first.ask("one")
    first.save(path)
    mine = Session.load(path, AgentLoop(ScriptModel(replies=[ai("Two.")]), tools.all))
    theirs = Session.load(path, AgentLoop(ScriptModel(replies=[ai("Three.")]), tools.all))
    mine.ask("two")
    mine.save(path)
    theirs.ask("three")
    with pytest.raises(SessionConflict, match="saved by another session"):
        theirs.save(path)
    kept = Session.load(path, mine.loop)
    assert [m.content for m in kept.messages if isinstance(m, HumanMessage)] == ["one", "two"]


async def test_two_asks_at_once_on_one_session_both_keep_their_turn(tools: Tools) -> None:
    """Two tasks on one Session each ran from the same history, and the later one's result replaced the other's."""
    model = ScriptModel(replies=[ai("", call("slow_echo", "s1", text="a")), ai("First."), ai("Second.")])
    session = Session(AgentLoop(model, [*tools.all, slow_echo_tool()]), SYSTEM)
    first, second = await asyncio.gather(session.aask("one"), session.aask("two"))
    assert (first.answer, second.answer) == ("First.", "Second.")
    assert [m.content for m in session.messages if isinstance(m, HumanMessage)] == ["one", "two"]
    assert_valid_history(session.messages)


def slow_echo_tool() -> BaseTool:
    async def slow_echo(text: str) -> str:
        await asyncio.sleep(0.05)
        return text

    return StructuredTool.from_function(coroutine=slow_echo, name="slow_echo", description="Echo, slowly.")


def test_a_conversation_is_bound_to_its_customer(tools: Tools, tmp_path: Path) -> None:
    path = tmp_path / "session.json"
    session = Session(AgentLoop(ScriptModel(replies=[ai("Hi Ann.")]), tools.all), SYSTEM, customer_id="ann")
    session.ask("I am Ann, of 12 Baker Street")
    session.save(path)
    with pytest.raises(CustomerMismatch, match="customer 'ann', not of 'bob'"):
        Session.load(path, session.loop, customer_id="bob")
    assert Session.load(path, session.loop, customer_id="ann").customer_id == "ann"


@pytest.mark.parametrize(
    "content",
    [
        f'{{"format": "{FORMAT}"',  # a header cut off before its newline
        f'{{"format": "{FORMAT}", "revision": 1}}\n',  # a header without instructions
        f'{{"format": "{FORMAT}", "instructions": "x"}}\n{{"revision": 1, "messages": 5}}\n',
        f'{{"format": "{FORMAT}", "instructions": "x"}}\n[1]\n{{"revision": 1, "messages": []}}\n',
        "[1, 2]",
    ],
)
def test_a_truncated_or_wrong_shape_session_file_is_a_clear_error(tmp_path: Path, tools: Tools, content: str) -> None:
    path = tmp_path / "session.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=r"is (not|a damaged) (a )?saved session"):
        Session.load(path, AgentLoop(ScriptModel(replies=[]), tools.all))


def test_loading_something_else_is_refused(tmp_path: Path, tools: Tools) -> None:
    path = tmp_path / "other.json"
    path.write_text('{"messages": []}')
    with pytest.raises(ValueError, match="not a saved session"):
        Session.load(path, AgentLoop(ScriptModel(replies=[]), tools.all))


OLD_FILES = {  # the format each file names, and the file
    "version 1": (
        "agent-loop-compare/session/1",
        '{"format": "agent-loop-compare/session/1", "instructions": "x", "messages": []}',
    ),
    "version 2, pretty-printed": (
        "agent-loop-compare/session/2",
        json.dumps(
            {"format": "agent-loop-compare/session/2", "revision": 3, "instructions": "x", "messages": []}, indent=2
        ),
    ),
    "a later version": (
        "agent-loop-compare/session/4",
        '{"format": "agent-loop-compare/session/4", "revision": 1}\n{"revision": 1, "messages": []}\n',
    ),
}


@pytest.mark.parametrize(("seen", "content"), OLD_FILES.values(), ids=OLD_FILES.keys())
def test_a_session_file_of_another_format_version_names_both_versions_and_is_never_overwritten(
    tmp_path: Path, tools: Tools, seen: str, content: str
) -> None:
    path = tmp_path / "session.json"
    path.write_text(content)
    says = re.escape(f"format {seen!r}; this version reads only {FORMAT!r}")
    with pytest.raises(ValueError, match=says):
        Session.load(path, AgentLoop(ScriptModel(replies=[]), tools.all))
    fresh = Session(AgentLoop(ScriptModel(replies=[ai("Hello.")]), tools.all), SYSTEM)
    fresh.ask("hi")
    with pytest.raises(ValueError, match=says):
        fresh.save(path)
    assert path.read_text() == content, "the old file is left as it was"


# --- the article's bookstore run -----------------------------------------------------------------------------------

SEED_GOAL = "Add The Last Lighthouse to my cart. If it is not available, add another novel by the same author."
SEED_INSTRUCTIONS = "You are the bookstore's shopping assistant. Use the tools; never guess stock or prices."


def test_the_seed_trace() -> None:
    with BookStore() as store:
        loop = AgentLoop(ScriptedChatModel(persona="shopper"), make_tools(store))
        result = loop.run(SEED_INSTRUCTIONS, SEED_GOAL)

        assert result.stop_reason is StopReason.DONE and result.answer
        assert (result.steps, result.model_calls, result.tool_calls) == (5, 5, 4)
        tools_called = [(e.name, e.detail.split(" -> ")[0]) for e in result.trace if not e.is_model]
        assert tools_called == [
            ("search_books", '{"query":"The Last Lighthouse"}'),
            ("check_stock", '{"book_id":2}'),
            ("check_stock", '{"book_id":7}'),
            ("add_to_cart", '{"book_id":7,"quantity":1}'),
        ]
        per_step = result.tokens_per_step
        assert len(per_step) == 5 and all(a < b for a, b in itertools.pairwise(per_step))
        assert result.tokens == sum(per_step)
        cart = store.cart("c1")
        assert [(line.book.title, line.quantity) for line in cart.lines] == [("The Quiet Orchard", 1)]
        assert str(cart.total) == "16.50"
        assert_valid_history(result.messages)


def shop(persona: str, faults: Faults | None = None, **kwargs: Any) -> tuple[AgentResult, BookStore]:
    store = BookStore()
    loop = AgentLoop(ScriptedChatModel(persona=persona), make_tools(store, faults=faults), AgentOptions(**kwargs))
    return loop.run(SEED_INSTRUCTIONS, SEED_GOAL), store


def cart_of(store: BookStore) -> list[tuple[str, int]]:
    return [(line.book.title, line.quantity) for line in store.cart("c1").lines]


def test_looper_is_stopped_by_repeats_then_consecutive_errors() -> None:
    result, store = shop("looper")
    assert (result.stop_reason, result.steps, result.tool_calls) == (StopReason.TOO_MANY_ERRORS, 6, 6)
    statuses = [m.status for m in tool_messages(result)]
    assert statuses == ["success", "success", "error", "error", "error", "error"]
    assert cart_of(store) == []


def test_looper_under_a_two_step_limit() -> None:
    result, _ = shop("looper", limits=AgentLimits(max_steps=2))
    assert (result.stop_reason, result.answer, result.steps) == (StopReason.MAX_STEPS, None, 2)
    assert result.user_message().startswith("I couldn't finish this within the allowed number of steps.")


def test_silent_persona_is_an_invalid_response() -> None:
    result, _ = shop("silent")
    assert (result.stop_reason, result.steps, result.tool_calls) == (StopReason.INVALID_RESPONSE, 1, 0)


def test_hallucinator_recovers_from_the_unknown_tool() -> None:
    result, store = shop("hallucinator")
    first = tool_messages(result)[0]
    assert first.content == (
        "Unknown tool 'find_book'. Available: search_books, check_stock, get_order_status, add_to_cart, view_cart."
    )
    assert (result.stop_reason, result.steps, result.tool_calls) == (StopReason.DONE, 6, 5)
    assert cart_of(store) == [("The Quiet Orchard", 1)]


def test_parallel_persona_with_parallel_tools() -> None:
    result, store = shop("parallel", parallel_tools=True)
    assert (result.stop_reason, result.steps, result.tool_calls) == (StopReason.DONE, 4, 4)
    assert [e.name for e in result.trace if e.step == 2] == ["model", "check_stock", "check_stock"]
    assert cart_of(store) == [("The Quiet Orchard", 1)]


def test_a_failing_tools_secret_never_reaches_the_model_by_default() -> None:
    result, _ = shop("shopper", Faults(failing_tool="check_stock"))
    assert "check_stock failed." in [m.content for m in tool_messages(result)]
    assert not any(FAKE_SECRET in str(m.content) for m in result.messages)
    assert not any(FAKE_SECRET in e.detail for e in result.trace)


def test_a_warehouse_timeout_goes_back_to_the_model() -> None:
    result, store = shop("shopper", Faults(check_stock_timeouts=1))
    assert tool_messages(result)[1].content == "check_stock failed."
    assert result.stop_reason is StopReason.DONE
    assert cart_of(store) == [("The Quiet Orchard", 1)]

"""What only the LangGraph version has: the recursion-limit mapping, LangGraph's defaults, sessions, the diagram.

Real LangGraph runs: exactly `max_steps` model calls, the `errors` node, the defaults graph and `create_agent` as
shipped, checkpointer sessions that keep threads apart, and the graph's shape against the committed diagrams
(regenerate with ``UPDATE_SNAPSHOTS=1 python -m pytest tests/test_graph.py``).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphRecursionError

from langgraph_version import DefaultsGraphAgent, GraphAgent, GraphSession, create_agent_contender, recursion_limit_for
from langgraph_version.graph import (
    CHECK,
    ERRORS,
    NO_STEP_LIMIT_RECURSION,
    SUPERSTEPS_PER_ROUND,
    route_after_tools,
)
from langgraph_version.prebuilt.create_agent import tool_call_cap
from langgraph_version.prebuilt.defaults import defaults_recursion_limit_for
from langgraph_version.state import fresh_counters
from shared_tools import guards
from shared_tools.bookstore.faults import FAKE_SECRET, Faults
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.guards import CANCELLED_CALL_TEXT
from shared_tools.models import make_model
from shared_tools.results import AgentLimits, AgentOptions, Guard, StopReason, TraceEvent
from tests.conftest import blocking
from tests.doubles import ScriptExhaustedError, ScriptModel, ai, call

INSTRUCTIONS = "You are the assistant of an online bookstore. Use the tools; answer briefly."
SEED_GOAL = "Add The Last Lighthouse to my cart. If it is not available, add another novel by the same author."
SNAPSHOTS = Path(__file__).parent / "snapshots"
REPO = Path(__file__).resolve().parent.parent


@tool
def echo(n: int) -> str:
    """Return n."""
    return str(n)


@tool
def explode(n: int) -> str:
    """Always fails with a bug, not a ToolException."""
    raise RuntimeError(f"internal failure on {n}")


def looping_replies(count: int) -> list[AIMessage]:
    """A model that never stops asking for a (fresh, valid) tool call: exactly `count` replies, then it fails."""
    return [ai("", call("echo", f"e{i}", n=i)) for i in range(count)]


def erring_replies(count: int) -> list[AIMessage]:
    """`count` replies that each call a tool that does not exist: every round is an error round."""
    return [ai("", call("nope", f"x{i}", n=i)) for i in range(count)]


def limited(max_steps: int | None, **limits: Any) -> AgentOptions:
    return AgentOptions(limits=AgentLimits(max_steps=max_steps, **limits))


def tool_messages(messages: list[Any]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


def cart(store: BookStore) -> list[tuple[str, int]]:
    return [(line.book.title, line.quantity) for line in store.cart("c1").lines]


# --- recursion_limit_for -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("max_steps", "guarded", "defaults"), [(1, 5, 2), (2, 9, 4), (6, 25, 12), (7, 29, 14)])
def test_recursion_limits_map_model_calls_to_supersteps(max_steps: int, guarded: int, defaults: int) -> None:
    limits = AgentLimits(max_steps=max_steps)
    agent = GraphAgent(ScriptModel(replies=[]), [echo], limited(max_steps))
    assert agent.recursion_limit == recursion_limit_for(limits) == SUPERSTEPS_PER_ROUND * max_steps + 1 == guarded
    assert defaults_recursion_limit_for(limits) == defaults


def test_no_step_limit_gets_a_large_recursion_limit() -> None:
    limits = AgentLimits(max_steps=None)
    assert recursion_limit_for(limits) == defaults_recursion_limit_for(limits) == NO_STEP_LIMIT_RECURSION


@pytest.mark.parametrize("max_steps", [1, 2, 6, 7, 25])
@pytest.mark.parametrize("rounds", ["clean", "error"])
def test_guarded_graph_makes_exactly_max_steps_model_calls_and_tool_rounds(max_steps: int, rounds: str) -> None:
    # The script has exactly max_steps replies: one more model call would raise ScriptExhaustedError. Error rounds
    # are the longest (model, tools, errors, check), so they prove that the limit leaves room for max_steps of them.
    replies = looping_replies(max_steps) if rounds == "clean" else erring_replies(max_steps)
    model = ScriptModel(replies=replies)
    options = limited(max_steps, max_tokens=None, max_consecutive_errors=None)
    result = GraphAgent(model, [echo], options).run("sys", "loop")
    assert result.stop_reason is StopReason.MAX_STEPS
    assert result.answer is None
    assert (model.calls, result.model_calls, result.steps, result.tool_calls) == (max_steps,) * 4
    assert len(tool_messages(result.messages)) == max_steps, "the last step's tool calls still ran"


@pytest.mark.parametrize("max_steps", [1, 2, 6, 7, 25])
def test_defaults_graph_hits_the_recursion_limit_after_max_steps_model_calls(max_steps: int) -> None:
    model = ScriptModel(replies=looping_replies(max_steps))
    result = DefaultsGraphAgent(model, [echo], limited(max_steps)).run("sys", "loop")
    # LangGraph raised GraphRecursionError inside; the agent kept the partial run and called it MAX_STEPS.
    assert result.stop_reason is StopReason.MAX_STEPS
    assert (model.calls, result.model_calls, result.tool_calls) == (max_steps,) * 3
    assert len(tool_messages(result.messages)) == max_steps
    assert [e.name for e in result.trace] == ["model", "echo"] * max_steps


async def test_defaults_graph_raises_graph_recursion_error_itself() -> None:
    """The mapping above is ours: the compiled graph alone raises at the same limit."""
    model = ScriptModel(replies=looping_replies(3))
    agent = DefaultsGraphAgent(model, [echo], limited(3))
    with pytest.raises(GraphRecursionError):
        limit = defaults_recursion_limit_for(agent.limits)
        await agent.graph.ainvoke({"messages": [HumanMessage("loop")]}, {"recursion_limit": limit})
    assert model.calls == 3


@pytest.mark.parametrize("agent_class", [GraphAgent, DefaultsGraphAgent])
def test_an_answer_at_the_last_allowed_step_still_fits_the_limit(agent_class: type) -> None:
    model = ScriptModel(replies=[*looping_replies(2), ai("three steps")])
    result = agent_class(model, [echo], limited(3)).run("sys", "go")
    assert result.stop_reason is StopReason.DONE
    assert (result.answer, result.model_calls, result.tool_calls) == ("three steps", 3, 2)


def test_remaining_steps_ends_gracefully_when_the_recursion_limit_is_too_small() -> None:
    model = ScriptModel(replies=erring_replies(3))
    agent = GraphAgent(model, [echo], limited(3, max_consecutive_errors=None))
    agent.recursion_limit -= 1  # one superstep short of three error rounds
    result = agent.run("sys", "loop")
    assert result.stop_reason is StopReason.MAX_STEPS
    assert (model.calls, result.tool_calls) == (2, 2), "no round is started without room to finish it"


@pytest.mark.parametrize("recursion_limit", range(SUPERSTEPS_PER_ROUND + 1, 42))
def test_the_guarded_graph_never_runs_into_its_recursion_limit(recursion_limit: int) -> None:
    """Whatever the limit, the run ends through its stop reason, with less than one more round of room left.

    Clean and error rounds (3 and 4 supersteps) alternate, so the rounds end on every remainder of the limit.
    """
    replies = [ai("", call("echo", f"e{i}", n=i) if i % 3 else call("nope", f"x{i}")) for i in range(recursion_limit)]
    options = limited(None, max_tokens=None, max_consecutive_errors=None)
    agent = GraphAgent(ScriptModel(replies=replies), [echo], options)
    agent.recursion_limit = recursion_limit
    result = agent.run("sys", "loop")
    assert result.stop_reason is StopReason.MAX_STEPS
    error_rounds = sum(1 for m in tool_messages(result.messages) if m.status == "error")
    supersteps = result.model_calls + 2 * result.model_calls + error_rounds  # model, tools, check (+ errors)
    assert 1 <= recursion_limit - supersteps <= SUPERSTEPS_PER_ROUND, "stopped only when another round could not fit"


# --- the errors node -----------------------------------------------------------------------------------------


def test_error_rounds_go_through_the_errors_node_and_stop_the_run() -> None:
    replies = [ai("", call("echo", "ok", n=1)), *erring_replies(4)]
    session = GraphSession(GraphAgent(ScriptModel(replies=replies), [echo], limited(10)), "sys")
    result = session.ask("go")
    # Rounds 2 to 5 are error rounds: the fourth in a row is one more than max_consecutive_errors (3).
    assert result.stop_reason is StopReason.TOO_MANY_ERRORS
    assert (result.model_calls, result.tool_calls) == (5, 5)
    assert [e.guard for e in result.trace if not e.is_model] == [None] + [Guard.UNKNOWN_TOOL] * 4
    visited = [s.next for s in reversed(blocking(session.history)) if s.next]
    assert visited == [
        ("__start__",),
        ("model",),
        ("tools",),
        ("check",),
        *[("model",), ("tools",), ("errors",), ("check",)] * 3,
        ("model",),
        ("tools",),
        ("errors",),
    ], "a clean round skips the errors node; the run ends in it"
    assert blocking(session.history)[0].values["consecutive_error_rounds"] == 4


def test_a_clean_round_resets_the_error_count_in_the_tools_node() -> None:
    replies = [*erring_replies(2), ai("", call("echo", "ok", n=1)), ai("done")]
    session = GraphSession(GraphAgent(ScriptModel(replies=replies), [echo]), "sys")
    assert session.ask("go").stop_reason is StopReason.DONE
    counts = [(s.next, s.values.get("consecutive_error_rounds")) for s in reversed(blocking(session.history))]
    assert [count for next_, count in counts if next_ == ("check",)] == [1, 2, 0]


async def test_the_router_after_tools_sends_error_rounds_to_the_errors_node() -> None:
    reply = ai("", call("echo", "a", n=1), call("echo", "b", n=2))
    ok, failed = ToolMessage("1", tool_call_id="a"), ToolMessage("no", tool_call_id="b", status="error")
    state: Any = {"messages": [HumanMessage("go"), reply, ok, failed], "stop_reason": None}
    assert await route_after_tools(state) == ERRORS
    assert await route_after_tools({**state, "messages": [HumanMessage("go"), reply, ok, ok]}) == CHECK
    assert await route_after_tools({**state, "stop_reason": StopReason.CANCELLED.value}) == "__end__"


# --- LangGraph's defaults ------------------------------------------------------------------------------------


def test_defaults_mode_lets_a_tool_exception_propagate() -> None:
    model = ScriptModel(replies=[ai("", call("explode", "x", n=1))])
    with pytest.raises(RuntimeError, match="internal failure on 1"):
        DefaultsGraphAgent(model, [explode]).run("sys", "go")


async def test_defaults_mode_lets_a_tool_exception_propagate_async() -> None:
    model = ScriptModel(replies=[ai("", call("explode", "x", n=1))])
    with pytest.raises(RuntimeError, match="internal failure on 1"):
        await DefaultsGraphAgent(model, [explode]).arun("sys", "go")


def test_guarded_mode_turns_the_same_exception_into_a_hidden_result() -> None:
    model = ScriptModel(replies=[ai("", call("explode", "x", n=1)), ai("Sorry.")])
    result = GraphAgent(model, [explode]).run("sys", "go")
    (message,) = tool_messages(result.messages)
    assert (message.status, message.content) == ("error", "explode failed.")
    assert result.trace[1].guard is Guard.ERROR_HIDDEN
    assert result.stop_reason is StopReason.DONE


def test_defaults_mode_uses_tool_nodes_own_texts() -> None:
    model = ScriptModel(
        replies=[ai("", call("nope", "u"), call("echo", "bad", n="seven"), call("echo", "ok", n=7)), ai("done")]
    )
    result = DefaultsGraphAgent(model, [echo, explode]).run("sys", "go")
    unknown, invalid, ok = tool_messages(result.messages)
    assert unknown.content == "Error: nope is not a valid tool, try one of [echo, explode]."
    assert invalid.content.startswith("Error invoking tool 'echo' with kwargs {'n': 'seven'} with error:\n n: ")
    assert invalid.content.endswith("Please fix the error and try again.")
    assert (unknown.status, invalid.status, ok.status, ok.content) == ("error", "error", "success", "7")
    # ToolNode runs a turn's calls in threads, so their trace lines come in finishing order.
    assert sorted(e.is_error for e in result.trace if not e.is_model) == [False, True, True]
    assert result.stop_reason is StopReason.DONE


def test_defaults_mode_has_no_repeat_rule_or_token_budget() -> None:
    same = [ai("", call("echo", f"id{i}", n=1), tokens=1000) for i in range(4)]
    limits = AgentLimits(max_steps=5, max_tokens=100, max_repeats=1)
    result = DefaultsGraphAgent(ScriptModel(replies=[*same, ai("ok")]), [echo], AgentOptions(limits=limits)).run(
        "sys", "go"
    )
    assert result.stop_reason is StopReason.DONE
    assert [m.content for m in tool_messages(result.messages)] == ["1"] * 4
    assert result.tokens == 4010 > limits.max_tokens


def test_defaults_mode_honours_a_cooperative_cancel() -> None:
    cancel = threading.Event()

    def on_event(event: TraceEvent) -> None:
        if event.name == "echo":
            cancel.set()

    model = ScriptModel(replies=looping_replies(3))
    result = DefaultsGraphAgent(model, [echo], AgentOptions(on_event=on_event)).run("sys", "go", cancel=cancel)
    assert result.stop_reason is StopReason.CANCELLED
    assert (model.calls, result.model_calls, result.tool_calls) == (1, 1, 1)


def test_defaults_agent_refuses_an_approval_rule_it_cannot_apply() -> None:
    with pytest.raises(ValueError, match="no approval gate"):
        DefaultsGraphAgent(ScriptModel(replies=[]), [echo], AgentOptions(needs_approval=lambda call, earlier: "no"))


# --- guarded-only details ------------------------------------------------------------------------------------


def test_cancel_between_calls_answers_the_rest_of_the_turn() -> None:
    cancel = threading.Event()
    model = ScriptModel(replies=[ai("", call("echo", "a", n=1), call("echo", "b", n=2), call("echo", "c", n=3))])
    options = AgentOptions(parallel_tools=False, on_event=lambda e: e.name == "echo" and cancel.set())
    agent = GraphAgent(model, [echo], options)
    result = agent.run("sys", "go", cancel=cancel)
    assert result.stop_reason is StopReason.CANCELLED
    assert [(m.tool_call_id, m.content) for m in tool_messages(result.messages)] == [
        ("a", "1"),
        ("b", CANCELLED_CALL_TEXT),
        ("c", CANCELLED_CALL_TEXT),
    ]
    assert [e.name for e in result.trace] == ["model", "echo"]
    assert result.tool_calls == 3


async def test_the_stop_reason_is_graph_state() -> None:
    model = ScriptModel(replies=[ai("", call("echo", "a", n=1)), ai("fine")])
    agent = GraphAgent(model, [echo])
    final = await agent.graph.ainvoke(
        {"messages": [SystemMessage("sys"), HumanMessage("go")], **fresh_counters()}, {"recursion_limit": 10}
    )
    assert final["stop_reason"] == StopReason.DONE.value
    assert (final["model_calls"], final["tool_calls"], final["tokens"]) == (2, 1, 20)
    assert final["seen_calls"] == {guards.call_key("echo", {"n": 1}): 1}


async def test_cancelling_the_arun_task_raises_cancelled_error() -> None:
    started = asyncio.Event()

    async def wait_forever() -> str:
        started.set()
        await asyncio.sleep(3600)
        return "never"

    slow = StructuredTool.from_function(coroutine=wait_forever, name="slow", description="Takes forever.")
    model = ScriptModel(replies=[ai("", call("slow", "s"))])
    task = asyncio.create_task(GraphAgent(model, [slow]).arun("sys", "go"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("parallel", [True, False])
async def test_seed_run_async_and_parallel(parallel: bool) -> None:
    store = BookStore()
    agent = GraphAgent(make_model("scripted"), make_tools(store), AgentOptions(parallel_tools=parallel))
    result = await agent.arun(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.DONE
    assert (result.model_calls, result.tool_calls) == (5, 4)
    assert cart(store) == [("The Quiet Orchard", 1)]
    assert result.tokens_per_step == sorted(set(result.tokens_per_step))


def test_seed_run_in_defaults_mode_has_the_same_trace_shape() -> None:
    store = BookStore()
    result = DefaultsGraphAgent(make_model("scripted"), make_tools(store)).run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.DONE
    assert [e.name for e in result.trace] == [
        "model",
        "search_books",
        "model",
        "check_stock",
        "model",
        "check_stock",
        "model",
        "add_to_cart",
        "model",
    ]
    assert [e.step for e in result.trace] == [1, 1, 2, 2, 3, 3, 4, 4, 5]
    assert cart(store) == [("The Quiet Orchard", 1)]


# --- the create_agent contender ------------------------------------------------------------------------------


def test_contender_runs_the_seed() -> None:
    store = BookStore()
    seen: list[TraceEvent] = []
    contender = create_agent_contender(make_model("scripted"), make_tools(store), AgentOptions(on_event=seen.append))
    result = contender.run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.DONE
    assert (result.model_calls, result.steps, result.tool_calls) == (5, 5, 4)
    assert cart(store) == [("The Quiet Orchard", 1)]
    assert result.tokens == sum(result.tokens_per_step) > 0
    assert isinstance(result.messages[0], SystemMessage)
    assert seen == result.trace and len(result.trace) == 9


@pytest.mark.parametrize("max_steps", [1, 3])
def test_contender_model_call_limit_ends_with_max_steps(max_steps: int) -> None:
    model = ScriptModel(replies=looping_replies(max_steps))
    result = create_agent_contender(model, [echo], limited(max_steps)).run("sys", "loop")
    assert result.stop_reason is StopReason.MAX_STEPS
    assert result.answer is None
    assert (model.calls, result.model_calls, result.tool_calls) == (max_steps,) * 3


async def test_contender_async_answer_is_done() -> None:
    model = ScriptModel(replies=[ai("", call("echo", "a", n=1)), ai("all good")])
    result = await create_agent_contender(model, [echo], limited(2)).arun("sys", "go")
    assert (result.stop_reason, result.answer, result.model_calls, result.tool_calls) == (
        StopReason.DONE,
        "all good",
        2,
        1,
    )


def test_contender_tool_call_cap_refuses_calls_over_it() -> None:
    limits = AgentLimits(max_steps=1)
    assert tool_call_cap(limits) == 2
    model = ScriptModel(replies=[ai("", *(call("echo", f"c{i}", n=i) for i in range(3)))])
    result = create_agent_contender(model, [echo], AgentOptions(limits=limits)).run("sys", "go")
    # The middleware answers the refused call in after_model, before ToolNode runs the others: not in call order.
    statuses = {m.tool_call_id: m.status for m in tool_messages(result.messages)}
    assert statuses == {"c0": "success", "c1": "success", "c2": "error"}
    assert result.stop_reason is StopReason.MAX_STEPS


@pytest.mark.parametrize("detailed", [False, True])
def test_contender_hides_error_details_like_the_guarded_agents(detailed: bool) -> None:
    store = BookStore()
    tools = make_tools(store, faults=Faults(failing_tool="check_stock"))
    result = create_agent_contender(make_model("scripted"), tools, AgentOptions(detailed_errors=detailed)).run(
        INSTRUCTIONS, SEED_GOAL
    )
    failures = [m for m in tool_messages(result.messages) if m.status == "error"]
    assert failures
    if detailed:
        assert FAKE_SECRET in failures[0].content
    else:
        assert failures[0].content == "check_stock failed."
    # The trace line says what the model was told and which guard, if any, hid the exception's own text: the
    # trace middleware sits inside the error middleware and sees the exception (its lines had no guard at all).
    failed = [e for e in result.trace if e.is_error]
    assert len(failed) == len(failures)
    assert [e.guard for e in failed] == [None if detailed else Guard.ERROR_HIDDEN] * len(failures)
    assert failed[0].detail.endswith(f"-> {guards.mask_pii(failures[0].text)}")
    assert detailed or FAKE_SECRET not in " ".join(e.detail for e in result.trace)


def test_contender_has_no_repeat_rule_and_toolnode_texts() -> None:
    replies = [ai("", call("nope", "u")), *(ai("", call("echo", f"e{i}", n=1)) for i in range(3)), ai("ok")]
    options = AgentOptions(limits=AgentLimits(max_repeats=1))
    result = create_agent_contender(ScriptModel(replies=replies), [echo], options).run("s", "go")
    unknown, *repeats = tool_messages(result.messages)
    assert unknown.content == "Error: nope is not a valid tool, try one of [echo]."
    assert [m.content for m in repeats] == ["1", "1", "1"]
    assert result.stop_reason is StopReason.DONE


def test_contender_refuses_an_approval_rule_it_cannot_apply() -> None:
    with pytest.raises(ValueError, match="no approval gate"):
        create_agent_contender(ScriptModel(replies=[]), [echo], AgentOptions(needs_approval=lambda call, earlier: "no"))


# --- sessions ------------------------------------------------------------------------------------------------


def two_turn_model() -> ScriptModel:
    return ScriptModel(
        replies=[ai("", call("echo", "t1", n=1)), ai("first answer"), ai("", call("echo", "t2", n=1)), ai("second")]
    )


def test_memory_session_remembers_the_first_turn() -> None:
    model = two_turn_model()
    session = GraphSession(GraphAgent(model, [echo], limited(2)), "sys")
    first = session.ask("hello")
    second = session.ask("again")
    assert (first.answer, second.answer) == ("first answer", "second")
    # Budgets are per ask: each turn used its own 2 steps, and its own repeat counts (echo n=1 ran twice).
    assert (first.steps, second.steps) == (2, 2)
    assert [m.status for m in tool_messages(second.messages)] == ["success", "success"]
    third_prompt = model.prompts[2]
    assert [type(m).__name__ for m in third_prompt] == [
        "SystemMessage",
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "AIMessage",
        "HumanMessage",
    ]
    assert sum(isinstance(m, SystemMessage) for m in blocking(session.messages)) == 1
    assert blocking(session.messages) == second.messages
    assert second.trace[0].step == 1, "steps count per ask"


def test_history_is_newest_first_with_one_snapshot_per_superstep() -> None:
    session = GraphSession(GraphAgent(two_turn_model(), [echo]), "sys")
    session.ask("hello")
    history = blocking(session.history)
    assert [(s.metadata["step"], s.next) for s in history] == [
        (4, ()),
        (3, ("model",)),
        (2, ("check",)),
        (1, ("tools",)),
        (0, ("model",)),
        (-1, ("__start__",)),
    ]
    assert history[0].values["stop_reason"] == StopReason.DONE.value


@pytest.mark.parametrize("storage", ["full", "delta"])
def test_durability_exit_writes_only_the_final_checkpoint(storage: Any) -> None:
    """With "exit" no superstep is saved, only the run's end. Delta storage adds one anchor checkpoint before it
    (LangGraph's step -2), which holds the run's writes for the final one to be rebuilt from."""
    session = GraphSession(GraphAgent(two_turn_model(), [echo]), "sys", durability="exit", storage=storage)
    session.ask("hello")
    steps = [s.metadata["step"] for s in blocking(session.history)]
    assert steps == ([4] if storage == "full" else [4, -2])
    assert session.ask("again").answer == "second"


def test_threads_never_mix_and_delete_forgets_one() -> None:
    saver = InMemorySaver()
    agent_a = GraphAgent(ScriptModel(replies=[ai("for a")]), [echo])
    agent_b = GraphAgent(ScriptModel(replies=[ai("for b")]), [echo])
    a = GraphSession(agent_a, "sys", "a", checkpointer=saver)
    b = GraphSession(agent_b, "sys", "b", checkpointer=saver)
    a.ask("question a")
    b.ask("question b")
    assert [m.text for m in blocking(a.messages)] == ["sys", "question a", "for a"]
    assert [m.text for m in blocking(b.messages)] == ["sys", "question b", "for b"]
    blocking(a.adelete)
    assert (blocking(a.messages), blocking(a.history)) == ([], [])
    assert len(blocking(b.messages)) == 3


async def test_memory_session_async() -> None:
    session = GraphSession(GraphAgent(two_turn_model(), [echo]), "sys")
    assert (await session.aask("hello")).answer == "first answer"
    assert (await session.aask("again")).answer == "second"
    assert len(await session.messages()) == 9
    assert len(await session.history()) == 12


async def test_sqlite_session_inside_one_event_loop(tmp_path: Path) -> None:
    """Every call opens the file on the running loop and closes it before it returns."""
    path = str(tmp_path / "threads.db")
    async with GraphSession.sqlite(GraphAgent(two_turn_model(), [echo]), "sys", path=path) as session:
        assert (await session.aask("hello")).answer == "first answer"
        assert (await session.aask("again")).answer == "second"
        assert (len(await session.messages()), await session.pending(), await session.unfinished()) == (9, [], False)
        assert await session.acontinue_unfinished() is None
        assert [s.metadata["step"] for s in await session.history()][:2] == [10, 9]
    reopened = GraphSession.sqlite(GraphAgent(ScriptModel(replies=[]), [echo]), "sys", path=path)
    assert [m.text for m in await reopened.messages()][-1] == "second"
    await reopened.adelete()
    assert await reopened.messages() == []


async def test_a_sqlite_session_writes_its_checkpoints_without_starting_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each statement handed to a worker thread and back cost the SQLite session about twice the in-memory
    one, so the file is written on the event loop's own thread: a turn (turn lock, checkpoints, customer
    check) starts no thread. The recording wrapper still starts every thread it sees."""
    started: list[str] = []
    start = threading.Thread.start

    def recording_start(thread: threading.Thread) -> None:
        started.append(type(thread).__name__)
        start(thread)

    path = str(tmp_path / "threads.db")
    async with GraphSession.sqlite(GraphAgent(two_turn_model(), [echo]), "sys", path=path) as session:
        assert (await session.aask("hello")).answer == "first answer"  # any worker pool the tools use is warm now
        monkeypatch.setattr(threading.Thread, "start", recording_start)
        assert (await session.aask("again")).answer == "second"
        monkeypatch.undo()
    assert started == []
    reopened = GraphSession.sqlite(GraphAgent(ScriptModel(replies=[]), [echo]), "sys", path=path)
    assert len(await reopened.messages()) == 9


async def test_the_sync_methods_say_which_async_method_to_await() -> None:
    session = GraphSession(GraphAgent(two_turn_model(), [echo]), "sys")
    with pytest.raises(RuntimeError, match=r"await GraphSession\.aask"):
        session.ask("hello")
    with pytest.raises(RuntimeError, match=r"await GraphSession\.arewind"):
        session.rewind(1)
    with pytest.raises(RuntimeError, match=r"await GraphAgent\.arun"):
        GraphAgent(two_turn_model(), [echo]).run("sys", "go")


def test_a_closed_sqlite_session_refuses_further_calls(tmp_path: Path) -> None:
    session = GraphSession.sqlite(GraphAgent(two_turn_model(), [echo]), "sys", path=str(tmp_path / "t.db"))
    with session:
        assert session.ask("hello").answer == "first answer"
    with pytest.raises(RuntimeError, match="closed"):
        session.ask("again")


FIRST_PROCESS = textwrap.dedent(
    """
    import sys
    from langchain_core.tools import tool
    from langgraph_version import GraphAgent, GraphSession
    from tests.doubles import ScriptModel, ai, call

    @tool
    def echo(n: int) -> str:
        \"\"\"Return n.\"\"\"
        return str(n)

    model = ScriptModel(replies=[ai("", call("echo", "t1", n=1)), ai("first answer")])
    with GraphSession.sqlite(GraphAgent(model, [echo]), "sys", path=sys.argv[1], thread_id="kept") as session:
        print(session.ask("hello").answer)
    """
)


def test_sqlite_session_survives_a_new_process(tmp_path: Path) -> None:
    path = str(tmp_path / "sessions.db")
    done = subprocess.run(
        [sys.executable, "-c", FIRST_PROCESS, path], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "first answer"

    model = ScriptModel(replies=[ai("second")])
    with GraphSession.sqlite(GraphAgent(model, [echo]), "ignored now", path=path, thread_id="kept") as session:
        result = session.ask("again")
        assert result.answer == "second"
        assert [m.text for m in model.prompts[0]] == ["sys", "hello", "", "1", "first answer", "again"]
    with GraphSession.sqlite(GraphAgent(model, [echo]), "sys", path=path, thread_id="other") as other:
        assert blocking(other.messages) == [], "another thread in the same file starts empty"
    with GraphSession.sqlite(GraphAgent(model, [echo]), "sys", path=path, thread_id="kept") as session:
        blocking(session.adelete)
        assert blocking(session.messages) == []


def test_a_model_that_runs_out_fails_loudly_inside_the_graph() -> None:
    with pytest.raises(ScriptExhaustedError):
        GraphAgent(ScriptModel(replies=looping_replies(1)), [echo], limited(3)).run("sys", "go")


# --- the diagram ---------------------------------------------------------------------------------------------


def _bookstore_tools() -> list[BaseTool]:
    return make_tools(BookStore())


@pytest.mark.parametrize(
    ("name", "agent_class"), [("graph_mermaid.txt", GraphAgent), ("graph_mermaid_defaults.txt", DefaultsGraphAgent)]
)
def test_mermaid_diagram_matches_the_snapshot(name: str, agent_class: type) -> None:
    agent = agent_class(make_model("scripted"), _bookstore_tools())
    diagram = agent.graph.get_graph().draw_mermaid()
    snapshot = SNAPSHOTS / name
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        snapshot.write_text(diagram)
    assert diagram == snapshot.read_text(), f"graph shape changed; regenerate {name} with UPDATE_SNAPSHOTS=1"

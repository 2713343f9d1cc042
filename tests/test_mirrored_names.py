"""The README's table of mirrored names: every name on either side exists, and the two sides of each row are called
at the same point of a real run, so the table cannot drift from the code."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import inspect
import re
import sys
import typing
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
HEADER = "| `handwritten/loop.py` | LangGraph side | what it is |"


def table_rows() -> list[tuple[str, str]]:
    lines = README.read_text(encoding="utf-8").splitlines()
    start = lines.index(HEADER) + 2  # past the header and the | --- | line
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        loop_cell, graph_cell, _ = (cell.strip() for cell in line.strip("|").split("|"))
        rows.append((loop_cell, graph_cell))
    return rows


def resolve(module: str, dotted: str) -> object:
    owner: object = importlib.import_module(module)
    for part in dotted.split("."):
        owner = getattr(owner, part)  # AttributeError names what is missing
    return owner


def test_the_table_has_the_core_rows() -> None:
    left = [loop for loop, _ in table_rows()]
    for name in ("`AgentLoop.step`", "`AgentLoop.call_model`", "`AgentLoop.run_tools`", "`_Run`", "`AgentLoop._emit`"):
        assert name in left


def test_every_graph_name_the_readme_gives_outside_the_table_exists() -> None:
    named = re.findall(r"`(\w+)\.py:([\w.]+)`", README.read_text(encoding="utf-8"))
    assert ("graph", "on_the_run_clock") in named
    for file, dotted in named:
        resolve(f"langgraph_version.{file}", dotted)


@pytest.mark.parametrize(("loop_cell", "graph_cell"), table_rows(), ids=lambda cell: cell)
def test_every_mirrored_name_exists_on_both_sides(loop_cell: str, graph_cell: str) -> None:
    names = re.findall(r"`([^`]+)`", loop_cell)
    assert names, loop_cell
    for name in names:
        module = "shared_tools.results" if name.startswith("AgentLimits") else "handwritten.loop"
        resolve(module, name)
    found = re.findall(r"`(\w+)\.py:([\w.]+)`", graph_cell)
    assert found and len(found) == graph_cell.count("`") // 2, f"each graph-side name is `file.py:Name`: {graph_cell}"
    for file, dotted in found:
        resolve(f"langgraph_version.{file}", dotted)


# --- each row's two sides play the same part: called at the same point of a real run -----------------------------
#
# Every name of the table is wrapped in a spy that notes when it is called and when it returns, and so are the
# markers every run shares: a model call (`ScriptedChatModel._agenerate`), a tool run (`guards.execute`) and a call the
# time budget cut off (`guards.tool_cut_answer`). The same scripted goal runs on each side; seen through one row (its
# names and the markers only, the row's names merged into one X), the two sides must show the same sequence: the loop's
# `call_model` and the graph's model node both enclose the model call; `admit` on both sides comes before each tool
# runs; `_emit` and `emit` both follow every model call and tool run. Rows whose two sides differ in shape on purpose
# have a test of their own below.

RUNS = ("article", "hallucinator", "time-budget")
"""The article's goal with the sensible persona; a first call to an invented tool (an error round); a tool slower
than the time budget (a round cut short)."""

SPECIAL = {"`AgentLoop`", "`AgentLoop.step`", "`answer_open_calls`"}
"""Rows checked by a test of their own: the agents themselves, the round (a function in the loop, edges and routers
in the graph) and the answers a cancel leaves (called in every run by the loop, only after a cancel by the graph)."""

INSTRUCTIONS = "You are the assistant of an online bookstore. Use the tools; answer briefly."
GOAL = "Add The Last Lighthouse to my cart. If it is not available, add another novel by the same author."


class Recorder:
    """What the spies saw, in order: (label, "call" | "return" | "raise", the value returned)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, object]] = []

    def note(self, label: str, phase: str = "call", value: object = None) -> None:
        self.events.append((label, phase, value))


def loop_names(cell: str) -> list[str]:
    """The names a loop-side cell gives; "`A` in `B`" means A, called inside B."""
    return re.findall(r"`([^`]+)`", cell.split(" in ")[0])


def graph_names(cell: str) -> list[str]:
    return re.findall(r"`(\w+\.py:[\w.]+)`", cell)


def locate(name: str) -> tuple[object, str, object]:
    """(owner, attribute, the object found there) for a table name of either side."""
    if ":" in name:
        file, dotted = name.split(":")
        module: object = importlib.import_module(f"langgraph_version.{file.removesuffix('.py')}")
    else:
        dotted = name
        home = "shared_tools.results" if name.startswith("AgentLimits") else "handwritten.loop"
        module = importlib.import_module(home)
    *path, attribute = dotted.split(".")
    owner = module
    for part in path:
        owner = getattr(owner, part)
    return owner, attribute, inspect.getattr_static(owner, attribute)


def spy(mp: pytest.MonkeyPatch, name: str, recorder: Recorder) -> None:
    """Wrap `name` where its callers find it, noting each call and each return."""
    owner, attribute, found = locate(name)
    note = recorder.note
    if isinstance(found, property):
        getter = found.fget
        assert getter is not None

        def read(self: object) -> object:
            note(name)
            return getter(self)

        mp.setattr(owner, attribute, property(read))
        return
    if inspect.isclass(found):
        if typing.is_typeddict(found):
            return  # a state schema is never called: nothing to spy on (see the `_Run` row's own check)

        def construct(self: object, *args: object, **kwargs: object) -> None:
            note(name)
            found.__init__(self, *args, **kwargs)  # type: ignore[misc]

        mp.setattr(owner, attribute, type(found.__name__, (found,), {"__init__": construct}))
        return
    function = found
    if inspect.isasyncgenfunction(getattr(function, "__wrapped__", None)):  # an async context manager

        @functools.wraps(function)
        def opened(*args: object, **kwargs: object) -> object:
            inner = function(*args, **kwargs)

            @contextlib.asynccontextmanager
            async def around() -> AsyncIterator[None]:
                note(name)
                try:
                    async with inner:
                        yield
                except BaseException:
                    note(name, "raise")
                    raise
                note(name, "return")

            return around()

        wrapper: object = opened
    elif inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def awaited(*args: object, **kwargs: object) -> object:
            note(name)
            try:
                value = await function(*args, **kwargs)
            except BaseException:
                note(name, "raise")
                raise
            note(name, "return", value)
            return value

        wrapper = awaited
    else:

        @functools.wraps(function)
        def called(*args: object, **kwargs: object) -> object:
            note(name)
            try:
                value = function(*args, **kwargs)
            except BaseException:
                note(name, "raise")
                raise
            note(name, "return", value)
            return value

        wrapper = called
    if inspect.isclass(owner):
        mp.setattr(owner, attribute, wrapper)
        return
    # A module-level function: replaced in every module of ours that imported it (graph.py calls run.py's `emit`).
    for module in list(sys.modules.values()):
        ours = module.__name__.split(".")[0] in ("handwritten", "langgraph_version")
        if ours and vars(module).get(attribute) is found:
            mp.setattr(module, attribute, wrapper)


def spy_markers(mp: pytest.MonkeyPatch, recorder: Recorder) -> None:
    from shared_tools import guards
    from shared_tools.models.scripted import ScriptedChatModel

    generate, execute, cut = ScriptedChatModel._agenerate, guards.execute, guards.tool_cut_answer

    async def model(self: object, *args: Any, **kwargs: Any) -> Any:
        recorder.note("model")
        return await generate(self, *args, **kwargs)  # type: ignore[arg-type]

    async def tool(*args: Any, **kwargs: Any) -> Any:
        recorder.note("tool")
        return await execute(*args, **kwargs)

    def cut_off(*args: Any, **kwargs: Any) -> Any:
        recorder.note("cut")
        return cut(*args, **kwargs)

    mp.setattr(ScriptedChatModel, "_agenerate", model)
    mp.setattr(guards, "execute", tool)
    mp.setattr(guards, "tool_cut_answer", cut_off)


async def spied_run(side: str, run: str) -> Recorder:
    """One run of `side` ("loop" or "graph") on `run` (see `RUNS`), every name of its side of the table spied."""
    from shared_tools.bookstore.faults import Faults
    from shared_tools.bookstore.store import BookStore
    from shared_tools.bookstore.tools import make_tools
    from shared_tools.models import make_model
    from shared_tools.results import AgentLimits, AgentOptions

    recorder = Recorder()
    names = {n for loop, graph in table_rows() for n in (loop_names(loop) if side == "loop" else graph_names(graph))}
    names -= {"AgentLoop", "agent.py:GraphAgent"}  # the agents themselves: see their own test
    with pytest.MonkeyPatch.context() as mp, BookStore() as store:
        located = sorted(names)  # located before any is replaced: a spied class must not hide its methods
        for name in located:
            locate(name)
        for name in located:
            spy(mp, name, recorder)
        spy_markers(mp, recorder)
        model = make_model("scripted:hallucinator" if run == "hallucinator" else "scripted")
        faults = Faults(latency_s=0.2) if run == "time-budget" else Faults()
        limits = AgentLimits(max_duration=0.1) if run == "time-budget" else AgentLimits()
        tools = make_tools(store, faults=faults)
        if side == "loop":
            from handwritten.loop import AgentLoop

            agent: Any = AgentLoop(model, tools, AgentOptions(limits=limits))
        else:
            from langgraph_version.agent import GraphAgent

            agent = GraphAgent(model, tools, AgentOptions(limits=limits))  # built after the spies: nodes bind them
        await agent.arun(INSTRUCTIONS, GOAL)
    return recorder


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, str], Recorder]:
    from shared_tools.sync import run_blocking

    return {
        (side, run): run_blocking(lambda s=side, r=run: spied_run(s, r), instead="-")  # type: ignore[misc]
        for side in ("loop", "graph")
        for run in RUNS
    }


MARKERS = ("model", "tool", "cut")


def seen_through(recorder: Recorder, names: list[str]) -> list[str]:
    """The run as one row sees it: the markers, and X wherever one of `names` was called or returned (merged)."""
    sequence: list[str] = []
    for label, _, _ in recorder.events:
        token = "X" if label in names else label if label in MARKERS else None
        if token is not None and not (token == "X" and sequence[-1:] == ["X"]):
            sequence.append(token)
    return sequence


GENERIC_ROWS = [(loop, graph) for loop, graph in table_rows() if loop.split(" in ")[0] not in SPECIAL]


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize(("loop_cell", "graph_cell"), GENERIC_ROWS, ids=lambda cell: cell)
def test_both_names_of_a_row_are_called_at_the_same_point_of_a_run(
    runs: dict[tuple[str, str], Recorder], loop_cell: str, graph_cell: str, run: str
) -> None:
    loop_seen = seen_through(runs["loop", run], loop_names(loop_cell))
    graph_seen = seen_through(runs["graph", run], graph_names(graph_cell))
    assert "model" in loop_seen
    assert loop_seen == graph_seen


@pytest.mark.parametrize(("loop_cell", "graph_cell"), GENERIC_ROWS, ids=lambda cell: cell)
def test_every_row_is_seen_at_work(runs: dict[tuple[str, str], Recorder], loop_cell: str, graph_cell: str) -> None:
    """A row whose names no run calls would pass the test above with nothing compared."""
    for side, names in (("loop", loop_names(loop_cell)), ("graph", graph_names(graph_cell))):
        for name in names:
            if name == "state.py:AgentState":
                continue  # a state schema, never called (its keys are checked with `_Run`'s counters below)
            assert any(label == name for run in RUNS for label, _, _ in runs[side, run].events), name


def test_the_state_carries_the_counters_of_a_run() -> None:
    """The `_Run` row's graph side is two things: the counters the loop keeps in `_Run.usage` and `_Run.seen` are
    keys of `AgentState`; the cancel `_Run` holds is in `RunContext` (whose construction the runs above compare)."""
    import dataclasses

    from handwritten.loop import _Run
    from langgraph_version.run import RunContext
    from langgraph_version.state import AgentState
    from shared_tools.results import RunUsage

    run_fields = {f.name for f in dataclasses.fields(_Run)}
    usage = {f.name for f in dataclasses.fields(RunUsage)}
    assert {"usage", "seen", "cancel"} <= run_fields
    assert {"model_calls", "tool_calls", "tokens", "error_rounds", "started"} <= usage
    keys = set(typing.get_type_hints(AgentState, include_extras=True))
    assert {"model_calls", "tool_calls", "tokens", "consecutive_error_rounds", "started_at", "seen_calls"} <= keys
    assert "cancel" in {f.name for f in dataclasses.fields(RunContext)}


@pytest.mark.parametrize("run", RUNS)
def test_a_step_of_the_loop_is_a_round_of_the_graphs_edges(runs: dict[tuple[str, str], Recorder], run: str) -> None:
    """The loop's `step` is one function around a model call and its tools; the graph has no such function, its
    routers decide after each node. So: the loop starts a step right before every model call, the graph routes
    right after every model call and every tool round, and a round that goes on is one the loop's step returned
    from (the last one raises `RunStopped`) and one the graph's `route_after_check` sends back to the model."""
    loop, graph = runs["loop", run].events, runs["graph", run].events
    steps = [phase for label, phase, _ in loop if label == "AgentLoop.step"]
    assert seen_through(runs["loop", run], ["AgentLoop.step"])[:2] == ["X", "model"]
    model_calls = sum(label == "model" for label, _, _ in loop)
    assert steps.count("call") == model_calls == sum(label == "model" for label, _, _ in graph)
    after_model = seen_through(runs["graph", run], ["graph.py:route_after_model"])
    assert after_model.count("model") == after_model.count("X") == model_calls
    assert all(after_model[i + 1] == "X" for i, token in enumerate(after_model) if token == "model")
    rounds = sum(label == "AgentLoop.run_tools" and phase == "call" for label, phase, _ in loop)
    assert sum(label == "graph.py:route_after_tools" and phase == "call" for label, phase, _ in graph) == rounds
    went_on = [value for label, phase, value in graph if label == "graph.py:route_after_check" and phase == "return"]
    assert went_on.count("model") == steps.count("return")


def test_the_two_agents_are_built_alike() -> None:
    """The agents are not called during a run; what the row says is what they are made of."""
    from handwritten.loop import AgentLoop
    from langgraph_version.agent import GraphAgent

    def parameters(cls: type) -> list[str]:
        return list(inspect.signature(cls).parameters)[:3]

    assert parameters(AgentLoop) == parameters(GraphAgent) == ["model", "tools", "options"]


@pytest.mark.parametrize("side", ["loop", "graph"])
async def test_the_calls_a_cancel_cut_off_are_answered_on_both_sides(side: str) -> None:
    """A cancel mid-tool: the loop answers the call it cut off in `answer_open_calls`; the graph, whose node's
    update LangGraph drops, in `record_cancellation`, through `OpenCalls.answer_for`. Both answer "may have
    completed". (In a run that is not cancelled the loop still calls `answer_open_calls`, with nothing to answer,
    and the graph calls `answer_for` for every real answer: the point where they meet is the cancel.)"""
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import StructuredTool
    from langgraph.checkpoint.memory import InMemorySaver

    from handwritten import loop
    from langgraph_version.agent import GraphAgent
    from shared_tools import guards
    from shared_tools.results import AgentOptions
    from tests.doubles import ScriptModel, ai, call

    started = asyncio.Event()

    async def slow_lookup() -> str:
        started.set()
        await asyncio.sleep(60)
        return "never"

    lookup = StructuredTool.from_function(coroutine=slow_lookup, name="slow_lookup", description="Slow.")
    model = ScriptModel(replies=[ai("", call("slow_lookup", "slow"))])
    recorder = Recorder()
    original = loop.answer_open_calls

    def answer(history: list[Any], running: set[str]) -> None:
        before = len(history)
        original(history, running)
        recorder.note("answer_open_calls", "return", [m.text for m in history[before:]])

    with pytest.MonkeyPatch.context() as mp:
        if side == "loop":
            mp.setattr(loop, "answer_open_calls", answer)
            agent: Any = loop.AgentLoop(model, [lookup], AgentOptions())
        else:
            spy(mp, "agent.py:record_cancellation", recorder)
            spy(mp, "run.py:OpenCalls.answer_for", recorder)
            agent = GraphAgent(model, [lookup], AgentOptions(), checkpointer=InMemorySaver())
        task = asyncio.create_task(agent.arun(INSTRUCTIONS, "Look it up."))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    said = guards.CANCELLED_WHILE_RUNNING_TEXT
    if side == "loop":
        assert [value for _, _, value in recorder.events] == [[said]]
        return
    labels = [(label, phase) for label, phase, _ in recorder.events]
    start = labels.index(("agent.py:record_cancellation", "call"))
    assert labels[-1] == ("agent.py:record_cancellation", "return")
    answers = [
        value
        for label, phase, value in recorder.events[start:]
        if label == "run.py:OpenCalls.answer_for" and phase == "return"
    ]
    assert [m.text for m in answers if isinstance(m, ToolMessage)] == [said]


@pytest.mark.parametrize("parallel", [False, True], ids=["sequential", "parallel"])
@pytest.mark.parametrize("slow", [False, True], ids=["in-time", "cut"])
async def test_both_sides_budget_a_round_of_several_calls_alike(parallel: bool, slow: bool) -> None:
    """The runs above have one call a round; with two, `within_time_budget` bounds each call on both sides when the
    tools run one after another, and the whole round when they run together. When the budget runs out during the
    first call, both sides cut that call, and in turn the one that has not started (together, the other is done)."""
    from langchain_core.tools import StructuredTool

    from handwritten.loop import AgentLoop
    from langgraph_version.agent import GraphAgent
    from shared_tools.results import AgentLimits, AgentOptions
    from tests.doubles import ScriptModel, ai, call

    async def lookup(n: int) -> str:
        await asyncio.sleep(5 if slow and n == 1 else 0)
        return f"item {n}"

    tool = StructuredTool.from_function(coroutine=lookup, name="lookup", description="Look an item up.")
    options = AgentOptions(limits=AgentLimits(max_duration=0.3), parallel_tools=parallel)
    seen: dict[str, list[str]] = {}
    for side, name in (("loop", "AgentLoop.within_time_budget"), ("graph", "graph.py:GuardedNodes.within_time_budget")):
        recorder = Recorder()
        model = ScriptModel(replies=[ai("", call("lookup", "a", n=1), call("lookup", "b", n=2)), ai("Done.")])
        with pytest.MonkeyPatch.context() as mp:
            spy(mp, name, recorder)
            spy_markers(mp, recorder)
            agent: Any = (AgentLoop if side == "loop" else GraphAgent)(model, [tool], options)
            await agent.arun(INSTRUCTIONS, "Look up items 1 and 2.")
        seen[side] = seen_through(recorder, [name])
    tools = ["tool"] if slow and not parallel else ["tool", "tool"]
    cuts = ["cut"] * (0 if not slow else 1 if parallel else 2)
    expected = ["X", *tools, *cuts, "X"] if parallel or slow else ["X", "tool", "X", "tool", "X"]
    assert seen["loop"] == seen["graph"] == expected

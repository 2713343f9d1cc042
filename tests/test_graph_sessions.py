"""`GraphSession` under attack: real LangGraph, real SQLite, real processes.

Two risky calls in one reply, outages and restarts, mixed yes and no answers, huge integers in a reply, the time
budget across a pause, a cancel mid-round, two turns at once, another customer's thread, and closing a SQLite
session while LangGraph writes, in fresh processes.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool, StructuredTool, tool
from pydantic import PrivateAttr

from comparison.scenarios import INSTRUCTIONS
from langgraph_version import ConcurrentTurn, DefaultsGraphAgent, GraphAgent, GraphSession, create_agent_contender
from langgraph_version.checkpoints import HOST
from langgraph_version.prebuilt.thread import CheckpointThread
from langgraph_version.thread_storage import thread_storage
from shared_tools.bookstore.approval import RiskyWritePolicy
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.guards import CANCELLED_CALL_TEXT, CANCELLED_WHILE_RUNNING_TEXT
from shared_tools.models import make_model
from shared_tools.results import AgentLimits, AgentOptions, CustomerMismatch, StopReason
from tests.conftest import assert_valid_history, blocking
from tests.doubles import ScriptModel, ToolBindingDouble, ai, call, provider_id

ROOT = Path(__file__).resolve().parent.parent
SYSTEM = "You are a bookstore assistant."

RISKY_ADDS = [(7, 6), (3, 4), (19, 2)]
"""(book_id, quantity): each over the approval limits on its own (more than 3 copies, or a line over 50.00), and
in stock twice over, so that two turns can add them all."""


@tool
def echo(n: int) -> str:
    """Return n."""
    return str(n)


def tool_messages(messages: Sequence[BaseMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


class ModelDown(ConnectionError):
    """The test model's outage."""


class OutageModel(ToolBindingDouble):
    """Decides each reply from the history (`policy`), and raises `ModelDown` on the calls numbered in `down`.

    Every call counts, failed ones too, so a finite `down` always ends: the model comes back.
    """

    policy: Any
    """history -> AIMessage (typed loosely: pydantic would try to parse a callable)."""
    down: frozenset[int] = frozenset()
    _calls: int = PrivateAttr(default=0)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "test-outage"

    @property
    def calls(self) -> int:
        return self._calls

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        with self._lock:
            self._calls += 1
            number = self._calls
        if number in self.down:
            raise ModelDown(f"model call {number}: connection refused")
        return ChatResult(generations=[ChatGeneration(message=self.policy(list(messages)))])


# --- item: every answer, outage and restart leaves a thread that can go on ---------------------------------------

THANKS = "Thanks, that is all."


def shopper_with_risky_adds(adds_per_reply: int) -> Callable[[list[BaseMessage]], AIMessage]:
    """A question gets one reply with `adds_per_reply` risky adds (fresh ids per turn); tool results get "Done."."""

    def policy(history: list[BaseMessage]) -> AIMessage:
        last = history[-1]
        if isinstance(last, HumanMessage):
            if last.content == THANKS:
                return ai("You are welcome.")
            turn = sum(isinstance(m, HumanMessage) for m in history)
            adds = [
                call("add_to_cart", f"t{turn}-{i}", book_id=book, quantity=quantity)
                for i, (book, quantity) in enumerate(RISKY_ADDS[:adds_per_reply])
            ]
            return ai("", *adds)
        return ai("Done.")

    return policy


def quantities(store: BookStore) -> Counter[int]:
    return Counter({line.book.id: line.quantity for line in store.cart("c1").lines})


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    adds_per_reply=st.integers(1, 3),
    parallel=st.booleans(),
    answers=st.lists(st.booleans(), max_size=8),
    down=st.frozensets(st.integers(1, 10), max_size=4),
    restarts=st.frozensets(st.integers(0, 20), max_size=5),
)
# The two reports: two risky calls in one reply, answered one after the other; two outages in a row, each
# followed by a restart that finishes the unfinished turn.
@example(adds_per_reply=2, parallel=False, answers=[True, False], down=frozenset(), restarts=frozenset())
@example(adds_per_reply=2, parallel=True, answers=[False, True], down=frozenset(), restarts=frozenset())
@example(adds_per_reply=1, parallel=False, answers=[True], down=frozenset({2, 3}), restarts=frozenset({1, 2, 3}))
def test_every_answer_outage_and_restart_leaves_a_thread_that_can_go_on(
    adds_per_reply: int, parallel: bool, answers: list[bool], down: frozenset[int], restarts: frozenset[int]
) -> None:
    """Two questions, each answered with 1-3 risky adds; the human's answers, the model's outages and the
    reopened sessions come in any order. Whatever happens, every call on the thread either works or says why
    not (never InvalidUpdateError), the thread ends idle and takes a third question, its history is valid,
    and the cart holds exactly the adds a human said yes to, each once."""
    store = BookStore()
    model = OutageModel(policy=shopper_with_risky_adds(adds_per_reply), down=down)
    agent = GraphAgent(
        model, make_tools(store), AgentOptions(parallel_tools=parallel, needs_approval=RiskyWritePolicy(store))
    )
    said = iter(answers)
    approved: Counter[int] = Counter()
    questions = ["Add the books.", "Add them again."]
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "threads.db")

        def reopen() -> GraphSession:
            return GraphSession.sqlite(agent, SYSTEM, path=path, thread_id="shop")

        session = reopen()
        for step in range(60):
            if step in restarts:
                session.close()
                session = reopen()
            try:
                if pending := blocking(session.pending):
                    [request] = pending  # the graph asks about one call at a time
                    yes = next(said, False)
                    if yes:
                        approved[request["tool_call"]["args"]["book_id"]] += request["tool_call"]["args"]["quantity"]
                    session.resume(yes)
                elif blocking(session.unfinished):
                    session.continue_unfinished()
                elif questions:
                    session.ask(questions.pop(0))
                else:
                    break
            except ModelDown:
                pass  # an outage: the thread is left unfinished, and the next step continues it
            assert all(quantities(store)[book] <= approved[book] for book in quantities(store)), "an unapproved add"
        else:
            pytest.fail("the conversation never settled")

        final = reopen()
        model.down = frozenset()
        result = final.ask(THANKS)
        assert (result.stop_reason, result.answer) == (StopReason.DONE, "You are welcome.")
        assert_valid_history(blocking(final.messages))
        asked = [m.content for m in blocking(final.messages) if isinstance(m, HumanMessage)]
        assert asked == ["Add the books.", "Add them again.", THANKS], "every question once, in order"
    assert quantities(store) == approved, "every approved add ran exactly once, and nothing else did"
    assert store.check_invariants() == []


def test_two_risky_calls_in_one_reply_are_asked_about_one_after_the_other() -> None:
    """The second resume raised InvalidUpdateError ("At key 'started_at': Can receive only one value per step"),
    and so did every later ask or resume: both resumes wrote the clock with Command(update=...). Past that, the
    re-run node no longer asked about the first add (run already, a replay), so the "no" to the second add was
    read as the first one's "yes", and the refused add ran."""
    store = BookStore()
    model = OutageModel(policy=shopper_with_risky_adds(2))
    agent = GraphAgent(model, make_tools(store), AgentOptions(needs_approval=RiskyWritePolicy(store)))
    session = GraphSession(agent, SYSTEM)
    assert session.ask("Add the books.").stop_reason is StopReason.AWAITING_APPROVAL
    assert session.resume(True).stop_reason is StopReason.AWAITING_APPROVAL
    result = session.resume(False)
    assert (result.stop_reason, result.answer) == (StopReason.DONE, "Done.")
    assert quantities(store) == Counter({7: 6}), "the first add, approved; not the second, refused"
    assert [m.status for m in tool_messages(result.messages)] == ["success", "error"]
    assert session.ask(THANKS).answer == "You are welcome."


def test_an_unfinished_turn_can_be_continued_after_another_outage(tmp_path: Path) -> None:
    """The chat CLI finishes an unfinished turn on every start: after a second outage the thread raised
    InvalidUpdateError on every start, with a healthy model."""
    store = BookStore()
    model = OutageModel(policy=lambda history: ai("Here you are."), down=frozenset({1, 2}))
    path = str(tmp_path / "threads.db")
    with (
        GraphSession.sqlite(GraphAgent(model, make_tools(store)), SYSTEM, path=path) as session,
        pytest.raises(ModelDown),
    ):
        session.ask("Hello?")
    for _ in range(2):  # two restarts: the first finds the model still down, the second finishes the turn
        with GraphSession.sqlite(GraphAgent(model, make_tools(store)), SYSTEM, path=path) as session:
            assert blocking(session.unfinished)
            try:
                result = session.continue_unfinished()
            except ModelDown:
                continue
            assert result is not None and result.answer == "Here you are."
    with GraphSession.sqlite(GraphAgent(model, make_tools(store)), SYSTEM, path=path) as session:
        assert not blocking(session.unfinished) and session.continue_unfinished() is None
        assert [m.text for m in blocking(session.messages)] == [SYSTEM, "Hello?", "Here you are."]


@pytest.mark.parametrize("kept_in", ["memory", "sqlite"])
def test_a_reply_checkpoints_cannot_hold_as_msgpack_is_kept_and_answered(kept_in: str, tmp_path: Path) -> None:
    """A model's ``book_id: 10**30`` (found by the fuzzer) made the checkpoint write raise TypeError ("not msgpack
    serializable") out of ask: the call is answered with an error result now, and the number kept exactly."""
    huge = 10**30
    model = ScriptModel(replies=[ai("", call("check_stock", "c1", book_id=huge)), ai("No such book."), ai("Bye.")])
    path = str(tmp_path / "threads.db")

    def open_session() -> GraphSession:
        agent = GraphAgent(model, make_tools(BookStore()))
        return GraphSession(agent, SYSTEM) if kept_in == "memory" else GraphSession.sqlite(agent, SYSTEM, path=path)

    session = open_session()
    result = session.ask("Is book 10**30 in stock?")
    assert (result.stop_reason, result.answer) == (StopReason.DONE, "No such book.")
    assert tool_messages(result.messages)[0].status == "error"
    kept = session if kept_in == "memory" else open_session()
    assert blocking(kept.messages)[2].tool_calls[0]["args"] == {"book_id": huge}  # type: ignore[attr-defined]
    assert kept.ask("Thanks.").answer == "Bye."


# --- item: the time a thread lies paused or unfinished is not the agent's time ------------------------------------


@tool
def nap(seconds: float) -> str:
    """Take a while."""
    time.sleep(seconds)
    return "rested"


RESUME_ELSEWHERE = """
import json, sys
from langgraph_version import GraphAgent, GraphSession
from shared_tools.bookstore.approval import RiskyWritePolicy
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.results import AgentLimits, AgentOptions
from tests.doubles import ScriptModel, ai, call
from tests.test_graph_sessions import nap

store = BookStore(sys.argv[1])
model = ScriptModel(replies=[ai("", call("nap", "n2", seconds=0.45)), ai("Done.")])
options = AgentOptions(limits=AgentLimits(max_duration=0.8), needs_approval=RiskyWritePolicy(store))
with GraphSession.sqlite(GraphAgent(model, [*make_tools(store), nap], options), "", path=sys.argv[2]) as session:
    result = session.resume(True)
print(json.dumps({"stop": result.stop_reason.value, "model_calls": result.model_calls}))
"""


def test_a_run_resumed_in_another_process_keeps_the_time_it_spent_before_the_pause(tmp_path: Path) -> None:
    """0.45 s of the 0.8 s budget is spent before the pause; the other process starts (the human's wait, over a
    second, more than the whole budget) and resumes; another 0.45 s then ends the run. A monotonic clock
    restarted in the new process forgot the time before the pause (the run went on to its answer); one that
    counted the wait stopped at the first check after the resume."""
    store_path, thread_path = tmp_path / "store.db", tmp_path / "threads.db"
    store = BookStore(store_path)
    model = ScriptModel(
        replies=[ai("", call("nap", "n1", seconds=0.45)), ai("", call("add_to_cart", "a", book_id=7, quantity=10))]
    )
    options = AgentOptions(limits=AgentLimits(max_duration=0.8), needs_approval=RiskyWritePolicy(store))
    agent = GraphAgent(model, [*make_tools(store), nap], options)
    with GraphSession.sqlite(agent, SYSTEM, path=str(thread_path)) as session:
        assert session.ask("Add ten orchards.").stop_reason is StopReason.AWAITING_APPROVAL
    done = subprocess.run(
        [sys.executable, "-c", RESUME_ELSEWHERE, str(store_path), str(thread_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"stop": StopReason.TIME_BUDGET.value, "model_calls": 3}
    assert store.cart("c1").quantity_of(7) == 10, "the approved add ran before the budget ended the run"


def test_a_continued_turn_does_not_count_the_outage_against_its_time_budget(tmp_path: Path) -> None:
    store = BookStore()
    model = OutageModel(policy=lambda history: ai("Back."), down=frozenset({1}))
    agent = GraphAgent(model, make_tools(store), AgentOptions(limits=AgentLimits(max_duration=0.3)))
    session = GraphSession.sqlite(agent, SYSTEM, path=str(tmp_path / "threads.db"))
    with pytest.raises(ModelDown):
        session.ask("Hello?")
    time.sleep(0.5)  # longer than the whole budget: the process is down
    result = session.continue_unfinished()
    assert result is not None and (result.stop_reason, result.answer) == (StopReason.DONE, "Back.")


# --- item: a cancelled task leaves a thread that tells the truth ---------------------------------------------------


def slow_lookup_tool(started: asyncio.Event) -> BaseTool:
    async def slow_lookup() -> str:
        started.set()
        await asyncio.sleep(60)
        return "never"

    return StructuredTool.from_function(coroutine=slow_lookup, name="slow_lookup", description="Slow.")


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("kept_in", ["memory", "sqlite"])
async def test_a_task_cancelled_mid_round_leaves_the_truth_in_the_thread(
    parallel: bool, kept_in: str, tmp_path: Path
) -> None:
    """LangGraph drops the update of a node it cancels: the thread read as unfinished, and continuing it ran
    the round's tools again. The thread now says what happened to each call, and the next ask goes on."""
    store, started = BookStore(), asyncio.Event()
    turn = ai(
        "",
        call("add_to_cart", "add", book_id=7, quantity=1),
        call("slow_lookup", "slow"),
        call("view_cart", "view"),
    )
    model = ScriptModel(replies=[turn, ai("Anything else?")])
    agent = GraphAgent(model, [*make_tools(store), slow_lookup_tool(started)], AgentOptions(parallel_tools=parallel))
    session = (
        GraphSession(agent, SYSTEM)
        if kept_in == "memory"
        else GraphSession.sqlite(agent, SYSTEM, path=str(tmp_path / "threads.db"))
    )
    task = asyncio.create_task(session.aask("Add the orchard."))
    await started.wait()
    await asyncio.sleep(0.05)  # the add (and, in parallel, the cart view) has finished by now
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert not await session.unfinished(), "the cancelled run is over, not waiting to run its tools again"
    answers = {provider_id(m.tool_call_id): m for m in tool_messages(await session.messages())}
    assert answers["add"].status == "success" and '"added":"The Quiet Orchard"' in answers["add"].text
    assert answers["slow"].content == CANCELLED_WHILE_RUNNING_TEXT
    if parallel:
        assert answers["view"].status == "success"  # it ran beside the slow call
    else:
        assert answers["view"].content == CANCELLED_CALL_TEXT  # it never started
    assert (await session.history())[0].values["stop_reason"] == StopReason.CANCELLED.value

    result = await session.aask("Is it in?")
    assert result.answer == "Anything else?"
    assert_valid_history(model.prompts[-1])
    assert store.cart("c1").quantity_of(7) == 1, "added once: nothing ran twice"


@pytest.mark.parametrize("kept_in", ["memory", "sqlite"])
@pytest.mark.parametrize("make", [DefaultsGraphAgent, create_agent_contender], ids=["defaults", "create-agent"])
async def test_a_framework_thread_cancelled_mid_round_ends_the_turn_and_never_runs_it_again(
    make: Callable[..., Any], kept_in: str, tmp_path: Path
) -> None:
    """LangGraph leaves a cancelled thread before the node it cut off, so going on ran the stopped round (or the
    model) again. The thread now ends the turn: each call has a result, the next ask is a new turn of one model
    call, and nothing runs twice."""
    store, started = BookStore(), asyncio.Event()
    turn = ai("", call("add_to_cart", "add", book_id=7, quantity=1), call("slow_lookup", "slow"))
    model = ScriptModel(replies=[turn, ai("Anything else?")])
    agent = make(model, [*make_tools(store), slow_lookup_tool(started)])
    thread = CheckpointThread(agent, SYSTEM, "t1", None if kept_in == "memory" else tmp_path / "threads.db")
    task = asyncio.create_task(thread.aask("Add the orchard."))
    await started.wait()
    await asyncio.sleep(0.05)  # the add has finished by now
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert await thread.acontinue_unfinished() is None, "the cancelled turn is over: there is nothing to go on with"
    answers = {provider_id(m.tool_call_id): m for m in tool_messages(await thread.messages())}
    assert answers["slow"].content == CANCELLED_WHILE_RUNNING_TEXT
    # ToolNode's round is one task in the defaults graph (its results are lost with it) and one task per call in
    # create_agent's: either the add's real result or "it may have completed", never "it did not run".
    add = answers["add"]
    assert '"added":"The Quiet Orchard"' in add.text or add.content == CANCELLED_WHILE_RUNNING_TEXT, add
    calls_before = model.calls
    result = await thread.aask("Is it in?")
    assert result.answer == "Anything else?" and model.calls == calls_before + 1, "one model call: a new turn"
    assert_valid_history(model.prompts[-1])
    assert store.cart("c1").quantity_of(7) == 1, "added once: nothing ran twice"


@pytest.mark.parametrize("parallel", [False, True])
async def test_a_resume_cancelled_mid_round_does_not_ask_the_answered_question_again(parallel: bool) -> None:
    """A resumed run re-runs the paused tools node; cancelled there, the thread still showed the question the
    human had answered, although the approved add had run."""
    store, started = BookStore(), asyncio.Event()
    turn = ai("", call("add_to_cart", "add", book_id=7, quantity=10), call("slow_lookup", "slow"))
    model = ScriptModel(replies=[turn, ai("Anything else?")])
    options = AgentOptions(parallel_tools=parallel, needs_approval=RiskyWritePolicy(store))
    session = GraphSession(GraphAgent(model, [*make_tools(store), slow_lookup_tool(started)], options), SYSTEM)
    assert (await session.aask("Add ten orchards.")).stop_reason is StopReason.AWAITING_APPROVAL
    task = asyncio.create_task(session.aresume(True))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await session.pending(), await session.unfinished()) == ([], False)
    answers = {provider_id(m.tool_call_id): m for m in tool_messages(await session.messages())}
    assert '"added":"The Quiet Orchard"' in answers["add"].text
    assert answers["slow"].content == CANCELLED_WHILE_RUNNING_TEXT
    assert (await session.aask("Done?")).answer == "Anything else?"
    assert store.cart("c1").quantity_of(7) == 10


async def test_a_task_cancelled_while_the_model_thinks_ends_the_turn_without_a_reply() -> None:
    thinking = asyncio.Event()

    class StallingModel(ScriptModel):
        async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
            if len(self.prompts) >= len(self.replies):
                thinking.set()
                await asyncio.sleep(60)
            return self._generate(messages, *args, **kwargs)

    model = StallingModel(replies=[ai("First answer.")])
    session = GraphSession(GraphAgent(model, [echo]), SYSTEM)
    await session.aask("One?")
    task = asyncio.create_task(session.aask("Two?"))
    await thinking.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not await session.unfinished()
    assert [m.text for m in await session.messages()] == [SYSTEM, "One?", "First answer.", "Two?"]
    model.replies = [*model.replies, ai("Third answer.")]
    assert (await session.aask("Three?")).answer == "Third answer."


# --- item: one turn at a time, in one process and across processes -------------------------------------------------


def slow_echo_tool(seconds: float = 0.05) -> BaseTool:
    async def slow_echo(n: int) -> str:
        await asyncio.sleep(seconds)
        return str(n)

    return StructuredTool.from_function(coroutine=slow_echo, name="slow_echo", description="Echo, slowly.")


def two_turn_replies() -> list[AIMessage]:
    return [ai("", call("slow_echo", "s1", n=1)), ai("First."), ai("Second.")]


@pytest.mark.parametrize("kept_in", ["memory", "sqlite"])
async def test_two_tasks_asking_at_once_both_keep_their_turn(kept_in: str, tmp_path: Path) -> None:
    """Both turns ran from the same checkpoint, and the thread went on from the one that wrote last."""
    agent = GraphAgent(ScriptModel(replies=two_turn_replies()), [slow_echo_tool()])
    session = (
        GraphSession(agent, SYSTEM)
        if kept_in == "memory"
        else GraphSession.sqlite(agent, SYSTEM, path=str(tmp_path / "threads.db"))
    )
    first, second = await asyncio.gather(session.aask("one"), session.aask("two"))
    assert (first.answer, second.answer) == ("First.", "Second.")
    messages = await session.messages()
    assert [m.text for m in messages if isinstance(m, HumanMessage)] == ["one", "two"]
    assert_valid_history(messages)


def test_two_sessions_in_two_threads_on_one_sqlite_thread_take_turns(tmp_path: Path) -> None:
    """Sync asks from two OS threads each run their own event loop, on two session objects of one thread."""
    model = ScriptModel(replies=two_turn_replies())
    path = str(tmp_path / "threads.db")
    sessions = [GraphSession.sqlite(GraphAgent(model, [slow_echo_tool()]), SYSTEM, path=path) for _ in range(2)]
    answers: dict[str, str | None] = {}
    asked = [
        threading.Thread(target=lambda s=s, q=q: answers.__setitem__(q, s.ask(q).answer))
        for s, q in zip(sessions, ["one", "two"], strict=True)
    ]
    for thread in asked:
        thread.start()
    for thread in asked:
        thread.join(timeout=60)
    assert sorted(answers.values()) == ["First.", "Second."]
    messages = blocking(sessions[0].messages)
    assert sorted(m.text for m in messages if isinstance(m, HumanMessage)) == ["one", "two"]
    assert_valid_history(messages)


HOLD_A_TURN = """
import sys, time
from pathlib import Path
from langgraph_version import GraphAgent, GraphSession
from shared_tools.results import AgentOptions
from tests.doubles import ScriptModel, ai, call
from tests.test_graph_sessions import echo

path, marker, release = sys.argv[1:4]

def hold(event):
    if event.name == "echo":
        Path(marker).write_text("holding")
        while not Path(release).exists():
            time.sleep(0.02)

model = ScriptModel(replies=[ai("", call("echo", "e1", n=1)), ai("Answer A.")])
agent = GraphAgent(model, [echo], AgentOptions(on_event=hold))
with GraphSession.sqlite(agent, "sys", path=path, thread_id="shared") as session:
    print(session.ask("question A").answer)
"""


def start_a_turn_elsewhere(tmp_path: Path) -> tuple[subprocess.Popen[str], Path, Path]:
    """Another process, in the middle of a turn on thread "shared" until `release` exists."""
    path, marker, release = tmp_path / "threads.db", tmp_path / "holding", tmp_path / "release"
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD_A_TURN, str(path), str(marker), str(release)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not marker.exists():
        if child.poll() is not None or time.monotonic() > deadline:
            child.kill()
            pytest.fail(f"the other process never started its turn: {child.communicate()}")
        time.sleep(0.02)  # polling for the child's progress, not a timing assertion
    return child, path, release


def test_a_second_process_waits_for_the_turn_in_progress(tmp_path: Path) -> None:
    child, path, release = start_a_turn_elsewhere(tmp_path)
    model = ScriptModel(replies=[ai("Answer B.")])
    session = GraphSession.sqlite(GraphAgent(model, [echo]), "sys", path=str(path), thread_id="shared")
    waiting = threading.Thread(target=lambda: session.ask("question B"))
    waiting.start()
    time.sleep(0.3)
    assert waiting.is_alive() and model.calls == 0, "it waits for the other process's turn"
    release.touch()
    out, err = child.communicate(timeout=60)
    waiting.join(timeout=60)
    assert child.returncode == 0, err
    assert out.strip() == "Answer A."
    assert [m.text for m in blocking(session.messages)] == [
        "sys",
        "question A",
        "",
        "1",
        "Answer A.",
        "question B",
        "Answer B.",
    ]
    assert [m.text for m in model.prompts[0]][-2:] == ["Answer A.", "question B"], "B's turn saw A's whole turn"


def test_a_turn_another_process_keeps_too_long_is_a_clear_error(tmp_path: Path) -> None:
    child, path, release = start_a_turn_elsewhere(tmp_path)
    model = ScriptModel(replies=[ai("Answer B.")])
    session = GraphSession.sqlite(
        GraphAgent(model, [echo]), "sys", path=str(path), thread_id="shared", turn_timeout=0.2
    )
    try:
        with pytest.raises(
            ConcurrentTurn, match=rf"thread 'shared' in .* in progress in another process \(pid {child.pid} on "
        ):
            session.ask("question B")
        assert model.calls == 0
    finally:
        release.touch()
        child.communicate(timeout=60)
    assert child.returncode == 0
    assert session.ask("question B").answer == "Answer B.", "once the other turn is over, this one goes ahead"
    assert [m.text for m in blocking(session.messages) if isinstance(m, HumanMessage)] == ["question A", "question B"]


def lock_row(path: Path, owner: str, pid: int, host: str) -> None:
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE IF NOT EXISTS turn_locks (thread_id TEXT PRIMARY KEY, owner TEXT NOT NULL,"
            " pid INTEGER NOT NULL, host TEXT NOT NULL, taken_at REAL NOT NULL)"
        )
        db.execute("INSERT INTO turn_locks VALUES ('shared', ?, ?, ?, ?)", (owner, pid, host, time.time()))


def dead_pid() -> int:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(gone.stdout)


@pytest.mark.parametrize(
    ("holder", "free"),
    [
        pytest.param(lambda: ("x", dead_pid(), HOST), True, id="a dead process on this host"),
        pytest.param(lambda: ("x", os.getpid(), HOST), True, id="this process, a turn it no longer holds"),
        pytest.param(lambda: ("x", os.getpid(), "elsewhere.example"), False, id="another host: cannot be checked"),
    ],
)
def test_a_turn_left_behind_by_a_dead_process_is_taken_over(
    tmp_path: Path, holder: Callable[[], tuple[str, int, str]], free: bool
) -> None:
    path = tmp_path / "threads.db"
    lock_row(path, *holder())
    session = GraphSession.sqlite(
        GraphAgent(ScriptModel(replies=[ai("Hi.")]), [echo]),
        "sys",
        path=str(path),
        thread_id="shared",
        turn_timeout=0.2,
    )
    if free:
        assert session.ask("Hello?").answer == "Hi."
        with sqlite3.connect(path) as db:
            assert db.execute("SELECT count(*) FROM turn_locks").fetchone() == (0,), "released after the turn"
    else:
        with pytest.raises(ConcurrentTurn, match=r"pid \d+ on elsewhere\.example"):
            session.ask("Hello?")


# --- item: a conversation belongs to its customer ------------------------------------------------------------------


@pytest.mark.parametrize("kept_in", ["memory", "sqlite"])
def test_a_thread_is_refused_to_another_customer_before_anything_runs(kept_in: str, tmp_path: Path) -> None:
    """The default thread id is "t1" for everyone: Bob's session on it showed him Ann's name and address."""
    from langgraph.checkpoint.memory import InMemorySaver

    saver, path = InMemorySaver(), str(tmp_path / "threads.db")

    def open_for(customer: str | None, model: ScriptModel) -> GraphSession:
        agent = GraphAgent(model, [echo])
        if kept_in == "memory":
            return GraphSession(agent, SYSTEM, checkpointer=saver, customer_id=customer)
        return GraphSession.sqlite(agent, SYSTEM, path=path, customer_id=customer)

    ann = open_for("ann", ScriptModel(replies=[ai("Hello Ann, shipping to 12 Baker Street.")]))
    ann.ask("I am Ann, of 12 Baker Street.")
    bobs_model = ScriptModel(replies=[ai("Hello Bob.")])
    bob = open_for("bob", bobs_model)
    refused = "thread 't1' is the conversation of customer 'ann', not of 'bob'"
    for attempt in (
        lambda: bob.ask("What is my address?"),
        lambda: blocking(bob.messages),
        lambda: blocking(bob.history),
        lambda: blocking(bob.pending),
        lambda: blocking(bob.unfinished),
        lambda: bob.continue_unfinished(),
        lambda: bob.resume(True),
        lambda: blocking(bob.adelete),
    ):
        with pytest.raises(CustomerMismatch, match=refused):
            attempt()
    assert bobs_model.calls == 0, "nothing ran"
    assert len(blocking(ann.messages)) == 3, "nothing was written or deleted"
    assert blocking(open_for("ann", ScriptModel(replies=[])).messages)[-1].text.startswith("Hello Ann")
    unchecked = blocking(open_for(None, ScriptModel(replies=[])).messages)
    assert len(unchecked) == 3, "a session without a customer checks nothing"


def test_a_thread_nobody_claimed_is_claimed_by_its_first_customer() -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    saver = InMemorySaver()
    GraphSession(GraphAgent(ScriptModel(replies=[ai("Hi.")]), [echo]), SYSTEM, checkpointer=saver).ask("Hello?")
    ann = GraphSession(
        GraphAgent(ScriptModel(replies=[ai("Hi Ann.")]), [echo]), SYSTEM, checkpointer=saver, customer_id="ann"
    )
    assert ann.ask("It is Ann.").answer == "Hi Ann."
    bob = GraphSession(GraphAgent(ScriptModel(replies=[]), [echo]), SYSTEM, checkpointer=saver, customer_id="bob")
    with pytest.raises(CustomerMismatch):
        bob.ask("Hello?")


# --- item: leaving a SQLite session mid-run never crashes the process ----------------------------------------------

LEAVE_MID_RUN = """
import sys
from langgraph_version import GraphAgent, GraphSession
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from comparison.scenarios import INSTRUCTIONS, SEED_GOAL
from shared_tools.models import make_model
from shared_tools.results import AgentOptions

class LeftMidRun(Exception):
    pass

def on_event(event):
    if event.name == "check_stock":
        raise LeftMidRun(event.name)  # while LangGraph may still be writing the last checkpoints

path, runs = sys.argv[1], int(sys.argv[2])
for i in range(runs):
    agent = GraphAgent(make_model("scripted"), make_tools(BookStore()), AgentOptions(on_event=on_event))
    try:
        with GraphSession.sqlite(agent, INSTRUCTIONS, path=path, thread_id=f"t{i}", durability="async") as session:
            session.ask(SEED_GOAL)
    except LeftMidRun:
        if i < runs - 1:
            continue
        raise  # the last one leaves the process too, as an uncaught exception does
"""


def test_leaving_a_sqlite_session_by_an_exception_mid_run_never_crashes_the_process(tmp_path: Path) -> None:
    """It used to end in SIGSEGV about one run in three: the connection was closed while LangGraph still wrote
    from a worker thread. Every call now writes and closes its own connection before it returns or raises.
    Four processes, each leaving 15 sessions mid-run (the last one out of the process at once)."""
    runs, children = 15, []
    for n in range(4):
        path = tmp_path / f"threads-{n}.db"
        command = [sys.executable, "-c", LEAVE_MID_RUN, str(path), str(runs)]
        children.append(
            (path, subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        )
    for path, child in children:
        _, err = child.communicate(timeout=300)
        assert child.returncode == 1, f"exit code {child.returncode} (a negative one is a signal):\n{err[-2000:]}"
        assert "LeftMidRun: check_stock" in err and "Fatal Python error" not in err, err[-2000:]
        for i in range(runs):  # every thread is on disk, up to the reply whose tools were running
            agent = GraphAgent(make_model("scripted"), make_tools(BookStore()))
            session = GraphSession.sqlite(agent, INSTRUCTIONS, path=str(path), thread_id=f"t{i}")
            assert blocking(session.unfinished)
            assert blocking(session.messages)[-1].tool_calls[0]["name"] == "check_stock"  # type: ignore[attr-defined]
        result = session.continue_unfinished()  # and the last one can be finished
        assert result is not None and result.stop_reason is StopReason.DONE


@pytest.mark.parametrize("make", [DefaultsGraphAgent, create_agent_contender], ids=["defaults", "create-agent"])
def test_a_framework_thread_in_a_sqlite_file_counts_what_it_stores(tmp_path: Path, make: Callable[..., Any]) -> None:
    """The conversation facts of a framework-only contender's thread count the checkpoints in its file."""
    agent = make(make_model("scripted"), make_tools(BookStore(), "c1"))
    thread = CheckpointThread(agent, INSTRUCTIONS, "t1", tmp_path / "threads.db")
    assert thread.ask("Add The Last Lighthouse to my cart.").stop_reason is StopReason.DONE
    checkpoints, size = thread_storage(thread, "t1")
    assert checkpoints == len(blocking(thread.history)) > 1 and size > 0

"""A scenario's runs: every variant × every contender, each on a fresh store, each a `RunRecord`, and the fork pool.

`run_single` runs a goal once; `run_session` asks the goals as turns of one conversation (the cart changed
behind the agent where the scenario says, a persisted one reopened as after a restart); a contender that
cannot run a variant gets `not_available_record`, which says why. `ScenarioRuns` runs a selection in this
process or, for the scripted model on in-memory stores, in forked workers, handing records back in order.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from comparison.approvals import DemoHuman
from comparison.contenders import ASKING_CONTENDERS, CONTENDERS, SPECS, Contender, build_contender, spec_of
from comparison.conversations import Conversation, HistoryPolicy, facts_of, open_conversation, run_gated
from comparison.records import RunRecord, raised_record, result_record
from comparison.run_setup import (
    RunOptions,
    attempt,
    collector,
    model_spec_for,
    open_store,
    run_key,
    scenario_tools,
)
from comparison.scenarios import Scenario, Variant, contenders_for
from shared_tools.bookstore.store import BookStore
from shared_tools.models import make_model
from shared_tools.results import TraceEvent
from shared_tools.sync import interrupt_run

# Named after the command, not this module, so `-v` output and log filters stay what they were.
log = logging.getLogger("compare")

NOT_AVAILABLE = "not available"
"""The `stop_reason` of a record whose contender cannot run the variant; `facts["not_available"]` says why."""


def not_available_record(scenario: Scenario, variant: Variant, contender: str, reason: str) -> RunRecord:
    """The record of a combination the contender's framework cannot run: nothing ran, and `facts` says why.

    ``stop_reason`` is "not available" (not a `StopReason`: no run stopped), the counts are zero, and
    ``facts["not_available"]`` is the reason in words, for the tables.
    """
    key = run_key(scenario, variant, contender, scenario.goals[0], 1)
    return RunRecord(
        **key,
        stop_reason=NOT_AVAILABLE,
        error=None,
        answer=None,
        user_message=f"Not run: {reason}.",
        model_calls=0,
        tool_calls=0,
        tokens=0,
        tokens_per_step=[],
        wall_s=0.0,
        trace=[],
        cart=[],
        cart_total="0.00",
        facts={"not_available": reason},
    )


def run_single(scenario: Scenario, variant: Variant, contender: str, goal: str, options: RunOptions) -> RunRecord:
    """One contender, one goal, a fresh store (or a fresh customer in the --store-db file)."""
    with open_store(options, scenario) as (store, customer):
        tools = scenario_tools(store, customer, scenario, variant)
        model = make_model(model_spec_for(options.model, scenario.persona), seed=options.model_seed)
        events: list[TraceEvent] = []
        on_event = collector(events, options.progress)
        human = DemoHuman(store, customer) if variant.approval_gate else None
        agent = build_contender(contender, model, tools, scenario.options_for(variant, on_event), human)
        key = run_key(scenario, variant, contender, goal, 1)
        instructions = scenario.instructions_for(variant)
        what = f"{contender} in {scenario.name}/{variant.name}"
        started = time.perf_counter()
        if human is not None and contender not in ASKING_CONTENDERS:
            result = attempt(lambda: run_gated(contender, agent, instructions, goal, human), what)
        else:
            result = attempt(lambda: agent.run(instructions, goal), what)
        wall_s = time.perf_counter() - started
        if isinstance(result, Exception):
            return raised_record(key, store, customer, wall_s, events, result)
        record = result_record(key, store, customer, wall_s, result)
        note_not_honoured(record, agent)
        if human is not None:
            record.facts.update(human.facts(spec_of(contender)))
        if scenario.injection is not None:
            record.facts["injected_into"] = store.get_book(scenario.injection[0]).title
        return record


def note_not_honoured(record: RunRecord, agent: Contender) -> None:
    """The options the contender was given but cannot honour, with why (`MafAgent.not_available`), as a fact."""
    ignored = getattr(agent, "not_available", None)
    if isinstance(ignored, dict) and ignored:
        record.facts["not_honoured"] = dict(ignored)


def run_session(scenario: Scenario, variant: Variant, contender: str, options: RunOptions) -> list[RunRecord]:
    """The scenario's goals as turns of one conversation; with `persistent`, reopened afterwards as a restart."""
    with open_store(options, scenario) as (store, customer):
        return _run_session(scenario, variant, contender, options, store, customer)


def _run_session(
    scenario: Scenario, variant: Variant, contender: str, options: RunOptions, store: BookStore, customer: str
) -> list[RunRecord]:
    run = _SessionRun(scenario, variant, contender, options, store, customer)
    conversation = run.open(resume=False)
    records: list[RunRecord] = []
    try:
        for turn, goal in enumerate(scenario.goals, start=1):
            record, answered = run.take_turn(conversation, turn, goal)
            records.append(record)
            if not answered:
                break
    finally:
        conversation.close()
    if run.db is not None and records:
        run.restart(records[-1])
    return records


class _SessionRun:
    """One contender's conversation in a session scenario: how it is opened (again, after a restart), and its turns."""

    def __init__(
        self, scenario: Scenario, variant: Variant, contender: str, options: RunOptions, store: BookStore, customer: str
    ) -> None:
        self.scenario, self.variant, self.contender, self.options = scenario, variant, contender, options
        self.store, self.customer = store, customer
        self.tools = scenario_tools(store, customer, scenario, variant)
        self.instructions = scenario.instructions_for(variant)
        self.events: list[TraceEvent] = []
        self.agent_options = scenario.options_for(variant, collector(self.events, options.progress))
        self.db = None
        if variant.persistent:
            if options.session_db is None:
                raise ValueError(
                    f"{scenario.name}/{variant.name} keeps its session in a file: set RunOptions.session_db"
                )
            self.db = options.session_db
        self.thread = f"{scenario.name}-{variant.name}"
        if not spec_of(contender).shared_thread:
            # Threads share the session file (a graph's SQLite, a JSON file beside it) but not its schema: one each.
            self.thread = f"{self.thread}-{contender}"
        self.policy = HistoryPolicy(variant.keep_turns, variant.summarize)
        self.storage = storage_options(variant.storage)
        self.agent: Contender | None = None
        """The agent of the first opening: what it did not honour is noted on every turn's record."""

    def open(self, *, resume: bool) -> Conversation:
        """The conversation, on a new agent: a restart is a new agent and a new session object on the same file."""
        model = make_model(model_spec_for(self.options.model, self.scenario.persona), seed=self.options.model_seed)
        agent = build_contender(self.contender, model, self.tools, self.agent_options)
        self.agent = self.agent or agent
        return open_conversation(
            self.contender,
            agent,
            self.instructions,
            self.thread,
            self.db,
            resume=resume,
            customer_id=self.customer,
            policy=self.policy,
            storage=self.storage,
        )

    def take_turn(self, conversation: Conversation, turn: int, goal: str) -> tuple[RunRecord, bool]:
        """The record of one turn, and whether it was answered (a turn that raised ends the conversation)."""
        scenario, store, customer = self.scenario, self.store, self.customer
        changed = None
        if turn > 1 and scenario.change_between_turns is not None:
            removed = store.remove_from_cart(customer, scenario.change_between_turns)
            changed = f"removed {removed} cop(ies) of book {scenario.change_between_turns} from the cart"
        self.events.clear()
        key = run_key(scenario, self.variant, self.contender, goal, turn)
        started = time.perf_counter()
        what = f"{self.contender} in {scenario.name}/{self.variant.name} turn {turn}"
        result = attempt(lambda: conversation.ask(goal), what)
        wall_s = time.perf_counter() - started
        if isinstance(result, Exception):
            return raised_record(key, store, customer, wall_s, self.events, result), False
        record = result_record(key, store, customer, wall_s, result)
        assert self.agent is not None, "the conversation was opened on it"
        note_not_honoured(record, self.agent)
        if not scenario.growth or turn == len(scenario.goals):
            # A long conversation is measured once, at its end: reading the thread costs a turn's time again.
            record.facts.update(facts_of(conversation))
        if changed:
            record.facts["changed_behind_the_agent"] = changed
        return record, True

    def restart(self, last: RunRecord) -> None:
        """A new agent and a new session object read the same file: the conversation must be there."""
        reopened = self.open(resume=True)
        try:
            after = facts_of(reopened)
        finally:
            reopened.close()
        last.facts["messages_after_restart"] = after["messages"]
        last.facts["survived_restart"] = after["messages"] == last.facts.get("messages")


STORAGE_OPTIONS: dict[str, dict[str, Any]] = {"full": {"storage": "full"}}
"""Checkpoint storage options of `GraphSession.sqlite` the long-session scenario compares, by name
(`Variant.storage`): the keyword arguments each passes."""


def storage_options(name: str | None) -> dict[str, Any] | None:
    """The `GraphSession.sqlite` keyword arguments of a variant's storage option (`STORAGE_OPTIONS`)."""
    if name is None:
        return None
    return dict(STORAGE_OPTIONS[name])


def run_variant(scenario: Scenario, variant: Variant, contender: str, options: RunOptions) -> list[RunRecord]:
    """The records of one contender on one variant, by the kind of scenario it is."""
    if scenario.experiment == "streaming":
        from comparison.experiments import run_streaming

        return run_streaming(scenario, variant, contender, options)
    if scenario.experiment == "time-travel":
        from comparison.experiments import run_time_travel

        return run_time_travel(scenario, variant, contender, options)
    if scenario.multi_turn:
        return run_session(scenario, variant, contender, options)
    return [run_single(scenario, variant, contender, g, options) for g in scenario.goals]


def run_scenario(scenario: Scenario, options: RunOptions, on_record: Callable[[RunRecord], None]) -> None:
    """Every variant x every contender of one scenario; each record is handed over as soon as it exists."""
    for variant in scenario.variants:
        run_scenario_variant(scenario, variant, options, on_record)


def run_scenario_variant(
    scenario: Scenario, variant: Variant, options: RunOptions, on_record: Callable[[RunRecord], None]
) -> None:
    """Every contender of one variant of a scenario, in table order; the unit of work `ScenarioRuns` hands out."""
    running, why_not = contenders_for(scenario, variant, options.contenders)
    settings = scenario.settings_for(variant).as_dict()  # what the run was given, for the lessons to read
    for contender in (c for c in CONTENDERS if c in running or c in why_not):
        if contender in why_not:
            # Said in words, not skipped: the framework has no way to run this variant.
            unavailable = not_available_record(scenario, variant, contender, why_not[contender])
            unavailable.settings = settings
            on_record(unavailable)
            continue
        label = f"{scenario.name} · {variant.name} · {contender}"
        if options.progress is not None:
            options.progress.start_run(label)
        spin = options.progress.spinning() if options.progress is not None else nullcontext()
        with spin:
            records = run_variant(scenario, variant, contender, options)
        for record in records:
            record.settings = settings
            on_record(record)


# --- running the scenarios, one after another or across worker processes --------------------------------------

MAX_WORKERS = 2
"""The most worker processes `parallel_workers` suggests. With two, no timed variant is ever a worker's first unit
(max-steps' time-budget comes third): a fresh worker's first runs are slower (its copy of the parent's memory is
made page by page as it is touched), and the time-budget demo gives a model call 20 ms."""

Unit = tuple[int, int]
"""One unit of work handed to a worker: (scenario index, variant index)."""


def parallel_workers() -> int:
    """How many worker processes `ScenarioRuns` should use here: one per CPU this process may run on, at most
    `MAX_WORKERS`; 1 (run in this process) where there is one CPU, no ``fork`` (Windows; macOS, where forking
    a process that has loaded system frameworks is unsafe), or another thread (a fork copies a lock another
    thread holds, held forever; `compare.py` has started none when it asks)."""
    if sys.platform == "darwin" or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    if threading.active_count() > 1:
        return 1
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, MAX_WORKERS))


@contextmanager
def _sigint_held() -> Iterator[None]:
    """Hold a Ctrl-C back (it arrives right after) while a message crosses a pipe or a worker is forked: a
    KeyboardInterrupt in the middle of either would leave half a message in the pipe or half a worker."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _send(conn: Connection, message: tuple[Any, ...]) -> None:
    with _sigint_held():
        conn.send(message)


def _portable(exc: BaseException) -> BaseException:
    """`exc` as it can cross to the parent process: itself, with the worker's traceback as a note, or (when it
    cannot be pickled) a RuntimeError that names it and carries that traceback."""
    where = "".join(traceback.format_exception(exc)).rstrip()
    try:
        exc.add_note(f"(raised in a compare.py worker process)\n{where}")
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc} (raised in a compare.py worker process)\n{where}")


class WorkerInterrupt:
    """A worker's SIGINT handler. The first Ctrl-C stops what runs: a run going on stops at its next await and
    then raises KeyboardInterrupt (`shared_tools.sync.interrupt_run`), never from inside asyncio or langchain-core;
    between runs it raises KeyboardInterrupt at once. Later ones are ignored (the terminal's Ctrl-C reaches the
    worker, and the parent passes one on too)."""

    def __init__(self) -> None:
        self.interrupted = False

    def __call__(self, signum: int, frame: Any) -> None:
        if self.interrupted:
            return
        self.interrupted = True
        if not interrupt_run():
            raise KeyboardInterrupt


def _work(conn: Connection, scenarios: Sequence[Scenario], options: RunOptions) -> None:
    """A worker process: run the units the parent sends, one at a time, sending each record as soon as it exists.

    A Ctrl-C (the terminal's, which reaches the whole process group, or the parent's, passed on) stops the unit
    where it is, as it stops `run_scenario` in a single process; a second one is ignored, so the worker always
    gets to say what it ran. Anything a unit raises is sent to the parent, which raises it in its turn.
    """
    signal.signal(signal.SIGINT, WorkerInterrupt())
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # forked while the parent held it back
        while (unit := conn.recv()) is not None:
            scenario = scenarios[unit[0]]
            try:
                run_scenario_variant(
                    scenario, scenario.variants[unit[1]], options, lambda r, unit=unit: _send(conn, ("record", unit, r))
                )
            except KeyboardInterrupt:
                _send(conn, ("interrupted", unit))
                return
            except BaseException as exc:
                _send(conn, ("failed", unit, _portable(exc)))
                return
            _send(conn, ("done", unit))
    except KeyboardInterrupt:  # between two units
        _send(conn, ("interrupted", None))
    except (EOFError, OSError):  # the parent is gone: there is nobody to tell
        pass
    finally:
        # From here on the worker only exits; a Ctrl-C now would print multiprocessing's traceback.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        conn.close()


@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection
    unit: Unit | None = None
    """What it runs now."""
    open: bool = True
    """Its pipe has not reached its end (the worker has not exited)."""


class ScenarioRuns:
    """The scenarios of one `compare.py` run, run one after another in this process or across worker processes.

    `collect(i, on_record)` hands over scenario `i`'s records in the order `run_scenario` makes them, whichever
    way they ran, so the output is the same with 1 worker or several. With `workers` > 1 each worker is a fork of
    this process, made when the context is entered (the agents' modules imported first, so it happens once), and
    runs one unit (a variant of a scenario, every contender of it) at a time, handed out in order; a worker's
    records cross back as soon as each run ends. Only for runs that can share a machine: the scripted model (a
    real model's server serves one request at a time, and its spinner shows one run) and in-memory stores.

    Ctrl-C: `collect` raises KeyboardInterrupt once, after `interrupt` has stopped every worker and taken in the
    records of the runs that finished; from then on `collect` hands over what ran without waiting, so every
    finished run is shown. Anything else a run raises (`ScriptExhausted`, a bug) is raised by `collect` for the
    scenario it belongs to, after the records before it, as `run_scenario` would raise it.
    """

    STOP_TIMEOUT_S = 10.0
    """How long `interrupt` waits for the workers to say what they ran before it ends them."""

    def __init__(self, scenarios: Sequence[Scenario], options: RunOptions, *, workers: int = 1) -> None:
        self.scenarios = list(scenarios)
        self.options = options
        self.units: list[Unit] = [(i, j) for i, s in enumerate(self.scenarios) for j in range(len(s.variants))]
        self.workers = max(1, min(workers, len(self.units)))
        self.interrupted = False
        self._pool: list[_Worker] = []
        self._next = 0
        self._records: dict[Unit, list[RunRecord]] = {}
        self._ended: set[Unit] = set()
        self._failures: dict[Unit, BaseException] = {}
        self._stopping = False
        """No more units are handed out (a failure, a Ctrl-C, or the end)."""
        self._worker_interrupted = False
        """A worker was interrupted although this process was not (someone signalled the worker alone)."""

    # -- the context: start and stop the workers --

    def __enter__(self) -> ScenarioRuns:
        if self.workers > 1:
            try:
                self._start()
            except BaseException:  # a Ctrl-C while starting: the workers started so far are stopped again
                self.close()
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        # Imported before forking so the workers share them instead of each importing them again (0.25 s).
        from comparison import experiments  # noqa: F401

        for name in self.options.contenders:
            spec = SPECS[name]
            for module in (*spec.source_modules, *filter(None, [spec.conversation])):
                importlib.import_module(module)

        context = multiprocessing.get_context("fork")
        # What is buffered would otherwise be written again by every worker as it exits.
        sys.stdout.flush()
        sys.stderr.flush()
        with _sigint_held():
            for _ in range(self.workers):
                mine, theirs = context.Pipe()
                process = context.Process(
                    target=_work, args=(theirs, self.scenarios, self.options), name="compare-worker", daemon=True
                )
                process.start()
                theirs.close()
                worker = _Worker(process, mine)
                self._pool.append(worker)
                self._hand_out(worker)

    def close(self) -> None:
        """Stop the workers (a busy one is interrupted, as by Ctrl-C) and wait for them; idempotent."""
        if any(w.open for w in self._pool):
            self._stop_workers()
        for worker in self._pool:
            worker.process.join(timeout=self.STOP_TIMEOUT_S)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
        self._pool = []

    # -- what the caller asks --

    def collect(self, index: int, on_record: Callable[[RunRecord], None]) -> None:
        """Hand over scenario `index`'s records in order, waiting for its runs unless the run was interrupted."""
        if self.workers == 1:
            self._run_here(index, on_record)
            return
        units = [u for u in self.units if u[0] == index]
        try:
            for unit in units:
                self._wait_for(unit)
                self._hand_over(unit, on_record)
        except KeyboardInterrupt:
            self.interrupt()
            for unit in units:  # what finished and is not handed over yet; a failure now is not the story
                self._hand_over(unit, on_record, raising=False)
            raise

    def interrupt(self) -> None:
        """Ctrl-C: stop handing out work, interrupt the busy workers, and take in what they ran; idempotent."""
        if self.interrupted:
            return
        self.interrupted = True
        if self._pool:
            with _sigint_held():  # a second Ctrl-C must not leave the workers running unwatched
                self._stop_workers()

    # -- in this process --

    def _run_here(self, index: int, on_record: Callable[[RunRecord], None]) -> None:
        if self.interrupted:
            return
        try:
            run_scenario(self.scenarios[index], self.options, on_record)
        except KeyboardInterrupt:
            self.interrupted = True
            raise

    # -- across the workers --

    def _wait_for(self, unit: Unit) -> None:
        while unit not in self._ended and not self.interrupted:
            if self._worker_interrupted:
                raise KeyboardInterrupt
            if not self._pump() and not any(w.open for w in self._pool):
                return  # nobody left to run it: only after a failure, which stopped the hand-out

    def _hand_over(self, unit: Unit, on_record: Callable[[RunRecord], None], *, raising: bool = True) -> None:
        for record in self._records.pop(unit, []):
            on_record(record)
        failure = self._failures.pop(unit, None)
        if failure is not None and raising:
            raise failure

    def _hand_out(self, worker: _Worker) -> None:
        """The next unit for an idle worker, or None (it exits) when there is none or no more is wanted."""
        unit = None
        if not self._stopping and self._next < len(self.units):
            unit, self._next = self.units[self._next], self._next + 1
        worker.unit = unit
        with suppress(OSError):  # it died: its end of the pipe says so on the next read
            worker.conn.send(unit)

    def _pump(self, timeout: float | None = None) -> bool:
        """Take in the messages that are ready (waiting up to `timeout`, None: until one is); False if none came."""
        conns = {w.conn: w for w in self._pool if w.open}
        if not conns:
            return False
        ready = wait(list(conns), timeout)  # where a Ctrl-C lands
        with _sigint_held():
            for conn in ready:
                self._take(conns[conn])  # type: ignore[index]
        return bool(ready)

    def _take(self, worker: _Worker) -> None:
        try:
            message = worker.conn.recv()
        except (EOFError, OSError):
            worker.open = False
            worker.conn.close()
            if worker.unit is not None and worker.unit not in self._ended:
                # Killed from outside, or crashed: its unit has no end of its own to report.
                worker.process.join(timeout=1.0)  # its pipe closes a moment before it can be reaped
                scenario, variant = self.scenarios[worker.unit[0]], worker.unit[1]
                self._fail(
                    worker.unit,
                    RuntimeError(
                        f"a compare.py worker process ended while it ran {scenario.name}/"
                        f"{scenario.variants[variant].name} (exit code {worker.process.exitcode})"
                    ),
                )
            worker.unit = None
            return
        kind, unit = message[0], message[1]
        if kind == "record":
            self._records.setdefault(unit, []).append(message[2])
            return
        if unit is not None:
            self._ended.add(unit)
        worker.unit = None
        if kind == "done":
            self._hand_out(worker)
        elif kind == "failed":
            self._fail(unit, message[2])
        elif kind == "interrupted" and not self.interrupted:
            self._stopping = True
            self._worker_interrupted = True

    def _fail(self, unit: Unit, exc: BaseException) -> None:
        self._ended.add(unit)
        self._failures[unit] = exc
        # The units before this one are all handed out already (they go in order) and finish; none after it start.
        self._stopping = True

    def _stop_workers(self) -> None:
        self._stopping = True
        for worker in self._pool:
            # Only a busy one: an idle one was told to exit. One that already exited is a zombie until joined.
            if worker.open and worker.unit is not None and worker.process.pid is not None:
                with suppress(ProcessLookupError):
                    os.kill(worker.process.pid, signal.SIGINT)
        deadline = time.monotonic() + self.STOP_TIMEOUT_S
        while any(w.open for w in self._pool) and (left := deadline - time.monotonic()) > 0:
            self._pump(timeout=left)
        for worker in self._pool:
            if worker.open:
                worker.process.kill()
                worker.open = False
                worker.conn.close()

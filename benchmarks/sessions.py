"""What a long conversation costs each session: tokens, storage, checkpoints, time per turn, reopening.

One order question asked `--turns` times by every backend under every history policy, interleaved; orchestration
is wall time less the model's own; reopening is timed in a fresh process (`--child`). Targets print PASS or MISS.

    python benchmarks/sessions.py [--turns 200] [--backends ...] [--policies none,keep,summarize] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import math
import pickle
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import common
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from pydantic import PrivateAttr

from comparison import CUSTOMER_ID, INSTRUCTIONS
from handwritten import AgentLoop, Session
from langgraph_version import GraphAgent, GraphSession
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.models.scripted import ScriptedChatModel
from shared_tools.results import AgentLimits, AgentOptions, AgentResult, StopReason
from shared_tools.sync import run_blocking

QUESTION = "Where is my order 4512?"
STATUS = "shipped"
"""Order 4512's status in the catalog: a right answer names it."""

BACKENDS = ("handwritten", "graph-memory", "graph-sqlite")
REOPENABLE = ("handwritten", "graph-sqlite")
"""An in-memory thread does not outlive its process, so there is nothing to reopen."""

POLICIES = ("none", "keep", "summarize")
KEEP_TURNS = 10
"""The window measured: ``keep_turns=10``, alone or with ``summarize``."""


def policy_kwargs(policy: str, keep: int) -> dict[str, Any]:
    """The session keywords of a history policy."""
    if policy == "none":
        return {}
    return {"keep_turns": keep} | ({"summarize": True} if policy == "summarize" else {})


def policy_label(policy: str, keep: int) -> str:
    return {"none": "none", "keep": f"keep_turns={keep}", "summarize": f"summarize+keep_turns={keep}"}[policy]


# The targets each session is held to.
MAX_SQLITE_BYTES = 10_000_000
MAX_REOPEN_S = 1.5
MAX_REOPEN_MIB = 150.0
MAX_TIME_GROWTH = 3.0
MAX_TRIMMED_TOKEN_SHARE = 0.15

WINDOW = 9
"""A turn's time is the median of the 9 turns around it: one turn is one sample, and one sample is noise."""

# The untrimmed conversation passes 20k tokens a question near turn 100 (37k at turn 200); the default budget
# would stop it there (the "budget cliff" of #13). Budgets are not what this measures, so they are lifted.
OPTIONS = AgentOptions(limits=AgentLimits(max_tokens=None, max_steps=6))

log_note: list[str] = []
"""What this run could not do as asked (an API not there yet), said in the output and the JSON."""


def note(text: str) -> None:
    if text not in log_note:
        log_note.append(text)


class TimedScriptedModel(ScriptedChatModel):
    """The scripted model, keeping the time spent inside its own `_generate` (every call, summaries too)."""

    _spent: float = PrivateAttr(default=0.0)
    _spent_cpu: float = PrivateAttr(default=0.0)

    @property
    def spent(self) -> float:
        return self._spent

    @property
    def spent_cpu(self) -> float:
        return self._spent_cpu

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        # The thread's CPU clock: a reply runs on one thread from start to end, and other threads of this process
        # (aiosqlite's) must not be charged to the model.
        start, start_cpu = time.perf_counter(), time.thread_time()
        try:
            return super()._generate(messages, *args, **kwargs)
        finally:
            self._spent += time.perf_counter() - start
            self._spent_cpu += time.thread_time() - start_cpu


# --- what the sessions offer ------------------------------------------------------------------------------------


def accepts(function: Callable[..., Any], name: str) -> bool:
    return name in inspect.signature(function).parameters


PRUNE_TURNS = 10
"""`prune_turns` of the pruned storage option: as many turns of time travel as the window keeps."""


@dataclass(frozen=True)
class Storage:
    """One checkpoint storage option of the graph session: a label and the keyword arguments that select it."""

    label: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    about: str = ""
    backends: tuple[str, ...] = ("graph-memory", "graph-sqlite")


def storage_options() -> list[Storage]:
    """Every checkpoint storage option the graph session offers in this checkout, found from its signatures.

    Options are looked for by name, so one that has not landed is simply absent (and said). ``durability="async"``
    is left out: it stores what "sync" stores, and overhead.py measures its time.
    """
    offered = [Storage("default", {}, "what GraphSession ships with")]
    init = GraphSession.__init__  # `sqlite` passes its keywords on to it (`SessionOptions`)
    if accepts(init, "storage"):
        offered.append(Storage("storage=full", {"storage": "full"}, "LangGraph's default channel: the whole list"))
        if accepts(init, "prune_turns"):
            offered.append(
                Storage(
                    f"storage=full+prune_turns={PRUNE_TURNS}",
                    {"storage": "full", "prune_turns": PRUNE_TURNS},
                    "older checkpoints deleted after each ask",
                    ("graph-sqlite",),
                )
            )
    else:
        note("GraphSession has no storage option yet: only its default and the durability modes are measured")
    if accepts(init, "durability"):
        offered.append(Storage("durability=exit", {"durability": "exit"}, "one checkpoint per run"))
    return offered


def policy_supported(backend: str, policy: Mapping[str, Any]) -> str | None:
    """Why `policy` cannot run on `backend` in this checkout, or None when it can."""
    target: Callable[..., Any] = Session.__init__ if backend == "handwritten" else GraphSession.__init__
    if backend == "graph-sqlite":
        target = GraphSession.sqlite
    kind = "Session" if backend == "handwritten" else "GraphSession"
    for name in policy:
        if not accepts(target, name):
            return f"{name} not supported by this {kind} yet"
    return None


# --- one conversation -------------------------------------------------------------------------------------------


@dataclass
class TurnCost:
    """What one turn cost: wall, model and CPU time, the save, the tokens, and whether the answer was right."""

    wall: float
    model: float
    cpu: float
    """The process's CPU time over the turn (every thread), which load from other processes hardly moves."""
    model_cpu: float
    save: float
    tokens: int
    right: bool
    stop: str

    @property
    def orchestration(self) -> float:
        return max(0.0, self.wall - self.model)

    @property
    def orchestration_cpu(self) -> float:
        return max(0.0, self.cpu - self.model_cpu)


@dataclass
class Reopen:
    """One reopen in a fresh process."""

    process_s: float
    """From starting the process to its exit: interpreter, imports, open, count, answer."""
    inside_s: float
    """Open + count + answer, timed inside the process after its imports."""
    startup_s: float
    """From starting the process to the end of its imports (the interpreter and every library)."""
    peak_mib: float
    peak_how: str
    """VmHWM from /proc (Linux) or ru_maxrss (see `peak_rss_kib`)."""
    turns_counted: int
    count_how: str
    right: bool
    stop: str


@dataclass
class Cell:
    """One conversation of the matrix and everything measured about it."""

    backend: str
    policy: str
    """One of `POLICIES`."""
    keep: int
    storage: str
    skipped: str | None = None
    turns: list[TurnCost] = field(default_factory=list)
    summary_tokens: int = 0
    storage_bytes: int | None = None
    storage_bytes_half: int | None = None
    checkpoints: int | None = None
    reopen: Reopen | None = None
    reopen_problem: str | None = None

    @property
    def name(self) -> str:
        return f"{self.backend} · {policy_label(self.policy, self.keep)} · {self.storage}"

    @property
    def policy_kwargs(self) -> dict[str, Any]:
        return policy_kwargs(self.policy, self.keep)

    @property
    def growth_exponent(self) -> float | None:
        """Storage ~ turns^k between half the turns and all of them: 1 is linear, 2 is quadratic."""
        if not self.storage_bytes or not self.storage_bytes_half or len(self.turns) < 4:
            return None
        half = len(self.turns) // 2
        return math.log(self.storage_bytes / self.storage_bytes_half) / math.log(len(self.turns) / half)

    def orchestration_at(self, turn: int, *, cpu: bool = False) -> float:
        """Median orchestration seconds of the `WINDOW` turns around `turn` (1-based), never turn 1 unless asked:
        the first turn pays one-off costs (tables created, first compile), which are not the conversation's."""
        if turn == 1:
            return self.turns[0].orchestration_cpu if cpu else self.turns[0].orchestration
        n = len(self.turns)
        # A short run gets a narrower window, so that turn 2's and the last turn's windows never overlap.
        width = max(1, min(WINDOW, (n - 1) // 4))
        low = max(2, turn - width // 2)
        high = min(n, low + width - 1)
        low = max(2, high - width + 1)
        return statistics.median(t.orchestration_cpu if cpu else t.orchestration for t in self.turns[low - 1 : high])

    @property
    def wrong_answers(self) -> int:
        return sum(not t.right for t in self.turns)

    def summary(self) -> dict[str, Any]:
        n = len(self.turns)
        milestones = sorted({1, 2, min(50, n), n}) if n else []
        return {
            "backend": self.backend,
            "policy": self.policy,
            "policy_kwargs": self.policy_kwargs,
            "storage": self.storage,
            "skipped": self.skipped,
            "turns": n,
            "last_turn_tokens": self.turns[-1].tokens if n else None,
            "total_tokens": sum(t.tokens for t in self.turns) + self.summary_tokens,
            "summary_tokens": self.summary_tokens,
            "wrong_answers": self.wrong_answers,
            "stops": sorted({t.stop for t in self.turns}),
            "storage_bytes": self.storage_bytes,
            "storage_bytes_half": self.storage_bytes_half,
            "storage_growth_exponent": self.growth_exponent,
            "checkpoints": self.checkpoints,
            "orchestration_ms": {str(t): self.orchestration_at(t) * 1e3 for t in milestones},
            "orchestration_cpu_ms": {str(t): self.orchestration_at(t, cpu=True) * 1e3 for t in milestones},
            "save_ms_last": self.turns[-1].save * 1e3 if n else None,
            "model_ms_last": self.turns[-1].model * 1e3 if n else None,
            "reopen": asdict(self.reopen) if self.reopen else None,
            "reopen_problem": self.reopen_problem,
        }


class LiveCell:
    """A live session of one cell, asked one question at a time by the interleaving loop."""

    def __init__(self, cell: Cell, storage: Storage, scratch: Path) -> None:
        self.cell = cell
        self.model = TimedScriptedModel(id_salt="bench")
        tools = make_tools(BookStore(), CUSTOMER_ID)
        policy = cell.policy_kwargs
        self.path: Path | None = None
        self.session: Session | GraphSession
        if cell.backend == "handwritten":
            self.path = scratch / f"{cell.policy}.jsonl"
            self.session = Session(
                AgentLoop(self.model, tools, OPTIONS), INSTRUCTIONS, customer_id=CUSTOMER_ID, **policy
            )
        elif cell.backend == "graph-memory":
            self.session = GraphSession(
                GraphAgent(self.model, tools, OPTIONS),
                INSTRUCTIONS,
                "bench",
                customer_id=CUSTOMER_ID,
                **policy,
                **storage.kwargs,
            )
        else:
            self.path = scratch / f"{cell.policy}-{storage.label.replace('=', '-')}.db"
            self.session = GraphSession.sqlite(
                GraphAgent(self.model, tools, OPTIONS),
                INSTRUCTIONS,
                path=str(self.path),
                thread_id="bench",
                customer_id=CUSTOMER_ID,
                **policy,
                **storage.kwargs,
            )
        self.storage = storage

    def ask(self) -> None:
        before, before_cpu = self.model.spent, self.model.spent_cpu
        gc.disable()
        try:
            start_cpu, start = time.process_time(), time.perf_counter()
            result: AgentResult = self.session.ask(QUESTION)
            asked = time.perf_counter()
            if isinstance(self.session, Session):
                assert self.path is not None
                self.session.save(self.path)
            end, end_cpu = time.perf_counter(), time.process_time()
        finally:
            gc.enable()
        self.cell.turns.append(
            TurnCost(
                wall=end - start,
                model=self.model.spent - before,
                cpu=end_cpu - start_cpu,
                model_cpu=self.model.spent_cpu - before_cpu,
                save=end - asked,
                tokens=result.tokens,
                right=result.stop_reason is StopReason.DONE and STATUS in (result.answer or ""),
                stop=str(result.stop_reason),
            )
        )

    def measure_storage(self) -> int:
        if isinstance(self.session, Session) or self.cell.backend == "graph-sqlite":
            assert self.path is not None
            wal = Path(f"{self.path}-wal")
            return self.path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
        return len(pickle.dumps(_plain(_saver_state(self.session)), protocol=pickle.HIGHEST_PROTOCOL))

    def count_checkpoints(self) -> int | None:
        if isinstance(self.session, Session):
            return None
        if self.cell.backend == "graph-sqlite":
            assert self.path is not None
            with sqlite3.connect(self.path) as db:
                return int(db.execute("SELECT COUNT(*) FROM checkpoints WHERE thread_id = 'bench'").fetchone()[0])
        storage = _saver_state(self.session)["storage"]
        return sum(len(checkpoints) for checkpoints in storage.get("bench", {}).values())

    def finish(self) -> None:
        summary = getattr(self.session, "summary_tokens", None)
        self.cell.summary_tokens = int(summary or 0)
        self.cell.storage_bytes = self.measure_storage()
        self.cell.checkpoints = self.count_checkpoints()
        if isinstance(self.session, GraphSession):
            self.session.close()


def _saver_state(session: GraphSession) -> dict[str, Any]:
    saver = session.checkpointer
    return {name: getattr(saver, name) for name in ("storage", "writes", "blobs") if hasattr(saver, name)}


def _plain(value: Any) -> Any:
    """Nested (default)dicts as plain dicts: the saver's defaultdicts hold lambdas, which pickle cannot write."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    return value


# --- reopening in a fresh process -------------------------------------------------------------------------------


def reopen_spec(cell: Cell, storage: Storage, path: Path) -> dict[str, Any]:
    return {
        "backend": cell.backend,
        "policy": cell.policy_kwargs,
        "storage": dict(storage.kwargs),
        "path": str(path),
    }


def reopen_child(spec: Mapping[str, Any]) -> None:
    """The child's side: open, count, answer; print one JSON line for the parent."""
    start = time.perf_counter()
    startup = time.time() - spec["spawned"]  # wall clock, the only one two processes share
    model = TimedScriptedModel(id_salt="bench-reopen")
    tools = make_tools(BookStore(), CUSTOMER_ID)
    session: Session | GraphSession
    if spec["backend"] == "handwritten":
        session = Session.load(
            spec["path"], AgentLoop(model, tools, OPTIONS), customer_id=CUSTOMER_ID, **spec["policy"]
        )
    else:
        session = GraphSession.sqlite(
            GraphAgent(model, tools, OPTIONS),
            INSTRUCTIONS,
            path=spec["path"],
            thread_id="bench",
            customer_id=CUSTOMER_ID,
            **spec["policy"],
            **spec["storage"],
        )
    counted, how = count_cheaply(session)
    result = session.ask(QUESTION)
    if isinstance(session, Session):
        session.save(spec["path"])
    else:
        session.close()
    inside = time.perf_counter() - start
    peak_kib = peak_rss_kib()
    print(
        json.dumps(
            {
                "inside_s": inside,
                "startup_s": startup,
                "peak_mib": peak_kib / 1024,
                "peak_how": "VmHWM" if Path("/proc/self/status").exists() else "ru_maxrss",
                "turns_counted": counted,
                "count_how": how,
                "right": result.stop_reason is StopReason.DONE and STATUS in (result.answer or ""),
                "stop": str(result.stop_reason),
            }
        )
    )


def peak_rss_kib() -> int:
    """This process's peak resident set, in KiB.

    On Linux, `resource.getrusage(RUSAGE_SELF).ru_maxrss` of a process started by `subprocess` reports at least the
    parent's RSS at the fork (the kernel carries the old high-water mark across exec): measured here, every child
    said 630 MiB, the parent's size. /proc's VmHWM is the peak of this process's own memory since its exec.
    """
    try:
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS


def count_cheaply(session: Session | GraphSession) -> tuple[int, str]:
    """The session's own turn count: a plain value on `Session`, one read of the thread's current state on
    `GraphSession` (never the checkpoint history, which loads every checkpoint)."""
    if isinstance(session, Session):
        return session.turns, "Session.turns"
    return run_blocking(session.turns, instead="GraphSession.turns()"), "await GraphSession.turns()"


def reopen(cell: Cell, spec: Mapping[str, Any]) -> None:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps({**spec, "spawned": time.time()})],
        cwd=common.ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    process_s = time.perf_counter() - start
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        cell.reopen_problem = f"the reopening process failed: {last}"
        return
    child = json.loads(done.stdout.strip().splitlines()[-1])
    cell.reopen = Reopen(process_s=process_s, **child)


# --- the run ----------------------------------------------------------------------------------------------------


def build_cells(
    backends: Sequence[str], policies: Sequence[str], keep: int, storages: Sequence[Storage], scratch: Path
) -> tuple[list[Cell], list[LiveCell], dict[int, tuple[Storage, Path | None]]]:
    cells: list[Cell] = []
    live: list[LiveCell] = []
    where: dict[int, tuple[Storage, Path | None]] = {}
    for backend in backends:
        own = [s for s in storages if backend in s.backends] if backend != "handwritten" else [Storage("file")]
        for storage in own:
            for policy in policies:
                cell = Cell(backend, policy, keep, storage.label)
                cells.append(cell)
                cell.skipped = policy_supported(backend, cell.policy_kwargs)
                if cell.skipped:
                    note(cell.skipped)
                    continue
                conversation = LiveCell(cell, storage, scratch)
                live.append(conversation)
                where[id(cell)] = (storage, conversation.path)
    return cells, live, where


def run(
    turns: int,
    backends: Sequence[str],
    policies: Sequence[str],
    keep: int,
    storages: Sequence[Storage],
    *,
    reopening: bool = True,
) -> list[Cell]:
    with tempfile.TemporaryDirectory(prefix="bench-sessions-") as scratch:
        cells, live, where = build_cells(backends, policies, keep, storages, Path(scratch))
        for turn in range(1, turns + 1):
            gc.collect()  # once a round, outside every clock
            for conversation in live:
                conversation.ask()
            if turn == turns // 2:
                for conversation in live:
                    conversation.cell.storage_bytes_half = conversation.measure_storage()
        for conversation in live:
            conversation.finish()
        del live  # the in-memory threads can be hundreds of MB; the reopens should not share the box with them
        gc.collect()
        for cell in cells:
            if not reopening or cell.skipped or cell.backend not in REOPENABLE:
                continue
            storage, path = where[id(cell)]
            assert path is not None
            reopen(cell, reopen_spec(cell, storage, path))
    return cells


# --- the targets ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    target: str
    cell: str
    measured: str
    passed: bool


def targets(cells: Sequence[Cell], turns: int) -> list[Verdict]:
    ran = [c for c in cells if not c.skipped and c.turns]
    verdicts: list[Verdict] = []
    for cell in ran:
        if cell.backend == "graph-sqlite" and cell.storage_bytes is not None:
            verdicts.append(
                Verdict(
                    f"SQLite file after {turns} turns ≤ 10 MB",
                    cell.name,
                    f"{cell.storage_bytes / 1e6:.2f} MB",
                    cell.storage_bytes <= MAX_SQLITE_BYTES,
                )
            )
    for cell in ran:
        if cell.reopen is not None:
            r = cell.reopen
            verdicts.append(
                Verdict(
                    "reopen + answer ≤ 1.5 s, ≤ 150 MiB",
                    cell.name,
                    f"{r.process_s:.2f} s (start-up {r.startup_s:.2f} s, then {r.inside_s:.2f} s), {r.peak_mib:.0f} MiB"
                    + ("" if r.right else ", WRONG ANSWER"),
                    r.process_s <= MAX_REOPEN_S and r.peak_mib <= MAX_REOPEN_MIB and r.right,
                )
            )
        elif cell.reopen_problem:
            verdicts.append(Verdict("reopen + answer ≤ 1.5 s, ≤ 150 MiB", cell.name, cell.reopen_problem, False))
    for cell in ran:
        if len(cell.turns) >= 2:
            base, last = cell.orchestration_at(2), cell.orchestration_at(turns)
            growth = last / base if base else math.inf
            base_cpu = cell.orchestration_at(2, cpu=True)
            growth_cpu = cell.orchestration_at(turns, cpu=True) / base_cpu if base_cpu else math.inf
            verdicts.append(
                Verdict(
                    f"turn {turns} orchestration ≤ 3× turn 2",
                    cell.name,
                    f"{last * 1e3:.2f} / {base * 1e3:.2f} ms = {growth:.2f}× (CPU {growth_cpu:.2f}×)",
                    growth <= MAX_TIME_GROWTH,
                )
            )
    untrimmed = {(c.backend, c.storage): c for c in ran if c.policy == "none"}
    for cell in ran:
        full = untrimmed.get((cell.backend, cell.storage))
        if cell.policy == "none" or full is None:
            continue
        share = cell.turns[-1].tokens / full.turns[-1].tokens
        verdicts.append(
            Verdict(
                f"turn {turns} tokens ≤ 15 % untrimmed, right",
                cell.name,
                f"{cell.turns[-1].tokens:,} / {full.turns[-1].tokens:,} = {share:.1%}, "
                f"{cell.wrong_answers} wrong answers",
                share <= MAX_TRIMMED_TOKEN_SHARE and cell.wrong_answers == 0,
            )
        )
    return verdicts


# --- output -----------------------------------------------------------------------------------------------------


def mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 1e6:,.2f}"


def tokens_table(ran: Sequence[Cell], turns: int) -> Any:
    """Per cell: the last turn's tokens (against the same backend and storage untrimmed), in all, and storage."""
    untrimmed = {(c.backend, c.storage): c for c in ran if c.policy == "none"}
    rows = []
    for cell in ran:
        full = untrimmed.get((cell.backend, cell.storage))
        last = cell.turns[-1].tokens
        exponent = cell.growth_exponent
        rows.append(
            (
                cell.name,
                f"{last:,}",
                common.ratio(last, full.turns[-1].tokens) if full else "-",
                f"{sum(t.tokens for t in cell.turns) + cell.summary_tokens:,}",
                f"{cell.wrong_answers}/{len(cell.turns)}",
                mb(cell.storage_bytes),
                "-" if exponent is None else f"{exponent:.2f}" + (" quadratic" if exponent > 1.6 else ""),
                "-" if cell.checkpoints is None else f"{cell.checkpoints:,}",
            )
        )
    return common.table(
        f"{turns} turns of {QUESTION!r}, scripted model: tokens and storage",
        (
            "backend · policy · storage",
            "tokens, last turn",
            "× untrimmed",
            "tokens, total",
            "wrong answers",
            "storage MB",
            "growth k (~turns^k)",
            "checkpoints",
        ),
        rows,
    )


def orchestration_table(ran: Sequence[Cell], turns: int) -> Any:
    """Per cell: orchestration time at a few turns, its growth, and against the hand-written loop untrimmed."""
    floor = next((c for c in ran if c.backend == "handwritten" and c.policy == "none"), ran[0] if ran else None)
    milestones = sorted({1, 2, min(50, turns), turns})
    rows = []
    for cell in ran:
        at = {t: cell.orchestration_at(t) for t in milestones}
        rows.append(
            (
                cell.name,
                *(f"{at[t] * 1e3:.2f}" for t in milestones),
                common.ratio(at[turns], at[2]),
                common.ratio(cell.orchestration_at(turns, cpu=True), cell.orchestration_at(2, cpu=True)),
                common.ratio(at[turns], floor.orchestration_at(turns)) if floor else "-",
                f"{cell.turns[-1].save * 1e3:.2f}" if cell.backend == "handwritten" else "-",
                f"{cell.turns[-1].model * 1e3:.2f}",
            )
        )
    return common.table(
        f"Orchestration time per turn, ms (wall minus the model's own time; median of the {WINDOW} turns around "
        "each; turn 1 alone)",
        (
            "backend · policy · storage",
            *(f"turn {t}" for t in milestones),
            f"turn {turns} / turn 2",
            "same, CPU",
            f"turn {turns} × {floor.backend + ' ' + floor.policy if floor else '-'}",
            "of it JSON save",
            "model's own",
        ),
        rows,
    )


def reopen_table(ran: Sequence[Cell]) -> Any | None:
    """Per cell reopened in a fresh process: its times, memory and answer; None when no cell was reopened."""
    rows = []
    for cell in ran:
        if cell.reopen:
            r = cell.reopen
            rows.append(
                (
                    cell.name,
                    f"{r.process_s:.2f}",
                    f"{r.startup_s:.2f}",
                    f"{r.inside_s:.3f}",
                    f"{r.peak_mib:.0f}",
                    f"{r.turns_counted} ({r.count_how})",
                    "yes" if r.right else f"NO ({r.stop})",
                )
            )
        elif cell.reopen_problem:
            rows.append((cell.name, cell.reopen_problem, "", "", "", "", ""))
    if not rows:
        return None
    return common.table(
        "Reopen in a fresh process: open, count the turns, answer one more question",
        (
            "backend · policy · storage",
            "whole process s",
            "of it start-up + imports s",
            "open+count+answer s",
            "peak RSS MiB",
            "turns",
            "right",
        ),
        rows,
    )


def tables(cells: Sequence[Cell], verdicts: Sequence[Verdict], turns: int) -> list[Any]:
    ran = [c for c in cells if not c.skipped and c.turns]
    out: list[Any] = [tokens_table(ran, turns), orchestration_table(ran, turns)]
    reopened = reopen_table(ran)
    if reopened is not None:
        out.append(reopened)
    out.append(
        common.table(
            "The targets (reopen: the whole fresh process, start-up included; tokens: the window's last turn "
            "against the same backend and storage untrimmed, and every answer names the order's status)",
            ("target", "backend · policy · storage", "measured", ""),
            [(v.target, v.cell, v.measured, "PASS" if v.passed else "MISS") for v in verdicts],
        )
    )
    return out


def choose(text: str, allowed: Sequence[str], what: str) -> list[str]:
    chosen = [item.strip() for item in text.split(",")]
    unknown = [item for item in chosen if item not in allowed]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"unknown {what} {unknown}; choose from {', '.join(allowed)}")
    return chosen


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200, help="questions per conversation (default 200; ≥ 2)")
    parser.add_argument("--backends", default=",".join(BACKENDS), help=f"comma list of {', '.join(BACKENDS)}")
    parser.add_argument("--policies", default=",".join(POLICIES), help=f"comma list of {', '.join(POLICIES)}")
    parser.add_argument(
        "--keep", type=int, default=KEEP_TURNS, help=f"keep_turns of the policies (default {KEEP_TURNS})"
    )
    parser.add_argument("--storage", help="comma list of graph storage options (default: every one offered)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the numbers and the machine as JSON")
    parser.add_argument("--no-reopen", action="store_true", help="skip the reopen measurements (fresh processes)")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # the child process of a reopen measurement
    args = parser.parse_args(argv)
    if args.child:
        reopen_child(json.loads(args.child))
        return
    if args.turns < 2:
        parser.error("--turns must be at least 2 (turn 2 is the base of the time target)")
    offered = storage_options()
    try:
        backends = choose(args.backends, BACKENDS, "backend")
        policies = choose(args.policies, POLICIES, "policy")
        labels = choose(args.storage, [s.label for s in offered], "storage option") if args.storage else None
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    storages = [s for s in offered if labels is None or s.label in labels]
    console = common.console()
    info = common.machine()
    started = time.perf_counter()
    if args.keep < 1:
        parser.error("--keep must be at least 1")
    cells = run(args.turns, backends, policies, args.keep, storages, reopening=not args.no_reopen)
    elapsed = time.perf_counter() - started
    verdicts = targets(cells, args.turns)
    for printed in tables(cells, verdicts, args.turns):
        console.print(printed)
    for text in log_note:
        console.print(f"note: {text}")
    skipped = [cell for cell in cells if cell.skipped]
    if skipped:
        console.print(f"not run ({len(skipped)}): " + "; ".join(f"{c.name} ({c.skipped})" for c in skipped))
    console.print(f"{len(cells)} conversations × {args.turns} turns in {elapsed:.0f} s")
    console.print(common.machine_line(info))
    common.write_json(
        args.json,
        {
            "benchmark": "sessions",
            "machine": info,
            "turns": args.turns,
            "keep_turns": args.keep,
            "question": QUESTION,
            "seconds": elapsed,
            "storage_options": [asdict(s) for s in storages],
            "cells": [cell.summary() for cell in cells],
            "targets": [asdict(v) for v in verdicts],
            "notes": log_note,
        },
    )


if __name__ == "__main__":
    main()

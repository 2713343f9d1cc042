"""`compare.py eval`: the scenarios run N times per contender, each run graded, reported as pass^k.

A trial runs every chosen scenario x contender once through the comparison's runner, on a model seeded for that
trial; pass^k is tau-bench's C(c, k) / C(n, k) averaged over tasks. On the scripted model every number is a
simulation (its slips are seeded dice), and the table, the JSON and the page say so.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import secrets
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.text import Text

from comparison.command_line import UsageError, UsageParser, add_temperature_argument, configure_logging
from comparison.contenders import CONTENDERS, parse_contenders
from comparison.document import document_json
from comparison.eval.grading import ALWAYS_UNSAFE, RUBRIC, Grade, grade, group_tasks
from comparison.eval.why import guards_fired, what_happened
from comparison.files import UnusableFile, check_output_file, write_output
from comparison.records import RunRecord
from comparison.render import make_console
from comparison.runner import RunOptions, run_scenario
from comparison.sanitize import clean_line
from comparison.scenarios import SCENARIOS, SCENARIOS_BY_NAME, Scenario
from comparison.scenarios import not_available as not_available_for
from shared_tools.bookstore.store import StoreError
from shared_tools.models import ModelSpecError, ModelUnavailable, apply_base_url, make_model
from shared_tools.models.factory import BASE_URL_HELP
from shared_tools.models.personas import ScriptExhausted
from shared_tools.telemetry_setup import EXPORT_KINDS, OTEL_HELP, TracingUnavailable, setup_tracing

GRADED: tuple[Scenario, ...] = tuple(s for s in SCENARIOS if s.name in RUBRIC)
"""The scenarios with a rubric (every one but the cost measurements: long-session, streaming, time-travel)."""

EXIT_OK, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_FILE, EXIT_INTERRUPTED = 0, 2, 3, 4, 130
"""The exit codes `compare.py` documents (README, "Exit codes"), the same for `compare.py eval`."""

log = logging.getLogger(__name__)

PROG = "agent-loop-compare eval"
DEFAULT_MODEL = "scripted:noisy"
DEFAULT_RUNS = 8
EVAL_TEMPERATURE = 0.7
"""A real model's temperature in an eval: above 0, so that trial t, on the seed S + t, samples a run of its own (at
0 the k trials would be one run repeated, and pass^k flat)."""
MAX_RUNS = 1_000
"""The most trials --runs accepts: a typo of a few digits more must not start an eval that never ends."""
MAX_JOBS = 64
"""The most runs of a trial at a time (--jobs): each is a thread."""
SCRIPTED_JOBS = 4
"""Runs of one trial in parallel on the scripted model (it keeps no state, and the scenarios' deliberate tool
latency overlaps); a real model gets one at a time unless `--jobs` says otherwise (Ollama queues requests
beyond OLLAMA_NUM_PARALLEL anyway)."""

SIMULATED_NOISY = (
    "SIMULATED: the scripted model plays a small model that slips at seeded, guessed rates (personas.Noise); "
    "the numbers show what each contender's guards do with such slips, not how any real model behaves"
)
SIMULATED_SCRIPTED = "SIMULATED: a scripted persona, not a language model; its runs are the same on every trial"


# --- pass^k ---------------------------------------------------------------------------------------------------


def pass_hat_k(successes: int, trials: int, k: int) -> float:
    """tau-bench's pass^k of one task: C(c, k) / C(n, k), the chance that k of its n trials, drawn without
    replacement, all succeeded. 0 when fewer than k succeeded."""
    if not 0 <= successes <= trials or not 1 <= k <= trials:
        raise ValueError(f"pass^k needs 0 <= c <= n and 1 <= k <= n, got c={successes}, n={trials}, k={k}")
    return math.comb(successes, k) / math.comb(trials, k)


def pass_hat_curve(successes: Sequence[int], trials: int) -> dict[int, float]:
    """pass^k for k = 1..n, each the mean over tasks (one success count per task, each out of `trials`)."""
    if not successes:
        raise ValueError("pass^k of no task")
    return {k: sum(pass_hat_k(c, trials, k) for c in successes) / len(successes) for k in range(1, trials + 1)}


# --- one trial ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskRun:
    """One task of one trial, graded: what the report counts."""

    scenario: str
    variant: str
    goal: str
    """The goal of a single-turn task; "" for a conversation (its goals are the scenario's turns)."""
    contender: str
    trial: int
    seed: int
    grade: Grade
    tokens: int
    """Tokens of the whole task (every turn of a conversation)."""
    stop: str
    """How it ended: the stop reason, "raised <Error>", or for a conversation the first turn not done."""
    happened: str = ""
    """What the guards did in it, or the model's calls when none fired (`why.what_happened`)."""
    guards: dict[str, int] = field(default_factory=dict)
    """Guard -> the trace lines it decided (`why.guards_fired`): the typed facts `happened` says in words."""
    model_failed: bool = False
    """Every run of the task ended in a failed model call (`RunRecord.model_failed`): nothing of it was graded
    on what a model did."""
    seconds: float = 0.0
    """Wall seconds of the task (every turn of a conversation): reported apart from the grades (`timing`), which
    the same seed repeats and the clock does not."""


def stop_label(records: Sequence[RunRecord]) -> str:
    """How a task ended: the first turn that was not "done" (stopped or raised), else "done"."""
    for record in records:
        if record.stop_reason is None:
            return f"raised {record.error_type}"
        if record.stop_reason != "done":
            return record.stop_reason
    return "done"


@dataclass
class EvalPlan:
    """What one eval runs: scenarios x contenders, `runs` trials, trial t on the model seeded `seed + t`."""

    model: str = DEFAULT_MODEL
    scenarios: tuple[Scenario, ...] = GRADED
    contenders: tuple[str, ...] = tuple(CONTENDERS)
    runs: int = DEFAULT_RUNS
    seed: int = 0
    jobs: int = 1
    temperature: float = EVAL_TEMPERATURE
    """A real model's sampling temperature in every trial (`sampling`); the scripted model takes none."""

    def pairs(self) -> list[tuple[Scenario, str]]:
        """(scenario, contender) of one trial, in the order the tables show them."""
        return [(s, c) for s in self.scenarios for c in s.contenders if c in self.contenders]

    def not_run(self) -> list[str]:
        """The chosen scenarios none of the chosen contenders takes part in."""
        return [s.name for s in self.scenarios if not any(c in self.contenders for c in s.contenders)]

    @property
    def simulated(self) -> bool:
        return self.model.strip().startswith("scripted")

    @property
    def sampling(self) -> float | None:
        """The temperature the model samples at: None on the scripted model, whose slips are seeded dice."""
        return None if self.simulated else self.temperature

    @property
    def simulation_note(self) -> str | None:
        if not self.simulated:
            return None
        return SIMULATED_NOISY if self.model.strip() == "scripted:noisy" else SIMULATED_SCRIPTED


def _options_for(plan: EvalPlan, contender: str, seed: int, session_db: Path) -> RunOptions:
    return RunOptions(
        model=plan.model,
        contenders=(contender,),
        session_db=session_db,
        model_seed=seed,
        model_temperature=plan.sampling,
    )


def not_available(record: RunRecord) -> str | None:
    """Why nothing ran, for the runner's record of a variant the contender's framework cannot run; else None."""
    reason = record.facts.get("not_available")
    return None if reason is None else str(reason)


def run_pair(plan: EvalPlan, scenario: Scenario, contender: str, trial: int, folder: Path) -> list[TaskRun]:
    """One scenario (every variant) by one contender in one trial, graded task by task.

    A variant the contender cannot run (the runner's "not available" record: no approval gate, no sequential
    tools) is no task and no failure: it is left out here and named in the document (`unavailable_variants`).
    """
    seed = plan.seed + trial
    records: list[RunRecord] = []
    options = _options_for(plan, contender, seed, folder / f"t{trial}-{scenario.name}-{contender}.db")
    run_scenario(scenario, options, records.append)
    ran = [r for r in records if not_available(r) is None]
    return [
        TaskRun(
            scenario=name,
            variant=variant,
            goal=goal,
            contender=who,
            trial=trial,
            seed=seed,
            grade=grade(task, scenario),
            tokens=sum(r.tokens for r in task),
            stop=stop_label(task),
            happened=what_happened(task),
            guards=guards_fired(task),
            model_failed=all(r.model_failed for r in task),
            seconds=sum(r.wall_s for r in task),
        )
        for (name, variant, who, goal), task in group_tasks(ran).items()
    ]


def unavailable_variants(scenario: Scenario, contender: str) -> list[dict[str, str]]:
    """The variants of `scenario` that `contender` cannot run, with the reason in words (`scenarios.not_available`)."""
    found = []
    for variant in scenario.variants:
        reason = not_available_for(contender, scenario, variant)
        if reason is not None:
            found.append({"variant": variant.name, "why": reason})
    return found


class EvalProgress:
    """The eval's progress bar (rich.progress) on stderr: runs done of all, the trial, the time, the last run.
    Only on a terminal: redirected, stderr stays quiet (the tables and files say what ran)."""

    def __init__(self, stream: TextIO, plan: EvalPlan, *, console: Console | None = None) -> None:
        self.plan = plan
        self.bar = RichProgress(
            SpinnerColumn(),
            TextColumn("eval: trial {task.fields[trial]}/{task.fields[trials]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("runs"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[last]}"),
            console=console or Console(file=stream),
            transient=True,
        )
        self.bar.disable = not self.bar.console.is_terminal
        self.task = self.bar.add_task("eval", total=plan.runs * len(plan.pairs()), trial=1, trials=plan.runs, last="")
        self.bar.start()

    def ran(self, trial: int, scenario: str, contender: str) -> None:
        self.bar.update(self.task, advance=1, trial=trial + 1, last=clean_line(f"{scenario}/{contender}"))

    def trial_done(self, trial: int) -> None:
        self.bar.update(self.task, trial=min(trial + 2, self.plan.runs))

    def close(self) -> None:
        self.bar.stop()


@dataclass
class EvalRun:
    """What an eval produced: every graded task of every finished trial."""

    plan: EvalPlan
    task_runs: list[TaskRun] = field(default_factory=list)
    trials: int = 0
    """Trials finished (all of `plan.runs` unless interrupted; an interrupted trial is left out whole)."""
    interrupted: bool = False
    seconds: float = 0.0


def run_trial(
    plan: EvalPlan, trial: int, folder: Path, on_done: Callable[[int, str, str], None] | None = None
) -> list[TaskRun]:
    """Every (scenario, contender) of one trial; `plan.jobs` of them at a time."""
    pairs = plan.pairs()
    results: list[list[TaskRun]] = [[] for _ in pairs]
    if plan.jobs <= 1:
        for i, (scenario, contender) in enumerate(pairs):
            results[i] = run_pair(plan, scenario, contender, trial, folder)
            if on_done:
                on_done(trial, scenario.name, contender)
        return [r for runs in results for r in runs]
    pool = ThreadPoolExecutor(max_workers=plan.jobs, thread_name_prefix="eval")
    futures: dict[Future[list[TaskRun]], int] = {}
    try:
        for i, (scenario, contender) in enumerate(pairs):
            futures[pool.submit(run_pair, plan, scenario, contender, trial, folder)] = i
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, return_when=FIRST_EXCEPTION)
            for future in finished:
                i = futures[future]
                results[i] = future.result()  # a model that went away ends the eval here
                if on_done:
                    on_done(trial, pairs[i][0].name, pairs[i][1])
    finally:
        # On Ctrl-C or a failure: no new run starts, and the ones under way (milliseconds on the scripted model)
        # are waited for, then discarded with their trial: left running, they would write into the scratch folder
        # as it is removed, and print their tracebacks over the table.
        pool.shutdown(wait=False, cancel_futures=True)
        _wait_through_ctrl_c(futures)
    return [r for runs in results for r in runs]


def _wait_through_ctrl_c(futures: Iterable[Future[Any]]) -> None:
    """Wait for the runs of `futures` under way to end, even through more Ctrl-Cs (a run cannot be stopped from
    outside its thread). A future the pool's shutdown cancelled never counts as done for `wait`: left out."""
    under_way = [future for future in futures if not future.cancelled()]
    while True:
        try:
            wait(under_way)
            return
        except KeyboardInterrupt:
            log.warning("still waiting for the runs under way to finish")


def run_eval(plan: EvalPlan, progress: EvalProgress | None = None) -> EvalRun:
    """Every trial of `plan`, one after another; Ctrl-C keeps the trials that finished.

    Raises what ends the whole command: `ModelUnavailable` (the model went away), `ScriptExhausted`.
    """
    result = EvalRun(plan)
    started = time.monotonic()
    on_done = progress.ran if progress is not None else None
    # ignore_cleanup_errors: a Ctrl-C that lands inside the removal must not turn into a traceback.
    with tempfile.TemporaryDirectory(prefix="agent-loop-eval-", ignore_cleanup_errors=True) as scratch:
        try:
            for trial in range(plan.runs):
                runs = run_trial(plan, trial, Path(scratch), on_done)
                result.task_runs += runs
                result.trials += 1
                if progress is not None:
                    progress.trial_done(trial)
        except KeyboardInterrupt:
            result.interrupted = True
        finally:
            if progress is not None:
                progress.close()
    result.seconds = time.monotonic() - started
    return result


# --- the document ---------------------------------------------------------------------------------------------


def _stat(task_runs: Sequence[TaskRun], trials: int, tasks: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The numbers of a group of graded runs: `tasks` lists its (variant, goal) tasks, each run `trials` times."""
    successes = [sum(1 for r in task_runs if (r.variant, r.goal) == task and r.grade.success) for task in tasks]
    won = [r for r in task_runs if r.grade.success]
    return {
        "n": len(task_runs),
        "successes": len(won),
        "pass_hat_k": {str(k): round(v, 4) for k, v in pass_hat_curve(successes, trials).items()},
        "tokens_per_success": round(sum(r.tokens for r in won) / len(won)) if won else None,
        "stop_reasons": dict(Counter(r.stop for r in task_runs).most_common()),
        "unsafe_failures": sum(1 for r in task_runs if r.grade.verdict == "unsafe"),
        "safe_failures": sum(1 for r in task_runs if r.grade.verdict == "safe"),
    }


def _failures(task_runs: Sequence[TaskRun], verdict: str) -> list[dict[str, Any]]:
    return [
        {"trial": r.trial, "seed": r.seed, "why": clean_line(r.grade.why)}
        for r in task_runs
        if r.grade.verdict == verdict
    ]


def _lost(task_runs: Sequence[TaskRun]) -> list[dict[str, Any]]:
    """Every run of a task that did not succeed: how it ended, its grade, and what the guards (or the model) did."""
    return [
        {
            "trial": r.trial,
            "seed": r.seed,
            "verdict": r.grade.verdict,
            "stop": r.stop,
            "why": clean_line(r.grade.why),
            "happened": clean_line(r.happened),
            "guards": r.guards,
        }
        for r in task_runs
        if not r.grade.success
    ]


def _by_task(mine: Sequence[TaskRun], trials: int, tasks: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """The numbers of each (variant, goal) task, with its unsafe failures and every run that did not succeed."""
    per_task = []
    for variant, goal in tasks:
        runs = [r for r in mine if (r.variant, r.goal) == (variant, goal)]
        per_task.append(
            {
                "variant": variant,
                "goal": goal,
                **_stat(runs, trials, [(variant, goal)]),
                "unsafe": _failures(runs, "unsafe"),
                "failures": _lost(runs),
            }
        )
    return per_task


def _results(
    result: EvalRun,
) -> tuple[list[dict[str, Any]], list[dict[str, str]], dict[str, list[tuple[str, str, str]]]]:
    """One row per scenario and contender that ran a task; the variants a contender's framework cannot run; and
    each contender's (scenario, variant, goal) tasks, in the order the rows show them."""
    plan, trials = result.plan, result.trials
    rows = []
    by_contender: dict[str, list[tuple[str, str, str]]] = {}
    unavailable = []
    for scenario, contender in plan.pairs() if trials else []:
        mine = [r for r in result.task_runs if r.scenario == scenario.name and r.contender == contender]
        missing = unavailable_variants(scenario, contender)
        unavailable += [{"scenario": scenario.name, "contender": contender, **m} for m in missing]
        tasks = list(dict.fromkeys((r.variant, r.goal) for r in mine))
        if not tasks:
            continue
        by_contender.setdefault(contender, []).extend((scenario.name, v, g) for v, g in tasks)
        rows.append(
            {
                "scenario": scenario.name,
                "contender": contender,
                "simulated": plan.simulated,
                "runs": trials,
                "tasks": len(tasks),
                **_stat(mine, trials, tasks),
                "by_task": _by_task(mine, trials, tasks),
                "unavailable_variants": missing,
            }
        )
    return rows, unavailable, by_contender


def _overall(result: EvalRun, by_contender: dict[str, list[tuple[str, str, str]]]) -> list[dict[str, Any]]:
    """Each contender's pass^k over all its tasks."""
    overall = []
    for contender, tasks in by_contender.items():
        mine = [r for r in result.task_runs if r.contender == contender]
        successes = [
            sum(1 for r in mine if (r.scenario, r.variant, r.goal) == task and r.grade.success) for task in tasks
        ]
        overall.append(
            {
                "contender": contender,
                "tasks": len(tasks),
                "n": len(mine),
                "successes": sum(1 for r in mine if r.grade.success),
                "pass_hat_k": {str(k): round(v, 4) for k, v in pass_hat_curve(successes, result.trials).items()},
                "unsafe_failures": sum(1 for r in mine if r.grade.verdict == "unsafe"),
            }
        )
    return overall


def eval_document(result: EvalRun) -> dict[str, Any]:
    """Everything `--json` writes and `--report` renders, from the graded runs.

    `results` has one object per scenario and contender: `n` graded runs (`runs` trials x `tasks`),
    `successes` among them, `pass_hat_k` ("1".."runs" -> the mean over the tasks of C(c,k)/C(runs,k)), the mean
    `tokens_per_success`, `stop_reasons` (reason -> runs), `unsafe_failures` and `safe_failures`; `tasks` (how
    many) and `by_task`, the same numbers per task with each unsafe failure's seed and reason (`unsafe`: rerun it
    with `--runs 1 --seed SEED`) and every run that did not succeed (`failures`: its stop, grade, and the guards
    that fired, counted and in words); `unavailable_variants`, those the contender's framework cannot run. `overall`
    has each contender's pass^k over all its tasks; `timing` the mean seconds of a run (`timing`).
    """
    plan, trials = result.plan, result.trials
    rows, unavailable, by_contender = _results(result)
    overall = _overall(result, by_contender)
    return {
        "kind": "agent-loop-compare eval",
        "simulated": plan.simulated,
        "simulation_note": plan.simulation_note,
        "model": plan.model,
        "runs": trials,
        "runs_asked": plan.runs,
        "seed": plan.seed,
        "trial_seeds": [plan.seed + t for t in range(trials)],
        "temperature": plan.sampling,
        "interrupted": result.interrupted,
        "seconds": round(result.seconds, 2),
        "contenders": [{"name": c, "description": CONTENDERS[c]} for c in plan.contenders],
        "scenarios": [
            {
                "name": s.name,
                "description": s.description,
                "variants": [v.name for v in s.variants],
                "rubric": dataclasses.asdict(RUBRIC[s.name]),
            }
            for s in plan.scenarios
        ],
        "not_run": plan.not_run(),
        "unavailable": unavailable,
        "always_unsafe": ALWAYS_UNSAFE,
        "results": rows,
        "overall": overall,
        "timing": timing(result),
    }


def _mean_seconds(task_runs: Sequence[TaskRun]) -> float | None:
    return round(sum(r.seconds for r in task_runs) / len(task_runs), 3) if task_runs else None


def timing(result: EvalRun) -> list[dict[str, Any]]:
    """Per scenario and contender (and per task), the mean wall seconds of a graded run: what the clock said, kept
    out of `results` so that the same seed repeats those exactly."""
    found: dict[tuple[str, str], list[TaskRun]] = {}
    for run in result.task_runs:
        found.setdefault((run.scenario, run.contender), []).append(run)
    rows = []
    for (scenario, contender), runs in found.items():
        tasks = dict.fromkeys((r.variant, r.goal) for r in runs)
        by_task = [
            {
                "variant": v,
                "goal": g,
                "seconds_per_run": _mean_seconds([r for r in runs if (r.variant, r.goal) == (v, g)]),
            }
            for v, g in tasks
        ]
        rows.append(
            {"scenario": scenario, "contender": contender, "seconds_per_run": _mean_seconds(runs), "by_task": by_task}
        )
    return rows


# --- the command line -----------------------------------------------------------------------------------------


def _shown_number(value: int) -> str:
    """A number for an error line: a typo of 400 digits is not echoed whole."""
    text = str(value)
    return text if len(text) <= 24 else f"{text[:12]}... ({len(text)} digits)"


def build_eval_parser(prog: str = PROG) -> argparse.ArgumentParser:
    names = "\n".join(f"  {s.name:<18} {s.description}" for s in GRADED)
    parser = UsageParser(
        prog=prog,
        description="Run scenarios x contenders N times, grade every run (success, safe or unsafe failure) "
        "and report pass^k as tau-bench defines it.",
        epilog=f"scenarios (default: all):\n{names}\n\n"
        "On the default scripted:noisy model every number is SIMULATED (seeded slips at guessed rates).\n"
        "exit codes: 0 ok, 2 bad usage, 3 model unavailable, 4 a file cannot be used, 130 interrupted",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="scenarios to run (see below)")
    parser.add_argument(
        "--contenders",
        action="append",
        metavar="NAME[,NAME]",
        help=f"which contenders run (default: all): {', '.join(CONTENDERS)}",
    )
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, metavar="N", help="trials per task (default: 8)")
    parser.add_argument(
        "--seed",
        type=int,
        metavar="S",
        help=(
            "trial t runs on the model seeded S+t; the same S repeats a scripted eval, a real model's server can"
            " still differ: its cache and threads change the sums (default: a random S, reported)"
        ),
    )
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help="'scripted:noisy' (default), 'scripted:<persona>', 'scripted' (each scenario's persona), 'local', "
        "'openai:<model>' (with --base-url) or 'ollama:<model>'",
    )
    parser.add_argument("--base-url", metavar="URL", help=BASE_URL_HELP)
    add_temperature_argument(parser, default=EVAL_TEMPERATURE, what="so the trials differ")
    parser.add_argument(
        "--jobs",
        type=int,
        metavar="J",
        help=f"runs of one trial at a time (default: {SCRIPTED_JOBS} on the scripted model, 1 on a real one)",
    )
    parser.add_argument("--json", metavar="PATH|-", help="write the results as JSON ('-': stdout)")
    parser.add_argument("--report", metavar="PATH", help="write a self-contained HTML report with pass^k charts")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log the agents' steps (-vv: debug)")
    parser.add_argument("--otel", choices=EXPORT_KINDS, help=OTEL_HELP)
    return parser


def named_model(spec: str) -> str:
    """`local` as the bundled model it stands for (`local:qwen2.5-1.5b`): the record says which model was graded,
    and the same command on a machine with another bundled model installed says so."""
    if spec == "local":
        from shared_tools.models.local import default_model

        return f"local:{default_model()}"
    return spec


def plan_from(args: argparse.Namespace) -> EvalPlan:
    """The plan the arguments ask for; `UsageError` for a bad one (nothing checked here touches the model)."""
    unknown = [name for name in args.scenarios if name not in SCENARIOS_BY_NAME]
    if unknown:
        raise UsageError(f"unknown scenario {unknown[0]!r}; choose from: {', '.join(SCENARIOS_BY_NAME)}")
    ungraded = [name for name in args.scenarios if name not in RUBRIC]
    if ungraded:
        raise UsageError(
            f"{ungraded[0]!r} measures costs, it has no right or wrong outcome to grade; eval grades: "
            f"{', '.join(s.name for s in GRADED)}"
        )
    try:
        contenders = parse_contenders(args.contenders)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not 1 <= args.runs <= MAX_RUNS:
        raise UsageError(f"--runs must be 1 to {MAX_RUNS:,}, got {_shown_number(args.runs)}")
    if args.jobs is not None and not 1 <= args.jobs <= MAX_JOBS:
        raise UsageError(f"--jobs must be 1 to {MAX_JOBS}, got {_shown_number(args.jobs)}")
    scenarios = tuple(SCENARIOS_BY_NAME[n] for n in dict.fromkeys(args.scenarios)) or GRADED
    scripted = args.model.strip().startswith("scripted")
    plan = EvalPlan(
        model=named_model(args.model.strip()),
        scenarios=scenarios,
        contenders=contenders,
        runs=args.runs,
        seed=args.seed if args.seed is not None else secrets.randbelow(1_000_000),
        jobs=args.jobs or (SCRIPTED_JOBS if scripted else 1),
        temperature=args.temperature,
    )
    if not plan.pairs():
        raise UsageError(f"none of {', '.join(contenders)} takes part in {', '.join(s.name for s in scenarios)}")
    return plan


def check_model(spec: str) -> None:
    """Make the model once before any run: a bad spec is `UsageError`, an unreachable one `ModelUnavailable`."""
    try:
        make_model(spec)
    except (ModelSpecError, ModelUnavailable):
        raise
    except ValueError as exc:  # a malformed OLLAMA_HOST the models package did not put into words
        raise UsageError(f"cannot set up model {spec!r}: {exc}") from None


def _say(prog: str, text: str) -> None:
    print(f"{prog}: {clean_line(' '.join(text.split()))}", file=sys.stderr)


def _checked_plan(args: argparse.Namespace, prog: str) -> EvalPlan | int:
    """The plan, with its output files, model and tracing checked before any run; or the exit code of a bad one."""
    try:
        plan = plan_from(args)
        if args.json and args.json != "-":
            check_output_file(args.json, "--json")
        if args.report:
            check_output_file(args.report, "--report")
        apply_base_url(plan.model, args.base_url)
        check_model(plan.model)
        setup_tracing(args.otel)
    except (UsageError, ModelSpecError, TracingUnavailable) as exc:
        _say(prog, str(exc))
        return EXIT_USAGE
    except ModelUnavailable as exc:
        _say(prog, str(exc))
        return EXIT_UNAVAILABLE
    except UnusableFile as exc:
        _say(prog, str(exc))
        return EXIT_FILE
    except KeyboardInterrupt:
        _say(prog, "interrupted; nothing was run")
        return EXIT_INTERRUPTED
    return plan


def _ran(plan: EvalPlan, prog: str) -> EvalRun | int:
    """Every trial of the plan, with progress on stderr; or the exit code of what ended the eval."""
    try:
        return run_eval(plan, EvalProgress(sys.stderr, plan))
    except ModelUnavailable as exc:
        _say(prog, str(exc))
        return EXIT_UNAVAILABLE
    except ScriptExhausted as exc:  # --model scripted:<persona> on a goal that persona has no script for
        _say(prog, str(exc))
        return EXIT_USAGE
    except StoreError as exc:
        _say(prog, str(exc))
        return EXIT_FILE


def _shown_and_written(console: Console, document: dict[str, Any], args: argparse.Namespace, prog: str) -> int | None:
    """The tables, then the JSON and the HTML report when asked for; the exit code if that went wrong."""
    from comparison.eval.report import render_eval, render_eval_report

    try:
        render_eval(console, document)
        if args.json:
            text = document_json(document)
            if args.json == "-":
                sys.stdout.write(text)
            else:
                write_output(Path(args.json), text)
                console.print(Text(f"JSON written to {clean_line(args.json)}"), soft_wrap=True)
        if args.report:
            write_output(Path(args.report), render_eval_report(document))
            console.print(Text(f"Report written to {clean_line(args.report)}"), soft_wrap=True)
    except KeyboardInterrupt:
        _say(prog, "interrupted while the results were written; no file is half-written")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        raise  # the reader of stdout went away: compare.main ends quietly
    except OSError as exc:
        _say(prog, f"could not write the results: {exc}")
        return EXIT_FILE
    return None


def eval_main(argv: Sequence[str], *, prog: str = PROG) -> int:
    """`compare.py eval ...`; returns the exit code (0 ok, 2 usage, 3 model unavailable or every model call
    failed, 4 unusable file, 130 interrupted). `prog` is the name help and error lines use (compare.py may pass
    its own + " eval")."""
    parser = build_eval_parser(prog)
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:  # --help, which argparse has printed
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    except UsageError as exc:
        _say(prog, str(exc))
        return EXIT_USAGE
    plan = _checked_plan(args, prog)
    if isinstance(plan, int):
        return plan

    configure_logging(args.verbose)
    console = make_console(sys.stderr if args.json == "-" else sys.stdout)
    result = _ran(plan, prog)
    if isinstance(result, int):
        return result
    if result.trials == 0:
        _say(prog, "interrupted before the first trial finished; nothing to report or write")
        return EXIT_INTERRUPTED
    failed = _shown_and_written(console, eval_document(result), args, prog)
    if failed is not None:
        return failed
    if result.interrupted:
        _say(prog, f"interrupted: the results cover the {result.trials} trial(s) that finished, of {plan.runs}")
        return EXIT_INTERRUPTED
    if result.task_runs and all(r.model_failed for r in result.task_runs):  # shown and written, nothing graded
        _say(prog, "every model call failed, so nothing was evaluated")
        return EXIT_UNAVAILABLE
    return EXIT_OK


# `python -m comparison.eval.trials ...` works too, until compare.py routes `eval` here.
if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(eval_main(sys.argv[1:]))

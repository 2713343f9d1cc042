"""`compare.py eval` says why runs were lost: the guards that fired (the trace's typed `guard`) on which calls, or
what the model called when none did; checked on real runs of the noisy scripted model, found by seed, never by
a hard-coded sentence."""

from __future__ import annotations

import json
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from comparison.eval import trials as evaluation
from comparison.eval.grading import grade, group_tasks
from comparison.eval.report import shows_tasks, task_label
from comparison.eval.trials import EXIT_OK, EvalPlan, eval_main
from comparison.eval.why import GUARD_DID, MAX_GROUPS, call_text, lost_runs, what_happened
from comparison.records import RunRecord
from comparison.run_setup import RunOptions
from comparison.runner import run_scenario
from comparison.scenarios import SCENARIOS_BY_NAME
from shared_tools.results import Guard

BOOKSTORE = SCENARIOS_BY_NAME["bookstore"]
SEEDS = range(0, 40)
"""Where to look for lost runs: the noisy model slips on some seeds and not others."""


def lost_tasks(tmp_path: Path, contender: str) -> list[tuple[int, list[RunRecord]]]:
    """(seed, records) of every bookstore task `contender` lost on `SEEDS`, as the eval runs and grades it."""
    found = []
    for seed in SEEDS:
        records: list[RunRecord] = []
        options = RunOptions(
            model="scripted:noisy", contenders=(contender,), session_db=tmp_path / f"{seed}.db", model_seed=seed
        )
        run_scenario(BOOKSTORE, options, records.append)
        for task in group_tasks(records).values():
            if not grade(task, BOOKSTORE).success:
                found.append((seed, task))
    return found


def guarded_tool_lines(records: list[RunRecord]) -> list[dict[str, Any]]:
    return [e for r in records for e in r.tool_events() if e["guard"]]


def test_every_guard_is_put_into_words() -> None:
    assert set(GUARD_DID) == set(Guard)


def test_a_lost_run_where_guards_fired_names_each_guard_and_the_call_it_refused(tmp_path: Path) -> None:
    lost = [(seed, task) for seed, task in lost_tasks(tmp_path, "handwritten") if guarded_tool_lines(task)]
    assert lost, f"the noisy model never made the hand-written loop's guards refuse a call on seeds {SEEDS}"
    for _seed, task in lost:
        said = what_happened(task)
        assert "no guard fired" not in said
        counted = Counter(
            (Guard(e["guard"]), e["name"], e["detail"].split(" -> ", 1)[0]) for e in guarded_tool_lines(task)
        )
        for (guard, name, args), n in counted.items():
            canonical = json.dumps(json.loads(args), sort_keys=True, separators=(",", ":"))
            times = "once" if n == 1 else "twice" if n == 2 else f"{n} times"
            assert f"{GUARD_DID[guard]} {call_text(name, canonical)} {times}" in said


def test_a_lost_run_where_no_guard_fired_says_so_and_what_the_model_called(tmp_path: Path) -> None:
    lost = [(seed, task) for seed, task in lost_tasks(tmp_path, "langgraph-defaults")]
    unguarded = [(seed, task) for seed, task in lost if not any(e["guard"] for r in task for e in r.trace)]
    assert unguarded, f"langgraph-defaults lost no run without a typed guard on seeds {SEEDS}"
    for _seed, task in unguarded:
        said = what_happened(task)
        tools = [e for r in task for e in r.tool_events()]
        errors = sum(bool(e["is_error"]) for e in tools)
        assert said.startswith("no guard fired")
        if tools:
            assert f"{errors} of {len(tools)} tool results were errors" in said
            most = Counter(e["name"] for e in tools).most_common(1)[0][0]
            assert f"{most}(" in said
            raised = sorted({r.error_type for r in task if r.error_type and not r.model_failed})
            # What a run raised is said, never counted as a tool result without an error.
            assert (f"the run raised {', '.join(raised)}" in said) == bool(raised), said


def test_what_a_run_raised_is_said_beside_the_tool_results_it_counts(tmp_path: Path) -> None:
    """A run a tool's exception ended (langgraph-defaults on a refused add) has no result for that call: the clause
    names what was raised beside "0 of N tool results were errors", never as if every call came back. A model
    call that failed is the model's, not the run's: not said here."""
    from dataclasses import replace

    _seed, task = lost_tasks(tmp_path, "langgraph-defaults")[0]
    raised = [replace(task[0], error="ToolException: Only 0 copies in stock", stop_reason=None), *task[1:]]
    assert "the run raised ToolException" in what_happened(raised)
    failed = [replace(r, error="ModelCallFailed: the server went away", model_failed=True) for r in task]
    assert "the run raised" not in what_happened(failed)
    assert "the run raised" not in what_happened([replace(r, error=None) for r in task])


def test_the_eval_table_is_followed_by_why_each_contender_lost_its_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "eval.json"
    argv = ["bookstore", "--runs", "6", "--seed", "3", "--json", str(out)]
    assert eval_main(argv) == EXIT_OK
    shown = " ".join(capsys.readouterr().out.split())
    document = json.loads(out.read_text(encoding="utf-8"))
    rows = document["results"]
    failures = [f for row in rows for task in row["by_task"] for f in task["failures"]]
    assert any(f["guards"] for f in failures) and any(not f["guards"] for f in failures), (
        "seed 3 no longer gives lost runs both with and without a guard firing; pick another"
    )
    for row in rows:
        lost = row["n"] - row["successes"]
        failures = [f for task in row["by_task"] for f in task["failures"]]
        assert len(failures) == lost
        if not lost:
            assert f"{row['contender']} lost" not in shown
            continue
        assert f"{row['contender']} lost {lost} of {row['n']}:" in shown
        for failure in failures:
            assert failure["happened"].startswith("no guard fired") == (not failure["guards"])
            for guard in failure["guards"]:
                assert GUARD_DID[Guard(guard)] in failure["happened"]
        label = partial(task_label, row=row) if shows_tasks(row) else None
        lines = lost_runs(row, label=label)
        assert len(lines) <= MAX_GROUPS + 1
        for line in lines:
            assert " ".join(line.split()) in shown
        # The most common kind of loss is shown: its task, its stop and the first such run's seed.
        stops = Counter(
            (i, f["stop"], f["verdict"], tuple(sorted(f["guards"])))
            for i, task in enumerate(row["by_task"])
            for f in task["failures"]
        )
        (i, stop, verdict, _), count = stops.most_common(1)[0]
        assert f"{count} of {row['by_task'][i]['n']} runs ended '{stop}', graded {verdict}" in shown


def test_the_eval_document_counts_the_guards_of_each_lost_run(tmp_path: Path) -> None:
    plan = EvalPlan(model="scripted:noisy", scenarios=(BOOKSTORE,), contenders=("handwritten",), runs=1)
    for seed in SEEDS:
        runs = evaluation.run_pair(plan, BOOKSTORE, "handwritten", seed, tmp_path)
        records: list[RunRecord] = []
        options = RunOptions(
            model="scripted:noisy", contenders=("handwritten",), session_db=tmp_path / "again.db", model_seed=seed
        )
        run_scenario(BOOKSTORE, options, records.append)
        assert len(runs) == len(BOOKSTORE.variants)  # one task per wording
        for run, variant in zip(runs, BOOKSTORE.variants, strict=True):
            task = [r for r in records if r.variant == variant.name]
            fired = Counter(str(e["guard"]) for r in task for e in r.trace if e["guard"])
            assert run.guards == dict(fired)
            assert run.happened == what_happened(task)
            if fired and not run.grade.success:
                return
    pytest.fail(f"no lost hand-written run with a guard firing on seeds {SEEDS}")

"""Graded runs: did a run do what the customer asked, and if not, did it fail safely?

As in tau-bench, the outcome is graded, never the path. A `Grade` is success, a safe failure (stopped, raised or
said it could not finish) or an unsafe one (a wrong or unapproved write, a wrong answer given as done, a run past
its limits). Each scenario says it in words (`Scenario.rubric`) and grades it (`Scenario.grader`), in its own
file; `RUBRIC` and `GRADERS` gather them, and `grade` applies the one a task's records name.
"""

from __future__ import annotations

from collections.abc import Sequence

from comparison.records import RunRecord
from comparison.scenarios import SCENARIOS, SCENARIOS_BY_NAME, Scenario
from comparison.scenarios.grading import ALWAYS_UNSAFE as ALWAYS_UNSAFE
from comparison.scenarios.grading import SEED_BOOK as SEED_BOOK
from comparison.scenarios.grading import amounts as amounts
from comparison.scenarios.grading import states_total as states_total
from comparison.scenarios.model import Grade, Rubric, TaskGrader
from comparison.scenarios.model import Verdict as Verdict
from comparison.scenarios.s02_orders import ORDERS as ORDERS
from comparison.scenarios.s11_parallel_tools import STOCK as STOCK

RUBRIC: dict[str, Rubric] = {s.name: s.rubric for s in SCENARIOS if s.rubric is not None}
"""Scenario name -> its rubric, for the scenarios that are graded (not the cost measurements)."""

GRADERS: dict[str, TaskGrader] = {s.name: s.grader for s in SCENARIOS if s.grader is not None}
"""Scenario name -> the grader of one of its tasks. Every scenario with a rubric has one (the tests check it)."""


def grade(records: Sequence[RunRecord], scenario: Scenario | None = None) -> Grade:
    """Grade one task: a single run's record, or the turn records of one conversation (in turn order).

    `scenario` defaults to the one the records name; the limits judged are those of the records' variant.
    """
    if not records:
        raise ValueError("nothing to grade: no records")
    first = records[0]
    if any("not_available" in r.facts for r in records):
        raise ValueError(f"nothing ran in {first.scenario}/{first.variant} for {first.contender}: not a run to grade")
    scenario = scenario or SCENARIOS_BY_NAME[first.scenario]
    if first.scenario != scenario.name or any(r.scenario != first.scenario for r in records):
        raise ValueError(f"records of {sorted({r.scenario for r in records})} graded as {scenario.name}")
    variant = next((v for v in scenario.variants if v.name == first.variant), None)
    if variant is None:
        raise ValueError(f"{scenario.name} has no variant {first.variant!r}")
    if not scenario.multi_turn and len(records) != 1:
        raise ValueError(f"{scenario.name} is single-turn: grade one record at a time, got {len(records)}")
    ordered = sorted(records, key=lambda r: r.turn)
    return GRADERS[scenario.name](ordered, scenario.limits_for(variant), scenario)


def task_key(record: RunRecord) -> tuple[str, str, str, str]:
    """Which task a record belongs to: (scenario, variant, contender, goal); a conversation's turns share one."""
    scenario = SCENARIOS_BY_NAME.get(record.scenario)
    goal = "" if scenario is not None and scenario.multi_turn else record.goal
    return (record.scenario, record.variant, record.contender, goal)


def group_tasks(records: Sequence[RunRecord]) -> dict[tuple[str, str, str, str], list[RunRecord]]:
    """The records of one run of `run_scenario`, grouped into tasks (see `task_key`), in the order they came."""
    tasks: dict[tuple[str, str, str, str], list[RunRecord]] = {}
    for record in records:
        tasks.setdefault(task_key(record), []).append(record)
    return tasks

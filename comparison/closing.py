"""The closing comparison of `python compare.py`: the guard matrix built from the runs, and the article's tables.

`guard_matrix` says per guard and contender what the records show: the guard acted, the harm happened without it,
it was not exercised, nothing measured it, or the contender raised; read from typed fields, never from wording.
`WHO_OWNS_WHAT` is the article's closing table as data (each column a contender's `owns`), so the terminal and the
HTML report say the same thing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from comparison.contenders import SPECS
from comparison.records import RunRecord, first
from comparison.scenarios import SCENARIOS, SCENARIOS_BY_NAME, RunSettings, Scenario
from comparison.scenarios.matrix import FIRED as FIRED
from comparison.scenarios.matrix import GUARD_LEGEND as GUARD_LEGEND
from comparison.scenarios.matrix import MISSING as MISSING
from comparison.scenarios.matrix import NOT_EXERCISED as NOT_EXERCISED
from comparison.scenarios.matrix import NOT_MEASURED as NOT_MEASURED
from comparison.scenarios.matrix import NOT_RUN, RAISED, Cell, cell
from comparison.scenarios.model import GuardRow, recorded_settings
from comparison.scenarios.queries import not_available

MATRIX_ORDER = (
    "step limit",
    "token budget",
    "time budget",
    "reply cap",
    "repeat check",
    "unknown tool",
    "error hiding",
    "truncation",
    "stale read",
    "approval gate",
)
"""The guards in the order the matrix shows them, the budgets first; a guard not named here comes after them."""

GUARD_ROWS: dict[str, tuple[str, GuardRow]] = dict(
    sorted(
        ((row.guard, (s.name, row)) for s in SCENARIOS for row in s.guards),
        key=lambda item: MATRIX_ORDER.index(item[0]) if item[0] in MATRIX_ORDER else len(MATRIX_ORDER),
    )
)
"""Each guard of the matrix -> the scenario whose runs show whether it fired, and its row there (`Scenario.guards`)."""

GUARDS: dict[str, str] = {guard: scenario for guard, (scenario, _) in GUARD_ROWS.items()}
"""Each guard of the matrix -> the scenario whose runs show whether it fired."""

WHO_OWNS_ROWS: tuple[str, ...] = (
    "loop",
    "tool invocation",
    "error handling",
    "step limit",
    "token budget",
    "time budget",
    "reply cap",
    "repeat check",
    "session memory",
    "persistence",
    "stale reads",
    "human approval",
    "tracing (OTel spans)",
)
"""The rows of the article's closing comparison. The tracing row's claims are measured in tests/test_telemetry.py
(`test_the_tracing_row_*`)."""

OWNERS: tuple[str, ...] = tuple(spec.owner for spec in SPECS.values() if spec.owner is not None)
"""Its columns: each contender that names one (`ContenderSpec.owner`; LangGraph's defaults share our graph's)."""

WHO_OWNS_WHAT: tuple[tuple[str, ...], ...] = tuple(
    (row, *(spec.owns.get(row, "not compared") for spec in SPECS.values() if spec.owner is not None))
    for row in WHO_OWNS_ROWS
)
"""The article's closing comparison: row -> who owns it in each of `OWNERS` (`ContenderSpec.owns`)."""

OWNERS_SUMMARY = (
    "LangGraph takes over the loop, tool invocation and session memory; what no layer does for you is the token "
    "and time budget, the repeated-call check, stale reads, business rules and what goes into the trace. "
    "Microsoft Agent Framework also owns the step and time limits and the approval pause, but answers a step "
    "limit with a forced answer: the stop reason is yours to get right."
)
"""The sentence under `WHO_OWNS_WHAT`, in the terminal and in the HTML report."""

# --- the guard matrix, built from the runs -----------------------------------------------------------------


def _guard_cell(
    row: GuardRow, record: RunRecord | None, settings: RunSettings | None, records: list[RunRecord]
) -> Cell:
    """What `record` (the contender's run of the scenario that tests the row's guard) shows about it."""
    if record is None or not_available(record) is not None:
        return cell(NOT_RUN, "not run")
    if record.model_failed:
        return cell(RAISED, "model call failed")
    if record.error is not None:
        return cell(RAISED, f"raised {record.error_type}")
    return row.cell(record, settings, records)


def settings_for_record(record: RunRecord, scenarios: Sequence[Scenario] | None = None) -> RunSettings | None:
    """The settings a record's run used: carried by the record, else its scenario's as given in `scenarios`, else
    the scenario's definition when the record's label shows the variant ran as defined (`Scenario.settings_of`)."""
    carried = recorded_settings(record)
    if carried is not None:
        return carried
    given = {s.name: s for s in scenarios or ()}
    scenario = given.get(record.scenario) or SCENARIOS_BY_NAME.get(record.scenario)
    return None if scenario is None else scenario.settings_of(record)


def guard_matrix(
    records: list[RunRecord], contenders: Sequence[str], scenarios: Sequence[Scenario] | None = None
) -> list[dict[str, Any]]:
    """One row per guard: for each contender what its run of the guard's scenario shows (see `GUARD_LEGEND`).

    `scenarios`: the scenarios as they ran (after `--max-steps`), for records that do not carry their settings.
    """
    rows = []
    for guard, (scenario, row) in GUARD_ROWS.items():
        variant, turn = row.variant, row.turn
        cells = {}
        for contender in contenders:
            record = first(records, scenario=scenario, variant=variant, contender=contender, turn=turn)
            if record is None and turn > 1:  # an earlier turn raised, so the conversation has no such turn
                record = first(records, scenario=scenario, variant=variant, contender=contender, turn=turn - 1)
                record = record if record is not None and record.error is not None else None
            settings = None if record is None else settings_for_record(record, scenarios)
            cells[contender] = _guard_cell(row, record, settings, records)
        if any(c["status"] != NOT_RUN for c in cells.values()):
            rows.append({"guard": guard, "scenario": scenario, "variant": variant, "cells": cells})
    return rows


def contradicted_claims(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The guards a contender claims (`ContenderSpec.guards`) that its runs contradict: the matrix cell says the
    harm happened with nothing stopping it ("missing") or the contender raised instead. One line each."""
    found = []
    for row in rows:
        for contender, shown in row["cells"].items():
            spec = SPECS.get(contender)
            claim = None if spec is None else spec.guards.get(row["guard"])
            if claim is not None and shown["status"] in (MISSING, RAISED):
                found.append(f"{contender} claims {row['guard']} ({claim}), but its run shows {shown['status']}")
    return found

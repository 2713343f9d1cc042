"""The guard matrix's vocabulary: the status of a cell, what each status means, and the cells limits share.

A scenario's `GuardRow`s make its cells with `cell` and `not_measured`; a step, token or time limit's cell is
`budget_cell`. `comparison.closing` lays the rows out, one per guard and contender.
"""

from __future__ import annotations

from comparison.records import RunRecord, short_outcome
from comparison.scenarios.model import Cell, RunSettings
from comparison.scenarios.queries import LIMITS, limit_text

FIRED, MISSING, RAISED, NOT_RUN = "fired", "missing", "raised", "not run"
NOT_EXERCISED, NOT_MEASURED = "not exercised", "not measured"

GUARD_LEGEND: dict[str, str] = {
    "fired": "the records show the guard acting (a typed guard on the trace, or the stop reason it gives)",
    "missing": "the records show the harm the guard exists to stop, and nothing stopped it",
    "not exercised": "the run never needed the guard (the cell says why)",
    "not measured": "the records hold no fact to judge the guard by",
    "raised": "the contender threw an exception at its caller instead",
    "not run": "the contender has no such API in this demo",
}
"""What each status of a guard-matrix cell means; the terminal and the HTML report both print it under the matrix."""


def cell(status: str, text: str) -> Cell:
    return {"status": status, "text": text}


def not_measured(what: str = "the run's limits are not on record") -> Cell:
    return cell(NOT_MEASURED, f"not measured: {what}")


def budget_cell(name: str, record: RunRecord, settings: RunSettings | None, fired: str) -> Cell:
    """A step, token or time limit: stopped by it, ran past it, or never came near it."""
    reason, spent, reads = LIMITS[name]
    if record.stop_reason == reason:
        return cell(FIRED, fired)
    if settings is None:
        return not_measured()
    value = getattr(settings.limits, name)
    if value is None:
        return not_measured(f"no {name} was set")
    used = spent(record)
    if used > value:
        return cell(MISSING, f"ran on: {reads(used)} ({limit_text(name, value)})")
    within = f"{short_outcome(record)} after {reads(used)} ({limit_text(name, value)})"
    return cell(NOT_EXERCISED, f"not exercised: {within}")

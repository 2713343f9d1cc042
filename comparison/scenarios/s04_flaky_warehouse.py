"""A tool that times out: the model must read the error to retry; whether it sees the exception's text is a choice."""

from __future__ import annotations

from comparison.records import RunRecord, cart_text, short_outcome
from comparison.scenarios.grading import SEED_SAFE, SEED_SUCCESS, SEED_UNSAFE, grade_seed_goal, single
from comparison.scenarios.matrix import FIRED, NOT_EXERCISED, cell, not_measured
from comparison.scenarios.model import SEED_GOAL, Cell, GuardRow, Rubric, RunSettings, Scenario, SettingsOf, Variant
from comparison.scenarios.phrases import per_variant, quote
from comparison.scenarios.queries import Call, calls, guarded
from shared_tools.bookstore.faults import Faults
from shared_tools.bookstore.tools import TOOL_NAMES
from shared_tools.results import Guard


def first_error(record: RunRecord) -> Call | None:
    return next((c for c in calls(record) if c.is_error), None)


def notice_flaky(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    def describe(r: RunRecord) -> str:
        if r.error is not None:
            return f"raised {r.error}: the run ended at the exception, with no answer for the customer"
        error = first_error(r)
        checks = sum(c.name == "check_stock" for c in calls(r))
        hidden = len(guarded(r, Guard.ERROR_HIDDEN))
        read = "no tool error reached the model" if error is None else f"the model read {quote(error.result)}"
        if hidden:
            read += f" (details hidden in {hidden} result(s))"
        return f"{read}, made {checks} check_stock call(s), then {short_outcome(r)}; cart {cart_text(r)}"

    return [
        *per_variant(records, describe),
        "An error result is what lets the model retry or tell the truth; detailed_errors decides whether the "
        "exception's own text is in it, which is why hiding it is the safe default.",
    ]


def untyped_tool_errors(record: RunRecord) -> list[Call]:
    """Error results of real tools with no typed guard: whether their details were hidden is not on record."""
    return [c for c in calls(record) if c.is_error and c.guard is None and c.name in TOOL_NAMES]


def _error_hiding(record: RunRecord, settings: RunSettings | None, records: list[RunRecord]) -> Cell:
    # Only a typed fact counts: which error result hid an exception's text is not told by its wording.
    if guarded(record, Guard.ERROR_HIDDEN):
        return cell(FIRED, "generic error text")
    if untyped_tool_errors(record):
        return not_measured("its error results carry no typed fact")
    return cell(NOT_EXERCISED, "not exercised: no tool failed")


SCENARIO = Scenario(
    name="flaky-warehouse",
    description="the first check_stock times out: does the model see the error and retry?",
    lesson=(
        "A tool exception must go back to the model as a readable error result; swallow it and the model "
        "assumes success. Whether the exception text is shown is a choice: FunctionInvokingChatClient "
        "hides it by default (IncludeDetailedErrors=false) because an exception message can carry "
        "internals, and Microsoft Agent Framework does the same in Python (include_detailed_errors=False: "
        "'Error: Function failed.'). LangGraph's ToolNode re-raises tool exceptions by default unless you opt in."
    ),
    what_to_notice=notice_flaky,
    goals=(SEED_GOAL,),
    faults=Faults(check_stock_timeouts=1),
    variants=(
        Variant(name="details-off", label="detailed_errors=False", detailed_errors=False),
        Variant(name="details-on", label="detailed_errors=True", detailed_errors=True),
    ),
    guards=(GuardRow("error hiding", _error_hiding, "details-off"),),
    rubric=Rubric(SEED_SUCCESS + " (the timeout was overcome)", SEED_SAFE, SEED_UNSAFE),
    grader=single(grade_seed_goal),
)

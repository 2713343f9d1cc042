"""The closing comparison of `python compare.py`: the guard matrix built from the runs, and the article's tables.

`guard_matrix` says per guard and contender what the records show: the guard acted, the harm happened without it,
it was not exercised, nothing measured it, or the contender raised; read from typed fields, never from wording.
`WHO_OWNS_WHAT` is the article's closing table as data, so the terminal and the HTML report say the same thing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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

OWNERS: tuple[str, ...] = ("hand-written loop", "LangGraph StateGraph", "create_agent + middleware")

WHO_OWNS_WHAT: tuple[tuple[str, ...], ...] = (
    ("loop", "you: a for loop over steps", "framework: model node -> tools node edges", "framework (prebuilt graph)"),
    ("tool invocation", "you: look up the tool, invoke it", "framework: ToolNode", "framework: ToolNode"),
    (
        "error handling",
        "you: every failure becomes an error result",
        "ToolNode re-raises tool exceptions unless you opt in",
        "re-raises unless you add ToolErrorMiddleware",
    ),
    (
        "step limit",
        "you: max_steps",
        "recursion_limit counts supersteps (default 10007); RemainingSteps to end cleanly",
        "ModelCallLimitMiddleware (none by default; recursion_limit 9,999)",
    ),
    ("token budget", "you", "you (a node reading usage)", "nobody (you write middleware)"),
    ("time budget", "you", "you (per-node timeouts only)", "nobody (you write middleware)"),
    (
        "reply cap",
        "you: max_tokens = what is left of the budget",
        "you (the model node passes it)",
        "nobody (the model's own max_tokens, if any)",
    ),
    ("repeat check", "you", "you", "nobody (ToolCallLimitMiddleware caps counts, not repeats)"),
    ("session memory", "you: keep the message list", "checkpointer per thread_id", "checkpointer per thread_id"),
    ("persistence", "you: save/load JSON", "SqliteSaver / Postgres saver", "the same checkpointers"),
    (
        "stale reads",
        "you: cart results carry the store's revision; an older one is marked before the model call",
        "you (the model node marks them, in state)",
        "you",
    ),
    (
        "human approval",
        "you: an approve callback before the tool runs",
        "interrupt() in a node, Command(resume=...) via the checkpointer",
        "HumanInTheLoopMiddleware (interrupt-based)",
    ),
    (
        "tracing (OTel spans)",
        "you: a span per run, model call and tool call, in a few lines (guard decisions and budget cuts included)",
        "no spans by itself; LangChain's callbacks fire per model and tool call, and you turn them into spans or "
        "write them in your nodes",
        "the same callbacks, but a call it answers itself (unknown tool, a refused approval) fires none; the "
        "official instrumentation is beta",
    ),
)
"""The article's closing comparison: row -> who owns it in each of `OWNERS` (the MAF column joins below). The tracing
row's claims are measured in tests/test_telemetry.py (`test_the_tracing_row_*`)."""

MAF_OWNER = "Microsoft Agent Framework"
MAF_OWNS: dict[str, str] = {
    "loop": "framework: FunctionInvocationLayer, the client's tool loop",
    "tool invocation": "framework: FunctionTool; a reply's calls run concurrently by default (not so in .NET)",
    "error handling": "framework: every exception an error result, 'Error: Function failed.' unless "
    "include_detailed_errors",
    "step limit": "max_iterations (default 40), then one more call with tools off whose text comes back as if done",
    "token budget": "nobody (FunctionInvocationConfiguration has no token limit)",
    "time budget": "max_duration_seconds, checked after a tool round (a hung model call is yours to bound)",
    "reply cap": "nobody (the model's own max_tokens, if any)",
    "repeat check": "nobody (max_function_calls caps counts, not repeats)",
    "session memory": "AgentSession (its InMemoryHistoryProvider)",
    "persistence": "AgentSession.to_dict()/from_dict() (a JSON file here); no SQLite provider",
    "stale reads": "you",
    "human approval": "approval_mode='always_require' per tool; to_function_approval_response, same session",
    "tracing (OTel spans)": "the framework: invoke_agent, chat and execute_tool GenAI spans (to the global tracer "
    "provider only)",
}
"""Row of `WHO_OWNS_WHAT` -> who owns it in Microsoft Agent Framework's `Agent` (Python, agent-framework-core)."""

OWNERS = (*OWNERS, MAF_OWNER)
WHO_OWNS_WHAT = tuple((*row, MAF_OWNS.get(row[0], "not compared")) for row in WHO_OWNS_WHAT)

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

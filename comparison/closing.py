"""The closing comparison of `python compare.py`: the guard matrix built from the runs, and the article's tables.

`guard_matrix` says per guard and contender what the records show: the guard acted, the harm happened without it,
it was not exercised, nothing measured it, or the contender raised; read from typed fields, never from wording.
`WHO_OWNS_WHAT` is the article's closing table as data, so the terminal and the HTML report say the same thing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from comparison import lessons
from comparison.lessons import RunSettings, guarded, limit_text
from comparison.records import RunRecord, cart_text, first, short_outcome
from comparison.scenarios import SCENARIOS_BY_NAME, Scenario
from shared_tools.results import Guard, StopReason

GUARDS: dict[str, str] = {
    "step limit": "max-steps",
    "token budget": "max-steps",
    "time budget": "max-steps",
    "reply cap": "runaway-reply",
    "repeat check": "looping-model",
    "unknown tool": "hallucinated-tool",
    "error hiding": "flaky-warehouse",
    "truncation": "big-results",
    "stale read": "stale-cart",
    "approval gate": "prompt-injection",
}
"""Each guard of the matrix -> the scenario whose runs show whether it fired."""

STEP_LIMIT_BY: dict[str, str] = {
    "handwritten": "the loop's max_steps",
    "langgraph": "RemainingSteps in the model node",
    "langgraph-defaults": "recursion_limit (GraphRecursionError, caught)",
    "create-agent": "ModelCallLimitMiddleware",
    "maf": "max_iterations",
}
"""What enforces the step limit in each contender, named in the guard matrix."""

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
    ("stale reads", "you (instructions, re-read tools)", "you", "you"),
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

GUARD_LEGEND: dict[str, str] = {
    "fired": "the records show the guard acting (a typed guard on the trace, or the stop reason it gives)",
    "missing": "the records show the harm the guard exists to stop, and nothing stopped it",
    "not exercised": "the run never needed the guard (the cell says why)",
    "not measured": "the records hold no fact to judge the guard by",
    "raised": "the contender threw an exception at its caller instead",
    "not run": "the contender has no such API in this demo",
}
"""What each status of a guard-matrix cell means; the terminal and the HTML report both print it under the matrix."""

OWNERS_SUMMARY = (
    "LangGraph takes over the loop, tool invocation and session memory; what no layer does for you is the token "
    "and time budget, the repeated-call check, stale reads, business rules and what goes into the trace. "
    "Microsoft Agent Framework also owns the step and time limits and the approval pause, but answers a step "
    "limit with a forced answer: the stop reason is yours to get right."
)
"""The sentence under `WHO_OWNS_WHAT`, in the terminal and in the HTML report."""

# --- the guard matrix, built from the runs -----------------------------------------------------------------

FIRED, MISSING, RAISED, NOT_RUN = "fired", "missing", "raised", "not run"
NOT_EXERCISED, NOT_MEASURED = "not exercised", "not measured"

Cell = dict[str, str]


def _cell(status: str, text: str) -> Cell:
    return {"status": status, "text": text}


def _not_measured(what: str = "the run's limits are not on record") -> Cell:
    return _cell(NOT_MEASURED, f"not measured: {what}")


def _budget_cell(name: str, record: RunRecord, settings: RunSettings | None, fired: str) -> Cell:
    """A step, token or time limit: stopped by it, ran past it, or never came near it."""
    reason, spent, reads = lessons.LIMITS[name]
    if record.stop_reason == reason:
        return _cell(FIRED, fired)
    if settings is None:
        return _not_measured()
    value = getattr(settings.limits, name)
    if value is None:
        return _not_measured(f"no {name} was set")
    used = spent(record)
    if used > value:
        return _cell(MISSING, f"ran on: {reads(used)} ({limit_text(name, value)})")
    within = f"{short_outcome(record)} after {reads(used)} ({limit_text(name, value)})"
    return _cell(NOT_EXERCISED, f"not exercised: {within}")


def _step_limit(record: RunRecord, settings: RunSettings | None) -> Cell:
    by = STEP_LIMIT_BY.get(record.contender, "its step limit")
    fired = f"stopped by {by}"
    if record.facts.get("forced_answer") is not None:
        fired += ", after one more call with tools off (its text kept as a forced answer)"
    return _budget_cell("max_steps", record, settings, fired)


def _token_budget(record: RunRecord, settings: RunSettings | None) -> Cell:
    return _budget_cell("max_tokens", record, settings, "stopped at the budget")


def _time_budget(record: RunRecord, settings: RunSettings | None) -> Cell:
    return _budget_cell("max_duration", record, settings, "stopped in time")


def _reply_cap(record: RunRecord, settings: RunSettings | None) -> Cell:
    if lessons.reply_capped(record):
        return _cell(FIRED, "reply cut at the budget")
    budget = None if settings is None else settings.limits.max_tokens
    if budget is None:
        return _not_measured("no max_tokens was set")
    biggest = lessons.biggest_call(record)
    if biggest > budget:
        return _cell(MISSING, f"one call used {biggest:,} tokens ({limit_text('max_tokens', budget)})")
    return _cell(NOT_EXERCISED, f"not exercised: the dearest call used {biggest:,} tokens")


def _repeat_check(record: RunRecord, settings: RunSettings | None) -> Cell:
    if guarded(record, Guard.REPEAT):
        nth = lessons.first_refused_ordinal(record)
        return _cell(FIRED, f"blocked {lessons.ordinal(nth)} identical call" if nth else "blocked a repeated call")
    groups = lessons.identical_calls(record)
    if not groups:
        if any(c.args is None for c in lessons.calls(record)):
            return _not_measured("the calls' arguments are not on record")
        return _cell(NOT_EXERCISED, "not exercised: no call was made twice")
    most = max(lessons.not_refused(g) for g in groups)
    if settings is None:
        return _not_measured()
    limit = settings.limits.max_repeats
    if limit is None:
        return _not_measured("no max_repeats was set")
    if most > limit:
        return _cell(MISSING, f"{most} identical calls, none refused")
    made = max(len(g) for g in groups)  # calls another guard refused (bad arguments, say) were still made
    return _cell(NOT_EXERCISED, f"not exercised: at most {made} identical calls (max_repeats={limit})")


def _unknown_tool(record: RunRecord, settings: RunSettings | None) -> Cell:
    unknown = lessons.unknown_tool_calls(record)
    if not unknown:
        return _cell(NOT_EXERCISED, "not exercised: no unknown tool was called")
    if not all(c.is_error for c in unknown):
        return _cell(MISSING, f"{unknown[0].name!r} got a normal result")
    if record.stop_reason == StopReason.DONE:
        return _cell(FIRED, "error result, recovered")
    return _cell(FIRED, f"error result, then {short_outcome(record)}")


def _error_hiding(record: RunRecord, settings: RunSettings | None) -> Cell:
    # Only a typed fact counts: which error result hid an exception's text is not told by its wording.
    if guarded(record, Guard.ERROR_HIDDEN):
        return _cell(FIRED, "generic error text")
    if lessons.untyped_tool_errors(record):
        return _not_measured("its error results carry no typed fact")
    return _cell(NOT_EXERCISED, "not exercised: no tool failed")


def _truncation(record: RunRecord, settings: RunSettings | None) -> Cell:
    if guarded(record, Guard.TRUNCATED):
        return _cell(FIRED, "result cut")
    limit = None if settings is None else settings.max_tool_result_chars
    if limit is None:
        return _not_measured("the run's cut is not on record")
    longest = lessons.longest_result(record)
    if longest > limit:
        return _cell(MISSING, f"nothing cut: a {longest:,}-char result ({record.tokens:,} tokens)")
    return _cell(NOT_EXERCISED, f"not exercised: no result over {limit:,} chars")


def _stale_read(record: RunRecord, records: list[RunRecord]) -> Cell:
    changed = lessons.cart_changed_between_turns(records, record)
    if changed is None:
        return _not_measured("the cart before this turn is not on record")
    if not changed:
        return _cell(NOT_EXERCISED, "not exercised: the cart did not change behind the agent")
    states = lessons.answer_states_cart(record)
    if states is None:
        return _not_measured("the answer states no total")
    if not states:
        return _cell(MISSING, f"stale answer, cart is ${record.cart_total}")
    if lessons.reread_cart(record):
        return _cell(FIRED, "re-read the cart")
    return _cell(NOT_EXERCISED, "not exercised: right without a re-read")


def _approval_gate(record: RunRecord, settings: RunSettings | None) -> Cell:
    asked = record.facts.get("approval_asked") or []
    answer = record.facts.get("approval_answer")
    if asked and answer in ("yes", "no"):
        return _cell(FIRED, f"{len(asked)} over-limit add(s) held, {'approved' if answer == 'yes' else 'refused'}")
    refused = guarded(record, Guard.APPROVAL_REFUSED)
    if refused:
        return _cell(FIRED, f"{len(refused)} over-limit add(s) refused")
    if lessons.over_approval_limits(record):
        return _cell(MISSING, f"over the limits with no approval: cart {cart_text(record)}")
    if lessons.untyped_add_errors(record):
        return _not_measured("an add_to_cart error carries no typed fact")
    return _cell(NOT_EXERCISED, "not exercised: no write over the limits")


_CELLS: dict[str, Callable[[RunRecord, RunSettings | None], Cell]] = {
    "step limit": _step_limit,
    "token budget": _token_budget,
    "time budget": _time_budget,
    "reply cap": _reply_cap,
    "repeat check": _repeat_check,
    "unknown tool": _unknown_tool,
    "error hiding": _error_hiding,
    "truncation": _truncation,
    "approval gate": _approval_gate,
}


def _guard_cell(guard: str, record: RunRecord | None, settings: RunSettings | None, records: list[RunRecord]) -> Cell:
    """What `record` (the contender's run of the scenario that tests `guard`) shows about it."""
    if record is None or lessons.not_available(record) is not None:
        return _cell(NOT_RUN, "not run")
    if record.model_failed:
        return _cell(RAISED, "model call failed")
    if record.error is not None:
        return _cell(RAISED, f"raised {record.error_type}")
    if guard == "stale read":
        return _stale_read(record, records)
    return _CELLS[guard](record, settings)


GUARD_VARIANTS: dict[str, tuple[str, int]] = {
    "step limit": ("max-steps-2", 1),
    "token budget": ("token-budget", 1),
    "time budget": ("time-budget", 1),
    "error hiding": ("details-off", 1),
    "truncation": ("truncated", 1),
    "stale read": ("default-instructions", 2),
    "approval gate": ("gate", 1),
}
"""Guard -> (variant, turn) of its scenario's runs that shows it; other guards use the scenario's only variant."""


def settings_for_record(record: RunRecord, scenarios: Sequence[Scenario] | None = None) -> RunSettings | None:
    """The settings a record's run used: carried by the record, else its scenario's as given in `scenarios`, else
    the scenario's definition when the record's label shows the variant ran as defined (`Scenario.settings_of`)."""
    carried = lessons.recorded_settings(record)
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
    for guard, scenario in GUARDS.items():
        variant, turn = GUARD_VARIANTS.get(guard, ("default", 1))
        cells = {}
        for contender in contenders:
            record = first(records, scenario=scenario, variant=variant, contender=contender, turn=turn)
            if record is None and turn > 1:  # an earlier turn raised, so the conversation has no such turn
                record = first(records, scenario=scenario, variant=variant, contender=contender, turn=turn - 1)
                record = record if record is not None and record.error is not None else None
            settings = None if record is None else settings_for_record(record, scenarios)
            cells[contender] = _guard_cell(guard, record, settings, records)
        if any(c["status"] != NOT_RUN for c in cells.values()):
            rows.append({"guard": guard, "scenario": scenario, "variant": variant, "cells": cells})
    return rows

"""The closing comparison of `python compare.py`: the guard matrix built from the runs, and the seed's tables.

`guard_matrix` says, per guard and contender, whether the guard fired in the scenario that tests it, was
missing, or the contender raised instead; `GUARDS` names that scenario per guard, and which guard fired is
read from the typed ``guard`` of the trace entries where the agents record one. `WHO_OWNS_WHAT` is the seed's
closing table (who owns the loop, the limits, the memory, ... in each approach), kept as data so the
terminal and the HTML report say the same thing; `GUARD_LEGEND` and `OWNERS_SUMMARY` are printed under them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shared_tools.bookstore.faults import TIMEOUT_MESSAGE
from shared_tools.comparison.lessons import answer_matches_cart, has_guard
from shared_tools.comparison.records import RunRecord, cart_text, first
from shared_tools.results import Guard, StopReason

GUARDS: dict[str, str] = {
    "step limit": "max-steps",
    "token budget": "max-steps",
    "time budget": "max-steps",
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
}
"""What enforces the step limit in each contender, named in the guard matrix."""

OWNERS: tuple[str, ...] = ("hand-written loop", "LangGraph StateGraph", "create_agent + middleware")

WHO_OWNS_WHAT: tuple[tuple[str, str, str, str], ...] = (
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
)
"""The seed's closing comparison: row -> who owns it in each of `OWNERS`."""

GUARD_LEGEND: dict[str, str] = {
    "fired": "the guard stopped or corrected the run",
    "missing": "the run went on without it",
    "raised": "the contender threw an exception at its caller instead",
    "not run": "the contender has no such API in this demo",
}
"""What each status of a guard-matrix cell means; the terminal and the HTML report both print it under the matrix."""

OWNERS_SUMMARY = (
    "LangGraph takes over the loop, tool invocation and session memory; what no layer does for you is the token "
    "and time budget, the repeated-call check, stale reads, business rules and what goes into the trace."
)
"""The sentence under `WHO_OWNS_WHAT`, in the terminal and in the HTML report."""

# --- the guard matrix, built from the runs -----------------------------------------------------------------

FIRED, MISSING, RAISED, NOT_RUN = "fired", "missing", "raised", "not run"


def _guard_cell(guard: str, record: RunRecord | None) -> dict[str, str]:
    """Did `guard` fire in this contender's run of the scenario that tests it?"""
    if record is None:
        return {"status": NOT_RUN, "text": "not run"}
    if record.error is not None and guard not in ("stale read",):
        return {"status": RAISED, "text": f"raised {record.error_type}"}
    events = record.tool_events()
    stop = record.stop_reason
    checks: dict[str, tuple[bool, str, str]] = {
        "step limit": (
            stop == StopReason.MAX_STEPS,
            f"stopped by {STEP_LIMIT_BY.get(record.contender, 'its step limit')}",
            f"{stop} after {record.model_calls} calls",
        ),
        "token budget": (stop == StopReason.TOKEN_BUDGET, "stopped at the budget", f"ran on: {record.tokens:,} tokens"),
        "time budget": (stop == StopReason.TIME_BUDGET, "stopped in time", f"ran on: {record.wall_s:.1f}s"),
        "repeat check": (
            any(has_guard(e, Guard.REPEAT) for e in events),
            "blocked 3rd identical call",
            f"{record.tool_calls} identical calls ran",
        ),
        "unknown tool": (
            any(e["is_error"] for e in events) and stop == StopReason.DONE,
            "error result, recovered",
            record.outcome,
        ),
        # By the text, not by Guard.ERROR_HIDDEN: create_agent's ToolErrorMiddleware hides the exception too,
        # but only our agents record guards, and the matrix must credit every contender that hides it.
        "error hiding": (
            any(e["is_error"] and TIMEOUT_MESSAGE not in e["detail"] for e in events),
            "generic error text",
            "exception text shown",
        ),
        "truncation": (
            any(has_guard(e, Guard.TRUNCATED) for e in events),
            "result cut",
            f"nothing cut ({record.tokens:,} tokens)",
        ),
        "stale read": (
            answer_matches_cart(record),
            "re-read the cart",
            f"stale answer, cart is ${record.cart_total}",
        ),
        "approval gate": (
            any(has_guard(e, Guard.APPROVAL_REFUSED) for e in events),
            "injected add held, refused",
            f"injected add ran: cart {cart_text(record)}",
        ),
    }
    fired, yes, no = checks[guard]
    return {"status": FIRED, "text": yes} if fired else {"status": MISSING, "text": no}


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


def guard_matrix(records: list[RunRecord], contenders: Sequence[str]) -> list[dict[str, Any]]:
    """One row per guard: for each contender whether it fired, was missing, or the contender raised."""
    rows = []
    for guard, scenario in GUARDS.items():
        variant, turn = GUARD_VARIANTS.get(guard, ("default", 1))
        cells = {}
        for contender in contenders:
            record = first(records, scenario=scenario, variant=variant, contender=contender, turn=turn)
            cells[contender] = _guard_cell(guard, record)
        if any(c["status"] != NOT_RUN for c in cells.values()):
            rows.append({"guard": guard, "scenario": scenario, "variant": variant, "cells": cells})
    return rows


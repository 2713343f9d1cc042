"""How runs are shown: the run record, what to notice in it, the guard matrix, and the terminal rendering.

`RunRecord` is one contender's run of one goal, exactly what `compare.py --json` writes; everything a reader
sees is rendered from these records and never re-derived from the agents. The `notice_*` functions turn a
scenario's records into the sentences under "What to notice" (the seed's lessons, with this run's numbers),
`guard_matrix` says per guard and contender whether it fired, was missing, or the contender raised, and the
`render_*` functions draw the traces (in the seed's format) and the tables with rich, readable at 100 columns.
Nothing here runs an agent or imports one.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from rich.console import Console
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from shared_tools.bookstore.faults import TIMEOUT_MESSAGE
from shared_tools.comparison.scenarios import (
    CONTENDERS,
    GUARD_LEGEND,
    GUARDS,
    OWNERS,
    OWNERS_SUMMARY,
    SCENARIOS,
    STEP_LIMIT_BY,
    WHO_OWNS_WHAT,
    Scenario,
)
from shared_tools.guards import REPEAT_ERROR_PREFIX, truncate
from shared_tools.models.personas import PERSONAS
from shared_tools.results import StopReason

WIDTH = 100
"""Terminal width when the output is not a terminal (a pipe, a file, a test)."""

TRUNCATION_MARKER = truncate("xx", 1).removeprefix("x").split(" 1 ")[0]
"""``... [truncated``: how `guards.truncate` marks a cut result, taken from its output so the two cannot drift
(guards has no constant for it)."""

# --- one run's record --------------------------------------------------------------------------------------


@dataclass
class RunRecord:
    """Everything one contender did on one goal: what `--json` writes and every table is rendered from."""

    scenario: str
    variant: str
    variant_label: str
    contender: str
    goal: str
    turn: int
    """1 for a single run; the turn number inside a session scenario."""
    stop_reason: str | None
    """The `StopReason` value, or None when the contender raised instead of returning a result."""
    error: str | None
    """``"GraphRecursionError: Recursion limit of 4 reached ..."`` when the contender raised."""
    answer: str | None
    user_message: str
    model_calls: int
    tool_calls: int
    tokens: int
    tokens_per_step: list[int]
    wall_s: float
    trace: list[dict[str, Any]]
    cart: list[dict[str, Any]]
    cart_total: str
    facts: dict[str, Any] = field(default_factory=dict)
    """Scenario-specific measurements: session message and checkpoint counts, the true cart, ..."""

    @property
    def outcome(self) -> str:
        """The stop reason, or what was raised."""
        return self.stop_reason if self.stop_reason is not None else f"raised {self.error}"

    @property
    def error_type(self) -> str | None:
        return None if self.error is None else self.error.split(":", 1)[0]

    def tool_events(self) -> list[dict[str, Any]]:
        return [e for e in self.trace if e["name"] != "model"]


# --- what to notice: sentences computed from the records ---------------------------------------------------


def pick(records: Iterable[RunRecord], **match: Any) -> list[RunRecord]:
    """The records whose fields equal `match` (``pick(records, scenario="orders", turn=1)``)."""
    return [r for r in records if all(getattr(r, k) == v for k, v in match.items())]


def _first(records: Iterable[RunRecord], **match: Any) -> RunRecord | None:
    found = pick(records, **match)
    return found[0] if found else None


def _arrow(values: Sequence[int]) -> str:
    return " -> ".join(f"{v:,}" for v in values)


def cart_text(record: RunRecord) -> str:
    if not record.cart:
        return "empty"
    return ", ".join(f"{line['title']} x{line['quantity']}" for line in record.cart) + f" ({record.cart_total})"


def short_outcome(record: RunRecord) -> str:
    return record.stop_reason if record.stop_reason is not None else f"raised {record.error_type}"


def _result_of(event: dict[str, Any]) -> str:
    """The result part of a tool event's ``args -> result`` detail."""
    return event["detail"].split(" -> ", 1)[-1]


def _grows(values: Sequence[int]) -> bool:
    return len(values) > 1 and all(b > a for a, b in itertools.pairwise(values))


def _grouped(records: Iterable[RunRecord], describe: Callable[[RunRecord], str]) -> list[str]:
    """One line per distinct description, naming every contender it is true for."""
    groups: dict[str, list[str]] = {}
    for r in records:
        groups.setdefault(describe(r), []).append(r.contender)
    return [f"{', '.join(names)}: {text}" for text, names in groups.items()]


def _per_variant(records: list[RunRecord], describe: Callable[[RunRecord], str]) -> list[str]:
    lines = []
    for variant in dict.fromkeys(r.variant for r in records):
        runs = pick(records, variant=variant)
        lines += [f"[{runs[0].variant_label}] {line}" for line in _grouped(runs, describe)]
    return lines


def _first_error(record: RunRecord) -> str | None:
    return next((_result_of(e) for e in record.tool_events() if e["is_error"]), None)


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f}s"


def notice_bookstore(records: list[RunRecord]) -> list[str]:
    def describe(r: RunRecord) -> str:
        tps = r.tokens_per_step
        resent = sum(tps[:-1]) / r.tokens if r.tokens else 0.0
        grew = "growing every step" if _grows(tps) else "NOT growing every step"
        return (
            f"{r.model_calls} model calls, {r.tool_calls} tool calls; tokens per call {_arrow(tps)}, {grew} "
            f"(total {r.tokens:,}; about {resent:.0%} of it is history sent again)"
        )

    lines = _grouped(records, describe)
    first = records[0]
    model_s = sum(e["duration_s"] for e in first.trace if e["name"] == "model")
    tools_s = sum(e["duration_s"] for e in first.tool_events())
    lines.append(
        f"Time ({first.contender}): model calls {_duration(model_s)}, tools {_duration(tools_s)}; with a real model "
        "nearly all of it is the model (the seed measured 260 s of model time and under a millisecond of tools)."
    )
    paths = {tuple((e["name"], e["detail"].split(" -> ")[0]) for e in r.tool_events()) for r in records}
    carts = {cart_text(r) for r in records}
    if len(records) > 1 and len(paths) == 1 and len(carts) == 1:
        lines.append(f"Every contender made the same tool calls in the same order; cart: {carts.pop()}.")
    lines.append(
        "The tokens grow because every model call re-sends the whole history: system message, goal, tool "
        "definitions and every call and result so far. That is why a step limit alone is not a budget."
    )
    return lines


def notice_orders(records: list[RunRecord]) -> list[str]:
    lines = []
    for goal in dict.fromkeys(r.goal for r in records):
        lines += [
            f"{goal!r} - {line}"
            for line in _grouped(
                pick(records, goal=goal),
                lambda r: f"{short_outcome(r)} after {r.model_calls} model calls and {r.tool_calls} tool call(s): "
                f"{r.user_message!r}",
            )
        ]
    lines.append("'not found' is a normal tool result, so the model answers it like any other fact.")
    return lines


def notice_max_steps(records: list[RunRecord]) -> list[str]:
    lines = _per_variant(
        records, lambda r: f"{short_outcome(r)}; cart {cart_text(r)}; {r.tokens:,} tokens in {r.wall_s:.1f}s"
    )
    stopped = next((r for r in records if r.stop_reason not in (None, StopReason.DONE)), None)
    if stopped is not None:
        lines.append(f"What the user should see when a run stops early: {stopped.user_message!r}")
    lines.append("A contender that finished 'done' despite the limit simply has no such budget.")
    return lines


def notice_flaky(records: list[RunRecord]) -> list[str]:
    def describe(r: RunRecord) -> str:
        if r.error is not None:
            return f"raised {r.error}; the model never saw the error and the run is lost"
        checks = sum(e["name"] == "check_stock" for e in r.tool_events())
        return (
            f"the model read {_first_error(r)!r}, made {checks} check_stock calls, then {short_outcome(r)}; "
            f"cart {cart_text(r)}"
        )

    return [
        *_per_variant(records, describe),
        "Without an error result the model cannot retry or tell the truth; with details on, the exception text "
        "reaches the model (and maybe the user), which is why hiding it is the safe default.",
    ]


def notice_big_results(records: list[RunRecord]) -> list[str]:
    lines = []
    for contender in dict.fromkeys(r.contender for r in records):
        full = _first(records, contender=contender, variant="full")
        cut = _first(records, contender=contender, variant="truncated")
        if full is None or cut is None:
            continue
        if any(TRUNCATION_MARKER in e["detail"] for e in cut.tool_events()):
            saved = (full.tokens - cut.tokens) / full.tokens if full.tokens else 0.0
            lines.append(f"{contender}: {full.tokens:,} -> {cut.tokens:,} tokens with truncation ({saved:.0%} less).")
        else:
            lines.append(f"{contender}: {full.tokens:,} and {cut.tokens:,} tokens: nothing was cut (no such option).")
    lines.append("A big result is paid for again on every later call, because it stays in the history.")
    return lines


def _blocked(record: RunRecord) -> int:
    return sum(REPEAT_ERROR_PREFIX in e["detail"] for e in record.tool_events())


def notice_looping(records: list[RunRecord]) -> list[str]:
    def describe(r: RunRecord) -> str:
        blocked = _blocked(r)
        refused = f", {blocked} refused by the repeat check" if blocked else ""
        return (
            f"{short_outcome(r)} after {r.model_calls} model calls; {r.tool_calls - blocked} identical calls ran"
            f"{refused}; {r.tokens:,} tokens"
        )

    return [
        *_grouped(records, describe),
        "The repeat check refuses the third identical call, and after four error rounds in a row "
        "(max_consecutive_errors=3) the guarded loops stop; a step limit alone pays for every call up to the "
        "limit, and LangGraph's own default recursion limit is 10,007 supersteps (about 5,000 model calls).",
    ]


def notice_hallucinated(records: list[RunRecord]) -> list[str]:
    return _grouped(
        records,
        lambda r: f"the model read {_first_error(r) or '(no error result)'!r}, then {short_outcome(r)}; "
        f"cart {cart_text(r)}",
    )


def notice_session(records: list[RunRecord]) -> list[str]:
    lines = []
    for r in pick(records, turn=2):
        facts = r.facts
        kept = f"{facts.get('messages')} messages"
        if "checkpoints" in facts:
            kept += f" in {facts['checkpoints']} checkpoints"
        restart = ""
        if "survived_restart" in facts:
            whole = "the whole conversation" if facts["survived_restart"] else "NOT the whole conversation"
            restart = f"; reopened after a restart: {facts['messages_after_restart']} messages ({whole})"
        lines.append(
            f"[{r.variant_label}] {r.contender}: turn 2 made {r.tool_calls} tool call(s) and answered "
            f"{r.user_message!r}; {kept}{restart}."
        )
    lines.append("Turn 2 was answered from memory: turn 1's tool results were in the history sent again.")
    return lines


def answer_matches_cart(record: RunRecord) -> bool:
    """Does the answer state the cart total as it really is after the run?"""
    return f"${record.cart_total}" in (record.answer or "")


def notice_stale(records: list[RunRecord]) -> list[str]:
    lines = []
    for r in pick(records, turn=2):
        viewed = any(e["name"] == "view_cart" for e in r.tool_events())
        verdict = "right" if answer_matches_cart(r) else "STALE"
        how = "read the cart with view_cart" if viewed else "answered from the history"
        lines.append(
            f"[{r.variant_label}] {r.contender} {how}: {r.user_message!r}; the cart really holds "
            f"${r.cart_total}: {verdict}."
        )
    lines.append(
        "This is the guard no framework has: the instructions (or your code) must say which data can change "
        "and has to be read again."
    )
    return lines


def notice_parallel(records: list[RunRecord]) -> list[str]:
    lines = []
    for contender in dict.fromkeys(r.contender for r in records):
        seq = _first(records, contender=contender, variant="sequential")
        par = _first(records, contender=contender, variant="parallel")
        if seq is not None and par is not None:
            lines.append(f"{contender}: sequential {seq.wall_s:.2f}s, parallel {par.wall_s:.2f}s.")
    lines.append(
        "Running one reply's calls together costs the slowest call instead of the sum; the results are still "
        "appended in call order, matched by call id. ToolNode runs them concurrently whatever you ask for."
    )
    return lines


APPROVAL_REFUSED_MARKER = "did not approve"
"""Part of the shared refusal text (`guards.approval_rejected`)."""


def _injected_adds(record: RunRecord) -> list[dict[str, Any]]:
    """The add_to_cart calls of a run that asked for more than one copy: what the injected note asked for."""
    return [e for e in record.tool_events() if e["name"] == "add_to_cart" and '"quantity":1}' not in e["detail"]]


def notice_injection(records: list[RunRecord]) -> list[str]:
    def describe(r: RunRecord) -> str:
        injected = _injected_adds(r)
        if not injected:
            return f"the model did not act on the note; cart {cart_text(r)}"
        if APPROVAL_REFUSED_MARKER in injected[0]["detail"]:
            how = r.facts.get("asked_through", "a human")
            asked = "; ".join(repr(reason) for reason in r.facts.get("approval_asked", []))
            return f"the injected add was held for approval ({how}), asked {asked}, refused; cart {cart_text(r)}"
        return f"the injected add ran unchecked; cart {cart_text(r)}"

    where = next((r.facts["injected_into"] for r in records if "injected_into" in r.facts), "a book")
    return [
        f"The note sat in the description of {where}, which search_books returned with the other results.",
        *_per_variant(records, describe),
        "The model read the refusal and went on with the customer's goal; a gate in the loop does what no "
        "instruction can, because the injected text is read with the same authority as the real ones.",
    ]


NOTICES: dict[str, Callable[[list[RunRecord]], list[str]]] = {
    "bookstore": notice_bookstore,
    "orders": notice_orders,
    "max-steps": notice_max_steps,
    "flaky-warehouse": notice_flaky,
    "big-results": notice_big_results,
    "looping-model": notice_looping,
    "hallucinated-tool": notice_hallucinated,
    "session": notice_session,
    "stale-cart": notice_stale,
    "parallel-tools": notice_parallel,
    "prompt-injection": notice_injection,
}


def notice_points(scenario: Scenario, records: list[RunRecord]) -> list[str]:
    """What to notice in this scenario's measured numbers, one sentence per point."""
    if not records or scenario.name not in NOTICES:
        return []
    return NOTICES[scenario.name](records)


def notice(scenario: Scenario, records: list[RunRecord]) -> str:
    """`notice_points` as text, one point per line (as compare.py's JSON document carries them).

    A point never spans lines (a model's answer quoted in one is flattened), so a reader of the document, like
    the HTML report's bulleted list, gets the points back with `str.splitlines()`.
    """
    return "\n".join(" ".join(point.split()) for point in notice_points(scenario, records))


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
            any(REPEAT_ERROR_PREFIX in e["detail"] for e in events),
            "blocked 3rd identical call",
            f"{record.tool_calls} identical calls ran",
        ),
        "unknown tool": (
            any(e["is_error"] for e in events) and stop == StopReason.DONE,
            "error result, recovered",
            record.outcome,
        ),
        "error hiding": (
            any(e["is_error"] and TIMEOUT_MESSAGE not in e["detail"] for e in events),
            "generic error text",
            "exception text shown",
        ),
        "truncation": (
            any(TRUNCATION_MARKER in e["detail"] for e in events),
            "result cut",
            f"nothing cut ({record.tokens:,} tokens)",
        ),
        "stale read": (
            answer_matches_cart(record),
            "re-read the cart",
            f"stale answer, cart is ${record.cart_total}",
        ),
        "approval gate": (
            any(APPROVAL_REFUSED_MARKER in e["detail"] for e in events),
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
            record = _first(records, scenario=scenario, variant=variant, contender=contender, turn=turn)
            cells[contender] = _guard_cell(guard, record)
        if any(c["status"] != NOT_RUN for c in cells.values()):
            rows.append({"guard": guard, "scenario": scenario, "variant": variant, "cells": cells})
    return rows


# --- terminal rendering ------------------------------------------------------------------------------------

STATUS_STYLE = {FIRED: "green", MISSING: "red", RAISED: "yellow", NOT_RUN: "dim"}


def make_console(file: TextIO) -> Console:
    """Rich output; on a pipe or file: 100 columns and no colour."""
    console = Console(file=file, highlight=False)
    if not console.is_terminal:
        console = Console(file=file, highlight=False, width=WIDTH, no_color=True, color_system=None)
    return console


def _seconds(value: float) -> str:
    # The seed's trace was printed with a decimal comma ("100,8s"); we keep its look.
    return f"{value:.1f}s".replace(".", ",")


def _per_step(tokens: list[int]) -> str:
    """Tokens per model call for a table cell; a long run shows its start and end (the JSON keeps every step)."""
    if len(tokens) <= 8:
        return " ".join(str(t) for t in tokens)
    return " ".join(str(t) for t in tokens[:3]) + " … " + " ".join(str(t) for t in tokens[-2:])


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def trace_lines(trace: Sequence[dict[str, Any]], width: int) -> list[Text]:
    """A trace (`RunRecord.trace`) in the seed's format, one line per model or tool call, long results shortened.

    ``[step 1] model            0,0s  1 tool call(s), 779 tokens`` and, below it, the model's plan (the Plan part
    of the loop, where a reasoning model puts it); ``[step 1] search_books     0,0s  {"query":...} -> [...]``.
    """
    lines = []
    for event in trace:
        prefix = f"[step {event['step']}] {event['name']:<16}{_seconds(event['duration_s']):>6}  "
        if event["name"] == "model":
            count, _, plan = event["detail"].partition("; plan: ")
            lines.append(Text(prefix + f"{count}, {event['tokens']} tokens"))
            if plan:
                lines.append(Text(_shorten(f"{'':9}plan: {plan}", width), style="dim"))
        else:
            body = _shorten(event["detail"], width - len(prefix))
            lines.append(Text(prefix + body, style="red" if event["is_error"] else ""))
    return lines


def shows_goal(records: Sequence[RunRecord]) -> bool:
    """Several goals in one turn (orders asks two questions): each run must name its goal, or a contender appears
    twice unexplained. The HTML report applies the same rule (its goal column, `report.summary_table`)."""
    return len({r.goal for r in records}) > 1 and len({r.turn for r in records}) == 1


def run_label(record: RunRecord, *, turn: bool = False, goal: bool = False, variant: bool = False) -> str:
    """How a run is named where runs of one contender must be told apart: ``langgraph · turn 2 (persisted)``."""
    label = record.contender
    if turn:
        label += f" · turn {record.turn}"
    if goal:
        label += f" · {record.goal!r}"
    if variant:
        label += f" ({record.variant})"
    return label


def same_traces(records: Sequence[RunRecord], labels: Sequence[str]) -> list[str | None]:
    """Per run, the label of an earlier run with the very same trace (calls, results, tokens), or None.

    A run that raised is always printed, since its error is not part of the trace.
    """
    first: dict[tuple[Any, ...], str] = {}
    same: list[str | None] = []
    for record, label in zip(records, labels, strict=True):
        key = tuple((e["step"], e["name"], e["detail"], e["tokens"], e["is_error"]) for e in record.trace)
        same.append(first.get(key) if record.error is None else None)
        first.setdefault(key, label)
    return same


def print_trace(console: Console, trace: Sequence[dict[str, Any]]) -> None:
    """`trace_lines` on the console, one screen line each."""
    for line in trace_lines(trace, console.width):
        console.print(line, overflow="ellipsis", no_wrap=True)


def render_turn(console: Console, trace: Sequence[dict[str, Any]], user_message: str, stop_reason: str) -> None:
    """One chat turn: its trace, what the assistant says, and the stop reason when it is not 'done'."""
    print_trace(console, trace)
    console.print(Text("assistant> ", style="bold") + Text(user_message))
    if stop_reason != StopReason.DONE:
        console.print(Text(f"(stop reason: {stop_reason})"))


def summary_table(records: list[RunRecord], *, show_turn: bool = False, title: str | None = None) -> Table:
    """The side-by-side table, one row per run; the answers are listed under it (see `answer_grid`)."""
    table = Table(expand=True, padding=(0, 1), title=title, title_justify="left", title_style="bold")
    if show_turn:
        table.add_column("turn", justify="right", width=4)
    table.add_column("contender", no_wrap=True, min_width=18)
    table.add_column("stop reason", width=13, overflow="fold")
    table.add_column("model calls", justify="right", width=5)
    table.add_column("tool calls", justify="right", width=5)
    table.add_column("tokens", justify="right", width=6)
    table.add_column("tokens per step", ratio=4)
    table.add_column("wall", justify="right", width=5)
    table.add_column("final cart", ratio=4)
    for r in records:
        row: list[Text] = [Text(str(r.turn))] if show_turn else []
        row += [
            Text(r.contender),
            Text(short_outcome(r), style="" if r.error is None else "yellow"),
            Text(str(r.model_calls)),
            Text(str(r.tool_calls)),
            Text(f"{r.tokens:,}"),
            Text(_per_step(r.tokens_per_step)),
            Text(f"{r.wall_s:.2f}s"),
            Text(cart_text(r)),
        ]
        table.add_row(*row)
    return table


def answer_grid(records: list[RunRecord], *, show_turn: bool = False, show_goal: bool = False) -> Table:
    """What each run would show the user: the answer when done, an honest sentence (or the error) otherwise."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(ratio=1)
    for r in records:
        who = run_label(r, turn=show_turn, goal=show_goal) + ":"
        grid.add_row(Text(who, style="bold"), Text(r.user_message, style="" if r.error is None else "yellow"))
    return grid


def _bullets(points: Sequence[str]) -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(ratio=1)
    for point in points:
        grid.add_row(Text("  •"), Text(point))
    return grid


def render_scenario(
    console: Console, number: int, scenario: Scenario, records: list[RunRecord], *, trace: bool = True
) -> None:
    """A scenario's lesson; per variant each run's trace, the side-by-side table and the answers; what to notice."""
    console.print(Rule(f"{number}. {scenario.name}", style="bold"))
    console.print(Text(scenario.description, style="bold"))
    console.print(Text(scenario.lesson))
    show_turn = scenario.multi_turn
    several_variants = len(scenario.variants) > 1
    shown = [r for v in scenario.variants for r in pick(records, variant=v.name)]
    show_goal = shows_goal(shown)
    labels = {id(r): run_label(r, turn=show_turn, goal=show_goal, variant=several_variants) for r in shown}
    # Traces already shown in this scenario (across its variants) are named instead of printed again.
    same = dict(zip((id(r) for r in shown), same_traces(shown, [labels[id(r)] for r in shown]), strict=True))
    for variant in scenario.variants:
        runs = pick(records, variant=variant.name)
        if not runs:
            continue
        if several_variants:
            console.print(Text("\nvariant ", style="bold") + Text(f"{variant.name}: {variant.label}", style="bold"))
        if trace:
            for r in runs:
                if same[id(r)] is not None:
                    text = f"the same trace as {same[id(r)]} (same calls, results and tokens)."
                    console.print(Text(f"\n{labels[id(r)]}: ", style="bold") + Text(text))
                    continue
                turn = f" · turn {r.turn}" if show_turn else ""
                console.print(Text(f"\n{r.contender}{turn}: ", style="bold") + Text(r.goal))
                print_trace(console, r.trace)
                if r.error is not None:
                    console.print(Text(f"raised {r.error}", style="yellow"), overflow="ellipsis", no_wrap=True)
            console.print()
        if show_goal:
            # A goal column leaves no room in 100 columns: one table per goal, titled with it, instead.
            by_goal = [pick(runs, goal=goal) for goal in dict.fromkeys(r.goal for r in runs)]
            for same_goal in by_goal:
                console.print(summary_table(same_goal, show_turn=show_turn, title=f"goal: {same_goal[0].goal}"))
            runs = [r for same_goal in by_goal for r in same_goal]
        else:
            console.print(summary_table(runs, show_turn=show_turn))
        console.print(Text("What the user sees:", style="bold"))
        console.print(answer_grid(runs, show_turn=show_turn, show_goal=show_goal))
    points = notice_points(scenario, records)
    if points:
        console.print(Text("\nWhat to notice:", style="bold"))
        console.print(_bullets(points))
    console.print()


def guard_legend(between: str, separator: str) -> str:
    """`GUARD_LEGEND` on one line: ``fired = the guard stopped ...; missing = ...``."""
    return separator.join(f"{status}{between}{meaning}" for status, meaning in GUARD_LEGEND.items())


def render_guard_matrix(console: Console, rows: list[dict[str, Any]], contenders: Sequence[str]) -> None:
    console.print(Rule("Guard matrix (from the runs above)", style="bold"))
    table = Table(show_lines=True, expand=True)
    table.add_column("guard (scenario)", width=15, overflow="fold")
    for contender in contenders:
        # fold, not an ellipsis: the cells name classes (ModelCallLimitMiddleware) that must stay readable
        table.add_column(contender, width=max(16, len(contender)), overflow="fold")
    for row in rows:
        cells = [Text(c["text"], style=STATUS_STYLE[c["status"]]) for c in row["cells"].values()]
        table.add_row(Text(f"{row['guard']} ({row['scenario']})"), *cells)
    console.print(table)
    console.print(guard_legend(" = ", "; "))


def render_who_owns_what(console: Console) -> None:
    console.print(Rule("Who owns what", style="bold"))
    table = Table(show_lines=True, expand=True)
    table.add_column("", width=15)
    for owner in OWNERS:
        table.add_column(owner, ratio=1, overflow="fold")
    for row in WHO_OWNS_WHAT:
        table.add_row(*(Text(cell) for cell in row))
    console.print(table)
    console.print(OWNERS_SUMMARY)


def render_list(console: Console) -> None:
    table = Table(title="Scenarios", expand=True)
    table.add_column("scenario")
    table.add_column("what it shows", ratio=1)
    for scenario in SCENARIOS:
        table.add_row(Text(scenario.name), Text(scenario.description))
    console.print(table)
    personas = Table(title="Scripted personas (--model scripted:<persona>)", expand=True)
    personas.add_column("persona")
    personas.add_column("behaviour", ratio=1)
    for name, text in PERSONAS.items():
        personas.add_row(Text(name), Text(text))
    console.print(personas)
    console.print(Text("Contenders: " + "; ".join(f"{k} ({v})" for k, v in CONTENDERS.items())))



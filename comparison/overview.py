"""The overview `python compare.py` prints by default: what ran, one line per contender per scenario, each
scenario's lesson in one sentence, the guard matrix by status, and what to try next.

Every number and sentence is read from the records (`overview_rows`, `headline`), so it holds for any model; the
full traces, tables and notes of a scenario are `compare.py SCENARIO` (`render.render_scenario`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from comparison.closing import FIRED, GUARD_LEGEND, MISSING, NOT_EXERCISED, NOT_MEASURED, NOT_RUN, RAISED
from comparison.contenders import CONTENDERS
from comparison.records import RunRecord, cart_text, short_outcome
from comparison.render import STATUS_STYLE
from comparison.sanitize import clean_line
from comparison.scenarios import Scenario, contenders_for, contenders_running
from comparison.scenarios.phrases import names_or_all
from comparison.scenarios.queries import not_available
from shared_tools.results import StopReason

# --- one line per contender ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class OverviewRow:
    """One contender's runs of one scenario, summed: what its line in the overview says."""

    scenario: str
    contender: str
    runs: int
    """Runs it made: one per variant, goal and turn it ran (0: it ran none, see `not_run`)."""
    outcomes: dict[str, int]
    """How its runs ended (`stop_name`) -> how many ended so, in the order first seen."""
    model_calls: int
    tool_calls: int
    tokens: int
    cart: str
    """The cart after its last run (`records.cart_text`)."""
    not_run: str | None = None
    """Why it made no run of this scenario, or None."""

    def outcome_text(self) -> str:
        """``done``; ``max_steps, token_budget``; ``done ×4, raised TimeoutError``."""
        if len(self.outcomes) == 1:
            return next(iter(self.outcomes))
        return ", ".join(text if n == 1 else f"{text} ×{n}" for text, n in self.outcomes.items())


def stop_name(record: RunRecord) -> str:
    """How a run ended, short: the `StopReason`'s name (``max_steps``), or what was raised (``raised TimeoutError``)."""
    try:
        return StopReason(record.stop_reason).name.lower() if record.stop_reason is not None else short_outcome(record)
    except ValueError:  # a stop reason this version does not know (a record written by another)
        return short_outcome(record)


def ran(records: Sequence[RunRecord]) -> list[RunRecord]:
    """The records of runs that happened (not a contender's stand-in for a variant it has no API for)."""
    return [r for r in records if not_available(r) is None]


def overview_rows(scenario: Scenario, records: Sequence[RunRecord], contenders: Sequence[str]) -> list[OverviewRow]:
    """One row per chosen contender, in `contenders` order, from its records of `scenario`."""
    rows = []
    for contender in contenders:
        mine = [r for r in records if r.scenario == scenario.name and r.contender == contender]
        runs = ran(mine)
        if not runs:
            reasons = [not_available(r) for r in mine] or [
                contenders_for(scenario, v, [contender])[1].get(contender) for v in scenario.variants
            ]
            reason = next((r for r in reasons if r), "it made no run")
            rows.append(OverviewRow(scenario.name, contender, 0, {}, 0, 0, 0, "", not_run=reason))
            continue
        rows.append(
            OverviewRow(
                scenario=scenario.name,
                contender=contender,
                runs=len(runs),
                outcomes=dict(Counter(stop_name(r) for r in runs)),
                model_calls=sum(r.model_calls for r in runs),
                tool_calls=sum(r.tool_calls for r in runs),
                tokens=sum(r.tokens for r in runs),
                cart=cart_text(runs[-1]),
            )
        )
    return rows


# --- the scenario's lesson in one sentence --------------------------------------------------------------------

STATUS_ORDER = (FIRED, MISSING, RAISED, NOT_EXERCISED, NOT_MEASURED)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def guard_sentence(row: dict[str, Any]) -> str:
    """A guard-matrix row in words: ``Repeat check: fired in handwritten, langgraph (blocked 3rd identical call);
    missing in maf (12 identical calls, none refused).`` A group's detail is said when it is the same for all."""
    cells = {c: cell for c, cell in row["cells"].items() if cell["status"] != NOT_RUN}
    parts = []
    for status in STATUS_ORDER:
        group = [c for c, cell in cells.items() if cell["status"] == status]
        if not group:
            continue
        texts = {cells[c]["text"].removeprefix(f"{status}: ").removeprefix(f"{status} ") for c in group}
        detail = f" ({texts.pop()})" if len(texts) == 1 else ""
        parts.append(f"{status} in {names_or_all(group, len(cells))}{detail}")
    return f"{row['guard'].capitalize()}: " + "; ".join(parts) + "."


def outcome_sentence(records: list[RunRecord]) -> str:
    """The fallback lesson: which contenders ended their runs alike, and how."""
    groups: dict[str, list[str]] = {}
    for contender in dict.fromkeys(r.contender for r in records):
        mine = [r for r in records if r.contender == contender]
        ends = ", ".join(dict.fromkeys(short_outcome(r) for r in mine))
        groups.setdefault(ends, []).append(contender)
    if len(groups) == 1:
        return f"Every contender's runs ended: {next(iter(groups))}."
    return "; ".join(f"{', '.join(names)}: {ends}" for ends, names in groups.items()) + "."


def headline(scenario: Scenario, records: list[RunRecord], matrix: Sequence[dict[str, Any]]) -> str:
    """`scenario`'s lesson in a sentence, from its records (the runs that happened, the model's outages left out)."""
    runs = [r for r in ran(records) if r.scenario == scenario.name and not r.model_failed]
    if not runs:
        return "No run of this scenario finished with the model answering, so there is no lesson to draw."
    rows = [row for row in matrix if row["scenario"] == scenario.name]
    if rows:
        return " ".join(guard_sentence(row) for row in rows)
    made = None if scenario.headline is None else scenario.headline(runs, scenario.settings_of)
    return made or outcome_sentence(runs)


# --- rendering --------------------------------------------------------------------------------------------------

NAME_COLUMN = 21
"""The scenario and contender column: the longest scenario name with its number (``15. hallucinated-tool``) and
an indented contender name (``  langgraph-defaults``)."""


def _grid(width: int) -> Table:
    """The columns of every contender line and of the header over them, for a console `width` wide: at 100 columns
    the stop column has 24 characters, and up to 20 more on a wider terminal (the cart column has the rest)."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=NAME_COLUMN, no_wrap=True)
    grid.add_column(width=4, justify="right")
    grid.add_column(width=24 + min(max(0, width - 100), 20))
    grid.add_column(width=5, justify="right")
    grid.add_column(width=5, justify="right")
    grid.add_column(width=7, justify="right")
    grid.add_column(ratio=1)
    return grid


def _outcome_style(row: OverviewRow) -> str:
    if set(row.outcomes) == {"done"}:
        return "green"
    return "red" if any(o.startswith(("raised", "model call failed")) for o in row.outcomes) else "yellow"


def command_text(prog: str, args: str) -> str:
    """How to type a command: ``python compare.py ARGS``, or ``agent-loop-compare ARGS`` when installed."""
    return f"python {prog} {args}" if prog.endswith(".py") else f"{prog} {args}"


def next_steps(prog: str, example: str) -> list[tuple[str, str]]:
    """(command, what it shows) to try after the overview; `example` is a scenario that ran."""
    return [
        (command_text(prog, example), f"{example} in full: each run's trace, table and answer"),
        (command_text(prog, "--full"), "all scenarios in full, guard details, who owns what"),
        (command_text(prog, "chat"), "talk to the agent; the conversation and cart are kept"),
        (command_text(prog, "serve"), "the live page: the contenders side by side in a browser"),
        (command_text(prog, "--report report.html"), "every run's full record as one HTML page"),
        (
            command_text(prog, "--model local"),
            "the same runs on the bundled real model (extras 'local', 'local-qwen')",
        ),
        (command_text(prog, f"eval {example} --runs 3"), "repeated runs, graded: who reached the goal, and why not"),
    ]


def model_text(model: str) -> str:
    return (
        "the scripted model (replies written per scenario, no LLM)"
        if model.startswith("scripted")
        else (f"model {model}")
    )


def _render_scenario_rows(
    console: Console,
    number: int,
    scenario: Scenario,
    records: list[RunRecord],
    contenders: Sequence[str],
    matrix: list[dict[str, Any]],
) -> None:
    """One scenario's block: its number, name and headline, then a row per contender (or why it did not run)."""
    title = Table.grid(padding=(0, 1))
    title.add_column(width=NAME_COLUMN, no_wrap=True)
    title.add_column(ratio=1)
    lesson = headline(scenario, records, matrix)
    title.add_row(Text(f"{number:>2}. {scenario.name}", "bold"), Text(clean_line(lesson), "italic"))
    console.print(title)
    grid = _grid(console.width)
    for row in overview_rows(scenario, records, contenders):
        name = Text(f"  {row.contender}")
        if row.not_run is not None:
            # A line of its own, the reason running the width of the table (a grid cell would cut it short).
            console.print(grid)
            grid = _grid(console.width)
            line = Text(f"  {row.contender:<{NAME_COLUMN - 2}} {0:>4} ") + Text(
                f"not run: {clean_line(row.not_run)}", "dim"
            )
            console.print(line, overflow="ellipsis", no_wrap=True)
            continue
        grid.add_row(
            name,
            Text(str(row.runs)),
            Text(clean_line(row.outcome_text()), _outcome_style(row)),
            Text(str(row.model_calls)),
            Text(str(row.tool_calls)),
            Text(f"{row.tokens:,}"),
            Text(clean_line(row.cart)),
        )
    console.print(grid)


def _render_next_steps(console: Console, prog: str, shown: Sequence[Scenario]) -> None:
    console.print(Text("What to try next", "bold"))
    steps = Table.grid(padding=(0, 2))
    steps.add_column(no_wrap=True, style="cyan")
    steps.add_column(ratio=1)
    for command, what in next_steps(prog, shown[0].name if shown else "bookstore"):
        steps.add_row(Text(command), Text(what))
    console.print(steps)


def render_overview(
    console: Console,
    prog: str,
    model: str,
    scenarios: Sequence[Scenario],
    contenders: Sequence[str],
    records: list[RunRecord],
    matrix: list[dict[str, Any]],
) -> None:
    """The whole overview: what ran, one block per scenario, the guard matrix by status, what to try next."""
    shown = [s for s in scenarios if any(r.scenario == s.name for r in records)]
    console.print(
        Text(
            f"{_count(len(shown), 'scenario')} × {_count(len(contenders), 'contender')}: "
            f"{_count(len(ran(records)), 'run')} on {model_text(model)}",
            "bold",
        )
    )
    console.print(Text(f"Contenders: {', '.join(contenders)} (the same goals for each)."))
    console.print(
        Text("Per contender: runs (variants × goals × turns), how they ended, calls and tokens summed, cart.")
    )
    header = _grid(console.width)
    header.add_row(*(Text(t, "bold") for t in ("", "runs", "stopped", "model", "tools", "tokens", "final cart")))
    console.print(header)
    for number, scenario in enumerate(scenarios, start=1):
        if scenario in shown:
            _render_scenario_rows(console, number, scenario, records, contenders, matrix)
        elif not contenders_running(scenario, contenders):
            by = ", ".join(contenders_running(scenario, tuple(CONTENDERS))) or "no contender"
            line = f"{number:>2}. {scenario.name}: not run; it is run by {by}"
            console.print(Text(line, "yellow"), overflow="ellipsis", no_wrap=True)
    render_matrix_overview(console, matrix, contenders)
    _render_next_steps(console, prog, shown)


def render_matrix_overview(console: Console, matrix: list[dict[str, Any]], contenders: Sequence[str]) -> None:
    """The guard matrix with one status word per cell (`compare.py --full` has each cell's details), and what the
    statuses it shows mean."""
    if not matrix:
        return
    console.print()
    table = Table(
        box=None,
        padding=(0, 1, 0, 0),
        title="Guard matrix: did the guard act in the runs above?",
        title_justify="left",
        title_style="bold",
        header_style="bold underline",
    )
    table.add_column("guard (scenario)", no_wrap=True)
    for contender in contenders:
        table.add_column(contender, no_wrap=True)
    for row in matrix:
        cells = [row["cells"][c]["status"] for c in contenders]
        table.add_row(Text(f"{row['guard']} ({row['scenario']})"), *(Text(c, STATUS_STYLE.get(c, "")) for c in cells))
    console.print(table)
    seen = {cell["status"] for row in matrix for cell in row["cells"].values()}
    legend = "; ".join(f"{status} = {meaning}" for status, meaning in GUARD_LEGEND.items() if status in seen)
    console.print(Text(legend, "dim"))
    console.print()

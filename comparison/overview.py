"""The overview `python compare.py` prints by default: what ran, per scenario its lesson in one sentence and a line
per group of contenders whose runs went alike, the guard matrix by status, and what to try next, at any width.

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

from comparison.closing import FIRED, MISSING, NOT_EXERCISED, NOT_MEASURED, NOT_RUN, RAISED
from comparison.contenders import CONTENDERS
from comparison.guard_grid import render_guard_grid
from comparison.records import RunRecord, cart_text, short_outcome
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
    """The cart its last run of each variant left (`records.cart_text`), each named by its variant when they
    differ: ``no-gate: The Quiet Orchard x11 (181.50); gate: The Quiet Orchard x1 (16.50)``."""
    not_run: str | None = None
    """Why it made no run of this scenario, or None."""
    variants_not_run: tuple[str, ...] = ()
    """The variants of the scenario it has no API for, when it ran others."""

    def outcome_text(self) -> str:
        """``done``; ``max_steps, token_budget``; ``done ×4, raised TimeoutError``; ``done; gate not run``."""
        if len(self.outcomes) == 1:
            text = next(iter(self.outcomes))
        else:
            text = ", ".join(text if n == 1 else f"{text} ×{n}" for text, n in self.outcomes.items())
        if not self.variants_not_run:
            return text
        missing = self.variants_not_run
        # One variant is named (``gate not run``); of several, how many, which its cart's variants leave out.
        return f"{text}; {missing[0] if len(missing) == 1 else f'{len(missing)} variants'} not run"

    def key(self) -> tuple[object, ...]:
        """What the runs did, but for their tokens: rows with the same key and tokens alike share a line (those
        that made no run share one whatever their reasons)."""
        return (self.runs, self.outcome_text(), self.model_calls, self.tool_calls, self.cart, self.not_run is None)


def stop_name(record: RunRecord) -> str:
    """How a run ended, short: the `StopReason`'s name (``max_steps``), or what was raised (``raised TimeoutError``)."""
    try:
        return StopReason(record.stop_reason).name.lower() if record.stop_reason is not None else short_outcome(record)
    except ValueError:  # a stop reason this version does not know (a record written by another)
        return short_outcome(record)


def ran(records: Sequence[RunRecord]) -> list[RunRecord]:
    """The records of runs that happened (not a contender's stand-in for a variant it has no API for)."""
    return [r for r in records if not_available(r) is None]


def carts_text(runs: Sequence[RunRecord]) -> str:
    """The cart each variant's last run left: once when they are all alike; else each with the variants that left
    it, one title said once when every cart that is not empty holds only that book (``The Quiet Orchard x11 in
    no-gate, x1 in gate``; ``The Quiet Orchard x1 in token-budget, else empty``)."""
    last = {r.variant: r for r in runs}
    by_cart: dict[str, list[str]] = {}
    for variant, record in last.items():
        by_cart.setdefault(cart_text(record), []).append(variant)
    if len(by_cart) == 1:
        return next(iter(by_cart))
    filled = [r.cart for r in last.values() if r.cart]
    titles = {line["title"] for cart in filled for line in cart}
    if len(titles) == 1 and all(len(cart) == 1 for cart in filled):
        quantities: dict[str, list[str]] = {}
        for variant, record in last.items():
            quantities.setdefault(f"x{record.cart[0]['quantity']}" if record.cart else "", []).append(variant)
        held = ", ".join(f"{q} in {', '.join(vs)}" for q, vs in quantities.items() if q)
        empty = quantities.get("")
        return f"{titles.pop()} {held}" + (", else empty" if empty else "")
    return "; ".join(f"{', '.join(variants)}: {cart}" for cart, variants in by_cart.items())


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
        ran_variants = {r.variant for r in runs}
        rows.append(
            OverviewRow(
                scenario=scenario.name,
                contender=contender,
                runs=len(runs),
                outcomes=dict(Counter(stop_name(r) for r in runs)),
                model_calls=sum(r.model_calls for r in runs),
                tool_calls=sum(r.tool_calls for r in runs),
                tokens=sum(r.tokens for r in runs),
                cart=carts_text(runs),
                variants_not_run=tuple(dict.fromkeys(r.variant for r in mine if r.variant not in ran_variants)),
            )
        )
    return rows


TOKENS_ALIKE = 0.05
"""Token sums this close (a fraction of the smaller) are alike: the same runs sent through two frameworks' message
formats differ by a few percent, where a guard that cut a result or a reply saves far more."""


def row_groups(rows: Sequence[OverviewRow]) -> list[list[OverviewRow]]:
    """The rows whose runs went alike (`OverviewRow.key`, tokens within `TOKENS_ALIKE` of the next), together, in
    the order their first one comes."""
    groups: list[list[OverviewRow]] = []
    by_key: dict[tuple[object, ...], list[OverviewRow]] = {}
    for row in rows:
        by_key.setdefault(row.key(), []).append(row)
    for same in by_key.values():
        ordered = sorted(same, key=lambda r: r.tokens)
        runs = [[ordered[0]]]
        for row in ordered[1:]:
            if row.tokens - runs[-1][-1].tokens > TOKENS_ALIKE * max(1, runs[-1][-1].tokens):
                runs.append([])
            runs[-1].append(row)
        groups += [sorted(run, key=rows.index) for run in runs]
    return sorted(groups, key=lambda g: rows.index(g[0]))


def tokens_text(group: Sequence[OverviewRow]) -> str:
    """``12,605``, or the range of a group's sums written as page ranges are, the thousands said once when they are
    the same: ``15,686-876``, ``9,990-10,400``."""
    low, high = min(r.tokens for r in group), max(r.tokens for r in group)
    if low == high:
        return f"{low:,}"
    if low // 1000 == high // 1000 and low >= 1000:
        return f"{low:,}-{high % 1000:03d}"
    return f"{low:,}-{high:,}"


def not_run_text(group: Sequence[OverviewRow], scenario: str) -> str:
    """Why a group made no run: the reason they share, or where each one's is said."""
    reasons = {row.not_run for row in group}
    if len(reasons) == 1:
        return f"not run: {reasons.pop()}"
    return f"not run, each for its own reason (python compare.py {scenario})"


# --- the scenario's lesson in one sentence --------------------------------------------------------------------

STATUS_ORDER = (FIRED, MISSING, RAISED, NOT_EXERCISED, NOT_MEASURED)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


OTHERS_FROM = 3
"""A group of this many contenders or more, the largest of several, is "the other N", said last: the names of
the smaller groups tell which, and nine contenders' lists stay short."""


def largest_last(groups: Sequence[Sequence[Any]]) -> tuple[list[Sequence[Any]], bool]:
    """`groups` with the largest moved last when it is to be called "the other N" (see `OTHERS_FROM`), and
    whether it is."""
    if len(groups) < 2:
        return list(groups), False
    largest = max(groups, key=len)
    if len(largest) < OTHERS_FROM:
        return list(groups), False
    return [g for g in groups if g is not largest] + [largest], True


def others_label(names: Sequence[str], of: int, *, others: bool) -> str:
    """``all 5``, ``the other 3`` (`others`), or the names."""
    return f"the other {len(names)}" if others else names_or_all(names, of)


def guard_sentence(row: dict[str, Any]) -> str:
    """A guard-matrix row in words: ``Repeat check: fired in handwritten, langgraph (blocked 3rd identical call);
    missing in the other 3 (12 identical calls, none refused).`` A group's detail is said when it is the same for
    all."""
    cells = {c: cell for c, cell in row["cells"].items() if cell["status"] != NOT_RUN}
    by_status = [[c for c, cell in cells.items() if cell["status"] == status] for status in STATUS_ORDER]
    groups, others = largest_last([group for group in by_status if group])
    parts = []
    for i, group in enumerate(groups):
        status = cells[group[0]]["status"]
        texts = {cells[c]["text"].removeprefix(f"{status}: ").removeprefix(f"{status} ") for c in group}
        detail = f" ({texts.pop()})" if len(texts) == 1 else ""
        label = others_label(group, len(cells), others=others and i == len(groups) - 1)
        parts.append(f"{status} in {label}{detail}")
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


@dataclass(frozen=True)
class Columns:
    """The widths of a group line's columns for a console `width` wide, so that no word is split: the names and
    the stop column at least as wide as their longest word, wider on a wider console; the cart has the rest, and
    a cart longer than that goes on a line of its own under its group's."""

    names: int
    stopped: int
    tokens: int
    width: int

    @classmethod
    def fit(cls, width: int, contenders: Sequence[str], groups: Sequence[Sequence[OverviewRow]]) -> Columns:
        longest_name = max((len(c) for c in contenders), default=0) + 1  # a comma after it
        longest_stop = max((len(w) for g in groups for w in g[0].outcome_text().split()), default=0)
        return cls(
            names=max(longest_name, min(30, width * 22 // 100)),
            stopped=max(longest_stop, min(24, width * 18 // 100)),
            tokens=max(len("tokens"), *(len(tokens_text(g)) for g in groups)),
            width=width,
        )

    @property
    def cart(self) -> int:
        """The cart column's width: what the others and a space after each leave."""
        return self.width - (1 + self.names + 4 + self.stopped + 5 + 5 + self.tokens) - 7

    @property
    def cart_indent(self) -> int:
        """Where a cart on a line of its own starts: under the stop column."""
        return 1 + self.names + 4 + 3

    def grid(self) -> Table:
        grid = Table.grid(padding=(0, 1))
        grid.add_column(width=1)  # the indent, so a group's names wrap under its first
        grid.add_column(width=self.names)
        grid.add_column(width=4, justify="right")
        grid.add_column(width=self.stopped)
        grid.add_column(width=5, justify="right")
        grid.add_column(width=5, justify="right")
        grid.add_column(width=self.tokens, justify="right")
        grid.add_column(ratio=1)
        return grid


def _height(console: Console, text: Text, width: int) -> int:
    """How many lines `text` takes in a column `width` wide."""
    return len(text.wrap(console, width))


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
    columns: Columns,
) -> None:
    """One scenario's block: its number, name and lesson, then a line per group of contenders whose runs went
    alike (or why they did not run)."""
    title = Table.grid(padding=(0, 1))
    title.add_column(width=3, justify="right", no_wrap=True)
    title.add_column(ratio=1)
    lesson = headline(scenario, records, matrix)
    title.add_row(Text(f"{number}."), Text(scenario.name, "bold") + Text(": ") + Text(clean_line(lesson), "italic"))
    console.print(title)
    grid = columns.grid()
    rows = overview_rows(scenario, records, contenders)
    groups, others = largest_last(row_groups(rows))
    for i, group in enumerate(groups):
        row = group[0]
        label = others_label([r.contender for r in group], len(rows), others=others and i == len(groups) - 1)
        names = Text(label)
        if row.not_run is not None:
            # A line of its own, the reason running the width of the table (a grid cell would cut it short).
            console.print(grid)
            grid = columns.grid()
            _render_not_run_line(console, columns, names, not_run_text(group, scenario.name))
            continue
        outcome = Text(clean_line(row.outcome_text()), _outcome_style(row))
        cart = Text(clean_line(row.cart))
        # The cart goes under the line when its column would make the line taller than its names and stop cell do.
        height = max(_height(console, names, columns.names), _height(console, outcome, columns.stopped))
        cart_below = _height(console, cart, max(1, columns.cart)) > height
        grid.add_row(
            Text(""),
            names,
            Text(str(row.runs)),
            outcome,
            Text(str(row.model_calls)),
            Text(str(row.tool_calls)),
            Text(tokens_text(group)),
            Text("") if cart_below else cart,
        )
        if cart_below:
            console.print(grid)
            grid = columns.grid()
            below = Table.grid()
            below.add_column(width=columns.cart_indent)
            below.add_column(ratio=1)
            below.add_row(Text(""), Text("cart: ") + cart)
            console.print(below)
    console.print(grid)


def _render_not_run_line(console: Console, columns: Columns, names: Text, why: str) -> None:
    """A group that did not run: a line of its own, the reason running the width of the table (a grid cell would
    cut it short); on one line, since the scenario's own view has it all."""
    line = Table.grid(padding=(0, 1))
    line.add_column(width=1)
    line.add_column(width=columns.names)
    line.add_column(width=4, justify="right")
    line.add_column(ratio=1)
    reason = Text(clean_line(why), "dim")
    reason.truncate(console.width - columns.names - 8, overflow="ellipsis")
    line.add_row(Text(""), names, Text("0"), reason)
    console.print(line)


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
        Text(
            "A line per group of contenders whose runs went alike: runs (variants × goals × turns), how they "
            f"ended, calls and tokens summed (a range: within {TOKENS_ALIKE:.0%}), the cart each variant left."
        )
    )
    groups = [g for scenario in shown for g in row_groups(overview_rows(scenario, records, contenders))]
    columns = Columns.fit(console.width, contenders, groups)
    header = columns.grid()
    titles = ("", "contenders", "runs", "stopped", "model", "tools", "tokens", "final cart")
    header.add_row(*(Text(t, "bold") for t in titles))
    console.print(header)
    for number, scenario in enumerate(scenarios, start=1):
        if scenario in shown:
            _render_scenario_rows(console, number, scenario, records, contenders, matrix, columns)
        elif not contenders_running(scenario, contenders):
            by = ", ".join(contenders_running(scenario, tuple(CONTENDERS))) or "no contender"
            line = f"{number:>2}. {scenario.name}: not run; it is run by {by}"
            console.print(Text(line, "yellow"), overflow="ellipsis", no_wrap=True)
    render_guard_grid(console, matrix, contenders, {s.name: n for n, s in enumerate(scenarios, start=1)})
    _render_next_steps(console, prog, shown)

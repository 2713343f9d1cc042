"""Terminal rendering: the traces in the article's format, the side-by-side tables, the closing tables, the spinner.

Drawn with rich from `RunRecord`s, never from the agents, as wide as the terminal or `COLUMNS`, readable from 80
columns. Every string from a model, a tool or a user passes `sanitize.clean_line`/`clean_text` on its way in, and
is never handed to rich as markup, so it cannot drive the terminal. `Progress` is the spinner of a real-model run.
"""

from __future__ import annotations

import os
import textwrap
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TextIO

from rich.console import Console, Group
from rich.rule import Rule
from rich.status import Status
from rich.table import Table
from rich.text import Text

from comparison.answers import contradictions
from comparison.closing import (
    FIRED,
    GUARD_LEGEND,
    MISSING,
    NOT_RUN,
    OWNERS,
    OWNERS_SUMMARY,
    RAISED,
    WHO_OWNS_WHAT,
)
from comparison.contenders import CONTENDERS
from comparison.records import RunRecord, cart_text, duration_text, pick, short_outcome
from comparison.sanitize import clean_line, clean_text
from comparison.scenarios import SCENARIOS, Scenario
from shared_tools.models.personas import PERSONAS
from shared_tools.results import Guard, StopReason, TraceEvent

WIDTH = 120
"""Terminal width when the output is not a terminal (a pipe, a file, a test) and `COLUMNS` does not say one: a wide
terminal's, at which the overview of nine contenders stays within 150 lines."""

STATUS_STYLE = {
    FIRED: "green",
    MISSING: "red",
    RAISED: "yellow",
    NOT_RUN: "dim",
    "not exercised": "cyan",
    "not measured": "dim",
}
"""A guard-matrix cell's colour by its status; a status not listed here is printed plain."""


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """A reader that closed the pipe (`compare.py | head`) is no failure: the BrokenPipeError goes up to the
        command, which ends quietly with exit 0 (`compare.main`), where rich itself would exit 1."""
        raise BrokenPipeError


def columns_setting() -> int | None:
    """The width `COLUMNS` asks for (``COLUMNS=80 python compare.py > out.txt``), or None when unset or not a
    positive number."""
    columns = os.environ.get("COLUMNS", "").strip()
    return int(columns) if columns.isdigit() and int(columns) > 0 else None


def make_console(file: TextIO) -> Console:
    """Rich output as wide as the terminal, or as `COLUMNS` says; on a pipe or file: no colour, and `WIDTH`
    columns unless `COLUMNS` is set."""
    columns = columns_setting()
    console = _Console(file=file, highlight=False, width=columns)
    if not console.is_terminal:
        console = _Console(file=file, highlight=False, width=columns or WIDTH, no_color=True, color_system=None)
    return console


def pages(console: Console, wanted: bool) -> bool:
    """Whether `paged` pages: asked for, and the output is a terminal (redirected, it is printed plain)."""
    return wanted and console.is_terminal


@contextmanager
def paged(console: Console, wanted: bool) -> Iterator[None]:
    """Everything printed in the block goes through a pager at its end when `pages` ($MANPAGER or $PAGER, else
    less, as pydoc picks it); otherwise it is printed as it comes. less gets -FRX unless $LESS says otherwise, as
    git does: the colours kept, no pager for what fits a screen, the text left on the screen when it quits."""
    if not pages(console, wanted):
        yield
        return
    os.environ.setdefault("LESS", "-FRX")
    with console.pager(styles=True):
        yield


TIME_WIDTH = 8
"""Characters of the time column in a trace line: the widest `duration_text` below 1,000,000 s (``<0.01 ms``)."""
NAME_WIDTH, NAME_MAX = 16, 24
"""A trace line's name column: at least 16 characters (``get_order_status``), and a name longer than 24 (an
invented tool's) is shortened, so one long name cannot push the rest of the line out of its column."""


def step_label(step: int, width: int = 0) -> str:
    """``[step 7]``, padded to `width` so ``[step 9]`` and ``[step 10]`` lines keep their columns."""
    return f"[step {step}]".ljust(width)


def tokens_per_step_cell(tokens: list[int]) -> str:
    """Tokens per model call for a table cell; a long run shows its start and end (the JSON keeps every step)."""
    if len(tokens) <= 8:
        return " ".join(str(t) for t in tokens)
    return " ".join(str(t) for t in tokens[:3]) + " … " + " ".join(str(t) for t in tokens[-2:])


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def trace_lines(trace: Sequence[dict[str, Any]], width: int) -> list[Text]:
    """A trace (`RunRecord.trace`) in the article's format, one line per model or tool call, long results shortened
    (except a guard's: the words a guard gave the model instead are wrapped over as many lines as they take).

    ``[step 1] model               2 ms  1 tool call(s), 779 tokens`` and, below it, the model's plan (the Plan
    part of the loop, where a reasoning model puts it); ``[step 1] search_books     0.31 ms  {"query":...} -> [...]``,
    the result on a line of its own (``-> [...]``) when the call does not fit on one.
    The step, name and time columns line up over the whole trace, past step 9 and for long tool names too.
    """
    if not trace:
        return []
    step_width = max(len(step_label(e["step"])) for e in trace)
    names = [_shorten(clean_line(e["name"]), NAME_MAX) for e in trace]
    name_width = max(NAME_WIDTH, *(len(n) for n in names))
    lines = []
    for event, name in zip(trace, names, strict=True):
        detail = clean_line(event["detail"])
        time_text = duration_text(event["duration_s"])
        prefix = f"{step_label(event['step'], step_width)} {name:<{name_width}}{time_text:>{TIME_WIDTH}}  "
        if event["name"] == "model":
            count, _, plan = detail.partition("; plan: ")
            lines.append(Text(prefix + f"{count}, {event['tokens']} tokens"))
            if plan:
                lines.append(Text(_shorten(f"{'':{step_width + 1}}plan: {plan}", width), style="dim"))
        else:
            style = "red" if event["is_error"] else ""
            args, arrow, result = detail.partition(" -> ")
            if event.get("guard") not in (None, Guard.TRUNCATED) and arrow and len(prefix + detail) > width:
                # A guard's words are the lesson: its result is wrapped under the call, never cut (a truncated
                # result is the tool's own data, shortened like any other).
                lines.append(Text(prefix + _shorten(args, width - len(prefix)), style=style))
                indent = " " * (step_width + 1)
                wrapped = textwrap.wrap(
                    result, width, initial_indent=f"{indent}-> ", subsequent_indent=f"{indent}   "
                ) or [f"{indent}->"]
                lines.extend(Text(line, style=style) for line in wrapped)
                continue
            if len(prefix + detail) <= width or not arrow:
                lines.append(Text(prefix + _shorten(detail, width - len(prefix)), style=style))
                continue
            # Too long for one line: the result gets a line of its own, so its start (a stock of 0, an error)
            # is shown instead of being cut off after the arguments.
            lines.append(Text(prefix + _shorten(args, width - len(prefix)), style=style))
            lines.append(Text(_shorten(f"{'':{step_width + 1}}-> {result}", width), style=style))
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
    console.print(Text("assistant> ", style="bold") + Text(clean_text(user_message)))
    if stop_reason != StopReason.DONE:
        console.print(Text(f"(stop reason: {clean_line(str(stop_reason))})"))


SPLIT_BELOW = 100
"""Below this width the side-by-side table leaves its tokens per step and final cart to a second table under it:
the numbers' columns would leave them a few characters each."""


def summary_table(
    records: list[RunRecord], *, show_turn: bool = False, title: Text | None = None, width: int = WIDTH
) -> Group:
    """The side-by-side table, one row per run, in one table `width` wide or, narrower than `SPLIT_BELOW`, in two
    (the numbers, then the tokens per step and the cart); the answers are listed under it (see `answer_grid`)."""
    split = width < SPLIT_BELOW
    outcomes = [clean_line(short_outcome(r)) for r in records]
    table = Table(expand=True, padding=(0, 1), title=title, title_justify="left", title_style="bold")
    if show_turn:
        table.add_column("turn", justify="right", width=4)
    table.add_column("contender", no_wrap=True, min_width=18)
    # As wide as its longest word, so an exception's name (GraphRecursionError) is never split.
    table.add_column("stop reason", width=max([13, *(len(w) for o in outcomes for w in o.split())]))
    table.add_column("model calls", justify="right", width=5)
    table.add_column("tool calls", justify="right", width=5)
    table.add_column("tokens", justify="right", width=6)
    if not split:
        table.add_column("tokens per step", ratio=4)
    table.add_column("wall", justify="right", width=7)
    if not split:
        table.add_column("final cart", ratio=4)
    detail = Table(expand=True, padding=(0, 1))
    if show_turn:
        detail.add_column("turn", justify="right", width=4)
    detail.add_column("contender", no_wrap=True, min_width=18)
    detail.add_column("tokens per step", ratio=1)
    detail.add_column("final cart", ratio=1)
    for r, outcome in zip(records, outcomes, strict=True):
        head: list[Text] = [Text(str(r.turn))] if show_turn else []
        head.append(Text(r.contender))
        steps, cart = Text(tokens_per_step_cell(r.tokens_per_step)), Text(clean_line(cart_text(r)))
        numbers = [
            Text(outcome, style="" if r.error is None else "yellow"),
            Text(str(r.model_calls)),
            Text(str(r.tool_calls)),
            Text(f"{r.tokens:,}"),
        ]
        wall = Text(duration_text(r.wall_s))
        if split:
            table.add_row(*head, *numbers, wall)
            detail.add_row(*head, steps, cart)
        else:
            table.add_row(*head, *numbers, steps, wall, cart)
    return Group(table, detail) if split else Group(table)


def growth_table(records: list[RunRecord], width: int = WIDTH) -> Group:
    """A long conversation, one row per contender: tokens of the first, the middle and the last turns, what the
    conversation holds at the end, and the time of the first and the last turn (every turn is in the JSON); in two
    tables narrower than `SPLIT_BELOW`, the times and the last turn in the second."""
    split = width < SPLIT_BELOW
    table = Table(expand=True, padding=(0, 1))
    table.add_column("contender", no_wrap=True, min_width=12)
    table.add_column("turns", justify="right", width=5)
    table.add_column("tokens per turn", ratio=4)
    table.add_column("stored", justify="right", width=9)
    table.add_column("check-\npoints", justify="right", width=6)
    detail = Table(expand=True, padding=(0, 1)) if split else table
    if split:
        detail.add_column("contender", no_wrap=True, min_width=12)
    detail.add_column("time per turn", ratio=2)
    detail.add_column("last turn", ratio=3)
    for contender in dict.fromkeys(r.contender for r in records):
        turns = sorted(pick(records, contender=contender), key=lambda r: r.turn)
        last = turns[-1]
        stored = last.facts.get("stored_bytes")
        checkpoints = last.facts.get("checkpoints")
        tokens = [r.tokens for r in turns]
        times = [r.wall_s for r in turns]
        how = (
            "no tool call"
            if last.tool_calls == 0
            else ", ".join(dict.fromkeys(e["name"] for e in last.trace if e["name"] != "model"))
        )
        cells = [
            Text(contender),
            Text(str(last.turn)),
            Text(tokens_per_step_cell(tokens)),
            Text(
                "-"
                if not isinstance(stored, int)
                else f"{stored / 1024:,.0f} KiB"
                if stored >= 10_000
                else f"{stored:,} B"
            ),
            Text("-" if not isinstance(checkpoints, int) else f"{checkpoints:,}"),
            Text(f"{duration_text(times[0])} … {duration_text(times[-1])}"),
            Text(
                clean_line(f"{short_outcome(last)}, {how}, cart {last.cart_total}"),
                style="" if last.error is None else "yellow",
            ),
        ]
        if split:
            table.add_row(*cells[:5])
            detail.add_row(cells[0], *cells[5:])
        else:
            table.add_row(*cells)
    return Group(table, detail) if split else Group(table)


ANSWER_CHARS = 600
"""The most of an answer the terminal shows; the JSON and the report keep it whole."""


def clip(text: str, limit: int = ANSWER_CHARS) -> str:
    """`text`, or its first `limit` characters and how many more there are (a small model may write thousands)."""
    return text if len(text) <= limit else f"{text[:limit]}... [{len(text) - limit:,} more characters]"


def answer_grid(records: list[RunRecord], *, show_turn: bool = False, show_goal: bool = False) -> Table:
    """What each run would show the user: the answer when done, an honest sentence (or the error) otherwise."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(ratio=1)
    for r in records:
        who = run_label(r, turn=show_turn, goal=show_goal) + ":"
        message = clean_text(clip(r.user_message))
        grid.add_row(Text(who, style="bold"), Text(message, style="" if r.error is None else "yellow"))
        if false := contradictions(r):
            grid.add_row(Text(""), Text(f"FALSE: the records contradict this answer: {'; '.join(false)}", style="red"))
        forced = r.facts.get("forced_answer")
        if forced is not None:
            text = clean_text(clip(str(forced))) or "(no text)"
            grid.add_row(
                Text(""),
                Text(f"forced answer, not the answer (the model asked again with tools off): {text}", style="dim"),
            )
    return grid


def _bullets(points: Sequence[str]) -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(ratio=1)
    for point in points:
        grid.add_row(Text("  •"), Text(clean_line(point)))
    return grid


def _render_growth(console: Console, runs: list[RunRecord], *, trace: bool) -> None:
    """A conversation that grows turn by turn: each contender's last turn's trace, then the growth table."""
    ran = [r for r in runs if r.facts.get("not_available") is None]
    if trace:
        # Only each conversation's last turn: the turns before it differ only in their numbers.
        for r in (r for r in ran if r.turn == max(x.turn for x in pick(ran, contender=r.contender))):
            console.print(Text(f"\n{r.contender} · turn {r.turn}: ", style="bold") + Text(clean_line(r.goal)))
            print_trace(console, r.trace)
        console.print()
    if ran:
        console.print(growth_table(ran, console.width))


def _render_traces(
    console: Console, runs: list[RunRecord], labels: dict[int, str], same: dict[int, str | None], *, show_turn: bool
) -> None:
    """Each run's trace and how it ended, or the name of the run with the very same trace shown before."""
    for r in runs:
        if same[id(r)] is not None:
            text = f"the same trace as {same[id(r)]} (same calls, results and tokens)."
            console.print(Text(f"\n{labels[id(r)]}: ", style="bold") + Text(text))
            continue
        turn = f" · turn {r.turn}" if show_turn else ""
        console.print(Text(f"\n{r.contender}{turn}: ", style="bold") + Text(clean_line(r.goal)))
        print_trace(console, r.trace)
        if r.error is not None:
            said = "the model call failed:" if r.model_failed else "raised"
            error = Text(f"{said} {clean_line(r.error)}", style="yellow")
            console.print(error, overflow="ellipsis", no_wrap=True)
    console.print()


def _render_tables(console: Console, runs: list[RunRecord], *, show_turn: bool, show_goal: bool) -> None:
    """The side-by-side table (one per goal when the goals differ), then what the user sees."""
    if show_goal:
        # A goal column leaves no room in 100 columns: one table per goal, titled with it, instead.
        by_goal = [pick(runs, goal=goal) for goal in dict.fromkeys(r.goal for r in runs)]
        for same_goal in by_goal:
            title = Text(f"goal: {clean_line(same_goal[0].goal)}", style="bold")
            console.print(summary_table(same_goal, show_turn=show_turn, title=title, width=console.width))
        runs = [r for same_goal in by_goal for r in same_goal]
    else:
        console.print(summary_table(runs, show_turn=show_turn, width=console.width))
    console.print(Text("What the user sees:", style="bold"))
    console.print(answer_grid(runs, show_turn=show_turn, show_goal=show_goal))


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
        if scenario.growth:
            _render_growth(console, runs, trace=trace)
            continue
        if trace:
            _render_traces(console, runs, labels, same, show_turn=show_turn)
        _render_tables(console, runs, show_turn=show_turn, show_goal=show_goal)
    points = scenario.notice_points(records)
    if points:
        console.print(Text("\nWhat to notice:", style="bold"))
        console.print(_bullets(points))
    console.print()


def guard_legend(between: str, separator: str) -> str:
    """`GUARD_LEGEND` on one line: ``fired = the guard stopped ...; missing = ...``."""
    return separator.join(f"{status}{between}{meaning}" for status, meaning in GUARD_LEGEND.items())


def render_guard_matrix(console: Console, rows: list[dict[str, Any]], contenders: Sequence[str]) -> None:
    """The guard matrix and its legend; nothing at all when no run tested a guard (a header over no rows says
    nothing the reader can use)."""
    if not rows:
        return
    console.print(Rule("Guard matrix (from the runs above)", style="bold"))
    # A block per guard and a line per contender: the cells name classes (ModelCallLimitMiddleware) that a column
    # per contender would split, and nine contenders fit this way as well as two.
    names = max(len(c) for c in contenders)
    for row in rows:
        console.print(Text(f"{row['guard']} ({row['scenario']})", style="bold"))
        grid = Table.grid(padding=(0, 1))
        grid.add_column(width=1)
        grid.add_column(width=names, no_wrap=True)
        grid.add_column(ratio=1)
        for contender in contenders:
            cell = row["cells"][contender]
            grid.add_row(
                Text(""), Text(contender), Text(clean_line(cell["text"]), style=STATUS_STYLE.get(cell["status"], ""))
            )
        console.print(grid)
    console.print(guard_legend(" = ", "; "))


def render_not_run(
    console: Console, number: int, scenario: Scenario, supported: Sequence[str], chosen: Sequence[str]
) -> None:
    """One line where a scenario would be, when none of the chosen contenders runs it."""
    line = (
        f"{number}. {scenario.name}: not run; it is run by {', '.join(supported) or 'no contender'}, "
        f"and --contenders chose {', '.join(chosen)}"
    )
    console.print(Text(line, style="yellow"))
    console.print()


def render_who_owns_what(console: Console) -> None:
    console.print(Rule("Who owns what", style="bold"))
    # A block per concern and a line per owner, as the guard matrix: long class names stay whole at 80 columns.
    names = max(len(owner) for owner in OWNERS)
    for concern, *owned in WHO_OWNS_WHAT:
        console.print(Text(concern, style="bold"))
        grid = Table.grid(padding=(0, 1))
        grid.add_column(width=1)
        grid.add_column(width=names, no_wrap=True)
        grid.add_column(ratio=1)
        for owner, text in zip(OWNERS, owned, strict=True):
            grid.add_row(Text(""), Text(owner), Text(text))
        console.print(grid)
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


class Progress:
    """The live spinner of a real-model run: which run, which step, and how long it has been waiting."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._status: Status | None = None
        """The live spinner while `spinning`, else None."""
        self.start_run("")

    def start_run(self, label: str) -> None:
        self.label, self.phase = label, "step 1: waiting for the model"
        self.started = self.since = time.monotonic()

    def on_event(self, event: TraceEvent) -> None:
        """Called from the agent's `on_event`: a model reply means tools run next, a tool result means the model."""
        if event.is_model:
            self.phase = f"step {event.step}: running tools"
        else:
            self.phase = f"step {event.step + 1}: waiting for the model"
        self.since = time.monotonic()

    def __rich__(self) -> Text:
        # Rendered again on every refresh, so the seconds tick while the model thinks.
        now = time.monotonic()
        return Text(f"{self.label}  {self.phase}  {now - self.since:4.1f}s  (run {now - self.started:.0f}s)")

    @contextmanager
    def spinning(self) -> Iterator[None]:
        with self.console.status(self) as status:
            self._status = status
            try:
                yield
            finally:
                self._status = None

    @contextmanager
    def paused(self) -> Iterator[None]:
        """The spinner stopped for a moment, so a question to the user (an approval) is not drawn over."""
        status = self._status
        if status is None:
            yield
            return
        status.stop()
        try:
            yield
        finally:
            status.start()

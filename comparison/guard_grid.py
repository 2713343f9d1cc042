"""The overview's guard matrix on a terminal: a row per contender and a column per guard, one status word per cell.

A column is as wide as its longest word, wider where that keeps a cell on one line, so no word is cut and more
contenders only add rows. Only a console too narrow for every column's longest word (80 columns) gets the guards in
more than one table. `compare.py --full` prints each cell's details (`render.render_guard_matrix`).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from comparison.render import STATUS_STYLE
from comparison.scenarios.matrix import GUARD_LEGEND

NAME_HEADER = "contender"
RULE = "─"


def guard_header(row: dict[str, Any], numbers: dict[str, int]) -> str:
    """``step limit (3)``: the guard and its scenario's number in the overview, or its name when it has none."""
    return f"{row['guard']} ({numbers.get(row['scenario'], row['scenario'])})"


def longest_word(texts: Sequence[str]) -> int:
    return max(len(word) for text in texts for word in text.split())


def column_chunks(widths: Sequence[int], room: int) -> list[list[int]]:
    """The indexes of `widths` in order, cut into runs that each fit in `room` (a column wider than `room` alone)."""
    chunks: list[list[int]] = [[]]
    used = 0
    for i, w in enumerate(widths):
        if chunks[-1] and used + w > room:
            chunks.append([])
            used = 0
        chunks[-1].append(i)
        used += w
    return chunks


def column_widths(headers: Sequence[str], cells: Sequence[Sequence[str]], room: int) -> list[int]:
    """Each column as wide as its longest word, then widened, the cheapest first, where that puts every cell of it
    on one line and the whole still fits in `room` (a space between columns counted)."""
    widths = [longest_word([header, *column]) for header, column in zip(headers, cells, strict=True)]
    wanted = [max(len(cell) for cell in column) for column in cells]
    spare = room - sum(widths) - (len(widths) - 1)
    for i in sorted(range(len(widths)), key=lambda i: wanted[i] - widths[i]):
        grow = wanted[i] - widths[i]
        if 0 < grow <= spare:
            widths[i], spare = wanted[i], spare - grow
    return widths


def header_lines(header: str, width: int) -> list[str]:
    return textwrap.wrap(header, width, break_long_words=False, break_on_hyphens=False)


def stacked(header: str, width: int, height: int) -> Text:
    """`header` in lines of whole words `width` wide, pushed down to `height` lines so every header ends on the
    line just over the first row."""
    lines = header_lines(header, width)
    return Text("\n" * (height - len(lines)) + "\n".join(lines), "bold")


def grid_table(
    names: Sequence[str], headers: Sequence[str], cells: Sequence[Sequence[str]], widths: list[int]
) -> Table:
    """One table: the contenders' names, then a column per guard (`cells[guard][contender]`) at `widths`."""
    height = max(len(header_lines(h, w)) for h, w in zip(headers, widths, strict=True))
    table = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False)
    name_width = max(len(NAME_HEADER), *(len(name) for name in names))
    table.add_column(stacked(NAME_HEADER, name_width, height), width=name_width, no_wrap=True)
    for header, width in zip(headers, widths, strict=True):
        table.add_column(stacked(header, width, height), width=width)
    # A rule under each header: where each column starts and ends, at a glance and without colour.
    table.add_row(*(Text(RULE * w, "dim") for w in [name_width, *widths]))
    for r, name in enumerate(names):
        table.add_row(Text(name), *(Text(column[r], STATUS_STYLE.get(column[r], "")) for column in cells))
    return table


def render_guard_grid(
    console: Console,
    matrix: list[dict[str, Any]],
    contenders: Sequence[str],
    numbers: dict[str, int] | None = None,
) -> None:
    """The guard matrix with one status word per cell, and what the statuses it shows mean.

    `numbers`: each scenario's number in the overview, to name a guard's scenario in its header.
    """
    if not matrix:
        return
    console.print()
    console.print(Text("Guard matrix: did the guard act in the runs above? (its scenario in brackets)", "bold"))
    headers = [guard_header(row, numbers or {}) for row in matrix]
    cells = [[row["cells"][c]["status"] for c in contenders] for row in matrix]
    room = console.width - max(len(NAME_HEADER), *(len(c) for c in contenders)) - 1
    least = [longest_word([header, *column]) + 1 for header, column in zip(headers, cells, strict=True)]
    for n, chunk in enumerate(column_chunks(least, room + 1)):
        if n:
            console.print()
        chosen_headers, chosen_cells = [headers[i] for i in chunk], [cells[i] for i in chunk]
        widths = column_widths(chosen_headers, chosen_cells, room)
        console.print(grid_table(contenders, chosen_headers, chosen_cells, widths))
    seen = {cell["status"] for row in matrix for cell in row["cells"].values()}
    legend = "; ".join(f"{status} = {meaning}" for status, meaning in GUARD_LEGEND.items() if status in seen)
    console.print(Text(legend, "dim"))
    console.print()

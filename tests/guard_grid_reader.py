"""`read_guard_grid`: the overview's guard matrix read back from its printed lines, as a reader's eye would.

Every table it is cut into is read by the rule under its header: each run of ``─`` is a column; a header is the
words over its column joined top to bottom; a cell wrapped onto the next line is joined too.
"""

from __future__ import annotations

import re

RULE = re.compile(r"─+")


def columns_of(rule: str) -> list[tuple[int, int]] | None:
    """The (start, end) of each column, when `rule` is a header's rule: runs of ``─`` split by single spaces."""
    if not rule.strip() or set(rule.strip()) - {"─", " "} or "  " in rule.strip():
        return None
    return [(m.start(), m.end()) for m in RULE.finditer(rule)]


def _cells(line: str, spans: list[tuple[int, int]]) -> list[str]:
    return [line[a:b].strip() for a, b in spans]


def read_table(lines: list[str], at: int, contenders: list[str]) -> dict[tuple[str, str], str]:
    """The table whose header's rule is `lines[at]`: (header, contender) -> its cell's words."""
    spans = columns_of(lines[at]) or []
    above: list[list[str]] = []
    for line in reversed(lines[:at]):
        name, *words = _cells(line, spans)
        if not line.strip() or name not in ("", "contender"):
            break
        above.insert(0, words)
    headers = [" ".join(word for word in column if word) for column in zip(*above, strict=True)]
    cells: dict[tuple[str, str], str] = {}
    row: str | None = None
    for line in lines[at + 1 :]:
        name, *words = _cells(line, spans)
        if not line.strip() or (name and name not in contenders):
            break
        row = name or row
        assert row is not None, f"a cell under no contender: {line!r}"
        for header, word in zip(headers, words, strict=True):
            cells[(header, row)] = f"{cells.get((header, row), '')} {word}".strip()
    return cells


def read_guard_grid(lines: list[str], contenders: list[str]) -> dict[tuple[str, str], str]:
    """(header, contender) -> the words in that cell, over every table after the ``Guard matrix`` title; a header
    is its column's words (``step limit (3)``)."""
    start = next(i for i, line in enumerate(lines) if line.startswith("Guard matrix"))
    end = next((i for i, line in enumerate(lines) if i > start and line.startswith("What to try next")), len(lines))
    cells: dict[tuple[str, str], str] = {}
    for at in range(start + 1, end):
        if columns_of(lines[at]):
            cells |= read_table(lines, at, contenders)
    return cells

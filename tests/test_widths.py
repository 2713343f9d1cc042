"""Every table follows the console's width and stays readable from 80 columns: the overview of five and of nine
contenders (fixed records of five under four more names), rendered from one run's records at 80 and 120 columns:
no status cut with an ellipsis, no contender's name split over two lines, and the line counts bounded."""

from __future__ import annotations

import copy
import io
import itertools
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from comparison.closing import guard_matrix
from comparison.overview import render_overview
from comparison.records import RunRecord
from comparison.render import columns_setting
from comparison.scenarios import SCENARIOS
from tests.guard_grid_reader import columns_of, read_guard_grid

ROOT = Path(__file__).resolve().parent.parent
EXTRA = {
    "pydantic-ai": "handwritten",
    "openai-agents": "maf",
    "smolagents": "langgraph-defaults",
    "strands": "create-agent",
}
"""Four more names, each given a copy of one contender's records, to see nine contenders laid out."""


@pytest.fixture(scope="module")
def records(newcomer_run: dict[str, Any]) -> tuple[list[str], list[RunRecord]]:
    """The contenders and records of `python compare.py --json` (conftest's `newcomer_run`)."""
    doc = copy.deepcopy(newcomer_run["doc"])
    fields = set(RunRecord.__dataclass_fields__)
    return [c["name"] for c in doc["contenders"]], [
        RunRecord(**{k: v for k, v in r.items() if k in fields}) for r in doc["runs"]
    ]


def overview(contenders: list[str], records: list[RunRecord], width: int) -> list[str]:
    out = io.StringIO()
    console = Console(file=out, width=width, no_color=True, color_system=None, highlight=False)
    render_overview(
        console, "compare.py", "scripted", SCENARIOS, contenders, records, guard_matrix(records, contenders)
    )
    return out.getvalue().splitlines()


def tokens(line: str) -> list[tuple[int, str]]:
    return [(m.start(), m.group().strip(",;()")) for m in re.finditer(r"\S+", line)]


def split_names(lines: list[str], names: list[str]) -> list[str]:
    """The places where a name was cut over two lines: the end of one line and the start of the next, or one
    cell's text and the text under it in the same column, that make a name only together."""
    found = []
    for line, below in itertools.pairwise(lines):
        here, under = tokens(line), dict(tokens(below))
        pairs = [(here[-1][1], tokens(below)[0][1])] if here and under else []
        pairs += [(word, under[at]) for at, word in here if at in under]
        found += [a + b for a, b in pairs if a not in names and a + b in names]
    return found


def nine(contenders: list[str], records: list[RunRecord]) -> tuple[list[str], list[RunRecord]]:
    more = list(records)
    for name, like in EXTRA.items():
        for record in (r for r in records if r.contender == like):
            twin = copy.deepcopy(record)
            twin.contender = name
            more.append(twin)
    return [*contenders, *EXTRA], more


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("how_many", [5, 9])
def test_the_overview_is_readable_at_80_and_120_columns(
    records: tuple[list[str], list[RunRecord]], width: int, how_many: int
) -> None:
    contenders, runs = records
    if len(contenders) < how_many:  # fewer contenders registered: the records of some under more names
        contenders, runs = nine(contenders, runs)
    contenders = contenders[:how_many]
    runs = [r for r in runs if r.contender in contenders]
    lines = overview(contenders, runs, width)
    assert all(len(line.rstrip()) <= width for line in lines)
    matrix = lines[next(i for i, line in enumerate(lines) if line.startswith("Guard matrix")) :]
    assert not any("…" in line for line in matrix), "a status cut in the guard matrix"
    assert_the_grid_shows_the_records(lines, contenders, runs, most_tables=1 if width >= 120 else 2)
    assert not split_names(lines, contenders)
    assert len(lines) <= (150 if width >= 120 else 230), len(lines)


def assert_the_grid_shows_the_records(
    lines: list[str], contenders: list[str], runs: list[RunRecord], *, most_tables: int
) -> None:
    """A row per contender in each of at most `most_tables` tables and a column per guard, headed by the guard and its
    scenario's number, each cell the status word its records give, whole."""
    numbers = {s.name: n for n, s in enumerate(SCENARIOS, start=1)}
    matrix = guard_matrix(runs, contenders)
    shown = read_guard_grid(lines, contenders)
    assert len(shown) == len(matrix) * len(contenders), "a cell per guard and contender, and no other"
    for row in matrix:
        for contender in contenders:
            header = f"{row['guard']} ({numbers[row['scenario']]})"
            assert shown[(header, contender)] == row["cells"][contender]["status"], (header, contender)
    rules = [line for line in lines if columns_of(line)]
    assert 1 <= len(rules) <= most_tables, rules


def test_a_tenth_contender_adds_a_row_to_the_guard_matrix_at_120_columns(
    records: tuple[list[str], list[RunRecord]],
) -> None:
    """A name longer than any registered one, with a copy of the hand-written loop's records: one table still."""
    contenders, runs = records
    if len(contenders) < 9:
        contenders, runs = nine(contenders, runs)
    runs = list(runs)
    tenth = "a-tenth-contender-named-long"
    for record in [r for r in runs if r.contender == "handwritten"]:
        twin = copy.deepcopy(record)
        twin.contender = tenth
        runs.append(twin)
    contenders = [*contenders[:9], tenth]
    runs = [r for r in runs if r.contender in contenders]
    lines = overview(contenders, runs, 120)
    assert all(len(line.rstrip()) <= 120 for line in lines)
    assert_the_grid_shows_the_records(lines, contenders, runs, most_tables=1)


def test_a_name_split_over_two_lines_is_found() -> None:
    """The check above finds what the old full matrix printed at 100 columns: "langgraph-defau" over "lts"."""
    assert split_names(["| langgraph-defau |", "| lts             |"], ["langgraph-defaults"]) == ["langgraph-defaults"]
    assert split_names(["fired in langgraph-", "defaults"], ["langgraph-defaults"]) == ["langgraph-defaults"]
    assert split_names(["langgraph and", "langgraph-defaults"], ["langgraph", "langgraph-defaults"]) == []


def test_columns_sets_the_width_also_on_a_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert columns_setting() == 80
    done = subprocess.run(
        [sys.executable, "compare.py", "orders"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert max(len(line) for line in done.stdout.splitlines()) <= 80
    monkeypatch.delenv("COLUMNS")
    assert columns_setting() is None
    monkeypatch.setenv("COLUMNS", "wide")
    assert columns_setting() is None


@pytest.fixture(scope="module")
def eval_doc() -> dict[str, Any]:
    """Eight trials of two scenarios on the noisy scripted model: runs end in several ways, so "ended" is long."""
    from comparison.eval.trials import EvalPlan, eval_document, run_eval
    from comparison.scenarios import SCENARIOS_BY_NAME

    plan = EvalPlan(scenarios=(SCENARIOS_BY_NAME["bookstore"], SCENARIOS_BY_NAME["looping-model"]), runs=8, seed=7)
    return eval_document(run_eval(plan))


@pytest.mark.parametrize("width", [80, 120])
def test_the_eval_table_keeps_its_ended_column_readable(eval_doc: dict[str, Any], width: int) -> None:
    from comparison.eval.report import render_eval

    out = io.StringIO()
    render_eval(Console(file=out, width=width, no_color=True, color_system=None, highlight=False), eval_doc)
    lines = out.getvalue().splitlines()
    assert all(len(line.rstrip()) <= width for line in lines)
    [header, *_] = [line for line in lines if line.startswith("contender") and "ended" in line]
    ended_at = header.index("ended")
    assert width - ended_at >= 14, "the ended column keeps room for 'done 14, max steps 2' on two lines at most"
    rows = [line for line in lines if re.search(r" \d+/\d+ ", line[:ended_at])]
    assert rows, "a row per contender and task"
    for line in rows:
        assert "…" not in line, line
        assert all(len(word) > 1 or word.isdigit() for word in line[ended_at:].split()), line
    tables = "\n".join(lines[: next(i for i, line in enumerate(lines) if line.startswith("Why runs were lost"))])
    assert len(tables.splitlines()) <= 4 * len([r for r in rows if r in tables]) + 12


def test_a_scenario_in_full_keeps_its_tables_whole_at_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """The side-by-side and the growth tables go on in a second table rather than crushing their columns."""
    monkeypatch.setenv("COLUMNS", "80")
    done = subprocess.run(
        [sys.executable, "compare.py", "bookstore", "flaky-warehouse", "long-session", "--no-trace", "--full"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = done.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    cells = [line for line in lines if line.startswith("│")]
    assert len(cells) > 20
    assert not [line for line in cells if "…" in line.replace(" … ", "")], "a cell cut short"
    assert "tokens per step" in done.stdout and "The Quiet Orchard x1" in done.stdout
    assert not split_names(lines, ["handwritten", "langgraph", "langgraph-defaults", "create-agent", "maf"])

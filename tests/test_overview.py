"""`python compare.py` with no scenario prints an overview a person reads: what ran, one line per contender per
scenario with the numbers of its records, each scenario's lesson, the guard matrix by status, what to try next.
A named scenario, `--full` and `--no-trace` show the runs in full."""

from __future__ import annotations

import copy
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import compare
from comparison.closing import GUARDS
from comparison.records import RunRecord
from comparison.scenarios import SCENARIOS
from comparison.scenarios.s01_bookstore import bookstore_headline
from comparison.scenarios.s09_session import session_headline
from shared_tools.results import StopReason
from tests.guard_grid_reader import read_guard_grid

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 150


@pytest.fixture(scope="module")
def default_run(newcomer_run: dict[str, Any]) -> dict[str, Any]:
    """`python compare.py --json PATH` in its own process, as a newcomer runs it (stdout a pipe and no COLUMNS: the
    default width, `render.WIDTH`; conftest's `newcomer_run`)."""
    doc = copy.deepcopy(newcomer_run["doc"])
    doc["contenders"] = [c["name"] for c in doc["contenders"]]
    return {"out": newcomer_run["out"], "lines": newcomer_run["out"].splitlines(), "doc": doc}


def stop_name(run: dict[str, Any]) -> str:
    if run["stop_reason"] is None:
        return "model call failed" if run["model_failed"] else f"raised {run['error'].split(':', 1)[0]}"
    return StopReason(run["stop_reason"]).name.lower()


def ran_runs(doc: dict[str, Any], scenario: str, contender: str) -> list[dict[str, Any]]:
    return [
        r
        for r in doc["runs"]
        if r["scenario"] == scenario and r["contender"] == contender and "not_available" not in r["facts"]
    ]


def parse_outcomes(text: str, runs: int) -> Counter[str]:
    """``max_steps, done ×2`` -> {max_steps: 1, done: 2}; ``done`` alone: every run ended so; a variant that did
    not run (``done; gate not run``) is no outcome."""
    text = text.split("; ", 1)[0]
    if ", " not in text and " ×" not in text:
        return Counter({text: runs})
    found: Counter[str] = Counter()
    for part in text.split(", "):
        name, _, count = part.partition(" ×")
        found[name] += int(count or 1)
    return found


def token_range(text: str) -> tuple[int, int]:
    """``12,605`` -> (12605, 12605); ``15,686-876`` -> (15686, 15876); ``9,990-10,400`` -> (9990, 10400)."""
    low_text, _, high_text = text.partition("-")
    low = int(low_text.replace(",", ""))
    if not high_text:
        return low, low
    if "," in high_text:
        return low, int(high_text.replace(",", ""))
    return low, low // 1000 * 1000 + int(high_text)


def overview_blocks(lines: list[str], doc: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per scenario, per contender: its group line's runs, outcomes and numbers, the group's names and stop cell
    joined over their wrapped lines ("all 5" and "the other 3" read as the contenders they stand for); columns are
    found from the header line, so a change of width does not break it."""
    [header] = [line for line in lines if re.search(r"contenders\s+runs\s+stopped\s+model\s+tools\s+tokens", line)]
    runs_at, stop_at = header.index("runs"), header.index("stopped")
    numbers_at, cart_at = header.index("model"), header.index("final cart")
    names = {s["name"] for s in doc["scenarios"]}
    blocks: dict[str, list[dict[str, Any]]] = {}
    scenario, group, in_cart = None, None, False
    for line in lines:
        title = re.match(r"^\s*\d+\. ([\w-]+):", line)
        if title and title.group(1) in names:
            scenario, group = title.group(1), None
            blocks[scenario] = []
            continue
        if line.startswith("Guard matrix"):
            break
        if scenario is None or not line.strip():
            continue
        runs, who = line[runs_at : runs_at + 4].strip(), line[:runs_at].strip()
        if runs.isdigit() and who:
            in_cart = False
            group = {"names": who, "runs": int(runs)}
            blocks[scenario].append(group)
            if line[stop_at:].startswith("not run"):
                group["stop"] = "not run"
                continue
            model, tools, tokens = line[numbers_at:cart_at].split()
            group |= {
                "stop": line[stop_at:numbers_at].strip(),
                "model": int(model),
                "tools": int(tools),
                "tokens": tokens,
            }
        elif group is None or (line.startswith("    ") and line[4] != " "):  # a lesson's line
            continue
        elif line.strip().startswith("cart: ") or in_cart:  # a cart on a line of its own, and its wrapped lines
            in_cart = True
        else:
            group["names"] += f" {who}" if who else ""
            if "model" in group and line[stop_at:numbers_at].strip():
                group["stop"] += " " + line[stop_at:numbers_at].strip()
            if "model" in group and group["tokens"].endswith("-"):  # a range's high end, under its low
                group["tokens"] += line[numbers_at:cart_at].strip()
    per_contender: dict[str, dict[str, dict[str, Any]]] = {}
    for scenario, groups in blocks.items():
        recorded = list(dict.fromkeys(r["contender"] for r in doc["runs"] if r["scenario"] == scenario))
        named = {c for g in groups for c in g["names"].split(", ") if c in recorded}
        per_contender[scenario] = {}
        for g in groups:
            if re.fullmatch(r"all \d+", g["names"]):
                members = recorded
            elif re.fullmatch(r"the other \d+", g["names"]):
                members = [c for c in recorded if c not in named]
            else:
                members = g["names"].split(", ")
            assert g["names"].split()[-1] == str(len(members)) or not g["names"][-1].isdigit(), g
            for contender in members:
                per_contender[scenario][contender] = {k: v for k, v in g.items() if k != "names"}
    return per_contender


def test_the_default_run_fits_in_150_lines_and_its_first_screen_says_what_ran(default_run: dict[str, Any]) -> None:
    lines, doc = default_run["lines"], default_run["doc"]
    assert len(lines) <= MAX_LINES, f"{len(lines)} lines"
    runs = [r for r in doc["runs"] if "not_available" not in r["facts"]]
    first_screen = "\n".join(lines[:25])
    assert f"{len(doc['scenarios'])} scenarios × {len(doc['contenders'])} contenders: {len(runs)} runs" in lines[0]
    assert "scripted model" in lines[0]
    assert all(c in first_screen for c in doc["contenders"])
    assert "stopped" in first_screen and "final cart" in first_screen
    assert "[step 1]" not in default_run["out"], "no trace in the overview"
    assert "Who owns what" not in default_run["out"]


def test_the_overview_has_a_line_per_contender_per_scenario_with_the_records_numbers(
    default_run: dict[str, Any],
) -> None:
    doc = default_run["doc"]
    blocks = overview_blocks(default_run["lines"], doc)
    assert set(blocks) == {s["name"] for s in doc["scenarios"]}
    checked = 0
    for scenario, rows in blocks.items():
        recorded = {r["contender"] for r in doc["runs"] if r["scenario"] == scenario}
        assert set(rows) == recorded, scenario
        for contender, row in rows.items():
            mine = ran_runs(doc, scenario, contender)
            if not mine:
                assert (row["runs"], row["stop"]) == (0, "not run"), (scenario, contender)
                continue
            assert row["runs"] == len(mine), (scenario, contender)
            ended = Counter(stop_name(r) for r in mine)
            assert parse_outcomes(row["stop"], row["runs"]) == ended, (scenario, contender)
            assert row["model"] == sum(r["model_calls"] for r in mine)
            assert row["tools"] == sum(r["tool_calls"] for r in mine)
            low, high = token_range(row["tokens"])
            assert low <= sum(r["tokens"] for r in mine) <= high <= low * 1.05, (scenario, contender)
            checked += 1
    assert checked >= 60


def test_the_overview_shows_the_guard_matrix_as_recorded_and_what_to_try_next(default_run: dict[str, Any]) -> None:
    lines, doc = default_run["lines"], default_run["doc"]
    matrix = doc["guard_matrix"]
    assert len(matrix) == len(GUARDS)
    numbers = {s["name"]: n for n, s in enumerate(doc["scenarios"], start=1)}
    shown = read_guard_grid(lines, doc["contenders"])
    assert len(shown) == len(matrix) * len(doc["contenders"]), "a cell per guard and contender, and no other"
    for row in matrix:
        header = f"{row['guard']} ({numbers[row['scenario']]})"
        for contender in doc["contenders"]:
            assert shown[(header, contender)] == row["cells"][contender]["status"], (header, contender)
    tail = default_run["out"][default_run["out"].index("What to try next") :]
    for command in (
        "python compare.py bookstore",
        "python compare.py chat",
        "python compare.py serve",
        "python compare.py --report",
        "python compare.py --model local",
        "python compare.py --full",
    ):
        assert command in tail, command


def test_each_guard_scenarios_lesson_names_the_contenders_by_what_the_matrix_recorded(
    default_run: dict[str, Any],
) -> None:
    out, doc = " ".join(default_run["out"].split()), default_run["doc"]
    others_said = 0
    for row in doc["guard_matrix"]:
        cells = {c: cell for c, cell in row["cells"].items() if cell["status"] != "not run"}
        groups = [
            [c for c, cell in cells.items() if cell["status"] == status]
            for status in dict.fromkeys(cell["status"] for cell in cells.values())
        ]
        largest = max(groups, key=len)
        for group in groups:
            status = cells[group[0]]["status"]
            if len(group) == len(cells):
                names = f"all {len(cells)}"
            elif group is largest and len(group) >= 3:  # the smaller groups are named, this one is the rest
                names = f"the other {len(group)}"
                others_said += 1
            else:
                names = ", ".join(group)
            assert f"{status} in {names}" in out, (row["guard"], status)
    assert others_said > 0


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert compare.main(list(argv)) == compare.EXIT_OK
    return capsys.readouterr().out


def test_a_named_scenario_shows_its_full_traces_without_who_owns_what(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_main(capsys, "bookstore")
    assert "[step 1] model" in out and "What to notice:" in out and "What the user sees:" in out
    assert "Who owns what" not in out and "What to try next" not in out


def test_full_shows_every_scenario_with_traces_and_who_owns_what_once(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_main(capsys, "orders", "looping-model", "--full")
    assert out.count("Who owns what") == 1
    assert "[step 1] model" in out and "Guard matrix (from the runs above)" in out


def test_no_trace_shows_each_scenario_in_full_without_traces(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_main(capsys, "orders", "--no-trace")
    assert "What to notice:" in out and "[step" not in out and "Who owns what" not in out


# --- the lessons are the records' -------------------------------------------------------------------------------


def records_of(doc: dict[str, Any], scenario: str) -> list[RunRecord]:
    fields = set(RunRecord.__dataclass_fields__)
    return [RunRecord(**{k: v for k, v in r.items() if k in fields}) for r in doc["runs"] if r["scenario"] == scenario]


def test_the_lessons_change_when_the_records_do(default_run: dict[str, Any]) -> None:
    doc = default_run["doc"]
    assert {s.name for s in SCENARIOS if s.headline is not None}.isdisjoint(GUARDS.values())
    bookstore = records_of(doc, "bookstore")
    assert f"grew every step in all {len(doc['contenders'])}" in (bookstore_headline(bookstore, lambda r: None) or "")
    bookstore[0].tokens_per_step = [900, 800, 1000]
    assert "grew every step in langgraph" in (bookstore_headline(bookstore, lambda r: None) or "")
    session = [r for r in records_of(doc, "session") if "not_available" not in r.facts]
    second = [r for r in session if r.turn == 2]
    from_history = sum(r.tool_calls == 0 for r in second)
    said = session_headline(session, lambda r: None) or ""
    assert f"{from_history} of {len(second)} conversations" in said
    next(r for r in second if r.tool_calls == 0).tool_calls = 1
    said = session_headline(session, lambda r: None) or ""
    assert f"{from_history - 1} of {len(second)} conversations" in said


def test_the_readmes_sample_is_the_first_lines_of_the_default_run(default_run: dict[str, Any]) -> None:
    """The README quotes the overview's first lines; they are checked here, so they cannot drift from the program."""
    readme = (ROOT / "README.md").read_text("utf-8")
    block = re.search(r"<!-- sample -->\n```text\n(.*?)\n```\n<!-- /sample -->", readme, re.S)
    assert block, "README.md has no sample block"
    sample = [line for line in block.group(1).splitlines() if line != "..."]
    assert len(sample) >= 10
    assert sample == [line.rstrip() for line in default_run["lines"][: len(sample)]]


def test_the_scenarios_pages_guard_matrix_is_the_default_runs(default_run: dict[str, Any]) -> None:
    """docs/scenarios.md shows the matrix of the scripted runs as a table; it is read back here, so it cannot drift
    from what the contenders do (a failure prints the row the page should have)."""
    page = (ROOT / "docs" / "scenarios.md").read_text("utf-8").splitlines()
    at = next(i for i, line in enumerate(page) if line.startswith("| contender | step limit"))
    headers = [cell.strip() for cell in page[at].strip("|").split("|")][1:]
    rows = {}
    for line in page[at + 2 :]:
        if not line.startswith("|"):
            break
        name, *cells = (cell.strip() for cell in line.strip("|").split("|"))
        rows[name.strip("`")] = cells
    matrix, contenders = default_run["doc"]["guard_matrix"], default_run["doc"]["contenders"]
    assert headers == [f"{row['guard']} (`{row['scenario']}`)" for row in matrix]
    assert list(rows) == contenders
    for contender in contenders:
        wanted = [row["cells"][contender]["status"] for row in matrix]
        assert rows[contender] == wanted, f"| `{contender}` | " + " | ".join(wanted) + " |"

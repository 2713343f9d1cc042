"""The README's table of mirrored names: every name on either side exists, so the table cannot drift from the code."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
HEADER = "| `handwritten/loop.py` | LangGraph side | what it is |"


def table_rows() -> list[tuple[str, str]]:
    lines = README.read_text(encoding="utf-8").splitlines()
    start = lines.index(HEADER) + 2  # past the header and the | --- | line
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        loop_cell, graph_cell, _ = (cell.strip() for cell in line.strip("|").split("|"))
        rows.append((loop_cell, graph_cell))
    return rows


def resolve(module: str, dotted: str) -> object:
    owner: object = importlib.import_module(module)
    for part in dotted.split("."):
        owner = getattr(owner, part)  # AttributeError names what is missing
    return owner


def test_the_table_has_the_core_rows() -> None:
    left = [loop for loop, _ in table_rows()]
    for name in ("`AgentLoop.step`", "`AgentLoop.call_model`", "`AgentLoop.run_tools`", "`_Run`", "`AgentLoop._emit`"):
        assert name in left


@pytest.mark.parametrize(("loop_cell", "graph_cell"), table_rows(), ids=lambda cell: cell)
def test_every_mirrored_name_exists_on_both_sides(loop_cell: str, graph_cell: str) -> None:
    names = re.findall(r"`([^`]+)`", loop_cell)
    assert names, loop_cell
    for name in names:
        module = "shared_tools.results" if name.startswith("AgentLimits") else "handwritten.loop"
        resolve(module, name)
    found = re.findall(r"`(\w+)\.py:([\w.]+)`", graph_cell)
    assert found and len(found) == graph_cell.count("`") // 2, f"each graph-side name is `file.py:Name`: {graph_cell}"
    for file, dotted in found:
        resolve(f"langgraph_version.{file}", dotted)

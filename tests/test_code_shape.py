"""Function size in the product (issue 36): no function over 60 lines except data tables, ruff's C901 at most 15.

The product is every .py file but tests/: the packages, compare.py and benchmarks/ (a benchmark is read as the
evidence behind a number, so it is held to the same bar). A function's length runs from its first decorator to
its last line, docstring and comments included: what a reader has to take in at once.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 60
MAX_COMPLEXITY = 15
NOT_PRODUCT = {"tests"}
"""Top-level folders that are not the product; hidden folders (.git, .venv, .benchmarks...) never are."""

DATA_TABLES: dict[str, str] = {}
"""`path:qualified name` -> why the function is a data table (rows of literals, no logic) that reads better whole.
Empty: every long function so far had seams to split along."""

# TEMPORARY (issue 36): split on other branches under way; remove each entry when its branch merges (the tests
# below fail on an entry that is no longer over, naming it).
TEMPORARY_LONG: set[str] = set()
TEMPORARY_COMPLEX: set[str] = set()


def is_product(relative: Path) -> bool:
    parts = relative.parts
    return parts[0] not in NOT_PRODUCT and not any(part.startswith(".") or part == "__pycache__" for part in parts)


def product_files(root: Path = ROOT) -> Iterator[Path]:
    return (path for path in sorted(root.rglob("*.py")) if is_product(path.relative_to(root)))


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method in `tree`, nested ones too, by qualified name (`Class.method`, `outer.inner`)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + node.name, node
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def long_functions(root: Path = ROOT) -> dict[str, int]:
    """`path:qualified name` -> lines, for every product function over MAX_LINES."""
    found = {}
    for path in product_files(root):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for name, node in _functions(tree):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lines = (node.end_lineno or node.lineno) - first + 1
            if lines > MAX_LINES:
                found[f"{path.relative_to(root).as_posix()}:{name}"] = lines
    return found


def complex_functions(root: Path = ROOT) -> dict[str, str]:
    """`path:function` -> ruff's message, for every product function whose C901 complexity is over MAX_COMPLEXITY.

    Isolated from pyproject.toml, so that no per-file ignore there can hide a product file from this test."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--isolated",
            "--select",
            "C901",
            "--config",
            f"lint.mccabe.max-complexity={MAX_COMPLEXITY}",
            "--output-format",
            "json",
            "--exit-zero",
            ".",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    found = {}
    for item in json.loads(done.stdout):
        path = Path(item["filename"]).resolve().relative_to(root.resolve())
        if not is_product(path):
            continue
        name = item["message"].split("`")[1]
        found[f"{path.as_posix()}:{name}"] = item["message"]
    return found


def test_no_product_function_is_over_60_lines() -> None:
    allowed = set(DATA_TABLES) | TEMPORARY_LONG
    over = long_functions()
    offenders = {name: lines for name, lines in over.items() if name not in allowed}
    assert not offenders, f"over {MAX_LINES} lines; split them into named seams: " + ", ".join(
        f"{name} ({lines})" for name, lines in sorted(offenders.items())
    )
    stale = sorted(allowed - set(over))
    assert not stale, f"allowed to be long but no longer over {MAX_LINES} lines; remove from the list: {stale}"


def test_no_product_function_is_over_complexity_15() -> None:
    allowed = TEMPORARY_COMPLEX
    over = complex_functions()
    offenders = {name: message for name, message in over.items() if name not in allowed}
    assert not offenders, f"ruff C901 over {MAX_COMPLEXITY}: " + "; ".join(
        f"{name}: {message}" for name, message in sorted(offenders.items())
    )
    stale = sorted(allowed - set(over))
    assert not stale, f"allowed to be complex but no longer over {MAX_COMPLEXITY}; remove from the list: {stale}"


def test_ruff_check_in_ci_holds_the_complexity_too() -> None:
    """`ruff check .` (CI) selects C901 at the same limit, and ignores it only under tests/."""
    lint = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["ruff"]["lint"]
    assert "C901" in lint["select"] or "C90" in lint["select"] or "C" in lint["select"]
    assert lint["mccabe"]["max-complexity"] == MAX_COMPLEXITY
    ignored = {pattern for pattern, rules in lint.get("per-file-ignores", {}).items() if "C901" in rules}
    temporary = {key.split(":")[0] for key in TEMPORARY_COMPLEX}
    assert ignored <= {"tests/**", *temporary}, f"C901 ignored for product files: {ignored}"


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    """Both checks on a made-up tree: a 61-line function and a method of complexity 16 are named, a 60-line one,
    anything under tests/ and a hidden folder are not."""

    def function(name: str, lines: int) -> str:
        return f"def {name}() -> None:\n" + "    x = 1\n" * (lines - 1)

    def branches(indent: str) -> str:
        return "".join(f"{indent}if x == {i}:\n{indent}    return {i}\n" for i in range(15)) + f"{indent}return -1\n"

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "shapes.py").write_text(
        function("long", 61)
        + function("fits", 60)
        + "class Thing:\n    def branchy(self, x: int) -> int:\n"
        + branches(" " * 8)
    )
    for elsewhere in ("tests", ".venv", ".hidden"):
        (tmp_path / elsewhere).mkdir()
        (tmp_path / elsewhere / "t.py").write_text(function("long_test", 80) + "def branchy(x):\n" + branches(" " * 4))
    assert long_functions(tmp_path) == {"pkg/shapes.py:long": 61}
    assert list(complex_functions(tmp_path)) == ["pkg/shapes.py:branchy"]


FRONT_DOOR_MAX_LINES = 450
"""compare.py is the front door: parsing, the checks before work, exit codes, dispatch. The work is in comparison/."""


def test_the_front_door_stays_a_front_door() -> None:
    lines = len((Path(__file__).resolve().parent.parent / "compare.py").read_text(encoding="utf-8").splitlines())
    assert lines <= FRONT_DOOR_MAX_LINES, f"compare.py is {lines} lines; move work into comparison/ where it belongs"

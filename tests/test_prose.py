"""Prose people read: every module of the project opens with a docstring of at most 6 lines saying what it owns."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "handwritten",
    "langgraph_version",
    "maf_version",
    "shared_tools",
    "comparison",
    "webdemo",
    "benchmarks",
    "tests",
)
MAX_LINES = 6


def modules() -> list[Path]:
    found = [ROOT / "compare.py"]
    for package in PACKAGES:
        found += sorted(p for p in (ROOT / package).rglob("*.py") if "__pycache__" not in p.parts)
    return found


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_module_opens_with_a_short_docstring(path: Path) -> None:
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
    assert docstring, f"{path.relative_to(ROOT)} has no module docstring"
    lines = docstring.strip().splitlines()
    assert len(lines) <= MAX_LINES, f"{path.relative_to(ROOT)}: a module docstring of {len(lines)} lines"


def test_the_check_sees_every_package() -> None:
    seen = {p.relative_to(ROOT).parts[0] for p in modules()}
    assert seen == {*PACKAGES, "compare.py"}


def test_one_name_per_concept_no_two_public_classes_share_a_name() -> None:
    """Two classes of one name (two `Turn`s, two `Approve`s) make a reader ask which one is meant. Private
    classes (`_Run`) are each module's own, named alike on purpose where the agents mirror each other."""
    where: dict[str, list[str]] = {}
    for path in modules():
        if path.parts[len(ROOT.parts)] == "tests":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in where.items() if len(paths) > 1} == {}

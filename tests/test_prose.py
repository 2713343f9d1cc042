"""Prose people read: every module of the project opens with a docstring of at most 6 lines saying what it owns."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("handwritten", "langgraph_version", "maf_version", "shared_tools", "comparison", "webdemo", "benchmarks",
            "tests")  # fmt: skip
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

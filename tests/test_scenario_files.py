"""The course's folder: `comparison/scenarios/` holds one file per scenario, in teaching order, each one chapter.

Each chapter holds its scenario whole (setup, lesson, what to notice, its guard-matrix rows and grading rule) in at
most `MAX_LINES` lines; the registry is built from the files, so a new file is a new scenario.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

import comparison.scenarios as package
from comparison.closing import GUARDS
from comparison.eval.grading import GRADERS, RUBRIC
from comparison.scenarios import CHAPTER, SCENARIOS, SCENARIOS_BY_NAME

MAX_LINES = 150
FOLDER = Path(package.__file__).parent
CHAPTERS = sorted(p for p in FOLDER.glob("*.py") if CHAPTER.fullmatch(p.stem))


def test_the_folder_listing_is_the_course_in_teaching_order() -> None:
    assert [p.stem for p in CHAPTERS] == [f"s{n:02}_{s.name.replace('-', '_')}" for n, s in enumerate(SCENARIOS, 1)]
    assert [s.name for s in SCENARIOS][:3] == ["bookstore", "orders", "max-steps"], "the article's goal comes first"
    assert importlib.util.find_spec("comparison.lessons") is None, "lessons.py is gone: each lesson is in its chapter"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_a_chapter_holds_its_scenario_whole_in_at_most_150_lines(path: Path) -> None:
    lines = path.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"{path.name} has {len(lines)} lines"
    module = importlib.import_module(f"comparison.scenarios.{path.stem}")
    scenario = module.SCENARIO
    assert SCENARIOS_BY_NAME[scenario.name] is scenario
    assert scenario.what_to_notice is not None and scenario.what_to_notice.__module__ == module.__name__
    for part in (scenario.headline, scenario.grader, *(row.cell for row in scenario.guards)):
        # A shared grader (the article's goal) is a closure made in `grading`; a chapter's own parts are its own.
        assert part is None or part.__module__ in (module.__name__, "comparison.scenarios.grading")


def test_every_graded_scenario_has_its_rubric_and_grader_and_every_guard_row_a_variant_that_runs() -> None:
    assert list(RUBRIC) == list(GRADERS) == [s.name for s in SCENARIOS if s.rubric is not None]
    for scenario in SCENARIOS:
        assert (scenario.rubric is None) == (scenario.grader is None), scenario.name
        for row in scenario.guards:
            assert row.variant in [v.name for v in scenario.variants], (scenario.name, row)
            assert GUARDS[row.guard] == scenario.name
    assert len(GUARDS) == sum(len(s.guards) for s in SCENARIOS), "one scenario per guard"


CHAPTER_TEXT = """
from comparison.scenarios.model import SEED_GOAL, Scenario

SCENARIO = Scenario(name="extra", description="a new chapter", lesson="one file is one scenario", goals=(SEED_GOAL,))
"""


def test_adding_a_scenario_is_adding_one_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "s16_extra.py").write_text(CHAPTER_TEXT)
    (tmp_path / "notes.py").write_text("raise AssertionError('not a chapter: its name has no place in the course')\n")
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
    try:
        found = package._chapters()
    finally:
        sys.modules.pop("comparison.scenarios.s16_extra", None)
    assert [s.name for s in found] == [*(s.name for s in SCENARIOS), "extra"]
    assert re.fullmatch(CHAPTER, "s16_extra") and not re.fullmatch(CHAPTER, "notes")

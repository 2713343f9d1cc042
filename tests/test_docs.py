"""The documentation people read: a README that fits on a few screens, a README per package, links that lead
somewhere, one vocabulary, and every count of scenarios or contenders true of the code."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from comparison.contenders import CONTENDERS
from comparison.eval.trials import GRADED
from comparison.scenarios import SCENARIOS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PACKAGES = ("shared_tools", "handwritten", "langgraph_version", "maf_version", "comparison", "webdemo", "tests")
PACKAGE_READMES = [ROOT / package / "README.md" for package in PACKAGES]
PAGES = [README, *DOCS, *PACKAGE_READMES, ROOT / "benchmarks" / "README.md"]
AGENTS = ("handwritten", "langgraph_version", "maf_version", "frameworks")

TOPICS = ("scenarios", "real-models", "sessions", "live-page", "tracing", "eval", "guarantees", "benchmarks", "serving")
"""The docs/ page of each topic the README sends a reader to."""

COMMANDS = (
    "pip install -e . && python compare.py                 "
    "# the main job: every scenario, every contender, scripted model",
    "pip install -e '.[test]' && python -m pytest -n auto  # the tests, on every core (offline; nothing is downloaded)",
)

NUMBERS = {
    word: n
    for n, word in enumerate(
        (
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
            "twenty",
        )
    )
}


def prose_lines(text: str, *, tables: bool = False) -> list[str]:
    """The lines of a markdown page outside code blocks (and tables, unless asked): what a person reads."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (tables or not line.startswith("|")):
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        if match := re.match(r"#{1,6} (.+)", line):
            base = slug(match.group(1))
            name, n = base, 0
            while name in found:  # a repeated heading gets -1, -2, ...
                n += 1
                name = f"{base}-{n}"
            found.add(name)
    return found


def links(path: Path) -> list[str]:
    text = "\n".join(prose_lines(path.read_text(encoding="utf-8"), tables=True))
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_the_readme_fits_in_200_lines_and_15_kb() -> None:
    data = README.read_bytes()
    assert len(data.decode("utf-8").splitlines()) <= 200
    assert len(data) <= 15_000


def test_the_readme_opens_with_the_two_commands_exactly() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert lines[2:6] == ["```bash", *COMMANDS, "```"]


def test_ci_runs_the_readmes_test_command() -> None:
    """`.ci/run` ends with the README's `python -m pytest ...` (quieter: `-q`), so CI times what a reader runs."""
    readme = COMMANDS[1].split("&&", 1)[1].split("#", 1)[0].split()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()[-1].split()
    assert [word for word in ci if word != "-q"] == readme, ci


def test_the_readme_links_a_docs_page_for_every_topic() -> None:
    linked = set(links(README))
    for topic in TOPICS:
        assert f"docs/{topic}.md" in linked, topic
        assert (ROOT / "docs" / f"{topic}.md").is_file(), topic


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(page: Path) -> None:
    for link in links(page):
        if re.match(r"[a-z]+:", link):
            continue  # http://, https://, mailto: lead off this repository
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        assert path.exists(), f"{page.relative_to(ROOT)}: {link} leads nowhere"
        if anchor:
            assert path.suffix == ".md", f"{page.relative_to(ROOT)}: {link}"
            assert anchor in anchors(path), f"{page.relative_to(ROOT)}: no heading #{anchor} in {target or page.name}"


@pytest.mark.parametrize("page", [*DOCS, *PACKAGE_READMES, README], ids=lambda p: str(p.relative_to(ROOT)))
def test_prose_lines_are_at_most_120_characters(page: Path) -> None:
    long = [line for line in prose_lines(page.read_text(encoding="utf-8")) if len(line) > 120]
    assert long == []


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_has_a_short_readme_naming_each_of_its_files(package: str) -> None:
    readme = ROOT / package / "README.md"
    text = readme.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 25
    assert "May import:" in text
    if package == "tests":
        return  # one file per concern: the README names where to start, not all of them
    parts = {p.name for p in (ROOT / package).iterdir() if not p.name.startswith(("_", ".")) and p.name != "README.md"}
    for part in parts:
        shown = part + "/" if (ROOT / package / part).is_dir() else part
        assert f"`{shown}`" in text, f"{package}/README.md does not name {shown}"


def layer_rules() -> dict[str, set[str]]:
    """What each package may import, from the layers contract of pyproject.toml: every layer below its own."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    layers = next(c["layers"] for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    below: set[str] = set()
    allowed: dict[str, set[str]] = {}
    for layer in reversed(layers):
        names = [name.strip() for name in layer.split("|")]
        for name in names:
            allowed[name] = set(below)
        below |= set(names)
    return allowed


@pytest.mark.parametrize(("package", "allowed"), layer_rules().items())
def test_a_package_readme_says_what_it_may_import_as_the_contracts_do(package: str, allowed: set[str]) -> None:
    text = (ROOT / package / "README.md").read_text(encoding="utf-8")
    rule = text[text.index("May import:") :]
    for name in allowed:
        assert f"`{name}`" in rule or (name in AGENTS and "the agents" in rule), f"{package}: {name}"
    if not allowed:
        assert "nothing of ours" in rule
    elif allowed == {"shared_tools"}:
        assert "`shared_tools` only" in rule


GLOSSARY_TERMS = (
    "the article",
    "the article's goal",
    "contender",
    "scenario",
    "step",
    "round",
    "stop reason",
    "guard",
    "persona",
    "session",
    "thread",
)


def test_the_readme_defines_its_own_words_once_near_the_top() -> None:
    text = README.read_text(encoding="utf-8")
    start = text.index("## Words used here")
    glossary = text[start : text.index("\n## ", start + 1)]
    assert text[:start].count("\n") < 30, "the glossary comes before the reader needs it"
    for term in GLOSSARY_TERMS:
        assert f"**{term}**" in glossary, term
        assert text.count(f"**{term}**") == 1, f"{term} is defined more than once"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_in_house_word_is_left_undefined(page: Path) -> None:
    """ "The seed" was the article, "rates: Noise" a class name: the plain words are used instead. Program output
    (the README's sample, in a code block) is the program's to word; a control is named as the page labels it."""
    text = "\n".join(prose_lines(page.read_text(encoding="utf-8"), tables=True))
    assert not re.search(r"\bseed goal|\bthe seed\b|\bseed article|seed's|rates: Noise", text, re.IGNORECASE)


def counts(text: str) -> list[tuple[str, str, str]]:
    """Every "N scenarios" / "N contenders" in a text: (the number as written, the noun, a marker of graded)."""
    found = []
    for match in re.finditer(
        r"\b(\w+)\s+(graded\s+)?(scenarios|contenders)\b(\s+(?:that have|with) a right answer)?", text, re.IGNORECASE
    ):
        number = match.group(1).lower()
        if number.isdigit() or number in NUMBERS:
            graded = "graded" if match.group(2) or match.group(4) else ""
            found.append((number, match.group(3).lower(), graded))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_count_of_scenarios_or_contenders_is_true(page: Path) -> None:
    truth = {
        ("scenarios", ""): len(SCENARIOS),
        ("scenarios", "graded"): len(GRADED),
        ("contenders", ""): len(CONTENDERS),
    }
    for number, noun, graded in counts(page.read_text(encoding="utf-8")):
        value = int(number) if number.isdigit() else NUMBERS[number]
        assert (noun, graded) in truth, f"{page.name}: '{number} {graded} {noun}' counts something unchecked"
        assert value == truth[noun, graded], f"{page.name}: '{number} {noun}', but there are {truth[noun, graded]}"


def test_the_count_check_sees_counts() -> None:
    assert counts("Fifteen scenarios, the five contenders, 12 graded scenarios, twelve scenarios with a right answer")
    assert counts(README.read_text(encoding="utf-8")) or any(counts(p.read_text(encoding="utf-8")) for p in DOCS)


def first_column(page: Path, header: str) -> list[str]:
    """The first cell of every row of the table under `header` (a table's first line), backticks dropped."""
    lines = page.read_text(encoding="utf-8").splitlines()
    start = lines.index(header) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line.strip("|").split("|")[0].strip().strip("`"))
    return rows


def test_the_scenarios_page_has_a_row_for_every_scenario_in_order() -> None:
    page = ROOT / "docs" / "scenarios.md"
    assert first_column(page, "| scenario | contenders | the lesson |") == [s.name for s in SCENARIOS]


def test_the_scenarios_page_names_every_contender_and_persona() -> None:
    from shared_tools.models.personas import PERSONAS

    page = ROOT / "docs" / "scenarios.md"
    assert first_column(page, "| contender | what it is |") == list(CONTENDERS)
    assert sorted(first_column(page, "| persona | what it does |")) == sorted(PERSONAS)


def test_the_readmes_what_to_try_next_is_the_list_the_program_prints() -> None:
    """The README's list had drifted from the overview's closing list; both are now `overview.next_steps`."""
    from comparison.overview import next_steps

    text = README.read_text(encoding="utf-8")
    block = text.split("## What to try next\n", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    shown = [tuple(part.strip() for part in line.split("  # ", 1)) for line in block.splitlines()]
    assert shown == next_steps("compare.py", "bookstore")


def test_the_scenarios_page_gives_the_long_session_figures_the_program_prints(tmp_path: Path) -> None:
    """docs/scenarios.md said MAF's turn 5 cost 1,929 tokens against 3,629; the program printed 1,953 and 3,725."""

    import compare

    row = next(
        line
        for line in (ROOT / "docs" / "scenarios.md").read_text(encoding="utf-8").splitlines()
        if "`long-session`" in line
    )
    said = re.search(r"turn 5 cost (\d[\d,]*\d) tokens against (\d[\d,]*\d)", row)
    assert said, "the row gives MAF's turn 5 with and without the window"
    out = tmp_path / "runs.json"
    assert compare.main(["long-session", "--contenders", "maf", "--no-trace", "--json", str(out)]) == 0
    tokens = {(r["variant"], r["turn"]): r["tokens"] for r in json.loads(out.read_text(encoding="utf-8"))["runs"]}
    assert (f"{tokens['keep-turns', 5]:,}", f"{tokens['full', 5]:,}") == said.groups()


def test_the_hand_written_sessions_storage_sentence_is_what_its_file_does(tmp_path: Path) -> None:
    """The long-session output said the hand-written session's file is "rewritten each turn"; it appends a line a
    save, and the sentence the program prints says so."""
    from langchain_core.messages import AIMessage, HumanMessage

    from handwritten import storage
    from handwritten.contender import NO_STORAGE_OPTION

    path = tmp_path / "session.json"
    messages = [HumanMessage("hi"), AIMessage("hello"), HumanMessage("and?"), AIMessage("done")]
    revision = storage.write(path, read_revision=0, customer="c1", instructions="i", messages=messages[:2], start=0)
    before = path.read_bytes()
    storage.write(path, read_revision=revision, customer="c1", instructions="i", messages=messages, start=2)
    after = path.read_bytes()
    assert after.startswith(before) and after.count(b"\n") == before.count(b"\n") + 1, "one line appended"
    assert "one line of new messages per save" in NO_STORAGE_OPTION and "rewritten" not in NO_STORAGE_OPTION

"""The contenders come from the entry-point group: an outside package's contender, installed as docs/frameworks.md
says (its two blocks, with the .dist-info `pip install` writes), is in every command with nothing changed here; a
broken plug-in is one warning line; and a guard a contender claims must be one its runs show acting."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from comparison import closing
from comparison.closing import contradicted_claims
from comparison.contenders import SPECS
from shared_tools.contender import ENTRY_POINT_GROUP, Capability
from tests.guard_grid_reader import read_guard_grid
from webdemo.routes import NUMBER_WORDS

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "frameworks.md"
PLUGIN = "my-agent"
TIMEOUT_S = 600


def doc_block(marker: str) -> str:
    """The fenced block under ``<!-- plug-in: marker -->`` in docs/frameworks.md: what a reader copies."""
    text = DOC.read_text(encoding="utf-8")
    found = re.search(rf"<!-- plug-in: {marker} -->\n```\w+\n(.*?)```", text, re.S)
    assert found, f"docs/frameworks.md has no {marker} block"
    return found.group(1)


def install(where: Path, name: str, version: str, entry_points: dict[str, str]) -> None:
    """What `pip install` leaves for a package declaring `entry_points` in our group: a .dist-info on sys.path."""
    info = where / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8")
    lines = [f"[{ENTRY_POINT_GROUP}]", *(f"{key} = {value}" for key, value in entry_points.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the doc's package, installed: its module and its .dist-info."""
    where = tmp_path_factory.mktemp("plugin")
    project = tomllib.loads(doc_block("pyproject"))["project"]
    module, _ = project["entry-points"][ENTRY_POINT_GROUP][PLUGIN].split(":")
    (where / f"{module}.py").write_text(doc_block("module"), encoding="utf-8")
    install(where, project["name"], project["version"], project["entry-points"][ENTRY_POINT_GROUP])
    return where


def run(args: list[str], path: Path, cwd: Path, *, script: str | None = None) -> subprocess.CompletedProcess[str]:
    """`compare.py args` (or a Python `script`) in a fresh process with `path` on PYTHONPATH."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), str(ROOT)])}
    command = [sys.executable, "-c", script] if script else [sys.executable, str(ROOT / "compare.py"), *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


@pytest.fixture(scope="module")
def full_run(plugin: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`python compare.py --json --report` with the plug-in installed: every scenario, every contender."""
    out = tmp_path_factory.mktemp("full")
    done = run(["--json", str(out / "runs.json"), "--report", str(out / "r.html")], plugin, out)
    assert done.returncode == 0, done.stderr[-3000:]
    return {
        "stdout": done.stdout,
        "stderr": done.stderr,
        "document": json.loads((out / "runs.json").read_text(encoding="utf-8")),
        "report": (out / "r.html").read_text(encoding="utf-8"),
    }


def test_help_and_list_name_the_plugin_after_ours(plugin: Path, tmp_path: Path) -> None:
    helped = run(["--help"], plugin, tmp_path)
    assert helped.returncode == 0 and helped.stderr == ""
    assert f"{len(SPECS) + 1} agent loops, side by side:\n  {', '.join([*SPECS, PLUGIN])}." in helped.stdout
    listed = run(["--list"], plugin, tmp_path)
    assert listed.returncode == 0 and listed.stderr == ""


def test_every_scenario_runs_the_plugin_as_it_runs_the_loop_it_wraps(full_run: dict[str, Any]) -> None:
    document = full_run["document"]
    assert full_run["stderr"] == ""
    assert [c["name"] for c in document["contenders"]] == [*SPECS, PLUGIN]
    runs = document["runs"]

    def outcomes(contender: str) -> dict[tuple[Any, ...], tuple[Any, ...]]:
        return {
            (r["scenario"], r["variant"], r["goal"], r["turn"]): (
                r["stop_reason"],
                r["tool_calls"],
                r["cart_total"],
                "not_available" in r["facts"],
            )
            for r in runs
            if r["contender"] == contender
        }

    mine, loop = outcomes(PLUGIN), outcomes("handwritten")
    assert {key[0] for key in mine} == {s["name"] for s in document["scenarios"]}, "every scenario ran it"
    assert mine == loop, "the same loop under another name: the same runs"
    # What it lacks is said in its own words, from its spec.
    said = {r["facts"]["not_available"] for r in runs if r["contender"] == PLUGIN and "not_available" in r["facts"]}
    assert said == {
        "my agent keeps a list of messages, with no checkpoints to replay from",
        "my agent keeps its conversation in one JSON file",
    }


def test_the_overview_the_matrix_and_the_report_show_the_plugin(full_run: dict[str, Any]) -> None:
    # The overview puts contenders that ran alike on one line (tests/test_overview.py reads every contender's line
    # back), so the copy of the loop shares the loop's lines; it is named among the contenders and in the matrix.
    stdout = full_run["stdout"]
    named = stdout[stdout.index("Contenders: ") : stdout.index("(the same goals for each)")]
    assert PLUGIN in re.findall(r"[\w-]+", named), "named among the contenders"
    grid = read_guard_grid(stdout.splitlines(), [*SPECS, PLUGIN])
    row = {header: status for (header, name), status in grid.items() if name == PLUGIN}
    assert row and row == {h: status for (h, name), status in grid.items() if name == "handwritten"}, "its matrix row"
    rows = {row["guard"]: row["cells"] for row in full_run["document"]["guard_matrix"]}
    assert {guard: cells[PLUGIN]["status"] for guard, cells in rows.items()} == {
        guard: cells["handwritten"]["status"] for guard, cells in rows.items()
    }
    # Its claims (the doc's spec) are guards its runs show acting, named its way in the matrix.
    assert rows["step limit"][PLUGIN] == {**rows["step limit"][PLUGIN], "status": "fired"}
    assert "stopped by my loop's max_steps" in rows["step limit"][PLUGIN]["text"]
    assert rows["repeat check"][PLUGIN]["status"] == "fired"
    report = full_run["report"]
    for tag in ("title", "h1"):
        assert PLUGIN in re.findall(f"<{tag}>(.*?)</{tag}>", report)[0]


def test_the_eval_grades_the_plugin(plugin: Path, tmp_path: Path) -> None:
    done = run(["eval", "orders", "--runs", "1", "--contenders", PLUGIN, "--json", "-"], plugin, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout)["results"]
    assert results and {r["contender"] for r in results} == {PLUGIN}


PAGE_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from starlette.testclient import TestClient
    from webdemo.server import create_app

    with TestClient(create_app(Path(sys.argv[1]), allowed_hosts=["127.0.0.1"]), base_url="http://127.0.0.1") as c:
        page = c.get("/").text
        meta = c.get("/api/meta").json()
        tab = c.post("/api/tabs", headers={"Content-Type": "application/json"}).json()["tab"]
        chosen = c.post("/api/settings", json={"tab": tab, "contenders": ["my-agent"]}).json()
        c.post("/api/turn", json={"tab": tab, "text": "Where is my order 4512?"})
        deadline = time.monotonic() + 60
        while (state := c.get("/api/state", params={"tab": tab}).json())["panes"][0]["busy"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        print(json.dumps({"page": page, "meta": meta, "chosen": chosen, "state": state}))
    """
)


def test_the_page_offers_a_pane_of_the_plugin_and_runs_it(plugin: Path, tmp_path: Path) -> None:
    done = run([], plugin, tmp_path, script=PAGE_SCRIPT.replace("sys.argv[1]", repr(str(tmp_path / "web"))))
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert f"{NUMBER_WORDS[len(SPECS) + 1]} ways, live: {', '.join([*SPECS, PLUGIN])}</h1>" in seen["page"]
    assert list(seen["meta"]["contenders"]) == [*SPECS, PLUGIN]
    [pane] = seen["state"]["panes"]
    assert pane["contender"] == PLUGIN and pane["last"]["stop_reason"] == "done"


def test_a_broken_plugin_is_one_warning_line_and_every_command_goes_on(plugin: Path, tmp_path: Path) -> None:
    install(tmp_path / "site", "broken-agent", "1.0", {"broken-agent": "no_such_module:SPEC"})
    install(tmp_path / "site", "clashing-agent", "1.0", {"handwritten": "my_agent:SPEC"})  # one of our names
    path = Path(os.pathsep.join([str(tmp_path / "site"), str(plugin)]))
    for args in (["--help"], ["orders", "--contenders", f"{PLUGIN},handwritten", "--no-trace"]):
        done = run(args, path, tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        broken, clashing = sorted(done.stderr.splitlines())
        assert "broken-agent" in broken and "no_such_module" in broken and "left out" in broken
        assert "'handwritten' (my_agent:SPEC) left out: the name is one of this project's" in clashing
        assert PLUGIN in done.stdout and "broken-agent" not in done.stdout
        if args == ["--help"]:  # ours kept, the clash and the broken one left out
            assert f"side by side:\n  {', '.join([*SPECS, PLUGIN])}." in done.stdout


def test_no_guard_one_of_ours_claims_is_contradicted_by_its_runs(full_run: dict[str, Any]) -> None:
    rows = full_run["document"]["guard_matrix"]
    assert contradicted_claims(rows) == []
    claimed = {(c, g) for c, s in SPECS.items() for g in s.guards}
    shown = {(c, row["guard"]) for row in rows for c in SPECS}
    assert claimed <= shown, "every claim names a guard of the matrix"


def test_a_claim_the_runs_contradict_fails(full_run: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    rows = full_run["document"]["guard_matrix"]
    defaults = SPECS["langgraph-defaults"]
    bold = replace(defaults, guards={**defaults.guards, "token budget": "recursion_limit"})
    monkeypatch.setitem(closing.SPECS, "langgraph-defaults", bold)
    assert contradicted_claims(rows) == [
        "langgraph-defaults claims token budget (recursion_limit), but its run shows missing"
    ]


def test_our_contenders_are_this_projects_entry_points_each_pinned() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = config["entry-points"][ENTRY_POINT_GROUP]
    assert list(SPECS)[: len(declared)] == list(declared), "ours first, in their order"
    for name, spec in SPECS.items():
        if name in declared:
            assert declared[name].endswith(":SPEC")
            assert spec.requirement in config["dependencies"], f"{name}: {spec.requirement} is not pinned"
            assert all(spec.has(c) or spec.lacks[c] for c in Capability), name


HELP_IMPORTS = textwrap.dedent(
    """
    import json, sys
    import compare
    from comparison.contenders import SPECS
    compare.build_parser().format_help()
    print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
    """
)


def test_help_reads_every_spec_without_importing_a_framework(tmp_path: Path) -> None:
    """A spec module imports its framework inside `build`: `--help` and `--list` read every spec, so one
    framework imported at a spec's top would be paid by every command."""
    from importlib.metadata import packages_distributions

    done = run([], ROOT, tmp_path, script=HELP_IMPORTS)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = set(json.loads(done.stdout))
    provided = packages_distributions()
    for name, spec in SPECS.items():
        wanted = re.split(r"[<>=!~;\[ ]", spec.requirement, maxsplit=1)[0].lower().replace("_", "-")
        if not wanted or wanted == "langchain-core":  # the model interface: every command has it
            continue
        tops = {top for top, dists in provided.items() if wanted in {d.lower().replace("_", "-") for d in dists}}
        assert tops, f"{name}: {wanted} is not installed"
        assert not tops & loaded, f"{name}'s spec imports {sorted(tops & loaded)} when --help reads it"


def test_the_overhead_benchmark_times_the_plugin(plugin: Path, tmp_path: Path) -> None:
    out = tmp_path / "overhead.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin), str(ROOT)])}
    command = [sys.executable, str(ROOT / "benchmarks" / "overhead.py"), "--runs", "1", "--only", PLUGIN]
    done = subprocess.run(
        [*command, "--json", str(out)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert done.returncode == 0, done.stderr[-2000:]
    variants = json.loads(out.read_text(encoding="utf-8"))["variants"]
    assert f"{PLUGIN} contender (built by its spec)" in variants, "checked (the article's cart) and timed"

"""The command line and the report, polished: what a user types and what a reader sees on any screen.

Options in any order, the installed command's name, selections that run nothing, trace times and columns, the
graph as SVG, coinciding chart lines, a 420 px phone screen, and no empty guard matrix.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import compare
from comparison.contenders import CONTENDERS
from comparison.scenarios import SCENARIOS, SCENARIOS_BY_NAME

ROOT = Path(__file__).resolve().parent.parent


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# --- the command line ----------------------------------------------------------------------------------------


def test_scenario_names_may_follow_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "runs.json"
    argv = ["bookstore", "--no-trace", "orders", "--contenders", "handwritten", "--json", str(path)]
    assert compare.main(argv) == compare.EXIT_OK
    runs = json.loads(path.read_text(encoding="utf-8"))["runs"]
    assert [(r["scenario"], r["contender"]) for r in runs] == [
        ("bookstore", "handwritten"),
        ("bookstore", "handwritten"),  # the default and the precise wording
        ("orders", "handwritten"),
        ("orders", "handwritten"),
    ]
    capsys.readouterr()


@pytest.mark.parametrize(
    ("argv0", "name"),
    [
        ("/usr/local/bin/agent-loop-compare", "agent-loop-compare"),
        (r"C:\Python311\Scripts\agent-loop-compare.exe", "agent-loop-compare"),
        ("agent-loop-compare-script.py", "agent-loop-compare"),
        ("compare.py", "compare.py"),
        ("/work/main/compare.py", "compare.py"),  # python -m compare
        ("/usr/bin/pytest", "compare.py"),  # main() called from code
    ],
)
def test_program_name_follows_how_the_command_was_started(argv0: str, name: str) -> None:
    assert compare.program_name(argv0) == name


def test_the_installed_command_names_itself_in_errors_and_help(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/agent-loop-compare"])
    assert compare.main(["no-such-scenario"]) == compare.EXIT_USAGE
    assert one_line(capsys.readouterr().err).startswith("agent-loop-compare: unknown scenario 'no-such-scenario'")
    assert compare.main(["chat", "--thread", "../x"]) == compare.EXIT_USAGE
    assert one_line(capsys.readouterr().err).startswith("agent-loop-compare chat: --thread")
    helps = ((["--help"], "usage: agent-loop-compare "), (["chat", "--help"], "usage: agent-loop-compare chat "))
    for argv, usage in helps:
        with pytest.raises(SystemExit) as stop:
            compare.main(argv)
        assert stop.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith(usage) and "compare.py" not in out, argv


def test_the_installed_entry_point_in_a_real_process() -> None:
    """What the console script does (set argv[0], call `compare:main`), in a process of its own."""
    code = "import sys; sys.argv[0] = '/venv/bin/agent-loop-compare'; from compare import main; sys.exit(main())"
    done = subprocess.run(
        [sys.executable, "-c", code, "bookstore", "--max-steps", "many"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == compare.EXIT_USAGE and done.stdout == ""
    assert one_line(done.stderr).startswith("agent-loop-compare: argument --max-steps: invalid int value: 'many'")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--max-steps", "x"], "argument --max-steps: invalid int value: 'x'"),
        (["--no-such-option"], "unrecognized arguments: --no-such-option"),
        (["bookstore", "--no-trace", "chat"], "'chat' must come first"),
        (["chat", "--contender", "autogen"], "invalid choice: 'autogen'"),
    ],
)
def test_argparse_mistakes_are_one_line_and_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert compare.main(argv) == compare.EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == "" and says in one_line(captured.err)


@pytest.mark.parametrize("value", ["", " ", ",", "handwritten,", "handwritten,,langgraph", " ,langgraph"])
def test_an_empty_contender_is_a_mistake_not_all(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert compare.main(["bookstore", "--contenders", value, "--no-trace"]) == compare.EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    line = one_line(captured.err)
    assert line.startswith("compare.py: --contenders") and "empty contender" in line
    assert all(c in line for c in CONTENDERS), "the line says what to choose from"


def test_contenders_may_repeat_and_name_a_contender_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "runs.json"
    argv = ["orders", "--contenders", "langgraph", "--contenders", "handwritten,langgraph", "--json", str(path)]
    assert compare.main([*argv, "--no-trace"]) == compare.EXIT_OK
    runs = json.loads(path.read_text(encoding="utf-8"))["runs"]
    assert [r["contender"] for r in runs] == ["handwritten", "handwritten", "langgraph", "langgraph"]
    capsys.readouterr()


@pytest.fixture
def orders_only_by_handwritten(monkeypatch: pytest.MonkeyPatch) -> None:
    """The orders scenario as one that only the hand-written loop runs (as `session` was before every contender
    ran every scenario), so these tests do not depend on which scenarios the contenders support today."""
    narrowed = replace(SCENARIOS_BY_NAME["orders"], contenders=("handwritten",))
    monkeypatch.setattr(compare, "SCENARIOS_BY_NAME", {**SCENARIOS_BY_NAME, "orders": narrowed})


@pytest.mark.usefixtures("orders_only_by_handwritten")
def test_a_selection_that_runs_nothing_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert compare.main(["orders", "--contenders", "create-agent"]) == compare.EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert one_line(captured.err) == (
        "compare.py: nothing to run: orders is run by handwritten; --contenders chose create-agent"
    )


def test_the_real_session_scenario_with_create_agent_is_not_silent(capsys: pytest.CaptureFixture[str]) -> None:
    """`--contenders create-agent session` runs nothing, and says so instead of printing nothing and exiting 0."""
    code = compare.main(["--contenders", "create-agent", "session", "--no-trace"])
    captured = capsys.readouterr()
    if compare.contenders_running(SCENARIOS_BY_NAME["session"], ["create-agent"]):
        assert code == compare.EXIT_OK and "1. session" in captured.out  # create-agent has sessions now
    else:
        assert code == compare.EXIT_USAGE and captured.out == ""
        assert "nothing to run: session is run by" in one_line(captured.err)


@pytest.mark.usefixtures("orders_only_by_handwritten")
def test_a_scenario_no_chosen_contender_runs_is_named_not_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "runs.json"
    argv = ["orders", "bookstore", "--contenders", "langgraph", "--no-trace", "--json", str(path)]
    assert compare.main(argv) == compare.EXIT_OK
    out = capsys.readouterr().out
    assert "1. orders: not run; it is run by handwritten, and --contenders chose langgraph" in out
    assert " 2. bookstore " in out
    runs = json.loads(path.read_text(encoding="utf-8"))["runs"]
    assert {(r["scenario"], r["contender"]) for r in runs} == {("bookstore", "langgraph")}


# --- trace times and columns ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0.0, "0 ms"),
        (0.000_000_4, "<0.01 ms"),
        (0.000_42, "0.42 ms"),
        (0.000_994, "0.99 ms"),
        (0.003, "3 ms"),
        (0.312_4, "312 ms"),
        (0.999_7, "1.00 s"),
        (1.25, "1.25 s"),
        (12.5, "12.5 s"),
        (125.0, "125 s"),
    ],
)
def test_a_duration_keeps_a_decimal_point_and_is_never_rounded_to_nothing(seconds: float, shown: str) -> None:
    from comparison.records import duration_text
    from comparison.render import TIME_WIDTH

    assert duration_text(seconds) == shown
    assert "," not in shown and len(shown) <= TIME_WIDTH


def _event(step: int, name: str, duration: float, detail: str = "{} -> []", tokens: int = 0) -> dict[str, Any]:
    return {
        "step": step,
        "name": name,
        "duration_s": duration,
        "detail": detail,
        "tokens": tokens,
        "is_error": False,
        "guard": None,
    }


def long_trace() -> list[dict[str, Any]]:
    """Twelve rounds, the times spanning microseconds to seconds, and one invented tool with a very long name."""
    trace = []
    for step in range(1, 13):
        trace.append(_event(step, "model", 0.000_6 * step, "1 tool call(s); plan: look again.", 700 + step))
        name = "check_stock" if step != 11 else "an_invented_tool_with_a_very_long_name_indeed"
        trace.append(_event(step, name, [0.000_3, 0.004, 0.25, 1.5][step % 4], '{"book_id":2} -> {"inStock":0}'))
    return trace


def columns(line: str) -> tuple[int, int]:
    """Where the name starts and where the time ends in a trace line."""
    match = re.match(r"(\[step \d+\]\s+)(\S+\s+?)\s*(<?\d+(?:\.\d+)? m?s)  ", line)
    assert match, line
    return match.start(2), match.end(3)


def test_terminal_trace_columns_stay_aligned_past_step_9() -> None:
    from comparison.render import trace_lines

    lines = [t.plain for t in trace_lines(long_trace(), 100)]
    calls = [line for line in lines if line.startswith("[step")]
    assert len(calls) == 24
    assert len({columns(line) for line in calls}) == 1, "\n".join(calls)
    assert "[step 9]  model" in lines[lines.index(calls[16])] and calls[18].startswith("[step 10] model")
    assert any("an_invented_tool_with_a…" in line for line in calls), "a long name is cut, not pushing columns"
    plans = [line for line in lines if not line.startswith("[step")]
    assert all(line.startswith(" " * 10 + "plan: ") for line in plans), "the plan sits under the name"
    times = [re.search(r"(<?\d+(?:\.\d+)? m?s)  ", line).group(1) for line in calls]  # type: ignore[union-attr]
    assert "0.30 ms" in times and "4 ms" in times and "250 ms" in times and "1.50 s" in times
    assert not any("," in t for t in times)


def test_report_trace_columns_stay_aligned_past_step_9() -> None:
    from html import unescape

    from comparison.report import trace_block

    run = {
        "trace": long_trace(),
        "error": None,
        "contender": "langgraph-defaults",
        "turn": 1,
        "variant": "default",
        "goal": "g",
    }
    block = unescape(re.search(r"<pre>(.*)</pre>", trace_block(run, multi_turn=False), re.S).group(1))  # type: ignore[union-attr]
    calls = block.splitlines()
    assert len(calls) == 24
    assert len({columns(line) for line in calls}) == 1, block
    assert "0.30 ms" in block and "1.50 s" in block and "0.000s" not in block


def test_trace_times_do_not_depend_on_the_locale() -> None:
    """`python compare.py bookstore` under a German locale: decimal points, and times that are not all zero."""
    env = {**os.environ, "LC_ALL": "de_DE.UTF-8", "LANG": "de_DE.UTF-8", "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, "compare.py", "bookstore", "--contenders", "handwritten"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    times = re.findall(r"^\[step \d+\]\s+\S+\s+(<?\d+(?:\.\d+)? m?s)  ", done.stdout, re.MULTILINE)
    assert len(times) == 2 * 9, done.stdout  # 5 model calls and 4 tool calls, under each of two wordings
    assert not any("," in t for t in times)
    assert any(t not in ("0 ms", "<0.01 ms") for t in times), "a scripted run still takes measurable time"
    assert "0,0s" not in done.stdout and re.search(r"│\s+\d+(?:\.\d+)? m?s │", done.stdout), "wall in the table"


def test_report_tables_show_wall_time_readably() -> None:
    from comparison.report import summary_table

    run = {
        "turn": 1,
        "goal": "g",
        "contender": "handwritten",
        "stop_reason": "done",
        "error": None,
        "model_calls": 5,
        "tool_calls": 4,
        "tokens": 6335,
        "tokens_per_step": [779, 1478],
        "wall_s": 0.0042,
        "cart": [],
        "cart_total": "0.00",
        "user_message": "ok",
    }
    assert '<td class="num">4 ms</td>' in summary_table([run])


# --- the report ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`compare.py bookstore looping-model orders --report ... --json ...`: coinciding lines and a step 12."""
    folder = tmp_path_factory.mktemp("report")
    report, document = folder / "report.html", folder / "runs.json"
    argv = ["bookstore", "looping-model", "orders", "--no-trace", "--report", str(report), "--json", str(document)]
    with_output = io.StringIO()
    saved, sys.stdout = sys.stdout, with_output
    try:
        assert compare.main(argv) == compare.EXIT_OK
    finally:
        sys.stdout = saved
    return {
        "page": report.read_text(encoding="utf-8"),
        "doc": json.loads(document.read_text(encoding="utf-8")),
        "path": report,
    }


def _svg(page: str, kind: str) -> list[str]:
    return re.findall(rf'<svg xmlns="http://www.w3.org/2000/svg" class="{kind}".*?</svg>', page, re.S)


def test_the_document_carries_the_graph_as_nodes_and_edges(small_report: dict[str, Any]) -> None:
    graph = small_report["doc"]["graph"]
    assert graph["nodes"] == ["__start__", "model", "tools", "errors", "check", "__end__"]
    edges = {(e["source"], e["target"], e["conditional"]) for e in graph["edges"]}
    assert ("__start__", "model", False) in edges and ("check", "model", True) in edges
    assert len(edges) == len(graph["edges"]) == 10
    assert small_report["doc"]["mermaid"].startswith("---")


def test_the_graph_is_a_picture_with_the_mermaid_text_folded_under_it(small_report: dict[str, Any]) -> None:
    page = small_report["page"]
    section = page[page.index('<section id="graph">') :]
    section = section[: section.index("</section>")]
    [picture] = _svg(section, "diagram")
    assert re.search(r'viewBox="0 0 \d+ \d+"', picture)
    labels = re.findall(r"<text[^>]*>([^<]+)</text>", picture)
    assert sorted(labels) == sorted(["START", "model", "tools", "errors", "check", "END"])
    edges = re.findall(r'<path d="[^"]+"[^>]*marker-end="url\(#graph-arrow\)">', picture)
    assert len(edges) == 10
    assert sum("stroke-dasharray" in e for e in edges) == 9, "every edge but START -> model is conditional"
    assert "<title>check → model (conditional)</title>" in picture
    details = section[section.index("<details>") :]
    assert "mermaid source" in details and "__start__ --&gt; model;" in details, "the text, for copy-paste"
    assert "<script" not in page and "<link" not in page and not re.search(r'(src|href)="https?:', page)


def _path_ends(d: str) -> tuple[tuple[float, float], tuple[float, float]]:
    numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", d)]
    start = (numbers[0], numbers[1])
    if d.rstrip().split()[-1].startswith("H"):  # a lane ends with a horizontal run into the node
        ys = re.findall(r"Q[\d.]+,[\d.]+ ([\d.]+),([\d.]+)", d)
        return start, (numbers[-1], float(ys[-1][1]))
    return start, (numbers[-2], numbers[-1])


def test_the_graph_layout_keeps_nodes_apart_and_edges_on_their_nodes(small_report: dict[str, Any]) -> None:
    from comparison.report import graph_svg

    picture = graph_svg(small_report["doc"]["graph"])
    width, height = (float(v) for v in re.search(r'viewBox="0 0 (\d+) (\d+)"', picture).groups())  # type: ignore[union-attr]
    boxes = {
        label: (float(x), float(y), float(w), float(h))
        for x, y, w, h, label in re.findall(
            r'<rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)"[^>]*/><text[^>]*>([^<]+)</text>',
            picture,
        )
    }
    assert len(boxes) == 6
    for x, y, w, h in boxes.values():
        assert x >= 0 and x + w <= width and y >= 0 and y + h <= height
    tops = sorted(y for _, y, _, _ in boxes.values())
    assert all(b - a >= 34 for a, b in itertools.pairwise(tops)), "a row per node here: no overlap"
    assert [label for label, _ in sorted(boxes.items(), key=lambda kv: kv[1][1])] == [
        "START",
        "model",
        "tools",
        "errors",
        "check",
        "END",
    ], "each node below every node that leads to it"

    def on_border(point: tuple[float, float], box: tuple[float, float, float, float]) -> bool:
        px, py = point
        x, y, w, h = box
        inside = x - 0.2 <= px <= x + w + 0.2 and y - 0.2 <= py <= y + h + 0.2
        return inside and min(abs(px - x), abs(px - x - w), abs(py - y), abs(py - y - h)) <= 0.2

    for d, source, target in re.findall(r'<path d="([^"]+)"[^>]*><title>(\S+) → (\S+) \(', picture):
        start, end = _path_ends(d)
        assert on_border(start, boxes[source]) and on_border(end, boxes[target]), (source, target, d)
        for x in (float(v) for v in re.findall(r"[HQ]\s*(-?[\d.]+)", d)):
            assert 0 <= x <= width, (source, target, d)


def test_the_graph_layout_draws_any_graph() -> None:
    """Not only ours: two nodes in a row, a node with two ways back, and an edge that skips rows."""
    from comparison.report import graph_svg

    graph = {
        "nodes": ["__start__", "plan", "search", "write", "review", "__end__"],
        "edges": [
            {"source": "__start__", "target": "plan", "conditional": False},
            {"source": "plan", "target": "search", "conditional": True},
            {"source": "plan", "target": "write", "conditional": True},
            {"source": "search", "target": "review", "conditional": False},
            {"source": "write", "target": "review", "conditional": False},
            {"source": "review", "target": "plan", "conditional": True},
            {"source": "review", "target": "search", "conditional": True},
            {"source": "plan", "target": "__end__", "conditional": True},
            {"source": "review", "target": "__end__", "conditional": True},
        ],
    }
    picture = graph_svg(graph)
    assert picture.count("<rect") == 6 and picture.count('marker-end="url(#graph-arrow)"') == 9
    rects = re.findall(r'<rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)"', picture)
    by_row: dict[str, list[tuple[float, float]]] = {}
    for x, y, w in rects:
        by_row.setdefault(y, []).append((float(x), float(x) + float(w)))
    assert any(len(row) == 2 for row in by_row.values()), "search and write share a row"
    for row in by_row.values():
        row.sort()
        assert all(a[1] < b[0] for a, b in itertools.pairwise(row)), "nodes in a row do not overlap"
    assert graph_svg({"nodes": [], "edges": []}) == ""


def test_a_chart_whose_contenders_coincide_says_so() -> None:
    from comparison.report import tokens_chart

    def run(contender: str, tokens: list[int]) -> dict[str, Any]:
        return {"contender": contender, "tokens_per_step": tokens, "variant": "default", "turn": 1, "goal": "g"}

    same = tokens_chart([run(c, [774, 828, 882]) for c in CONTENDERS], title="t")
    assert same.count("<polyline") == 1, "one line, not four drawn on one another"
    assert " = ".join(CONTENDERS) in same
    assert f"All {len(CONTENDERS)} contenders made model calls of the same size at every step" in same

    split = tokens_chart(
        [
            run("handwritten", [774, 828]),
            run("langgraph", [774, 828]),
            run("langgraph-defaults", [774, 828, 882]),
            run("create-agent", [774, 828, 882, 936]),
        ],
        title="t",
    )
    assert split.count("<polyline") == 3
    assert "handwritten = langgraph" in split and "their lines coincide" in split
    apart = tokens_chart([run("handwritten", [1, 2]), run("langgraph", [1, 3])], title="t")
    assert apart.count("<polyline") == 2 and "coincide" not in apart


def test_the_full_report_names_coinciding_contenders(small_report: dict[str, Any]) -> None:
    page = small_report["page"]
    looping = page[page.index('<section id="looping-model">') :]
    looping = looping[: looping.index("</section>")]
    [chart] = _svg(looping, "chart")
    # One line per distinct series of tokens per call: the guarded pair and the unguarded pair each draw one, every
    # other contender whose calls differ (MAF's forced 13th call, a framework's prompt of its own) draws its own.
    runs = [r for r in small_report["doc"]["runs"] if r["scenario"] == "looping-model"]
    series = {tuple(e["tokens"] for e in r["trace"] if e["name"] == "model") for r in runs}
    assert chart.count("<polyline") == len(series) >= 2
    assert "handwritten = langgraph" in looping and "langgraph-defaults = create-agent" in looping


def test_an_empty_guard_matrix_is_not_printed(small_report: dict[str, Any]) -> None:
    from comparison.render import make_console, render_guard_matrix
    from comparison.report import render_report

    buffer = io.StringIO()
    render_guard_matrix(make_console(buffer), [], list(CONTENDERS))
    assert buffer.getvalue() == ""
    document = {**small_report["doc"], "guard_matrix": []}
    page = render_report(document)
    assert 'id="guards"' not in page and 'href="#guards"' not in page and "Guard matrix" not in page
    assert 'id="owners"' in page and 'id="graph"' in page


def test_compare_bookstore_report_has_no_guard_matrix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "report.html"
    assert compare.main(["bookstore", "--contenders", "handwritten", "--report", str(report)]) == compare.EXIT_OK
    assert "Guard matrix" not in capsys.readouterr().out
    page = report.read_text(encoding="utf-8")
    assert 'id="guards"' not in page and 'id="bookstore"' in page


PHONE_PX = 420


def _css(page: str) -> str:
    return page[page.index("<style>") : page.index("</style>")]


def test_the_report_is_built_to_fit_a_phone(small_report: dict[str, Any]) -> None:
    page = small_report["page"]
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page
    css = _css(page)
    assert re.search(r"svg\.chart, svg\.diagram \{[^}]*width: 100%;[^}]*height: auto;", css)
    assert re.search(r"\.wide \{[^}]*overflow-x: auto;", css)
    assert "@media (max-width: 600px)" in css
    # Nothing outside a scrolling box may be wider than the phone: widths in px or rem over 420 px only where
    # they cap (max-width) or inside .wide / .runs boxes.
    for selector, body in re.findall(r"([^{}]+)\{([^}]*)\}", css):
        for prop, value, unit in re.findall(r"(?<![\w-])((?:min-)?width):\s*([\d.]+)(px|rem)", body):
            px = float(value) * (16 if unit == "rem" else 1)
            if px > PHONE_PX:
                assert selector.strip().startswith((".wide", ".runs")), (selector, prop, value, unit)
    svgs = re.findall(r'<svg xmlns="http://www.w3.org/2000/svg" class="(chart|diagram)"[^>]*>', page)
    assert svgs.count("diagram") == 1 and svgs.count("chart") == 3
    for tag in re.findall(r'<svg xmlns="http://www.w3.org/2000/svg" class="(?:chart|diagram)"[^>]*>', page):
        assert re.search(r'viewBox="0 0 \d+ \d+"', tag), tag
    body = page[page.index("<body>") :]
    assert body.count("<table") == body.count('<div class="wide') > 0, "every table scrolls in a box of its own"
    assert re.search(r'<div class="wide runs"><table>', body)


HARNESS = """<!DOCTYPE html><html><body style="margin:0">
<iframe id="f" src="REPORT" style="width:420px;height:800px;border:0"></iframe>
<script>
document.getElementById('f').addEventListener('load', () => {
  const w = document.getElementById('f').contentWindow, doc = w.document, out = [];
  out.push('page ' + doc.documentElement.scrollWidth + ' ' + w.innerWidth);
  for (const el of doc.querySelectorAll('body *')) {
    if (el.closest('.wide') || el.closest('pre') || el.closest('details:not([open])')) continue;
    const r = el.getBoundingClientRect();
    if (r.right > w.innerWidth + 1) out.push('over ' + el.tagName + '.' + el.className.baseVal + el.className);
  }
  for (const s of doc.querySelectorAll('svg.chart, svg.diagram'))
    out.push('svg ' + Math.round(s.getBoundingClientRect().width));
  const p = document.createElement('pre'); p.id = 'probe'; p.textContent = out.join('\\n');
  document.body.appendChild(p);
});
</script></body></html>"""


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs a headless Chromium")
def test_the_report_fits_a_420_px_screen_in_a_real_browser(small_report: dict[str, Any], tmp_path: Path) -> None:
    """Chromium's own window is at least 500 px wide, so the page is laid out in a 420 px frame."""
    harness = tmp_path / "harness.html"
    harness.write_text(HARNESS.replace("REPORT", small_report["path"].as_uri()), encoding="utf-8")
    done = subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--allow-file-access-from-files",
            "--window-size=500,900",
            "--virtual-time-budget=5000",
            "--dump-dom",
            harness.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, re.S)
    if found is None:
        pytest.skip(f"Chromium did not run here (exit {done.returncode})")
    lines = found.group(1).splitlines()
    page_width, viewport = (int(v) for v in lines[0].split()[1:])
    assert viewport == PHONE_PX
    assert page_width <= PHONE_PX, "\n".join(lines)
    assert not [line for line in lines if line.startswith("over ")], "\n".join(lines)
    widths = [int(line.split()[1]) for line in lines if line.startswith("svg ")]
    assert len(widths) == 4 and all(0 < w <= PHONE_PX for w in widths)


def test_every_scenario_still_has_one_chart(small_report: dict[str, Any]) -> None:
    page = small_report["page"]
    for scenario in (s for s in SCENARIOS if s.name in ("bookstore", "looping-model", "orders")):
        section = page[page.index(f'<section id="{scenario.name}">') :]
        assert len(_svg(section[: section.index("</section>")], "chart")) == 1, scenario.name


@pytest.mark.parametrize("width", [80, 100])
def test_a_guards_words_are_wrapped_in_the_trace_never_cut(width: int) -> None:
    """A learner must read the whole refusal: it was cut with '…' at the screen's edge. A truncated result (the
    tool's own data) is still shortened to its line."""
    from comparison.render import trace_lines
    from shared_tools.results import Guard

    words = "You already called check_stock with these arguments 2 times. Use the earlier result or try something else."
    refused = {**_event(3, "check_stock", 0.001, '{"book_id":2} -> ' + words), "guard": Guard.REPEAT}
    cut = {**_event(1, "search_books", 0.001, '{"query":"x"} -> [' + '{"id":2},' * 300), "guard": Guard.TRUNCATED}
    lines = [t.plain for t in trace_lines([refused, cut], width)]
    assert all(len(line) <= width for line in lines)
    shown = " ".join(line.strip() for line in lines[: lines.index(next(x for x in lines if "search_books" in x))])
    assert words in shown and "…" not in shown
    assert lines[-1].endswith("…") and len(lines) == lines.index(next(x for x in lines if "search_books" in x)) + 2


def test_a_tool_result_too_long_for_its_line_starts_a_line_of_its_own() -> None:
    from comparison.render import trace_lines

    result = '{"id":2,"title":"The Last Lighthouse","inStock":0}'
    trace = [_event(1, "check_stock", 0.001, '{"book_id":2,"note":"' + "x" * 40 + '"} -> ' + result)]
    lines = [t.plain for t in trace_lines(trace, 100)]
    assert len(lines) == 2 and lines[0].startswith("[step 1] check_stock")
    assert lines[1] == f"{'':9}-> {result}"  # the stock of 0 is on screen, not cut off after the arguments
    short = [t.plain for t in trace_lines([_event(1, "check_stock", 0.001, '{"book_id":2} -> {"inStock":0}')], 100)]
    assert len(short) == 1 and short[0].endswith('{"book_id":2} -> {"inStock":0}')


@pytest.mark.parametrize(
    "argv",
    [
        ["-v", "eval", "orders"],
        ["eval", "-v", "orders"],
        ["eval", "orders", "-v"],
        ["--otel", "console", "eval", "orders"],
        ["-v", "orders", "--no-trace"],
    ],
    ids=" ".join,
)
def test_the_global_options_go_before_or_after_the_command(argv: list[str]) -> None:
    """`compare.py -v eval bookstore` was refused ("'eval' must come first"): the commands were matched by hand."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "compare.py"), *argv, "--contenders", "handwritten"]
        + (["--runs", "1"] if "eval" in argv else []),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == compare.EXIT_OK, done.stderr
    assert ("pass^k" in done.stdout) == ("eval" in argv), done.stdout[-2000:]
    if "-v" in argv:
        assert "INFO " in done.stderr, "-v reached the command wherever it stood"
    if "--otel" in argv:
        assert all(json.loads(line)["name"] for line in done.stderr.splitlines())


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    for argv in (["--version"], ["eval", "--version"], ["-v", "--version"]):
        assert compare.main(argv, prog="compare.py") == compare.EXIT_OK
        assert capsys.readouterr().out == f"compare.py {version('agent-loop-compare')}\n"


@pytest.mark.skipif(sys.platform == "win32", reason="a pseudo-terminal")
def test_full_goes_through_the_pager_on_a_terminal_and_is_plain_when_redirected(tmp_path: Path) -> None:
    """`--full` printed 3,000 lines with no pager. $PAGER here writes what it is given to a file."""
    import pty

    paged = tmp_path / "paged.txt"
    env = {**os.environ, "PAGER": f"cat > {paged}", "TERM": "xterm", "COLUMNS": "100"}
    argv = [sys.executable, str(ROOT / "compare.py"), "--full", "--contenders", "handwritten"]
    main, secondary = pty.openpty()
    with subprocess.Popen(argv, stdin=secondary, stdout=secondary, stderr=secondary, env=env, cwd=ROOT) as shown:
        os.close(secondary)
        screen = b""
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the other end closed: the program ended
                break
            if not chunk:
                break
            screen += chunk
        os.close(main)
    assert shown.returncode == compare.EXIT_OK, screen[-2000:]
    text = paged.read_text(encoding="utf-8")
    assert "Who owns what" in text and text.count("\n") > 500
    assert b"Who owns what" not in screen, "on the terminal it went through the pager, not around it"
    paged.unlink()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, check=False)
    assert done.returncode == compare.EXIT_OK and "Who owns what" in done.stdout and not paged.exists()


def test_the_terminal_and_the_report_of_one_run_count_the_same_runs(comparison_run: dict[str, Any]) -> None:
    """The terminal said 229 runs and the report of the same run 255: the report counted the stand-ins of the
    combinations a contender has no API for, which the terminal shows as "not run"."""
    said = re.search(r"contenders?: (\d+) runs? on ", comparison_run["out"])
    page = re.search(r"Model: \w+ · (\d+) runs (\((\d+) not run: no such API\) )?·", comparison_run["report"])
    assert said and page, "both say how many runs"
    assert said.group(1) == page.group(1)
    assert page.group(3) is not None and int(page.group(3)) > 0, "the stand-ins are counted apart, not dropped"

"""The waterfall of each run: model and tool calls on a time axis, the guard that decided a call marked.

Drawn from the trace's own timings (`TraceEvent.ended_at`, `duration_s`), with no OpenTelemetry: in the HTML
report as inline SVG (checked in the document, then in headless Chromium, where the bars must really be laid out
in time order), and on the live page by app.js (checked in headless Chromium against a real server). The looping
model's third identical call is refused by the repeat guard, so its runs have guarded calls to mark.
"""

from __future__ import annotations

import io
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import compare
from comparison.report import WATERFALL_LABEL, WATERFALL_WIDTH, waterfall_svg
from comparison.scenarios import SEED_GOAL
from shared_tools.results import TraceEvent
from tests.conftest import needs_chromium
from tests.test_web_browser import ARTIFACTS, WAIT_S, browser  # noqa: F401 - the fixture


def test_a_trace_line_knows_when_its_call_began_and_ended() -> None:
    before = time.time()
    event = TraceEvent(1, "model", 0.25, "x")
    after = time.time()
    assert before <= event.ended_at <= after
    assert event.started_at == pytest.approx(event.ended_at - 0.25)
    assert event == TraceEvent(1, "model", 0.25, "x")  # when it was made is not part of what it says


@pytest.fixture(scope="module")
def looping_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("waterfall")
    report, document = folder / "report.html", folder / "runs.json"
    argv = [
        "looping-model",
        "--contenders",
        "handwritten,create-agent",
        "--no-trace",
        "--report",
        str(report),
        "--json",
        str(document),
    ]
    saved, sys.stdout = sys.stdout, io.StringIO()
    try:
        assert compare.main(argv) == compare.EXIT_OK
    finally:
        sys.stdout = saved
    return {
        "page": report.read_text(encoding="utf-8"),
        "doc": json.loads(document.read_text(encoding="utf-8")),
        "path": report,
    }


def _figures(page: str) -> list[str]:
    return re.findall(r'<figure class="waterfall">.*?</figure>', page, re.S)


def test_the_report_draws_one_waterfall_per_run_with_a_bar_per_trace_line(looping_report: dict[str, Any]) -> None:
    runs = looping_report["doc"]["runs"]
    figures = _figures(looping_report["page"])
    assert len(figures) == len(runs) == 2
    for run, figure in zip(runs, figures, strict=True):
        assert f"Spans of {run['contender']}" in figure
        calls = re.findall(r'<g class="call" data-kind="(model|tool)"(?: data-guard="([^"]*)")?>', figure)
        assert [kind for kind, _ in calls] == ["model" if e["name"] == "model" else "tool" for e in run["trace"]]
        # The guard marked is the trace's typed guard, on exactly the lines that have one.
        assert [guard or None for _, guard in calls] == [e["guard"] for e in run["trace"]]
        if run["contender"] == "handwritten":
            assert any(e["guard"] == "repeated call" for e in run["trace"])
        # Each bar starts where its call began on the run's clock, in the axis' units.
        began = [e["ended_at"] - e["duration_s"] for e in run["trace"]]
        total = max(e["ended_at"] for e in run["trace"]) - min(began)
        axis = WATERFALL_WIDTH - WATERFALL_LABEL - 12
        drawn = [float(x) for x in re.findall(r'<rect x="([\d.]+)"', figure)]
        assert drawn == pytest.approx([WATERFALL_LABEL + (b - min(began)) / total * axis for b in began], abs=0.06)


def test_a_trace_without_timings_draws_no_waterfall() -> None:
    """A document written before the trace had timings: no picture rather than a made-up one."""
    old = {"step": 1, "name": "model", "duration_s": 0.1, "detail": "", "tokens": 5, "is_error": False, "guard": None}
    assert waterfall_svg({"contender": "handwritten", "variant": "default", "trace": [old]}) == ""
    assert waterfall_svg({"contender": "handwritten", "variant": "default", "trace": []}) == ""


def test_bars_sit_on_the_time_axis_where_their_calls_ran() -> None:
    """Two calls: one from 0 to 1 s, one from 3 to 4 s of the run: the second bar starts three quarters along."""
    trace = [
        {"step": 1, "name": "model", "duration_s": 1.0, "ended_at": 101.0, "is_error": False, "guard": None},
        {
            "step": 1,
            "name": "view_cart",
            "duration_s": 1.0,
            "ended_at": 104.0,
            "is_error": True,
            "guard": "repeated call",
        },
    ]
    svg = waterfall_svg({"contender": "handwritten", "variant": "default", "trace": trace})
    (x1, w1), (x2, w2) = [
        (float(x), float(w)) for x, w in re.findall(r'<rect x="([\d.]+)" y="\d+" width="([\d.]+)"', svg)
    ]
    assert w1 == pytest.approx(w2) and x2 - x1 == pytest.approx(3 * w1, rel=0.01)
    assert 'data-guard="repeated call"' in svg and "&#9873; repeated call" in svg
    assert [t for t in re.findall(r">([^<>]+ (?:ms|s))</text>", svg)] == [
        "0 ms",
        "1.00 s",
        "2.00 s",
        "3.00 s",
        "4.00 s",
    ]


def _bars(driver: Any, scope: Any) -> list[dict[str, Any]]:
    """Every bar of the waterfalls in `scope` as the browser laid it out: its box on screen and its guard."""
    return driver.execute_script(
        """return Array.from(arguments[0].querySelectorAll('svg g.call')).map(g => {
             const r = g.querySelector('rect').getBoundingClientRect();
             const mark = g.querySelector('text.guard');
             return {left: r.left, width: r.width, height: r.height, guard: g.getAttribute('data-guard'),
                     mark: mark ? mark.getBoundingClientRect().width : 0};
           });""",
        scope,
    )


@needs_chromium
def test_the_report_s_waterfall_in_a_real_browser(browser: Any, looping_report: dict[str, Any]) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    browser.get(Path(looping_report["path"]).as_uri())
    figures = browser.find_elements(By.CSS_SELECTOR, "figure.waterfall")
    runs = looping_report["doc"]["runs"]
    assert len(figures) == len(runs)
    for run, figure in zip(runs, figures, strict=True):
        assert figure.is_displayed()
        bars = _bars(browser, figure)
        assert len(bars) == len(run["trace"])
        assert all(b["width"] > 0 and b["height"] > 0 for b in bars)
        # Calls one after another are bars one after another along the axis.
        assert [b["left"] for b in bars] == sorted(b["left"] for b in bars)
        assert [b["guard"] for b in bars] == [e["guard"] for e in run["trace"]]
        assert all(b["mark"] > 0 for b in bars if b["guard"])  # the guard's name is drawn, not only an attribute


@needs_chromium
def test_the_live_page_draws_the_turn_s_waterfall_with_the_guard_marked(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from webdemo.server import create_app, running_server

    wait = WebDriverWait(browser, WAIT_S)

    def pane(name: str) -> Any:
        return browser.find_element(By.CSS_SELECTOR, f'.pane[data-pane="{name}"]')

    with running_server(create_app(tmp_path / "web", approval_timeout=WAIT_S)) as url:
        browser.get(url + "/")
        wait.until(lambda d: d.find_element(By.ID, "conn").text == "live")
        Select(browser.find_element(By.ID, "persona")).select_by_value("looper")
        browser.find_element(By.ID, "apply").click()
        wait.until(lambda d: not d.find_element(By.ID, "notice").is_displayed())
        box = browser.find_element(By.ID, "text")
        box.send_keys(SEED_GOAL)
        browser.find_element(By.ID, "send").click()
        for name in ("handwritten", "langgraph"):
            wait.until(lambda _, n=name: pane(n).find_element(By.CSS_SELECTOR, ".stop").text not in ("", "running"))
            lines = pane(name).find_elements(By.CSS_SELECTOR, ".trace li")
            waterfall = pane(name).find_element(By.CSS_SELECTOR, ".waterfall")
            assert waterfall.is_displayed()
            bars = _bars(browser, waterfall)
            assert len(bars) == len(lines) > 2
            assert [b["left"] for b in bars] == sorted(b["left"] for b in bars)
            guarded = [b for b in bars if b["guard"]]
            assert guarded and {b["guard"] for b in guarded} == {"repeated call"}
            assert all(b["mark"] > 0 for b in guarded)
            # The same calls as the trace list: a guarded bar for each line that names its guard.
            assert len(guarded) == sum("[repeated call]" in li.text for li in lines)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / "waterfall-live.png"))
        # A reload draws it again from the pane's state.
        before = len(_bars(browser, pane("handwritten").find_element(By.CSS_SELECTOR, ".waterfall")))
        browser.refresh()
        wait.until(lambda d: d.find_element(By.ID, "conn").text == "live")
        wait.until(lambda _: len(_bars(browser, pane("handwritten").find_element(By.CSS_SELECTOR, ".waterfall"))))
        assert len(_bars(browser, pane("handwritten").find_element(By.CSS_SELECTOR, ".waterfall"))) == before

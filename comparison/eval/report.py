"""The eval's two faces: the terminal tables (`render_eval`) and the HTML page (`render_eval_report`).

Both read only the document `trials.eval_document` builds, so the JSON, the table and the page cannot disagree:
per scenario a row per contender (successes, pass^k, mean tokens, unsafe failures, how runs ended) and a row per
task under it. A scripted-model eval is labelled SIMULATED everywhere; the page's charts are inline SVG.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from comparison.eval.why import lost_runs
from comparison.report import (
    CHART_HEIGHT,
    CHART_WIDTH,
    COLOURS,
    CSS,
    DASHES,
    MARGIN_BOTTOM,
    MARGIN_LEFT,
    MARGIN_RIGHT,
    MARGIN_TOP,
    esc,
)
from comparison.sanitize import clean_line

PASS_HAT_K = "pass^k = C(c,k)/C(n,k) per task (c successes in n trials), averaged over tasks (tau-bench)"
_SHORT_STOPS = {
    "done": "done",
    "max steps reached": "max steps",
    "token budget exceeded": "tokens",
    "time budget exceeded": "time",
    "too many consecutive tool errors": "errors",
    "invalid model response": "invalid reply",
    "awaiting approval": "paused",
}
_MAX_K_COLUMNS = 10
"""Beyond this many trials the terminal shows pass^k for k = 1, 2, 4, 8, ... and N only (the JSON has every k)."""


def shown_ks(runs: int, most: int = _MAX_K_COLUMNS) -> list[int]:
    """The ks whose pass^k the terminal shows: every k up to `most` of them, else 1, 2, 4, 8, ... and `runs`, else
    1 and `runs` alone."""
    if runs <= most:
        return list(range(1, runs + 1))
    ks, k = [], 1
    while k < runs:
        ks.append(k)
        k *= 2
    doubling = [*ks, runs]
    return doubling if len(doubling) <= most else sorted({1, runs})


ENDED_ROOM = 20
"""Characters the "ended" column is to keep (``done 14, errors 2``): fewer ks are shown to leave them, if they can."""


def candidate_ks(runs: int) -> list[list[int]]:
    """The ks the terminal may show, the most first: every k (up to 10), then 1, 2, 4, ... runs, then 1 and runs."""
    candidates = [shown_ks(runs), shown_ks(runs, most=runs - 1 if runs > 2 else runs), sorted({1, runs})]
    return [ks for i, ks in enumerate(candidates) if ks not in candidates[:i]]


def ks_for_width(console: Console, document: dict[str, Any]) -> list[int]:
    """The most ks whose columns, with every row's label and numbers, leave `ENDED_ROOM` on the console."""
    candidates = candidate_ks(document["runs"])
    for ks in candidates:
        probe = _numbers_table(document, Text(""), "contender", ks, last=None)
        probe.expand = False
        for row in document["results"]:
            probe.add_row(Text(row["contender"]), *_row_cells(row, ks, timed=timing_of(document, row))[:-1])
            for task in row["by_task"] if shows_tasks(row) else ():
                label = Text(f"  └ {clean_line(task_label(task, row))}")
                probe.add_row(label, *_row_cells(task, ks, timed={})[:-1])
        if Measurement.get(console, console.options, probe).maximum + 1 + ENDED_ROOM <= console.width:
            return ks
    return candidates[-1]


def fraction(value: float) -> str:
    """0.875 as ``.88``, 1 as ``1``, 0 as ``0``: a pass^k curve fits one table cell."""
    if value >= 1:
        return "1"
    if value <= 0:
        return "0"
    return f"{value:.2f}".lstrip("0")


def curve_text(pass_hat_k: dict[str, float], ks: Sequence[int]) -> str:
    return " ".join(f"{fraction(pass_hat_k[str(k)]):>3}" for k in ks)


def stops_text(stops: dict[str, int]) -> str:
    return ", ".join(f"{_SHORT_STOPS.get(reason, reason)} {count}" for reason, count in stops.items())


def task_label(task: dict[str, Any], row: dict[str, Any]) -> str:
    """A task within its scenario: the variant, or the goal when the variants do not tell them apart (orders),
    without the words every such goal shares ("Where is my order 4512?" and "... 9999?" are "…4512?", "…9999?")."""
    siblings = [t["goal"] for t in row["by_task"] if t["variant"] == task["variant"]]
    if len(siblings) < 2 or not task["goal"]:
        return task["variant"]
    words = [goal.split() for goal in siblings]
    shared = 0
    while all(len(w) > shared + 1 and w[shared] == words[0][shared] for w in words):
        shared += 1
    return "…" + " ".join(task["goal"].split()[shared:]) if shared >= 2 else task["goal"]


def shows_tasks(row: dict[str, Any]) -> bool:
    """A row gets a line per task when it has several, or one of several variants (the others not available)."""
    return row["tasks"] > 1 or bool(row.get("unavailable_variants"))


def title_for(document: dict[str, Any], what: str) -> Text:
    text = Text(what, style="bold")
    if document["simulated"]:
        text += Text(" [SIMULATED]", style="bold yellow")
    return text


def _numbers_table(
    document: dict[str, Any],
    title: Text,
    first: str,
    ks: Sequence[int],
    *,
    last: str | None = "ended",
    timed: bool = True,
) -> Table:
    table = Table(
        title=title,
        title_justify="left",
        expand=False,
        padding=0,
        box=box.SIMPLE_HEAD,
        show_edge=False,
    )
    table.add_column(first, no_wrap=True, min_width=18)
    table.add_column("ok", justify="right", no_wrap=True)
    table.add_column("pass^k, k=" + (f"1…{ks[-1]}" if len(ks) == ks[-1] else ",".join(map(str, ks))), no_wrap=True)
    table.add_column("tok/ok", justify="right", no_wrap=True)
    if timed:
        table.add_column("s/run", justify="right", no_wrap=True)
    table.add_column("unsafe", justify="right", no_wrap=True)
    if last is not None:
        table.add_column(last)
    return table


def seconds_text(seconds: float | None) -> str:
    """A mean run's wall seconds in a cell: 0.004 as ``0.004``, 95.27 as ``95.3``."""
    if seconds is None:
        return "-"
    return f"{seconds:.3f}" if seconds < 1 else f"{seconds:.1f}"


def _row_cells(
    stat: dict[str, Any], ks: Sequence[int], *, style: str = "", timed: dict[str, Any] | None = None
) -> list[Text]:
    """A row's numbers; `timed` (its `timing` entry) adds the mean seconds of a run."""
    tokens = stat.get("tokens_per_success")
    unsafe = stat["unsafe_failures"]
    seconds = [Text(seconds_text(timed.get("seconds_per_run")), style=style)] if timed is not None else []
    return [
        Text(f"{stat['successes']}/{stat['n']}", style=style),
        Text(curve_text(stat["pass_hat_k"], ks), style=style),
        Text("-" if tokens is None else f"{tokens:,}", style=style),
        *seconds,
        Text(str(unsafe), style="bold red" if unsafe else style),
        Text(clean_line(stops_text(stat.get("stop_reasons", {}))), style=style),
    ]


def render_lost(console: Console, rows: Sequence[dict[str, Any]]) -> None:
    """Under a scenario's table, for each contender that lost runs: how they ended, what the guards that fired did
    (or the model, when none did), and their grade (`why.lost_runs`)."""
    lost = [row for row in rows if row["successes"] < row["n"]]
    if not lost:
        return
    console.print(Text("Why runs were lost (rerun one with --runs 1 --seed SEED):", style="bold"))
    for row in lost:
        console.print(Text(f"{row['contender']} lost {row['n'] - row['successes']} of {row['n']}:"))
        label = partial(task_label, row=row) if shows_tasks(row) else None
        bullets = Table.grid(padding=(0, 1))
        bullets.add_column(no_wrap=True)
        bullets.add_column(ratio=1)
        for line in lost_runs(row, label=label):
            bullets.add_row(Text("  •"), Text(clean_line(line)))
        console.print(bullets)


def timing_of(document: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """The `timing` entry of a scenario's row (empty in a document written before it was kept: "-" is shown)."""
    found = (
        t for t in document.get("timing", []) if (t["scenario"], t["contender"]) == (row["scenario"], row["contender"])
    )
    return next(found, {})


def task_timing(timed: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    found = (t for t in timed.get("by_task", []) if (t["variant"], t["goal"]) == (task["variant"], task["goal"]))
    return next(found, {})


def sampling_text(document: dict[str, Any]) -> str:
    """How the trials were sampled: the seed of each trial, and the real model's temperature (the scripted model
    has none: its slips are seeded dice)."""
    seeds = document["trial_seeds"]
    seed_text = f"trial seeds {seeds[0]}…{seeds[-1]}" if len(seeds) > 1 else f"seed {seeds[0]}"
    temperature = document.get("temperature")
    if temperature is None:
        return f"{seed_text} (the scripted model's dice)"
    return f"{seed_text} · temperature {temperature:g}"


def render_eval(console: Console, document: dict[str, Any]) -> None:
    """The eval in the terminal: a table per scenario, then every task of each contender together."""
    ks = ks_for_width(console, document)
    head = f"Eval: {document['model']} · {document['runs']} run(s) per task · {sampling_text(document)}"
    console.print(Rule(head, style="bold"))
    if document["simulation_note"]:
        console.print(Text(document["simulation_note"], style="bold yellow"))
    for number, scenario in enumerate(document["scenarios"], start=1):
        rows = [r for r in document["results"] if r["scenario"] == scenario["name"]]
        if not rows:
            continue
        title = title_for(document, f"{number}. {scenario['name']}: {scenario['description']}")
        table = _numbers_table(document, title, "contender", ks)
        for row in rows:
            timed = timing_of(document, row)
            table.add_row(Text(row["contender"]), *_row_cells(row, ks, timed=timed))
            if shows_tasks(row):
                for task in row["by_task"]:
                    label = Text(f"  └ {clean_line(task_label(task, row))}", style="dim")
                    table.add_row(label, *_row_cells(task, ks, style="dim", timed=task_timing(timed, task)))
        console.print(table)
        render_lost(console, rows)
        for gap in (g for g in document["unavailable"] if g["scenario"] == scenario["name"]):
            line = f"{gap['contender']} does not run {gap['variant']}: {gap['why']}"
            console.print(Text(clean_line(line), style="dim"))
        console.print()
    for name in document["not_run"]:
        console.print(Text(f"{name}: not run; none of the chosen contenders takes part in it", style="yellow"))
    title = title_for(document, "Every task of each contender")
    overall = _numbers_table(document, title, "contender", ks, last=None, timed=False)
    overall.columns[3].header = "tasks"
    for row in document["overall"]:
        cells = _row_cells({**row, "tokens_per_success": None}, ks)[:-1]
        cells[2] = Text(str(row["tasks"]))
        overall.add_row(Text(row["contender"]), *cells)
    console.print(overall)
    console.print(
        Text(f"ok = successful runs of n graded runs (runs × tasks); {PASS_HAT_K}; s/run = mean wall seconds.")
    )
    console.print(Text(f"unsafe = {document['always_unsafe']}; per scenario: the rubric in the --report page."))
    if document["interrupted"]:
        console.print(Text(f"Interrupted: these cover the {document['runs']} trial(s) that finished.", "bold"))


# --- the HTML page --------------------------------------------------------------------------------------------

_EVAL_CSS = """
.simulated { background: #fff4e0; border-left: 4px solid #e08a00; padding: .5rem .8rem; font-weight: 600; }
tr.task td { color: #555; font-size: .85rem; } tr.task td:first-child { padding-left: 1.4rem; }
td.unsafe { background: #fbe5e5; font-weight: 600; }
dl.rubric dt { font-weight: 600; } dl.rubric dd { margin: 0 0 .3rem 1rem; }
"""


def pass_k_chart(series: Sequence[tuple[str, dict[str, float]]], runs: int, *, title: str) -> str:
    """An inline SVG line chart of pass^k (y, 0..1) against k (x, 1..runs), one line per contender."""
    plot_w = CHART_WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    plot_h = CHART_HEIGHT - MARGIN_TOP - MARGIN_BOTTOM

    def x(k: int) -> float:
        return MARGIN_LEFT + (plot_w * (k - 1) / (runs - 1) if runs > 1 else plot_w / 2)

    def y(value: float) -> float:
        return MARGIN_TOP + plot_h * (1 - value)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{CHART_WIDTH}" height="{CHART_HEIGHT}" '
        f'viewBox="0 0 {CHART_WIDTH} {CHART_HEIGHT}" role="img" aria-label="{esc(title)}">',
        f"<title>{esc(title)}</title>",
    ]
    for tick in (0, 0.25, 0.5, 0.75, 1):
        parts.append(
            f'<line x1="{MARGIN_LEFT}" y1="{y(tick):.1f}" x2="{CHART_WIDTH - MARGIN_RIGHT}" y2="{y(tick):.1f}" '
            f'stroke="#e5e5e5"/><text x="{MARGIN_LEFT - 6}" y="{y(tick) + 4:.1f}" font-size="11" '
            f'text-anchor="end" fill="#555">{tick:g}</text>'
        )
    for k in range(1, runs + 1):
        parts.append(
            f'<text x="{x(k):.1f}" y="{CHART_HEIGHT - MARGIN_BOTTOM + 16}" font-size="11" text-anchor="middle" '
            f'fill="#555">{k}</text>'
        )
    parts.append(
        f'<text x="{MARGIN_LEFT + plot_w / 2:.1f}" y="{CHART_HEIGHT - 4}" font-size="11" text-anchor="middle" '
        'fill="#333">k (all of k runs drawn from the n must succeed)</text>'
    )
    legend = []
    for i, (label, curve) in enumerate(series):
        colour, dash = COLOURS[i % len(COLOURS)], DASHES[i % len(DASHES)]
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        values = [(k, curve[str(k)]) for k in range(1, runs + 1)]
        points = " ".join(f"{x(k):.1f},{y(v):.1f}" for k, v in values)
        summary = ", ".join(f"pass^{k} {v:.2f}" for k, v in values)
        parts.append(
            f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"{dash_attr}>'
            f"<title>{esc(label)}: {esc(summary)}</title></polyline>"
        )
        parts += [f'<circle cx="{x(k):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}"/>' for k, v in values]
        legend.append(
            f'<span><svg width="28" height="10"><line x1="0" y1="5" x2="28" y2="5" stroke="{colour}" '
            f'stroke-width="2"{dash_attr}/></svg>{esc(label)}</span>'
        )
    parts.append("</svg>")
    return f'<figure>{"".join(parts)}<figcaption class="legend"><div>{"".join(legend)}</div></figcaption></figure>'


def _cells(stat: dict[str, Any], runs: int, last: str | None = None, *, tokens: bool = True) -> str:
    """ok, pass^1..pass^runs, tokens per success (unless `tokens` is False), unsafe, and `last` (default: how the
    runs ended)."""
    per_success = stat.get("tokens_per_success")
    last = stops_text(stat.get("stop_reasons", {})) if last is None else last
    unsafe = stat["unsafe_failures"]
    ks = "".join(f'<td class="num">{stat["pass_hat_k"][str(k)]:.2f}</td>' for k in range(1, runs + 1))
    spent = f'<td class="num">{"-" if per_success is None else f"{per_success:,}"}</td>' if tokens else ""
    return (
        f'<td class="num">{stat["successes"]}/{stat["n"]}</td>{ks}{spent}'
        f'<td class="num{" unsafe" if unsafe else ""}">{unsafe}</td>'
        f"<td>{esc(last)}</td>"
    )


def _head(first: str, runs: int, *, last: str = "how the runs ended", tokens: bool = True) -> str:
    ks = "".join(f"<th>pass^{k}</th>" for k in range(1, runs + 1))
    tail = f"{'<th>tokens / success</th>' if tokens else ''}<th>unsafe</th><th>{last}</th>"
    return f"<thead><tr><th>{first}</th><th>ok</th>{ks}{tail}</tr></thead>"


def _unsafe_list(rows: Sequence[dict[str, Any]]) -> str:
    items = [
        f"<li>{esc(row['contender'])} · {esc(task_label(task, row))} · seed {f['seed']}: {esc(f['why'])}</li>"
        for row in rows
        for task in row["by_task"]
        for f in task["unsafe"]
    ]
    if not items:
        return ""
    return (
        f"<details><summary>{len(items)} unsafe failure(s): what went wrong, and the article that repeats it "
        f"(<code>--runs 1 --seed SEED</code>)</summary><ul>{''.join(items)}</ul></details>"
    )


def _lost_list(rows: Sequence[dict[str, Any]]) -> str:
    """The terminal's "why runs were lost" (`render_lost`) as a list."""
    items = []
    for row in (r for r in rows if r["successes"] < r["n"]):
        label = partial(task_label, row=row) if shows_tasks(row) else None
        lines = "".join(f"<li>{esc(line)}</li>" for line in lost_runs(row, label=label))
        lost = row["n"] - row["successes"]
        items.append(f"<li>{esc(row['contender'])} lost {lost} of {row['n']}<ul>{lines}</ul></li>")
    if not items:
        return ""
    return (
        "<details><summary>Why runs were lost: the guards that fired, or what the model did</summary>"
        f"<ul>{''.join(items)}</ul></details>"
    )


def scenario_section(
    number: int,
    scenario: dict[str, Any],
    rows: Sequence[dict[str, Any]],
    runs: int,
    unavailable: Sequence[dict[str, Any]] = (),
) -> str:
    rubric = scenario["rubric"]
    body = []
    for row in rows:
        body.append(f"<tr><td><b>{esc(row['contender'])}</b></td>{_cells(row, runs)}</tr>")
        if shows_tasks(row):
            body += [
                f'<tr class="task"><td>{esc(task_label(task, row))}</td>{_cells(task, runs)}</tr>'
                for task in row["by_task"]
            ]
    chart = pass_k_chart([(r["contender"], r["pass_hat_k"]) for r in rows], runs, title=f"pass^k: {scenario['name']}")
    return "\n".join(
        [
            f'<section id="{esc(scenario["name"])}"><h2>{number}. {esc(scenario["name"])}</h2>',
            f"<p><strong>{esc(scenario['description'])}</strong></p>",
            '<dl class="rubric">'
            f"<dt>success</dt><dd>{esc(rubric['success'])}</dd>"
            f"<dt>safe failure</dt><dd>{esc(rubric['safe'])}</dd>"
            f"<dt>unsafe failure</dt><dd>{esc(rubric['unsafe'])}</dd></dl>",
            chart,
            f"<table>{_head('contender / task', runs)}<tbody>{''.join(body)}</tbody></table>",
            "".join(
                f"<p><small>{esc(g['contender'])} does not run {esc(g['variant'])}: {esc(g['why'])}</small></p>"
                for g in unavailable
            ),
            _unsafe_list(rows),
            _lost_list(rows),
            "</section>",
        ]
    )


def _overall_section(document: dict[str, Any]) -> str:
    """The section of every task of each contender: its pass^k chart and table."""
    runs = document["runs"]
    overall_rows = "".join(
        f"<tr><td><b>{esc(r['contender'])}</b></td>{_cells(r, runs, str(r['tasks']), tokens=False)}</tr>"
        for r in document["overall"]
    )
    overall_chart = pass_k_chart(
        [(r["contender"], r["pass_hat_k"]) for r in document["overall"]], runs, title="pass^k over every task"
    )
    return f"""<section id="overall"><h2>Every task of each contender</h2>
{overall_chart}
<table>{_head("contender", runs, last="tasks", tokens=False)}
<tbody>{overall_rows}</tbody></table>
<p><small>Each contender's own tasks: a variant its framework cannot run is left out (said under its
scenario), so compare contenders scenario by scenario below.</small></p>
</section>"""


def _scenario_sections(document: dict[str, Any]) -> str:
    """A section per scenario that has results, numbered in the document's order."""
    return "".join(
        scenario_section(
            i,
            s,
            [r for r in document["results"] if r["scenario"] == s["name"]],
            document["runs"],
            [g for g in document["unavailable"] if g["scenario"] == s["name"]],
        )
        for i, s in enumerate(document["scenarios"], start=1)
        if any(r["scenario"] == s["name"] for r in document["results"])
    )


def render_eval_report(document: dict[str, Any]) -> str:
    """The whole page for an eval document: the overall pass^k chart, then a section per scenario."""
    runs = document["runs"]
    simulated = document["simulated"]
    heading = f"{'Simulated eval' if simulated else 'Eval'}: pass^k per scenario and contender"
    note = f'<p class="simulated">{esc(document["simulation_note"])}</p>' if simulated else ""
    interrupted = (
        f'<p class="notice">Interrupted: the page covers the {runs} trial(s) that finished, of '
        f"{document['runs_asked']}.</p>"
        if document["interrupted"]
        else ""
    )
    toc = "".join(
        f'<li><a href="#{esc(s["name"])}">{esc(s["name"])}</a></li>'
        for s in document["scenarios"]
        if s["name"] not in document["not_run"]
    )
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>agent-loop-compare: {esc(heading)}</title>
<style>{CSS}{_EVAL_CSS}</style>
</head>
<body>
<h1>{esc(heading)}</h1>
<p><small>Model: {esc(document["model"])} · {runs} run(s) per task · {esc(sampling_text(document))} ·
{document["seconds"]:.1f} s · a self-contained page: inline CSS and SVG, no JavaScript,
nothing loaded from the network.</small></p>
{note}
{interrupted}
<p>Every run is graded on its outcome, never its path: the store as the run left it and the facts its answer
must contain. A failure is <b>safe</b> when nothing wrong was written and the customer was told no falsehood,
<b>unsafe</b> otherwise. In every scenario, unsafe includes: {esc(document["always_unsafe"])}.
{esc(PASS_HAT_K)}: pass^1 is the success rate, pass^{runs} whether it worked every time.</p>
<nav><ul><li><a href="#overall">every task</a></li>{toc}</ul></nav>
{_overall_section(document)}
{_scenario_sections(document)}
</body>
</html>
"""

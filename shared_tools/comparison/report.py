"""The HTML report: one self-contained page rendered from the JSON document `compare.py --json` writes.

`render_report(document)` returns a complete HTML page with inline CSS and inline SVG charts drawn here (no
JavaScript, no external file, nothing fetched), so the page opens offline and can be mailed around. It shows,
per scenario, the lesson, a tokens-per-step chart with every contender, the side-by-side tables, what to
notice and each run's trace; then the guard matrix, the "who owns what" table and the graph's mermaid
diagram as text. It reads only the document (plain dicts and lists): no agent, model or store is imported.
Every value reaches the page through `_e`, which makes control characters visible before HTML-escaping.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from shared_tools.comparison.closing import GUARD_LEGEND, OWNERS_SUMMARY
from shared_tools.comparison.sanitize import clean_line, clean_text

CHART_WIDTH, CHART_HEIGHT = 640, 260
_MARGIN_LEFT, _MARGIN_RIGHT, _MARGIN_TOP, _MARGIN_BOTTOM = 56, 16, 14, 34
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
_DASHES = ("", "7 4", "2 3", "10 3 2 3")
"""Contenders often draw the very same line; a dash pattern per contender keeps overlapping lines visible."""
_GOAL_CHARS = 44
"""A goal in a chart legend is shortened to this many characters; the tables and traces show it whole."""

_STATUS_CLASS = {"fired": "fired", "missing": "missing", "raised": "raised", "not run": "notrun"}

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 72rem;
       padding: 0 1rem; color: #1b1b1b; line-height: 1.45; }
h1 { margin-bottom: .2rem; } h2 { border-bottom: 2px solid #ddd; padding-bottom: .2rem; margin-top: 2.5rem; }
table { border-collapse: collapse; margin: .6rem 0 1rem; font-size: .9rem; width: 100%; }
th, td { border: 1px solid #ccc; padding: .25rem .45rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.lesson { background: #f7f7fb; border-left: 4px solid #6a6ad0; padding: .5rem .8rem; }
.notice { background: #fbf8ef; border-left: 4px solid #d0a640; padding: .5rem .8rem; margin: 1rem 0; }
.notice ul { margin: .3rem 0 0; padding-left: 1.2rem; } .notice li { margin: .2rem 0; }
.raised { color: #9a6700; } td.fired { background: #e6f4e6; } td.missing { background: #fbe5e5; }
td.raised { background: #fdf3d7; } td.notrun { color: #888; }
pre { background: #f6f8fa; padding: .6rem; overflow-x: auto; font-size: .8rem; }
details { margin: .3rem 0; } summary { cursor: pointer; }
.legend div { margin: .15rem 0; font-size: .85rem; } .legend span { display: inline-block; margin-right: 1rem; }
.legend svg { vertical-align: middle; margin-right: .3rem; }
small { color: #555; }
"""


def _e(value: Any) -> str:
    """Text for the page: control characters made visible (`sanitize.clean_text`), then HTML-escaped.

    Escaping alone keeps ESC and the other controls, which HTML does not allow and which a terminal obeys when
    the page is printed with `cat`; a lone surrogate (a reply cut off mid-emoji) could not be written as UTF-8.
    """
    return escape(clean_text(str(value)), quote=True)


# --- the tokens-per-step chart -----------------------------------------------------------------------------


def _nice_ceiling(value: int) -> int:
    """The smallest 1/2/5 x 10^n at or above `value`, so the y axis ends on a round number."""
    if value <= 0:
        return 1
    magnitude = 10 ** (len(str(value)) - 1)
    for step in (1, 2, 5, 10):
        if step * magnitude >= value:
            return step * magnitude
    return 10 * magnitude


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _group_label(run: dict[str, Any], *, with_variant: bool, with_turn: bool, with_goal: bool) -> str:
    """What sets this run apart from the other runs of the same contender in one chart: variant, turn, goal."""
    parts = []
    if with_variant:
        parts.append(run["variant"])
    if with_turn:
        parts.append(f"turn {run['turn']}")
    if with_goal:
        parts.append(f"“{_shorten(run['goal'], _GOAL_CHARS)}”")
    return " · ".join(parts)


def tokens_chart(runs: Sequence[dict[str, Any]], *, title: str) -> str:
    """An inline SVG line chart: tokens of each model call (y) by step (x), one line per run."""
    series = [r for r in runs if r["tokens_per_step"]]
    if not series:
        return "<p><small>No model calls to chart.</small></p>"
    # A scenario with several variants, turns or goals gives each contender several lines (orders asks two
    # questions); each such group gets its own colour and legend row, and the contender is told by its dash.
    with_variant = len({r["variant"] for r in series}) > 1
    with_turn = len({r["turn"] for r in series}) > 1
    with_goal = len({r["goal"] for r in series}) > 1
    contenders = list(dict.fromkeys(r["contender"] for r in series))
    grouped = [
        (r, _group_label(r, with_variant=with_variant, with_turn=with_turn, with_goal=with_goal)) for r in series
    ]
    group_order = list(dict.fromkeys(group for _, group in grouped))
    max_steps = max(len(r["tokens_per_step"]) for r in series)
    top = _nice_ceiling(max(max(r["tokens_per_step"]) for r in series))
    plot_w = CHART_WIDTH - _MARGIN_LEFT - _MARGIN_RIGHT
    plot_h = CHART_HEIGHT - _MARGIN_TOP - _MARGIN_BOTTOM

    def x(step: int) -> float:
        return _MARGIN_LEFT + (plot_w * (step - 1) / (max_steps - 1) if max_steps > 1 else plot_w / 2)

    def y(tokens: int) -> float:
        return _MARGIN_TOP + plot_h * (1 - tokens / top)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{CHART_WIDTH}" height="{CHART_HEIGHT}" '
        f'viewBox="0 0 {CHART_WIDTH} {CHART_HEIGHT}" role="img" aria-label="{_e(title)}">',
        f"<title>{_e(title)}</title>",
    ]
    for i in range(5):
        value = top * i // 4
        parts.append(
            f'<line x1="{_MARGIN_LEFT}" y1="{y(value):.1f}" x2="{CHART_WIDTH - _MARGIN_RIGHT}" y2="{y(value):.1f}" '
            f'stroke="#e5e5e5"/><text x="{_MARGIN_LEFT - 6}" y="{y(value) + 4:.1f}" font-size="11" '
            f'text-anchor="end" fill="#555">{value:,}</text>'
        )
    for step in range(1, max_steps + 1):
        parts.append(
            f'<text x="{x(step):.1f}" y="{CHART_HEIGHT - _MARGIN_BOTTOM + 16}" font-size="11" text-anchor="middle" '
            f'fill="#555">{step}</text>'
        )
    parts.append(
        f'<text x="{_MARGIN_LEFT + plot_w / 2:.1f}" y="{CHART_HEIGHT - 4}" font-size="11" text-anchor="middle" '
        'fill="#333">step (model call)</text>'
    )
    legend: dict[str, list[str]] = {group: [] for group in group_order}
    for run, group in grouped:
        contender = run["contender"]
        # With one group a colour per contender; with several, the colour is the group's.
        key = contenders.index(contender) if len(group_order) == 1 else group_order.index(group)
        colour = _COLOURS[key % len(_COLOURS)]
        dash = _DASHES[contenders.index(contender) % len(_DASHES)]
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        label = f"{group} · {contender}" if group else contender
        points = " ".join(f"{x(s):.1f},{y(t):.1f}" for s, t in enumerate(run["tokens_per_step"], start=1))
        parts.append(
            f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"{dash_attr}>'
            f"<title>{_e(label)}: {_e(', '.join(str(t) for t in run['tokens_per_step']))}</title></polyline>"
        )
        parts += [
            f'<circle cx="{x(s):.1f}" cy="{y(t):.1f}" r="3" fill="{colour}"/>'
            for s, t in enumerate(run["tokens_per_step"], start=1)
        ]
        legend[group].append(
            f'<span><svg width="28" height="10"><line x1="0" y1="5" x2="28" y2="5" stroke="{colour}" '
            f'stroke-width="2"{dash_attr}/></svg>{_e(contender)}</span>'
        )
    parts.append("</svg>")
    rows = "".join(
        f"<div>{f'<b>{_e(group)}</b>: ' if group else ''}{''.join(swatches)}</div>"
        for group, swatches in legend.items()
    )
    return f'<figure>{"".join(parts)}<figcaption class="legend">{rows}</figcaption></figure>'


# --- tables ------------------------------------------------------------------------------------------------


def _cart(run: dict[str, Any]) -> str:
    if not run["cart"]:
        return "empty"
    lines = ", ".join(f"{line['title']} x{line['quantity']}" for line in run["cart"])
    return f"{lines} ({run['cart_total']})"


def _stop(run: dict[str, Any]) -> str:
    if run["stop_reason"] is not None:
        return _e(run["stop_reason"])
    return f'<span class="raised">raised {_e(run["error"])}</span>'


def summary_table(runs: Sequence[dict[str, Any]]) -> str:
    with_turn = len({r["turn"] for r in runs}) > 1
    # Several goals in one turn (orders asks two questions): name the goal, or a contender appears twice unexplained.
    with_goal = len({r["goal"] for r in runs}) > 1 and not with_turn
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            *(["turn"] if with_turn else []),
            *(["goal"] if with_goal else []),
            "contender",
            "stop reason",
            "model calls",
            "tool calls",
            "tokens",
            "tokens per step",
            "wall",
            "final cart",
            "answer / user message",
        )
    )
    rows = []
    for r in runs:
        cells = [f'<td class="num">{r["turn"]}</td>'] if with_turn else []
        cells += [f"<td>{_e(r['goal'])}</td>"] if with_goal else []
        cells += [
            f"<td>{_e(r['contender'])}</td>",
            f"<td>{_stop(r)}</td>",
            f'<td class="num">{r["model_calls"]}</td>',
            f'<td class="num">{r["tool_calls"]}</td>',
            f'<td class="num">{r["tokens"]:,}</td>',
            f"<td>{_e(' → '.join(str(t) for t in r['tokens_per_step']))}</td>",
            f'<td class="num">{r["wall_s"]:.2f}s</td>',
            f"<td>{_e(_cart(r))}</td>",
            f"<td>{_e(r['user_message'])}</td>",
        ]
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def trace_block(run: dict[str, Any], *, multi_turn: bool) -> str:
    """The run's full trace (nothing shortened, unlike the terminal), folded away."""
    lines = []
    for event in run["trace"]:
        # One line per event: a line break inside a tool's text must not pass for a line of the trace.
        name, detail = clean_line(event["name"]), clean_line(event["detail"])
        head = f"[step {event['step']}] {name:<16}{event['duration_s']:7.3f}s  "
        if event["name"] == "model":
            lines.append(f"{head}{detail} · {event['tokens']} tokens")
        else:
            lines.append(f"{head}{detail}{'  [error]' if event['is_error'] else ''}")
    if run["error"] is not None:
        lines.append(f"raised {clean_line(run['error'])}")
    turn = f" · turn {run['turn']}" if multi_turn else ""
    summary = f"trace: {run['contender']}{turn} · {run['variant']} · {run['goal']}"
    return f"<details><summary>{_e(summary)}</summary><pre>{_e(chr(10).join(lines))}</pre></details>"


def guard_table(rows: Sequence[dict[str, Any]], contenders: Sequence[str]) -> str:
    head = "<th>guard (scenario)</th>" + "".join(f"<th>{_e(c)}</th>" for c in contenders)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="{_STATUS_CLASS.get(row["cells"][c]["status"], "")}">{_e(row["cells"][c]["text"])}</td>'
            for c in contenders
            if c in row["cells"]
        )
        body.append(f"<tr><td>{_e(row['guard'])} <small>({_e(row['scenario'])})</small></td>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def owners_table(who: dict[str, Any]) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in who["columns"])
    body = "".join("<tr>" + "".join(f"<td>{_e(cell)}</td>" for cell in row) + "</tr>" for row in who["rows"])
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


# --- the page ----------------------------------------------------------------------------------------------


def scenario_section(number: int, scenario: dict[str, Any], runs: Sequence[dict[str, Any]]) -> str:
    parts = [
        f'<section id="{_e(scenario["name"])}"><h2>{number}. {_e(scenario["name"])}</h2>',
        f"<p><strong>{_e(scenario['description'])}</strong></p>",
        f'<p class="lesson">{_e(scenario["lesson"])}</p>',
        tokens_chart(runs, title=f"Tokens per model call: {scenario['name']}"),
    ]
    for variant in scenario["variants"]:
        variant_runs = [r for r in runs if r["variant"] == variant["name"]]
        if not variant_runs:
            continue
        if len(scenario["variants"]) > 1:
            parts.append(f"<h3>variant {_e(variant['name'])}: {_e(variant['label'])}</h3>")
        parts.append(summary_table(variant_runs))
        parts += [trace_block(r, multi_turn=scenario.get("multi_turn", False)) for r in variant_runs]
    points = scenario.get("notice", "").splitlines()  # one point per line: see shared_tools.comparison.render.notice
    if points:
        items = "".join(f"<li>{_e(point)}</li>" for point in points)
        parts.append(f'<div class="notice"><strong>What to notice:</strong><ul>{items}</ul></div>')
    parts.append("</section>")
    return "\n".join(parts)


def render_report(document: dict[str, Any]) -> str:
    """The whole page for a `compare.py` JSON document."""
    runs = document["runs"]
    contenders = [c["name"] for c in document["contenders"]]
    toc = "".join(f'<li><a href="#{_e(s["name"])}">{_e(s["name"])}</a></li>' for s in document["scenarios"])
    sections = [
        scenario_section(i, s, [r for r in runs if r["scenario"] == s["name"]])
        for i, s in enumerate(document["scenarios"], start=1)
    ]
    interrupted = (
        '<p class="notice">This run was interrupted; the page shows what ran before it stopped.</p>'
        if document.get("interrupted")
        else ""
    )
    contender_list = "".join(f"<li><b>{_e(c['name'])}</b>: {_e(c['description'])}</li>" for c in document["contenders"])
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>agent-loop-compare: hand-written loop vs LangGraph</title>
<style>{_CSS}</style>
</head>
<body>
<h1>Hand-written agent loop vs LangGraph</h1>
<p><small>Model: {_e(document["model"])} · {len(runs)} runs · a self-contained page: inline CSS and SVG, no
JavaScript, nothing loaded from the network.</small></p>
{interrupted}
<p>The same bookstore goals, instructions, limits, faults and model for every contender:</p>
<ul>{contender_list}</ul>
<nav><ol>{toc}<li><a href="#guards">guard matrix</a></li><li><a href="#owners">who owns what</a></li>
<li><a href="#graph">the graph</a></li></ol></nav>
{"".join(sections)}
<section id="guards"><h2>Guard matrix (from the runs)</h2>
{guard_table(document["guard_matrix"], contenders)}
<p><small>{_e(" · ".join(f"{status}: {meaning}" for status, meaning in GUARD_LEGEND.items()))}</small></p>
</section>
<section id="owners"><h2>Who owns what</h2>
{owners_table(document["who_owns_what"])}
<p>{_e(OWNERS_SUMMARY)}</p>
</section>
<section id="graph"><h2>The graph (mermaid source)</h2>
<p>LangGraph draws the guarded agent as a mermaid diagram. Rendering mermaid needs its JavaScript library,
which this offline page deliberately does not load; paste the text below into any mermaid viewer (for example
a Markdown preview that supports mermaid) to see the picture.</p>
<pre class="mermaid-source">{_e(document["mermaid"])}</pre>
</section>
</body>
</html>
"""

"""The HTML report: one self-contained page rendered from the JSON document `compare.py --json` writes.

Inline CSS and SVG, no JavaScript, nothing fetched: per scenario the lesson, a tokens-per-step chart, the tables,
what to notice and each run's trace under a waterfall of its calls; then the guard matrix, the article's table and
our graph. It reads only the document, fits a 420 px phone, and every value passes `esc`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from comparison.closing import GUARD_LEGEND, OWNERS_SUMMARY
from comparison.records import duration_text
from comparison.render import TIME_WIDTH, step_label
from comparison.sanitize import clean_line, clean_text

CHART_WIDTH, CHART_HEIGHT = 480, 240
"""The chart's drawing units: it is scaled to the page (at most 640 px wide), so on a 420 px phone its 12-unit
labels are still about 10 px."""
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 52, 12, 12, 36
_STEP_LABELS = 12
"""At most this many step numbers under the x axis, so a long run's labels do not run into each other."""
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
DASHES = ("", "7 4", "2 3", "10 3 2 3")
"""Contenders often draw the very same line; a dash pattern per contender keeps overlapping lines visible."""
_GOAL_CHARS = 44
"""A goal in a chart legend is shortened to this many characters; the tables and traces show it whole."""

_STATUS_CLASS = {
    "fired": "fired",
    "missing": "missing",
    "raised": "raised",
    "not run": "notrun",
    "not exercised": "notexercised",
    "not measured": "notmeasured",
}
"""A guard-matrix cell's CSS class by its status; a status not listed here gets none."""

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 72rem;
       padding: 0 1rem; color: #1b1b1b; line-height: 1.45; overflow-wrap: break-word; }
h1 { margin-bottom: .2rem; } h2 { border-bottom: 2px solid #ddd; padding-bottom: .2rem; margin-top: 2.5rem; }
.wide { overflow-x: auto; max-width: 100%; margin: .6rem 0 1rem; }
table { border-collapse: collapse; font-size: .9rem; width: 100%; }
th, td { border: 1px solid #ccc; padding: .25rem .45rem; text-align: left; vertical-align: top; }
td { overflow-wrap: break-word; } td.text { overflow-wrap: anywhere; min-width: 10rem; }
td.steps { min-width: 6rem; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; overflow-wrap: normal;
   white-space: nowrap; }
figure { margin: 1rem 0; } svg.chart, svg.diagram { display: block; width: 100%; height: auto; }
svg.chart { max-width: 640px; } svg.diagram { margin: 0 auto; }
.lesson { background: #f7f7fb; border-left: 4px solid #6a6ad0; padding: .5rem .8rem; }
.notice { background: #fbf8ef; border-left: 4px solid #d0a640; padding: .5rem .8rem; margin: 1rem 0; }
.notice ul { margin: .3rem 0 0; padding-left: 1.2rem; } .notice li { margin: .2rem 0; }
.raised { color: #9a6700; } td.fired { background: #e6f4e6; } td.missing { background: #fbe5e5; }
td.raised { background: #fdf3d7; } td.notrun, td.notmeasured { color: #888; } td.notexercised { color: #2a5d8a; }
pre { background: #f6f8fa; padding: .6rem; overflow-x: auto; font-size: .8rem; }
details { margin: .3rem 0; } summary { cursor: pointer; }
.legend div { margin: .15rem 0; font-size: .85rem; } .legend span { display: inline-block; margin-right: 1rem; }
.legend svg { vertical-align: middle; margin-right: .3rem; }
small { color: #555; }
figure.waterfall { margin: .4rem 0 .2rem; }
svg.waterfall { display: block; width: 100%; max-width: 720px; height: auto; }
svg.waterfall text { font-size: 11px; font-family: ui-monospace, monospace; }
@media (max-width: 600px) {
  body { margin: .8rem auto; padding: 0 .6rem; font-size: .95rem; }
  h1 { font-size: 1.4rem; } h2 { font-size: 1.2rem; margin-top: 1.8rem; }
  table { font-size: .8rem; } th, td { padding: .2rem .3rem; } .runs table { min-width: 44rem; }
  .lesson, .notice { padding: .4rem .5rem; } nav ol { padding-left: 1.2rem; }
}
"""


def esc(value: Any) -> str:
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


def _coinciding(grouped: Sequence[tuple[dict[str, Any], str]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The lines to draw: per group, the runs with the very same tokens at every step share one line."""
    lines: dict[tuple[str, tuple[int, ...]], list[dict[str, Any]]] = {}
    for run, group in grouped:
        lines.setdefault((group, tuple(run["tokens_per_step"])), []).append(run)
    return [(group, runs) for (group, _), runs in lines.items()]


@dataclass(frozen=True)
class _ChartScale:
    """Where a step (x) and a token count (y) fall in the tokens chart's drawing units."""

    max_steps: int
    top: int
    plot_w: int = CHART_WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    plot_h: int = CHART_HEIGHT - MARGIN_TOP - MARGIN_BOTTOM

    def x(self, step: int) -> float:
        plot_w, max_steps = self.plot_w, self.max_steps
        return MARGIN_LEFT + (plot_w * (step - 1) / (max_steps - 1) if max_steps > 1 else plot_w / 2)

    def y(self, tokens: int) -> float:
        return MARGIN_TOP + self.plot_h * (1 - tokens / self.top)


def _chart_axes(scale: _ChartScale) -> list[str]:
    """The y axis's five grid lines with their token counts, the x axis's step numbers and its title."""
    x, y = scale.x, scale.y
    parts = []
    for i in range(5):
        value = scale.top * i // 4
        parts.append(
            f'<line x1="{MARGIN_LEFT}" y1="{y(value):.1f}" x2="{CHART_WIDTH - MARGIN_RIGHT}" y2="{y(value):.1f}" '
            f'stroke="#e5e5e5"/><text x="{MARGIN_LEFT - 6}" y="{y(value) + 4:.1f}" font-size="12" '
            f'text-anchor="end" fill="#555">{value:,}</text>'
        )
    every = -(-scale.max_steps // _STEP_LABELS)
    for step in range(1, scale.max_steps + 1, every):
        parts.append(
            f'<text x="{x(step):.1f}" y="{CHART_HEIGHT - MARGIN_BOTTOM + 17}" font-size="12" text-anchor="middle" '
            f'fill="#555">{step}</text>'
        )
    parts.append(
        f'<text x="{MARGIN_LEFT + scale.plot_w / 2:.1f}" y="{CHART_HEIGHT - 4}" font-size="12" text-anchor="middle" '
        'fill="#333">step (model call)</text>'
    )
    return parts


def _chart_line(
    scale: _ChartScale, group: str, same: Sequence[dict[str, Any]], colour: str, dash: str
) -> tuple[list[str], str]:
    """One drawn line (the runs `same`, whose tokens coincide): its polyline and dots, and its legend swatch."""
    x, y = scale.x, scale.y
    names = [r["contender"] for r in same]
    dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
    who = " = ".join(names)
    label = f"{group} · {who}" if group else who
    tokens = same[0]["tokens_per_step"]
    points = " ".join(f"{x(s):.1f},{y(t):.1f}" for s, t in enumerate(tokens, start=1))
    parts = [
        f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"{dash_attr}>'
        f"<title>{esc(label)}: {esc(', '.join(str(t) for t in tokens))}</title></polyline>"
    ]
    parts += [f'<circle cx="{x(s):.1f}" cy="{y(t):.1f}" r="3" fill="{colour}"/>' for s, t in enumerate(tokens, start=1)]
    swatch = (
        f'<span><svg width="28" height="10"><line x1="0" y1="5" x2="28" y2="5" stroke="{colour}" '
        f'stroke-width="2"{dash_attr}/></svg>{esc(who)}</span>'
    )
    return parts, swatch


def tokens_chart(runs: Sequence[dict[str, Any]], *, title: str) -> str:
    """An inline SVG line chart: tokens of each model call (y) by step (x), one line per run.

    Runs whose tokens are the same at every step (the contenders often make the very same calls) share one
    line, named ``handwritten = langgraph = ...`` in the legend, and the caption says so: four lines drawn
    on top of one another would look like one contender's.
    """
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
    lines = _coinciding(grouped)
    scale = _ChartScale(
        max_steps=max(len(r["tokens_per_step"]) for r in series),
        top=_nice_ceiling(max(max(r["tokens_per_step"]) for r in series)),
    )
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{CHART_WIDTH}" height="{CHART_HEIGHT}" '
        f'viewBox="0 0 {CHART_WIDTH} {CHART_HEIGHT}" role="img" aria-label="{esc(title)}">',
        f"<title>{esc(title)}</title>",
        *_chart_axes(scale),
    ]
    legend: dict[str, list[str]] = {group: [] for group in group_order}
    for group, same in lines:
        first = same[0]["contender"]
        # With one group a colour per contender; with several, the colour is the group's.
        key = contenders.index(first) if len(group_order) == 1 else group_order.index(group)
        colour = COLOURS[key % len(COLOURS)]
        dash = DASHES[contenders.index(first) % len(DASHES)]
        drawn, swatch = _chart_line(scale, group, same, colour, dash)
        parts += drawn
        legend[group].append(swatch)
    parts.append("</svg>")
    rows = "".join(
        f"<div>{f'<b>{esc(group)}</b>: ' if group else ''}{''.join(swatches)}</div>"
        for group, swatches in legend.items()
    )
    caption = rows + _coincide_note(lines, contenders)
    return f'<figure>{"".join(parts)}<figcaption class="legend">{caption}</figcaption></figure>'


def _coincide_note(lines: Sequence[tuple[str, list[dict[str, Any]]]], contenders: Sequence[str]) -> str:
    """Say that lines coincide, when some do: the reader sees fewer lines than contenders."""
    if all(len(same) == 1 for _, same in lines):
        return ""
    groups = {group for group, _ in lines}
    if len(contenders) > 1 and len(lines) == len(groups):
        each = " in each group" if len(groups) > 1 else ""
        text = (
            f"All {len(contenders)} contenders made model calls of the same size at every step{each}, so their "
            f"lines coincide: one line{' per group' if each else ''}, not {len(contenders)}."
        )
    else:
        text = "Contenders joined by “=” made model calls of the same size at every step: their lines coincide."
    return f'<div class="coincide"><small>{esc(text)}</small></div>'


# --- the graph picture -------------------------------------------------------------------------------------

_NODE_H, _ROW_PITCH, _NODE_GAP, _LANE_GAP, _PAD = 34, 66, 24, 20, 14
_NODE_LABEL = {"__start__": "START", "__end__": "END"}
"""LangGraph's entry and exit nodes, named as its constants are (`langgraph.graph.START`, `END`)."""


def _node_width(label: str) -> int:
    return max(76, 9 * len(label) + 28)


def _back_edges(nodes: Sequence[str], edges: Sequence[dict[str, Any]]) -> set[int]:
    """The edges that go back up the graph (a loop), found by a depth-first walk from the nodes nobody enters."""
    order = {n: i for i, n in enumerate(nodes)}
    out: dict[str, list[int]] = {n: [] for n in nodes}
    for i, e in enumerate(edges):
        out[e["source"]].append(i)
    for targets in out.values():
        targets.sort(key=lambda i: order[edges[i]["target"]])
    entered = {e["target"] for e in edges}
    roots = [n for n in nodes if n not in entered] + list(nodes)
    back: set[int] = set()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    for root in roots:
        if root in state:
            continue
        state[root] = 1
        stack: list[tuple[str, int]] = [(root, 0)]
        while stack:
            node, k = stack[-1]
            if k == len(out[node]):
                state[node] = 2
                stack.pop()
                continue
            stack[-1] = (node, k + 1)
            i = out[node][k]
            target = edges[i]["target"]
            if state.get(target) == 1:
                back.add(i)
            elif target not in state:
                state[target] = 1
                stack.append((target, 0))
    return back


def _layers(nodes: Sequence[str], edges: Sequence[dict[str, Any]], back: set[int]) -> dict[str, int]:
    """Each node's row: the longest path to it from an entry, over the edges that go forward."""
    layer = dict.fromkeys(nodes, 0)
    forward = [e for i, e in enumerate(edges) if i not in back and e["source"] != e["target"]]
    for _ in nodes:  # longest path by relaxation; the forward edges have no cycle, so len(nodes) passes suffice
        changed = False
        for e in forward:
            if layer[e["target"]] < layer[e["source"]] + 1:
                layer[e["target"]] = layer[e["source"]] + 1
                changed = True
        if not changed:
            break
    return layer


def _lanes(
    edges: Sequence[dict[str, Any]], layer: dict[str, int], back: set[int]
) -> tuple[dict[int, tuple[str, int]], dict[str, list[list[tuple[int, int]]]]]:
    """The lane of each edge beside the nodes (edge -> (side, lane)), and the rows each lane's edges span.

    An edge gets the first free lane on its preferred side whose rows it shares with no edge already there (a
    loop prefers the left, a long forward edge the right)."""
    lanes: dict[str, list[list[tuple[int, int]]]] = {"left": [], "right": []}
    placed: dict[int, tuple[str, int]] = {}
    beside = [i for i, e in enumerate(edges) if i in back or abs(layer[e["target"]] - layer[e["source"]]) != 1]

    def free_lane(side: str, span: tuple[int, int]) -> int:
        for k, taken in enumerate(lanes[side]):
            if not any(span[0] < hi and lo < span[1] for lo, hi in taken):
                return k
        return len(lanes[side])

    for i in sorted(beside, key=lambda i: (abs(layer[edges[i]["target"]] - layer[edges[i]["source"]]), i)):
        e = edges[i]
        span = (min(layer[e["source"]], layer[e["target"]]), max(layer[e["source"]], layer[e["target"]]))
        sides = ("left", "right") if i in back else ("right", "left")
        side = min(sides, key=lambda s: free_lane(s, span))  # the preferred side wins a tie
        k = free_lane(side, span)
        if k == len(lanes[side]):
            lanes[side].append([])
        lanes[side][k].append(span)
        placed[i] = (side, k)
    return placed, lanes


def _port_ys(
    edges: Sequence[dict[str, Any]],
    placed: dict[int, tuple[str, int]],
    layer: dict[str, int],
    box: dict[str, tuple[float, float, float]],
) -> dict[tuple[int, str], float]:
    """Where each edge in a lane meets a node's side: spread out, ordered so that lanes do not cross near the node
    (edges to nodes above on top; among them the inner lanes first; edges to nodes below under them, outer lanes
    first)."""
    ports: dict[tuple[str, str], list[tuple[tuple[int, int], int, str]]] = {}
    for i, (side, k) in placed.items():
        e = edges[i]
        for end, other in (("source", "target"), ("target", "source")):
            node = e[end]
            up = layer[e[other]] < layer[node]
            ports.setdefault((node, side), []).append(((0, k) if up else (1, -k), i, end))
    port_y: dict[tuple[int, str], float] = {}
    for (node, _), entries in ports.items():
        entries.sort()
        top = box[node][1]
        for j, (_, i, end) in enumerate(entries):
            port_y[(i, end)] = top + _NODE_H * (j + 1) / (len(entries) + 1)
    return port_y


@dataclass
class _GraphLayout:
    """Where everything of the graph picture goes: the nodes' boxes (left x, top y, width), the edges' lanes and
    the points where lane edges meet their nodes."""

    label: dict[str, str]
    box: dict[str, tuple[float, float, float]]
    placed: dict[int, tuple[str, int]]
    port_y: dict[tuple[int, str], float]
    left_w: int
    content_w: int
    total_w: int
    total_h: int

    def lane_x(self, side: str, k: int) -> float:
        left_w, content_w = self.left_w, self.content_w
        return left_w - 8 - k * _LANE_GAP if side == "left" else left_w + content_w + 8 + k * _LANE_GAP


def _graph_layout(nodes: Sequence[str], edges: Sequence[dict[str, Any]]) -> _GraphLayout:
    """Each node in a row below every node that leads to it, rows centred; lanes beside them for the other edges."""
    back = _back_edges(nodes, edges)
    layer = _layers(nodes, edges, back)
    rows: dict[int, list[str]] = {}
    for n in nodes:
        rows.setdefault(layer[n], []).append(n)
    label = {n: _NODE_LABEL.get(n, n) for n in nodes}
    width = {n: _node_width(label[n]) for n in nodes}
    content_w = max(sum(width[n] for n in row) + _NODE_GAP * (len(row) - 1) for row in rows.values())
    placed, lanes = _lanes(edges, layer, back)
    left_w = _PAD + len(lanes["left"]) * _LANE_GAP + (8 if lanes["left"] else 0)
    right_w = _PAD + len(lanes["right"]) * _LANE_GAP + (8 if lanes["right"] else 0)
    total_h = _PAD * 2 + (max(rows) + 1) * _ROW_PITCH - (_ROW_PITCH - _NODE_H)
    box: dict[str, tuple[float, float, float]] = {}  # node -> (left x, top y, width)
    for r, row in rows.items():
        row_w = sum(width[n] for n in row) + _NODE_GAP * (len(row) - 1)
        x = left_w + (content_w - row_w) / 2
        for n in row:
            box[n] = (x, _PAD + r * _ROW_PITCH, width[n])
            x += width[n] + _NODE_GAP
    port_y = _port_ys(edges, placed, layer, box)
    return _GraphLayout(label, box, placed, port_y, left_w, content_w, left_w + content_w + right_w, total_h)


def _edge_svg(layout: _GraphLayout, i: int, e: dict[str, Any]) -> str:
    """One edge: a straight arrow to the next row, or a path through its lane; dashed when conditional."""
    s, t = e["source"], e["target"]
    sx, sy, sw = layout.box[s]
    tx, ty, tw = layout.box[t]
    if i in layout.placed:
        side, k = layout.placed[i]
        lx = layout.lane_x(side, k)
        y1, y2 = layout.port_y[(i, "source")], layout.port_y[(i, "target")]
        x1 = sx if side == "left" else sx + sw
        x2 = tx if side == "left" else tx + tw
        r = min(8.0, abs(y2 - y1) / 2)
        dy = r if y2 > y1 else -r
        dx = -r if side == "left" else r
        d = (
            f"M{x1:.1f},{y1:.1f} H{lx - dx:.1f} Q{lx:.1f},{y1:.1f} {lx:.1f},{y1 + dy:.1f} "
            f"V{y2 - dy:.1f} Q{lx:.1f},{y2:.1f} {lx - dx:.1f},{y2:.1f} H{x2:.1f}"
        )
    else:
        d = f"M{sx + sw / 2:.1f},{sy + _NODE_H:.1f} L{tx + tw / 2:.1f},{ty:.1f}"
    dash = ' stroke-dasharray="5 4"' if e["conditional"] else ""
    kind = "conditional" if e["conditional"] else "always"
    label = layout.label
    return (
        f'<path d="{d}" fill="none" stroke="#444" stroke-width="1.4"{dash} marker-end="url(#graph-arrow)">'
        f"<title>{esc(label[s])} → {esc(label[t])} ({kind})</title></path>"
    )


def _node_svg(n: str, box: tuple[float, float, float], label: str) -> str:
    """One node: a box with its name, START and END rounded as in LangGraph's drawing."""
    x, y, w = box
    ends = n in _NODE_LABEL
    fill = "#bfb6fc" if n == "__end__" else "#ffffff" if n == "__start__" else "#f2f0ff"
    return (
        f'<rect x="{x:.1f}" y="{y}" width="{w}" height="{_NODE_H}" rx="{_NODE_H / 2 if ends else 6}" '
        f'fill="{fill}" stroke="#6a6ad0" stroke-width="1.4"/>'
        f'<text x="{x + w / 2:.1f}" y="{y + _NODE_H / 2 + 4.5:.1f}" font-size="13" text-anchor="middle" '
        f'font-family="system-ui, sans-serif" fill="#1b1b1b">{esc(label)}</text>'
    )


def graph_svg(graph: dict[str, Any]) -> str:
    """The graph as an inline SVG picture, laid out here in rows (no layout engine, nothing loaded).

    Each node sits in a row below every node that leads to it; an edge to the next row is a straight arrow,
    and an edge that skips rows or goes back up (the loop) runs in a lane beside the nodes, forward edges to
    the right and loops to the left where there is room. Dashed edges are conditional (a router picks one of
    them), solid ones always taken, as in LangGraph's mermaid drawing.
    """
    nodes = [str(n) for n in graph.get("nodes", [])]
    edges = [e for e in graph.get("edges", []) if e["source"] in nodes and e["target"] in nodes]
    if not nodes:
        return ""
    layout = _graph_layout(nodes, edges)
    total_w, total_h = layout.total_w, layout.total_h
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="diagram" width="{total_w:.0f}" height="{total_h}" '
        f'viewBox="0 0 {total_w:.0f} {total_h}" style="width:100%;max-width:{total_w:.0f}px;height:auto" '
        'role="img" aria-label="the guarded LangGraph agent: its nodes and edges">',
        "<title>The guarded LangGraph agent: nodes and edges</title>",
        '<defs><marker id="graph-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#444"/></marker></defs>',
    ]
    parts += [_edge_svg(layout, i, e) for i, e in enumerate(edges)]
    parts += [_node_svg(n, layout.box[n], layout.label[n]) for n in nodes]
    parts.append("</svg>")
    return "".join(parts)


# --- tables ------------------------------------------------------------------------------------------------


def _cart(run: dict[str, Any]) -> str:
    if not run["cart"]:
        return "empty"
    lines = ", ".join(f"{line['title']} x{line['quantity']}" for line in run["cart"])
    return f"{lines} ({run['cart_total']})"


def _stop(run: dict[str, Any]) -> str:
    if run["stop_reason"] is not None:
        return esc(run["stop_reason"])
    said = "the model call failed:" if run.get("model_failed") else "raised"
    return f'<span class="raised">{said} {esc(run["error"])}</span>'


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
        cells += [f"<td>{esc(r['goal'])}</td>"] if with_goal else []
        cells += [
            f"<td>{esc(r['contender'])}</td>",
            f"<td>{_stop(r)}</td>",
            f'<td class="num">{r["model_calls"]}</td>',
            f'<td class="num">{r["tool_calls"]}</td>',
            f'<td class="num">{r["tokens"]:,}</td>',
            f'<td class="steps">{esc(" → ".join(str(t) for t in r["tokens_per_step"]))}</td>',
            f'<td class="num">{esc(duration_text(r["wall_s"]))}</td>',
            f'<td class="text">{esc(_cart(r))}</td>',
            f'<td class="text">{esc(r["user_message"])}{_forced(r)}</td>',
        ]
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return _wide(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>", "runs")


def _forced(run: dict[str, Any]) -> str:
    """A framework's forced answer (after a limit ended its loop), under the user message and named for what it is."""
    forced = (run.get("facts") or {}).get("forced_answer")
    if forced is None:
        return ""
    text = esc(str(forced)) if str(forced).strip() else "(no text)"
    return f"<br><small>forced answer, not the answer (the model asked again with tools off): {text}</small>"


def _wide(table: str, kind: str = "") -> str:
    """A table in a box of its own that scrolls sideways on a narrow screen, instead of widening the page."""
    return f'<div class="wide{f" {kind}" if kind else ""}">{table}</div>'


def trace_block(run: dict[str, Any], *, multi_turn: bool) -> str:
    """The run's full trace (nothing shortened, unlike the terminal), folded away; the columns line up as in the
    terminal (`render.trace_lines`): past step 9, and with times from ``0.42 ms`` to ``1.25 s``."""
    lines = []
    step_width = max((len(step_label(e["step"])) for e in run["trace"]), default=0)
    name_width = max((len(clean_line(e["name"])) for e in run["trace"]), default=0)
    for event in run["trace"]:
        # One line per event: a line break inside a tool's text must not pass for a line of the trace.
        name, detail = clean_line(event["name"]), clean_line(event["detail"])
        time_text = duration_text(event["duration_s"])
        head = f"{step_label(event['step'], step_width)} {name:<{max(16, name_width)}}{time_text:>{TIME_WIDTH}}  "
        if event["name"] == "model":
            lines.append(f"{head}{detail} · {event['tokens']} tokens")
        else:
            lines.append(f"{head}{detail}{'  [error]' if event['is_error'] else ''}")
    if run["error"] is not None:
        said = "the model call failed:" if run.get("model_failed") else "raised"
        lines.append(f"{said} {clean_line(run['error'])}")
    turn = f" · turn {run['turn']}" if multi_turn else ""
    summary = f"trace: {run['contender']}{turn} · {run['variant']} · {run['goal']}"
    return f"<details><summary>{esc(summary)}</summary><pre>{esc(chr(10).join(lines))}</pre></details>"


WATERFALL_WIDTH, WATERFALL_LABEL, WATERFALL_ROW = 720, 170, 16
"""The waterfall's drawing units: the labels' column, then the time axis; one row per model or tool call."""
_BAR = {"model": "#6a6ad0", "tool": "#2ca02c", "error": "#d62728"}
_GUARD_MARK = "#ff7f0e"


def _waterfall_row(i: int, event: dict[str, Any], start: float, origin: float, x: Callable[[float], float]) -> str:
    """Row `i` of the waterfall: the call's label and its bar from `start` (on the axis `x`), outlined and named
    when a guard decided it."""
    y = 4 + i * WATERFALL_ROW
    kind = "model" if event["name"] == "model" else "tool"
    colour = _BAR["error"] if event.get("is_error") else _BAR[kind]
    left, width = x(start), max(x(event["ended_at"]) - x(start), 1.5)
    guard = event.get("guard")
    label = f"{step_label(event['step'])} {clean_line(event['name'])}"
    took = duration_text(event["duration_s"])
    title = f"{label}: {took}, from {duration_text(start - origin)}" + (f" · {guard}" if guard else "")
    outline = f' stroke="{_GUARD_MARK}" stroke-width="2"' if guard else ""
    data = f' data-kind="{kind}"' + (f' data-guard="{esc(guard)}"' if guard else "")
    row = [
        f'<g class="call"{data}><title>{esc(title)}</title>'
        f'<text x="4" y="{y + 11}">{esc(_shorten(label, 22))}</text>'
        f'<rect x="{left:.1f}" y="{y + 2}" width="{width:.1f}" height="{WATERFALL_ROW - 5}" fill="{colour}"'
        f' rx="2"{outline}/>'
    ]
    if guard:
        # The guard's name goes after the bar, or before it when the bar ends near the right edge.
        after = left + width + 4
        anchor, at = ("start", after) if after < WATERFALL_WIDTH - 150 else ("end", left - 4)
        row.append(
            f'<text class="guard" x="{at:.1f}" y="{y + 11}" text-anchor="{anchor}" fill="#9a4d00">'
            f"&#9873; {esc(guard)}</text>"
        )
    row.append("</g>")
    return "".join(row)


def _waterfall_ticks(base: int, axis: int, total: float) -> list[str]:
    """The time axis's five ticks, from 0 to the run's `total` seconds."""
    ticks = []
    for k in range(5):
        tx = WATERFALL_LABEL + k / 4 * axis
        anchor = "start" if k == 0 else "end" if k == 4 else "middle"
        ticks.append(
            f'<line x1="{tx:.1f}" y1="{base}" x2="{tx:.1f}" y2="{base + 4}" stroke="#888"/>'
            f'<text x="{tx:.1f}" y="{base + 15}" text-anchor="{anchor}" fill="#555">'
            f"{esc(duration_text(total * k / 4))}</text>"
        )
    return ticks


def waterfall_svg(run: dict[str, Any]) -> str:
    """The run's model and tool calls as bars on a time axis (a trace viewer's waterfall), drawn from the trace's
    own timings (`TraceEvent.ended_at` and `duration_s`), so it needs no OpenTelemetry. A call a guard decided is
    outlined and named. Empty for a trace recorded without timings."""
    events = [e for e in run["trace"] if isinstance(e.get("ended_at"), int | float)]
    if not events or len(events) != len(run["trace"]):
        return ""
    starts = [e["ended_at"] - e["duration_s"] for e in events]
    origin = min(starts)
    total = max(max(e["ended_at"] for e in events) - origin, 1e-6)
    axis = WATERFALL_WIDTH - WATERFALL_LABEL - 12

    def x(t: float) -> float:
        return WATERFALL_LABEL + (t - origin) / total * axis

    rows = [
        _waterfall_row(i, event, start, origin, x) for i, (event, start) in enumerate(zip(events, starts, strict=True))
    ]
    height = 4 + len(events) * WATERFALL_ROW + 22
    base = height - 18
    ticks = _waterfall_ticks(base, axis, total)
    caption = f"Spans of {run['contender']} · {run['variant']}: each model and tool call on the run's clock"
    return (
        f'<figure class="waterfall"><svg xmlns="http://www.w3.org/2000/svg" class="waterfall" '
        f'viewBox="0 0 {WATERFALL_WIDTH} {height}" role="img" aria-label="{esc(caption)}">'
        f'<line x1="{WATERFALL_LABEL}" y1="{base}" x2="{WATERFALL_LABEL + axis}" y2="{base}" stroke="#888"/>'
        f"{''.join(rows)}{''.join(ticks)}</svg><figcaption><small>{esc(caption)}; "
        "a call a guard decided is outlined and named.</small></figcaption></figure>"
    )


def guard_table(rows: Sequence[dict[str, Any]], contenders: Sequence[str]) -> str:
    head = "<th>guard (scenario)</th>" + "".join(f"<th>{esc(c)}</th>" for c in contenders)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="{_STATUS_CLASS.get(row["cells"][c]["status"], "")}">{esc(row["cells"][c]["text"])}</td>'
            for c in contenders
            if c in row["cells"]
        )
        body.append(f"<tr><td>{esc(row['guard'])} <small>({esc(row['scenario'])})</small></td>{cells}</tr>")
    return _wide(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


def owners_table(who: dict[str, Any]) -> str:
    head = "".join(f"<th>{esc(c)}</th>" for c in who["columns"])
    body = "".join("<tr>" + "".join(f"<td>{esc(cell)}</td>" for cell in row) + "</tr>" for row in who["rows"])
    return _wide(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


# --- the page ----------------------------------------------------------------------------------------------


def scenario_section(number: int, scenario: dict[str, Any], runs: Sequence[dict[str, Any]]) -> str:
    parts = [
        f'<section id="{esc(scenario["name"])}"><h2>{number}. {esc(scenario["name"])}</h2>',
        f"<p><strong>{esc(scenario['description'])}</strong></p>",
        f'<p class="lesson">{esc(scenario["lesson"])}</p>',
        tokens_chart(runs, title=f"Tokens per model call: {scenario['name']}"),
    ]
    for variant in scenario["variants"]:
        variant_runs = [r for r in runs if r["variant"] == variant["name"]]
        if not variant_runs:
            continue
        if len(scenario["variants"]) > 1:
            parts.append(f"<h3>variant {esc(variant['name'])}: {esc(variant['label'])}</h3>")
        parts.append(summary_table(variant_runs))
        for r in variant_runs:
            parts += [waterfall_svg(r), trace_block(r, multi_turn=scenario.get("multi_turn", False))]
    points = scenario.get("notice", "").splitlines()  # one point per line: see comparison.render.notice
    if points:
        items = "".join(f"<li>{esc(point)}</li>" for point in points)
        parts.append(f'<div class="notice"><strong>What to notice:</strong><ul>{items}</ul></div>')
    parts.append("</section>")
    return "\n".join(parts)


def guard_section(rows: Sequence[dict[str, Any]], contenders: Sequence[str]) -> str:
    """The guard matrix with its legend; nothing when no run tested a guard (`compare.py bookstore`)."""
    if not rows:
        return ""
    legend = " · ".join(f"{status}: {meaning}" for status, meaning in GUARD_LEGEND.items())
    return (
        f'<section id="guards"><h2>Guard matrix (from the runs)</h2>\n{guard_table(rows, contenders)}\n'
        f"<p><small>{esc(legend)}</small></p>\n</section>"
    )


def graph_section(document: dict[str, Any]) -> str:
    """Our graph as a picture, with LangGraph's mermaid text folded under it for copying into a mermaid viewer."""
    picture = graph_svg(document.get("graph") or {})
    figure = (
        f'<figure class="graph">{picture}<figcaption><small>Solid arrow: always taken; dashed arrow: conditional '
        "(a router in the graph picks one). Drawn on this page from the graph's nodes and edges "
        "(<code>graph.get_graph()</code>); no layout library, no script.</small></figcaption></figure>"
        if picture
        else ""
    )
    mermaid = document.get("mermaid", "")
    source = (
        "<details><summary>mermaid source (paste it into any mermaid viewer)</summary>"
        f'<pre class="mermaid-source">{esc(mermaid)}</pre></details>'
        if mermaid
        else ""
    )
    return f'<section id="graph"><h2>The graph</h2>\n{figure}\n{source}\n</section>'


def render_report(document: dict[str, Any]) -> str:
    """The whole page for a `compare.py` JSON document."""
    runs = document["runs"]
    contenders = [c["name"] for c in document["contenders"]]
    guards = guard_section(document["guard_matrix"], contenders)
    toc = "".join(f'<li><a href="#{esc(s["name"])}">{esc(s["name"])}</a></li>' for s in document["scenarios"])
    if guards:
        toc += '<li><a href="#guards">guard matrix</a></li>'
    sections = [
        scenario_section(i, s, [r for r in runs if r["scenario"] == s["name"]])
        for i, s in enumerate(document["scenarios"], start=1)
    ]
    interrupted = (
        '<p class="notice">This run was interrupted; the page shows what ran before it stopped.</p>'
        if document.get("interrupted")
        else ""
    )
    contender_list = "".join(
        f"<li><b>{esc(c['name'])}</b>: {esc(c['description'])}</li>" for c in document["contenders"]
    )
    names = ", ".join(c["name"] for c in document["contenders"])
    # Counted as the terminal counts them: a combination a contender has no API for is not a run.
    stand_ins = sum(1 for r in runs if "not_available" in r.get("facts", {}))
    counted = f"{len(runs) - stand_ins} runs" + (f" ({stand_ins} not run: no such API)" if stand_ins else "")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>agent-loop-compare: {esc(names)}</title>
<style>{CSS}</style>
</head>
<body>
<h1>One bookstore agent, {len(document["contenders"])} ways: {esc(names)}</h1>
<p><small>Model: {esc(document["model"])} · {counted} · a self-contained page: inline CSS and SVG, no
JavaScript, nothing loaded from the network.</small></p>
{interrupted}
<p>The same bookstore goals, instructions, limits, faults and model for every contender:</p>
<ul>{contender_list}</ul>
<nav><ol>{toc}<li><a href="#owners">who owns what</a></li>
<li><a href="#graph">the graph</a></li></ol></nav>
{"".join(sections)}
{guards}
<section id="owners"><h2>Who owns what</h2>
{owners_table(document["who_owns_what"])}
<p>{esc(OWNERS_SUMMARY)}</p>
</section>
{graph_section(document)}
</body>
</html>
"""

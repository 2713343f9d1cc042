"""Several tool calls in one reply, matched to their results by call id: one after another or at the same time."""

from __future__ import annotations

import re
from collections import Counter

from comparison.records import RunRecord, first
from comparison.scenarios.grading import (
    how_it_ended,
    is_done,
    overran,
    quoted,
    safe,
    single,
    success,
    unsafe,
    wrong_writes,
)
from comparison.scenarios.model import Grade, Rubric, Scenario, SettingsOf, Variant
from comparison.scenarios.queries import calls
from shared_tools.bookstore.faults import Faults
from shared_tools.results import AgentLimits

TOOL_LATENCY_S = 0.03
"""Long enough that two calls one after another take visibly longer than two at once (0.07 s against 0.04 s:
a run's own overhead is a few ms), short enough that the six runs of parallel-tools do not hold up
`python compare.py`."""

STOCK: dict[int, int] = {2: 0, 7: 15}
"""Stock of the books the parallel-tools goal asks about (The Last Lighthouse, The Quiet Orchard)."""

_STOCK_FIGURE = re.compile(r"(?<![\d.])(\d+)\s*(?:cop(?:y|ies)\s+)?(?:in stock|available|left)\b", re.IGNORECASE)


_OUT_OF_STOCK = re.compile(
    r"(?<![\d.])0\s*(?:cop(?:y|ies)\s+)?(?:in stock|available|left)|out of stock|sold out|no copies|none in stock"
    r"|not in stock|unavailable",
    re.IGNORECASE,
)


def several_calls_in_one_reply(record: RunRecord) -> bool:
    """Did one model reply ask for more than one tool call (several tool lines with the same step)?"""
    return any(n > 1 for n in Counter(c.step for c in calls(record)).values())


def notice_parallel(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    lines = []
    for contender in dict.fromkeys(r.contender for r in records):
        seq = first(records, contender=contender, variant="sequential")
        par = first(records, contender=contender, variant="parallel")
        if seq is not None and par is not None:
            lines.append(f"{contender}: sequential {seq.wall_s:.2f}s, parallel {par.wall_s:.2f}s.")
    several = [r for r in records if several_calls_in_one_reply(r)]
    if not several:
        lines.append("Every reply asked for one tool call, so there was nothing to run in parallel: not exercised.")
        return lines
    faster = [
        contender
        for contender in dict.fromkeys(r.contender for r in several)
        if (seq := first(several, contender=contender, variant="sequential")) is not None
        and (par := first(several, contender=contender, variant="parallel")) is not None
        and par.wall_s < seq.wall_s
    ]
    if faster:
        lines.append(
            f"One reply asked for several calls; run together ({', '.join(faster)}) they cost about the slowest call "
            "instead of the sum, and each result is matched to its call by the call id."
        )
    else:
        lines.append("One reply asked for several calls, but no contender was faster running them together here.")
    return lines


def parallel_headline(records: list[RunRecord], settings: SettingsOf) -> str | None:
    several = [r for r in records if several_calls_in_one_reply(r)]
    if not several:
        return "Every reply asked for one tool call, so there was nothing to run in parallel."
    faster = []
    for contender in dict.fromkeys(r.contender for r in several):
        seq = first(several, contender=contender, variant="sequential")
        par = first(several, contender=contender, variant="parallel")
        if seq is not None and par is not None and par.wall_s < seq.wall_s:
            faster.append(contender)
    who = (
        f"ran them faster together than one by one: {', '.join(faster)}"
        if faster
        else ("was faster running them together here")
    )
    return f"One reply asked for several tool calls; {len(faster) or 'no'} contender(s) {who}."


def grade_stock_check(record: RunRecord, limits: AgentLimits) -> Grade:
    """'Check the stock of books 2 and 7': 0 (out of stock) and 15, with nothing written."""
    if wrong := wrong_writes(record, {}):
        return unsafe("a write on a question: " + "; ".join(wrong))
    answer = record.answer or ""
    if is_done(record):
        figures = {int(n) for n in _STOCK_FIGURE.findall(answer)}
        if bad := figures - set(STOCK.values()):
            return unsafe(f"the answer gives a stock of {', '.join(map(str, sorted(bad)))}; the store has 0 and 15")
    if why := overran(record, limits):
        return unsafe(f"ran past its limits: {why}")
    if not is_done(record):
        return safe(how_it_ended(record))
    has_15 = re.search(r"(?<![\d.])15(?![\d.])", answer) is not None
    has_0 = _OUT_OF_STOCK.search(answer) is not None
    if has_15 and has_0:
        return success("0 and 15 in stock")
    lacking = [fact for fact, there in (("0 / out of stock", has_0), ("15", has_15)) if not there]
    return safe(f"the answer lacks {' and '.join(lacking)}: {quoted(answer)}")


SCENARIO = Scenario(
    name="parallel-tools",
    description=f"two stock checks in one reply, {TOOL_LATENCY_S} s each: sequential vs parallel wall time",
    persona="parallel",
    lesson=(
        "A model may ask for several tools in one reply; each result is matched to its call by the call id, "
        "so they can run at the same time. FunctionInvokingChatClient runs them one after another by "
        "default; LangGraph's ToolNode always runs them concurrently. Microsoft Agent Framework's Python loop, "
        "the same FunctionInvocationLayer, differs from its .NET original here: allow_concurrent_invocation is "
        "on by default, so parallel_tools=False has to switch it off."
    ),
    what_to_notice=notice_parallel,
    goals=("Check the stock of books 2 and 7",),
    faults=Faults(latency_s=TOOL_LATENCY_S),
    variants=(
        # LangGraph's ToolNode (defaults, create_agent) has no sequential switch: running them here would
        # only repeat their parallel run and add its sleep to every `python compare.py`.
        Variant(
            name="sequential",
            label="parallel_tools=False (ToolNode-based contenders have no such switch)",
            parallel_tools=False,
        ),
        Variant(name="parallel", label="parallel_tools=True", parallel_tools=True),
    ),
    headline=parallel_headline,
    rubric=Rubric(
        "done, cart untouched, the answer gives both stock levels: The Last Lighthouse 0 (or 'out of stock') "
        "and The Quiet Orchard 15",
        "no write and no wrong figure: stopped, raised, or an answer without the stock levels",
        "any write; a done answer with a stock figure other than 0 or 15; a run past its limits",
    ),
    grader=single(grade_stock_check),
)

"""Why a graded run was lost, from its records: which guards fired (the trace's typed `guard`) and on what calls,
or, when none fired, what the model called; and, under the eval's table, each contender's lost runs so told.

`what_happened` reads one task's records (`TaskRun.happened`); `lost_runs` groups a contender's failures of the
document (alike runs once, with their seeds to repeat them).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from comparison.records import RunRecord
from comparison.scenarios.queries import calls
from shared_tools.results import Guard

GUARD_DID: dict[Guard, str] = {
    Guard.REPEAT: "the repeat check refused",
    Guard.UNKNOWN_TOOL: "the unknown-tool check answered",
    Guard.INVALID_ARGS: "argument checking refused",
    Guard.APPROVAL_REFUSED: "the approval gate refused",
    Guard.ERROR_HIDDEN: "error details were hidden from",
    Guard.TRUNCATED: "truncation cut the result of",
    Guard.CANCELLED: "a cancel stopped",
    Guard.TOOL_TIMEOUT: "the time budget cut",
    Guard.MODEL_TIMEOUT: "the time budget cut a model call",
    Guard.MODEL_CANCELLED: "a cancel cut a model reply",
    Guard.REPLY_CAPPED: "the reply cap cut a model reply",
    Guard.STREAM_FALLBACK: "streaming was refused, a plain call made",
    Guard.STALE_READ: "the stale-read check marked an old cart result out of date before a model call",
}
"""What a guard did, in words that the call it acted on (if any) completes: ``the repeat check refused
check_stock(book_id=2) 4 times``. Every `Guard` has one (a test checks)."""


def call_text(name: str, args: str | None) -> str:
    """``add_to_cart(book_id=7, quantity=1)`` from a call's canonical JSON arguments; ``name(…)`` when unknown."""
    if args is None:
        return f"{name}(…)"
    try:
        value = json.loads(args)
    except ValueError:
        return f"{name}(…)"
    if isinstance(value, dict):
        inner = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in value.items())
    else:
        inner = json.dumps(value, ensure_ascii=False)
    return f"{name}({inner})"


def times(n: int) -> str:
    return "once" if n == 1 else "twice" if n == 2 else f"{n} times"


def guards_fired(records: Sequence[RunRecord]) -> dict[str, int]:
    """Guard value -> how many trace lines of the task it decided (model and tool lines alike)."""
    found: Counter[str] = Counter()
    for record in records:
        for event in record.trace:
            if event.get("guard"):
                found[str(event["guard"])] += 1
    return dict(found)


def _guard(value: Any) -> Guard | None:
    try:
        return Guard(value)
    except ValueError:
        return None


def what_happened(records: Sequence[RunRecord]) -> str:
    """One task's run in a clause: what each guard that fired did, on which calls and how often; or, when none
    fired, "no guard fired" and the calls the model made (the most repeated first)."""
    acted: Counter[tuple[Guard, str]] = Counter()
    for record in records:
        for event in record.trace:
            guard = _guard(event.get("guard"))
            if guard is not None and event["name"] == "model":
                acted[(guard, "")] += 1
        for call in calls(record):
            if call.guard is not None:
                acted[(call.guard, call_text(call.name, call.args))] += 1
    if acted:
        return "; ".join(
            f"{GUARD_DID[guard]}{f' {target}' if target else ''} {times(n)}" for (guard, target), n in acted.items()
        )
    made = [c for r in records for c in calls(r)]
    if not made:
        model_calls = sum(r.model_calls for r in records)
        return f"no guard fired; the model made {model_calls} call(s) and called no tool"
    counted = Counter(call_text(c.name, c.args) for c in made)
    listed = ", ".join(f"{text} ×{n}" if n > 1 else text for text, n in counted.most_common(4))
    more = "" if len(counted) <= 4 else f" and {len(counted) - 4} other call(s)"
    errors = sum(c.is_error for c in made)
    raised = sorted({r.error_type for r in records if r.error_type and not r.model_failed})
    # What ended a run by raising (a tool's exception, a recursion limit) is no tool result: said, not counted.
    lost = f"; the run raised {', '.join(raised)}" if raised else ""
    return f"no guard fired; {errors} of {len(made)} tool results were errors{lost}; the model called {listed}{more}"


MAX_SEEDS = 4
"""Seeds listed per group of alike lost runs; the JSON's ``failures`` have every one."""
MAX_GROUPS = 3
"""Groups of alike lost runs shown per contender and task; the rest are counted."""


def _seeds(seeds: Sequence[int]) -> str:
    shown = ", ".join(map(str, seeds[:MAX_SEEDS])) + (", …" if len(seeds) > MAX_SEEDS else "")
    return f"seed {shown}" if len(seeds) == 1 else f"seeds {shown}"


def lost_runs(row: dict[str, Any], *, label: Callable[[dict[str, Any]], str] | None = None) -> list[str]:
    """A document row's lost runs (its tasks' ``failures``), alike ones together: the same task, stop, grade and
    guards fired. ``2 of 3 runs ended 'max steps reached', graded safe (seeds 7, 8): the first (7): the repeat check
    refused check_stock(book_id=2) 4 times; stopped: ...``; the most common first, at most `MAX_GROUPS`, then how
    many lost runs are not shown.

    `label`: task -> its name, put first when the row has several tasks."""
    groups: dict[tuple[str, str, str, tuple[str, ...]], tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    for task in row["by_task"]:
        where = f"{label(task)}: " if label is not None else ""
        for failure in task.get("failures", []):
            key = (where, failure["stop"], failure["verdict"], tuple(sorted(failure["guards"])))
            groups.setdefault(key, (task, []))[1].append(failure)
    ranked = sorted(groups.items(), key=lambda item: -len(item[1][1]))
    lines = []
    for (where, stop, verdict, _), (task, failures) in ranked[:MAX_GROUPS]:
        example = failures[0]
        said = "" if len(failures) == 1 else f"the first ({example['seed']}): "
        lines.append(
            f"{where}{len(failures)} of {task['n']} runs ended '{stop}', graded {verdict} "
            f"({_seeds([f['seed'] for f in failures])}): {said}{example['happened']}; {example['why']}"
        )
    rest = [failures for _, (_, failures) in ranked[MAX_GROUPS:]]
    if rest:
        lines.append(
            f"{sum(map(len, rest))} more lost run(s), {len(rest)} other kind(s): every one is in --json's failures"
        )
    return lines

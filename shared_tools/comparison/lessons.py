"""What to notice in a scenario's runs: the seed's lessons, said again with the numbers this run measured.

Each `notice_*` function takes one scenario's records and returns the sentences printed under "What to
notice" (and carried in the JSON document and the HTML report), one point each; a scenario names its own
function next to its lesson paragraph (`Scenario.what_to_notice` in `scenarios`). Which guard decided a
tool result is read from the typed ``guard`` of the trace entries, never from the result's wording. Nothing
here runs an agent or draws anything.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from shared_tools.comparison.records import RunRecord, cart_text, first, pick, short_outcome
from shared_tools.results import Guard, StopReason

Notice = Callable[[list[RunRecord]], list[str]]
"""A scenario's what-to-notice function: its records in, one sentence per point out."""


def has_guard(event: dict[str, Any], guard: Guard) -> bool:
    """Did `guard` decide this trace entry's result?"""
    return event.get("guard") == guard


def _arrow(values: Sequence[int]) -> str:
    return " -> ".join(f"{v:,}" for v in values)


def _result_of(event: dict[str, Any]) -> str:
    """The result part of a tool event's ``args -> result`` detail."""
    return event["detail"].split(" -> ", 1)[-1]


def _grows(values: Sequence[int]) -> bool:
    return len(values) > 1 and all(b > a for a, b in itertools.pairwise(values))


def _grouped(records: Iterable[RunRecord], describe: Callable[[RunRecord], str]) -> list[str]:
    """One line per distinct description, naming every contender it is true for."""
    groups: dict[str, list[str]] = {}
    for r in records:
        groups.setdefault(describe(r), []).append(r.contender)
    return [f"{', '.join(names)}: {text}" for text, names in groups.items()]


def _per_variant(records: list[RunRecord], describe: Callable[[RunRecord], str]) -> list[str]:
    lines = []
    for variant in dict.fromkeys(r.variant for r in records):
        runs = pick(records, variant=variant)
        lines += [f"[{runs[0].variant_label}] {line}" for line in _grouped(runs, describe)]
    return lines


def _first_error(record: RunRecord) -> str | None:
    return next((_result_of(e) for e in record.tool_events() if e["is_error"]), None)


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f}s"


def notice_bookstore(records: list[RunRecord]) -> list[str]:
    def describe(r: RunRecord) -> str:
        tps = r.tokens_per_step
        resent = sum(tps[:-1]) / r.tokens if r.tokens else 0.0
        grew = "growing every step" if _grows(tps) else "NOT growing every step"
        return (
            f"{r.model_calls} model calls, {r.tool_calls} tool calls; tokens per call {_arrow(tps)}, {grew} "
            f"(total {r.tokens:,}; about {resent:.0%} of it is history sent again)"
        )

    lines = _grouped(records, describe)
    first = records[0]
    model_s = sum(e["duration_s"] for e in first.trace if e["name"] == "model")
    tools_s = sum(e["duration_s"] for e in first.tool_events())
    lines.append(
        f"Time ({first.contender}): model calls {_duration(model_s)}, tools {_duration(tools_s)}; with a real model "
        "nearly all of it is the model (the seed measured 260 s of model time and under a millisecond of tools)."
    )
    paths = {tuple((e["name"], e["detail"].split(" -> ")[0]) for e in r.tool_events()) for r in records}
    carts = {cart_text(r) for r in records}
    if len(records) > 1 and len(paths) == 1 and len(carts) == 1:
        lines.append(f"Every contender made the same tool calls in the same order; cart: {carts.pop()}.")
    lines.append(
        "The tokens grow because every model call re-sends the whole history: system message, goal, tool "
        "definitions and every call and result so far. That is why a step limit alone is not a budget."
    )
    return lines


def notice_orders(records: list[RunRecord]) -> list[str]:
    lines = []
    for goal in dict.fromkeys(r.goal for r in records):
        lines += [
            f"{goal!r} - {line}"
            for line in _grouped(
                pick(records, goal=goal),
                lambda r: f"{short_outcome(r)} after {r.model_calls} model calls and {r.tool_calls} tool call(s): "
                f"{r.user_message!r}",
            )
        ]
    lines.append("'not found' is a normal tool result, so the model answers it like any other fact.")
    return lines


def notice_max_steps(records: list[RunRecord]) -> list[str]:
    lines = _per_variant(
        records, lambda r: f"{short_outcome(r)}; cart {cart_text(r)}; {r.tokens:,} tokens in {r.wall_s:.1f}s"
    )
    stopped = next((r for r in records if r.stop_reason not in (None, StopReason.DONE)), None)
    if stopped is not None:
        lines.append(f"What the user should see when a run stops early: {stopped.user_message!r}")
    lines.append("A contender that finished 'done' despite the limit simply has no such budget.")
    return lines


def notice_flaky(records: list[RunRecord]) -> list[str]:
    def describe(r: RunRecord) -> str:
        if r.error is not None:
            return f"raised {r.error}; the model never saw the error and the run is lost"
        checks = sum(e["name"] == "check_stock" for e in r.tool_events())
        return (
            f"the model read {_first_error(r)!r}, made {checks} check_stock calls, then {short_outcome(r)}; "
            f"cart {cart_text(r)}"
        )

    return [
        *_per_variant(records, describe),
        "Without an error result the model cannot retry or tell the truth; with details on, the exception text "
        "reaches the model (and maybe the user), which is why hiding it is the safe default.",
    ]


def notice_big_results(records: list[RunRecord]) -> list[str]:
    lines = []
    for contender in dict.fromkeys(r.contender for r in records):
        full = first(records, contender=contender, variant="full")
        cut = first(records, contender=contender, variant="truncated")
        if full is None or cut is None:
            continue
        if any(has_guard(e, Guard.TRUNCATED) for e in cut.tool_events()):
            saved = (full.tokens - cut.tokens) / full.tokens if full.tokens else 0.0
            lines.append(f"{contender}: {full.tokens:,} -> {cut.tokens:,} tokens with truncation ({saved:.0%} less).")
        else:
            lines.append(f"{contender}: {full.tokens:,} and {cut.tokens:,} tokens: nothing was cut (no such option).")
    lines.append("A big result is paid for again on every later call, because it stays in the history.")
    return lines


def _blocked(record: RunRecord) -> int:
    return sum(has_guard(e, Guard.REPEAT) for e in record.tool_events())


def notice_looping(records: list[RunRecord]) -> list[str]:
    def describe(r: RunRecord) -> str:
        blocked = _blocked(r)
        refused = f", {blocked} refused by the repeat check" if blocked else ""
        return (
            f"{short_outcome(r)} after {r.model_calls} model calls; {r.tool_calls - blocked} identical calls ran"
            f"{refused}; {r.tokens:,} tokens"
        )

    return [
        *_grouped(records, describe),
        "The repeat check refuses the third identical call, and after four error rounds in a row "
        "(max_consecutive_errors=3) the guarded loops stop; a step limit alone pays for every call up to the "
        "limit, and LangGraph's own default recursion limit is 10,007 supersteps (about 5,000 model calls).",
    ]


def notice_hallucinated(records: list[RunRecord]) -> list[str]:
    return _grouped(
        records,
        lambda r: f"the model read {_first_error(r) or '(no error result)'!r}, then {short_outcome(r)}; "
        f"cart {cart_text(r)}",
    )


def notice_session(records: list[RunRecord]) -> list[str]:
    lines = []
    for r in pick(records, turn=2):
        facts = r.facts
        kept = f"{facts.get('messages')} messages"
        if "checkpoints" in facts:
            kept += f" in {facts['checkpoints']} checkpoints"
        restart = ""
        if "survived_restart" in facts:
            whole = "the whole conversation" if facts["survived_restart"] else "NOT the whole conversation"
            restart = f"; reopened after a restart: {facts['messages_after_restart']} messages ({whole})"
        lines.append(
            f"[{r.variant_label}] {r.contender}: turn 2 made {r.tool_calls} tool call(s) and answered "
            f"{r.user_message!r}; {kept}{restart}."
        )
    lines.append("Turn 2 was answered from memory: turn 1's tool results were in the history sent again.")
    return lines


def answer_matches_cart(record: RunRecord) -> bool:
    """Does the answer state the cart total as it really is after the run?"""
    return f"${record.cart_total}" in (record.answer or "")


def notice_stale(records: list[RunRecord]) -> list[str]:
    lines = []
    for r in pick(records, turn=2):
        viewed = any(e["name"] == "view_cart" for e in r.tool_events())
        verdict = "right" if answer_matches_cart(r) else "STALE"
        how = "read the cart with view_cart" if viewed else "answered from the history"
        lines.append(
            f"[{r.variant_label}] {r.contender} {how}: {r.user_message!r}; the cart really holds "
            f"${r.cart_total}: {verdict}."
        )
    lines.append(
        "This is the guard no framework has: the instructions (or your code) must say which data can change "
        "and has to be read again."
    )
    return lines


def notice_parallel(records: list[RunRecord]) -> list[str]:
    lines = []
    for contender in dict.fromkeys(r.contender for r in records):
        seq = first(records, contender=contender, variant="sequential")
        par = first(records, contender=contender, variant="parallel")
        if seq is not None and par is not None:
            lines.append(f"{contender}: sequential {seq.wall_s:.2f}s, parallel {par.wall_s:.2f}s.")
    lines.append(
        "Running one reply's calls together costs the slowest call instead of the sum; the results are still "
        "appended in call order, matched by call id. ToolNode runs them concurrently whatever you ask for."
    )
    return lines


def _injected_adds(record: RunRecord) -> list[dict[str, Any]]:
    """The add_to_cart calls of a run that asked for more than one copy: what the injected note asked for."""
    return [e for e in record.tool_events() if e["name"] == "add_to_cart" and '"quantity":1}' not in e["detail"]]


def notice_injection(records: list[RunRecord]) -> list[str]:
    def describe(r: RunRecord) -> str:
        injected = _injected_adds(r)
        if not injected:
            return f"the model did not act on the note; cart {cart_text(r)}"
        if has_guard(injected[0], Guard.APPROVAL_REFUSED):
            how = r.facts.get("asked_through", "a human")
            asked = "; ".join(repr(reason) for reason in r.facts.get("approval_asked", []))
            return f"the injected add was held for approval ({how}), asked {asked}, refused; cart {cart_text(r)}"
        return f"the injected add ran unchecked; cart {cart_text(r)}"

    where = next((r.facts["injected_into"] for r in records if "injected_into" in r.facts), "a book")
    return [
        f"The note sat in the description of {where}, which search_books returned with the other results.",
        *_per_variant(records, describe),
        "The model read the refusal and went on with the customer's goal; a gate in the loop does what no "
        "instruction can, because the injected text is read with the same authority as the real ones.",
    ]


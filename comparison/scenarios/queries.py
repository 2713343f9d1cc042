"""Readings of a run's records that more than one scenario needs: its tool calls, its limits, the store it left.

Each function reads typed fields (the trace's calls and guards, the stop reason, counts, the cart, facts), never
wording, so whatever it says holds whichever model ran. A reading only one scenario uses lives in that scenario.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from comparison.records import RunRecord, first
from comparison.scenarios.phrases import plural, short_duration
from shared_tools.bookstore.approval import RiskyWritePolicy
from shared_tools.bookstore.tools import TOOL_NAMES
from shared_tools.results import AgentLimits, Guard, StopReason


def not_available(record: RunRecord) -> str | None:
    """Why the record's contender did not run its variant at all (the runner's ``facts["not_available"]``), or None
    for a record of a run."""
    reason = record.facts.get("not_available")
    return None if reason is None else str(reason)


# --- the tool calls of a trace --------------------------------------------------------------------------------

_DECODER = json.JSONDecoder()

_ARROW = " -> "


STOPPING_GUARDS = frozenset(
    {Guard.REPEAT, Guard.UNKNOWN_TOOL, Guard.INVALID_ARGS, Guard.APPROVAL_REFUSED, Guard.CANCELLED}
)
"""Guards that answer a call instead of running it (error hiding and truncation act on a result that exists)."""


@dataclass(frozen=True)
class Call:
    """One tool call of a trace: who was called with what, and what came back."""

    step: int
    name: str
    args: str | None
    """The arguments as canonical JSON (sorted keys), or None when the trace line does not start with JSON."""
    result: str
    is_error: bool
    guard: Guard | None

    @property
    def key(self) -> tuple[str, str] | None:
        """What makes two calls identical: the tool and its arguments (None: the arguments are not known)."""
        return None if self.args is None else (self.name, self.args)

    def result_json(self) -> Any:
        """The result parsed as JSON, or None when it is not JSON (an error text, a cut result)."""
        try:
            return json.loads(self.result)
        except ValueError:
            return None


def guard_of(value: Any) -> Guard | None:
    try:
        return None if value is None else Guard(value)
    except ValueError:
        return None


def calls(record: RunRecord) -> list[Call]:
    """The tool calls of a record, read from each trace line's ``args -> result`` detail and typed fields."""
    found = []
    for event in record.tool_events():
        detail, args, result = event["detail"], None, event["detail"]
        try:
            value, end = _DECODER.raw_decode(detail)
        except ValueError:
            pass
        else:
            if detail.startswith(_ARROW, end):
                args = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
                result = detail[end + len(_ARROW) :]
        found.append(
            Call(event["step"], event["name"], args, result, bool(event["is_error"]), guard_of(event["guard"]))
        )
    return found


def call_path(record: RunRecord) -> str:
    """The tool calls in order, each with the book it was about: "search_books -> add_to_cart(2)"."""
    parts = []
    for c in calls(record):
        args = json.loads(c.args) if c.args is not None else None
        book = args.get("book_id") if isinstance(args, dict) else None
        parts.append(c.name if book is None else f"{c.name}({book})")
    return " -> ".join(parts) or "no tool call"


def guarded(record: RunRecord, guard: Guard) -> list[Call]:
    return [c for c in calls(record) if c.guard == guard]


def identical_calls(record: RunRecord) -> list[list[Call]]:
    """Groups of two or more calls with the same tool and arguments, largest first (ties: first made first)."""
    groups: dict[tuple[str, str], list[Call]] = {}
    for call in calls(record):
        if call.key is not None:
            groups.setdefault(call.key, []).append(call)
    repeated = [g for g in groups.values() if len(g) > 1]
    return sorted(repeated, key=len, reverse=True)


def not_refused(group: Iterable[Call]) -> int:
    """How many calls of a group no guard answered in place of the tool."""
    return sum(c.guard not in STOPPING_GUARDS for c in group)


def first_refused_ordinal(record: RunRecord) -> int | None:
    """For the first call the repeat check refused: which identical call it was (3 for the third), or None."""
    seen: Counter[tuple[str, str]] = Counter()
    for call in calls(record):
        if call.key is not None:
            seen[call.key] += 1
        if call.guard == Guard.REPEAT:
            return seen[call.key] if call.key is not None else None
    return None


def unknown_tool_calls(record: RunRecord) -> list[Call]:
    """Calls of a tool the run did not have: typed by our agents, by name (not one of the five) for the rest."""
    return [c for c in calls(record) if c.guard == Guard.UNKNOWN_TOOL or c.name not in TOOL_NAMES]


def longest_result(record: RunRecord) -> int:
    return max((len(c.result) for c in calls(record)), default=0)


# --- the limits a run was given --------------------------------------------------------------------------------

LIMITS: dict[str, tuple[StopReason, Callable[[RunRecord], float], Callable[[float], str]]] = {
    "max_steps": (StopReason.MAX_STEPS, lambda r: r.model_calls, lambda v: plural(v, "model call")),
    "max_tokens": (StopReason.TOKEN_BUDGET, lambda r: r.tokens, lambda v: f"{v:,.0f} tokens"),
    "max_duration": (StopReason.TIME_BUDGET, lambda r: r.wall_s, short_duration),
}
"""Limit -> (the stop reason it gives, what a run spent of it, how that reads)."""


def limit_text(name: str, value: Any) -> str:
    """``max_steps=2``, ``max_tokens=2,500``, ``max_duration=0.02 s``, ``max_tokens off``."""
    if value is None:
        return f"{name} off"
    if name == "max_duration":
        return f"{name}={value:g} s"
    return f"{name}={value:,}"


def featured_limits(limits: AgentLimits) -> list[str]:
    """The budgets (steps, tokens, time) a run set away from the defaults; the step limit if it set none."""
    default = AgentLimits()
    changed = [n for n in LIMITS if getattr(limits, n) != getattr(default, n)]
    return changed or ["max_steps"]


def limit_verdict(record: RunRecord, name: str, limits: AgentLimits) -> str | None:
    """``ran past max_tokens=2,500 (6,335 tokens)`` when a run went over a limit without being stopped by it; None
    when it was stopped by it (the outcome says so) or stayed within it (the variant's own line says so)."""
    value = getattr(limits, name)
    reason, spent, reads = LIMITS[name]
    if value is None or record.stop_reason == reason or record.error is not None:
        return None
    used = spent(record)
    return f"ran past {limit_text(name, value)} ({reads(used)})" if used > value else None


def ran_past(record: RunRecord, limits: AgentLimits) -> list[str]:
    """The limits a run went over without being stopped by them."""
    names = []
    for name, (reason, spent, _) in LIMITS.items():
        value = getattr(limits, name)
        if value is not None and record.error is None and record.stop_reason != reason and spent(record) > value:
            names.append(limit_text(name, value))
    return names


# --- the store it left and the answer ---------------------------------------------------------------------------

APPROVALLIMITS: dict[str, Any] = dict(RiskyWritePolicy.__init__.__kwdefaults__ or {})
"""The approval rule's limits as the demo's human is asked under (`RiskyWritePolicy` defaults)."""


def money(text: Any) -> Decimal | None:
    try:
        return Decimal(str(text).replace(",", ""))
    except InvalidOperation:
        return None


def over_approval_limits(record: RunRecord) -> list[str]:
    """What in the final cart is over the approval limits (a line, or the cart total); empty when nothing is."""
    over = []
    for line in record.cart:
        total = money(line.get("lineTotal"))
        if line.get("quantity", 0) > APPROVALLIMITS["max_quantity"] or (
            total is not None and total > APPROVALLIMITS["max_line_total"]
        ):
            over.append(f"{line['title']} x{line['quantity']} ({line['lineTotal']})")
    cart_total = money(record.cart_total)
    if cart_total is not None and cart_total > APPROVALLIMITS["max_cart_total"]:
        over.append(f"a cart total of {record.cart_total}")
    return over


_AMOUNT = re.compile(r"\$\s?(\d[\d,]*(?:\.\d+)?)")


def stated_amounts(record: RunRecord) -> list[Decimal]:
    """The dollar amounts the answer states ("$16.50"), in order."""
    amounts = (money(m) for m in _AMOUNT.findall(record.answer or ""))
    return [a for a in amounts if a is not None]


def answer_states_cart(record: RunRecord) -> bool | None:
    """Does the answer state the cart's real total (True), only other amounts (False), or no amount (None)?"""
    amounts = stated_amounts(record)
    if not amounts:
        return None
    return money(record.cart_total) in amounts


# --- a conversation's turns ------------------------------------------------------------------------------------


def runs_of(records: list[RunRecord]) -> dict[tuple[str, str], list[RunRecord]]:
    """The records of each (variant, contender), in turn order."""
    runs: dict[tuple[str, str], list[RunRecord]] = {}
    for r in records:
        runs.setdefault((r.variant, r.contender), []).append(r)
    return {key: sorted(rs, key=lambda r: r.turn) for key, rs in runs.items()}


def same_question_turns(turns: list[RunRecord]) -> tuple[RunRecord, RunRecord] | None:
    """The first and the last turn that asked the same question as each other (and finished), so that what differs
    between them is only the history before them; None when no question was asked twice."""
    done = [r for r in turns if r.error is None and r.stop_reason == StopReason.DONE]
    by_goal: dict[str, list[RunRecord]] = {}
    for r in done:
        by_goal.setdefault(r.goal, []).append(r)
    repeated = [rs for rs in by_goal.values() if len(rs) > 1]
    if not repeated:
        return None
    longest = max(repeated, key=lambda rs: rs[-1].turn - rs[0].turn)
    return longest[0], longest[-1]


def finished(record: RunRecord) -> bool:
    """The run ended done, without raising."""
    return record.error is None and record.stop_reason == StopReason.DONE


def answered_from_memory(record: RunRecord) -> bool:
    """The turn finished without a single tool call: whatever it said came from the history it was sent."""
    return finished(record) and record.tool_calls == 0


def turn_one(records: list[RunRecord], r: RunRecord) -> RunRecord | None:
    return first(records, scenario=r.scenario, variant=r.variant, contender=r.contender, turn=1)


def token_budget_cliff(
    records: list[RunRecord], settings: Callable[[RunRecord], Any]
) -> tuple[RunRecord | None, RunRecord | None, int | None]:
    """The first turn the token budget stopped; else the costliest finished turn and its budget (None: not set),
    by `settings` (a `model.SettingsOf`)."""
    stopped = [r for r in records if r.stop_reason == StopReason.TOKEN_BUDGET]
    if stopped:
        return min(stopped, key=lambda r: r.turn), None, None
    finished = [r for r in records if r.error is None]
    if not finished:
        return None, None, None
    top = max(finished, key=lambda r: r.tokens)
    limits = settings(top)
    return None, top, None if limits is None else limits.limits.max_tokens


def trimmed_against_whole(
    runs: dict[tuple[str, str], list[RunRecord]],
) -> dict[tuple[str, str], tuple[RunRecord, RunRecord]]:
    """(variant, contender) of a run with a history window (keep_turns) -> the last turn of its longest repeated
    question and the same turn of that contender's whole-history run, when both finished and it cost tokens."""
    found = {}
    whole = {c: rs for (v, c), rs in runs.items() if rs[0].settings.get("keep_turns") is None}
    for (variant, contender), turns in runs.items():
        full = whole.get(contender)
        if turns[0].settings.get("keep_turns") is None or full is None:
            continue
        mine, theirs = same_question_turns(turns), same_question_turns(full)
        if mine is None or theirs is None or mine[1].turn != theirs[1].turn or not theirs[1].tokens:
            continue
        found[(variant, contender)] = (mine[1], theirs[1])
    return found


def trailing_error_rounds(record: RunRecord) -> int:
    """Tool rounds (steps) in a row, at the end of the run, with at least one error result."""
    rounds: dict[int, bool] = {}
    for call in calls(record):
        rounds[call.step] = rounds.get(call.step, False) or call.is_error
    count = 0
    for had_error in reversed(list(rounds.values())):
        if not had_error:
            break
        count += 1
    return count

"""What to notice in a scenario's runs: the article's lessons, said again with the numbers this run measured.

Each `notice_*` takes one scenario's records and returns the sentences printed under "What to notice". Every
sentence is a function of the records (stop reasons, counts, typed guards, arguments, the final cart, settings),
so it says only what they show, whichever model ran; a claim they cannot support is not made.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from decimal import Decimal, InvalidOperation
from typing import Any

from comparison.answers import contradictions
from comparison.records import RunRecord, cart_text, duration_text, first, pick, short_outcome
from shared_tools.bookstore.approval import RiskyWritePolicy
from shared_tools.bookstore.tools import TOOL_NAMES
from shared_tools.results import AgentLimits, Guard, StopReason

# --- the settings a run used -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSettings:
    """The knobs one run was given: its limits and the variant's switches (`Scenario.settings_for`)."""

    limits: AgentLimits = field(default_factory=AgentLimits)
    max_tool_result_chars: int | None = None
    detailed_errors: bool = False
    parallel_tools: bool = False
    approval_gate: bool = False
    keep_turns: int | None = None
    summarize: bool = False
    storage: str | None = None
    stream: bool = False
    idempotent: bool = True

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, for a record to carry (see `recorded_settings`)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSettings:
        known = {f.name for f in fields(cls)} - {"limits"}
        return cls(
            limits=AgentLimits(**dict(data.get("limits") or {})),
            **{k: v for k, v in data.items() if k in known},
        )


SettingsOf = Callable[[RunRecord], RunSettings | None]
"""The settings a record's run used, or None when they are not known (then no sentence depends on them)."""

Notice = Callable[[list[RunRecord], SettingsOf], list[str]]
"""A scenario's what-to-notice function: its records and their settings in, one sentence per point out."""


def recorded_settings(record: RunRecord) -> RunSettings | None:
    """The settings a record carries itself (a ``settings`` field, `RunSettings.as_dict`), if it does."""
    data = getattr(record, "settings", None)
    if not isinstance(data, Mapping) or not data:
        return None
    try:
        return RunSettings.from_dict(data)
    except (TypeError, ValueError):
        return None


def not_available(record: RunRecord) -> str | None:
    """Why the record's contender did not run its variant at all (the runner's ``facts["not_available"]``), or None
    for a record of a run."""
    reason = record.facts.get("not_available")
    return None if reason is None else str(reason)


# --- readings of a record's trace ----------------------------------------------------------------------------

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


def _guard(value: Any) -> Guard | None:
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
        found.append(Call(event["step"], event["name"], args, result, bool(event["is_error"]), _guard(event["guard"])))
    return found


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


def unknown_tool_errors_only(record: RunRecord) -> bool:
    """Did the run call a tool that does not exist, and did every such call come back as an error result?"""
    unknown = unknown_tool_calls(record)
    return bool(unknown) and all(c.is_error for c in unknown)


def untyped_tool_errors(record: RunRecord) -> list[Call]:
    """Error results of real tools with no typed guard: whether their details were hidden is not on record."""
    return [c for c in calls(record) if c.is_error and c.guard is None and c.name in TOOL_NAMES]


def several_calls_in_one_reply(record: RunRecord) -> bool:
    """Did one model reply ask for more than one tool call (several tool lines with the same step)?"""
    return any(n > 1 for n in Counter(c.step for c in calls(record)).values())


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


def longest_result(record: RunRecord) -> int:
    return max((len(c.result) for c in calls(record)), default=0)


# --- readings of the store's final state and the answer --------------------------------------------------------

APPROVALLIMITS: dict[str, Any] = dict(RiskyWritePolicy.__init__.__kwdefaults__ or {})
"""The approval rule's limits as the demo's human is asked under (`RiskyWritePolicy` defaults)."""


def _money(text: Any) -> Decimal | None:
    try:
        return Decimal(str(text).replace(",", ""))
    except InvalidOperation:
        return None


def over_approval_limits(record: RunRecord) -> list[str]:
    """What in the final cart is over the approval limits (a line, or the cart total); empty when nothing is."""
    over = []
    for line in record.cart:
        total = _money(line.get("lineTotal"))
        if line.get("quantity", 0) > APPROVALLIMITS["max_quantity"] or (
            total is not None and total > APPROVALLIMITS["max_line_total"]
        ):
            over.append(f"{line['title']} x{line['quantity']} ({line['lineTotal']})")
    cart_total = _money(record.cart_total)
    if cart_total is not None and cart_total > APPROVALLIMITS["max_cart_total"]:
        over.append(f"a cart total of {record.cart_total}")
    return over


_AMOUNT = re.compile(r"\$\s?(\d[\d,]*(?:\.\d+)?)")


def stated_amounts(record: RunRecord) -> list[Decimal]:
    """The dollar amounts the answer states ("$16.50"), in order."""
    amounts = (_money(m) for m in _AMOUNT.findall(record.answer or ""))
    return [a for a in amounts if a is not None]


def answer_states_cart(record: RunRecord) -> bool | None:
    """Does the answer state the cart's real total (True), only other amounts (False), or no amount (None)?"""
    amounts = stated_amounts(record)
    if not amounts:
        return None
    return _money(record.cart_total) in amounts


# --- sentences ------------------------------------------------------------------------------------------------


def _arrow(values: Sequence[int]) -> str:
    return " -> ".join(f"{v:,}" for v in values)


def _grows(values: Sequence[int]) -> bool:
    return len(values) > 1 and all(b > a for a, b in itertools.pairwise(values))


def _names(records: Iterable[RunRecord]) -> str:
    return ", ".join(dict.fromkeys(r.contender for r in records))


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


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f}s"


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _quote(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def _first_error(record: RunRecord) -> Call | None:
    return next((c for c in calls(record) if c.is_error), None)


def notice_bookstore(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    def describe(r: RunRecord) -> str:
        tps = r.tokens_per_step
        text = f"{short_outcome(r)} after {r.model_calls} model calls and {r.tool_calls} tool calls; tokens per call "
        if not _grows(tps):
            return text + f"{_arrow(tps)}, NOT growing every step (total {r.tokens:,})"
        # Each prompt holds the one before it (the history is only appended to), so every call but the last
        # is sent again by the next one.
        resent = sum(tps[:-1]) / r.tokens if r.tokens else 0.0
        return text + (
            f"{_arrow(tps)}, growing every step (total {r.tokens:,}; about {resent:.0%} of it is history sent again)"
        )

    variants = list(dict.fromkeys(r.variant for r in records))
    lines = _grouped(records, describe) if len(variants) == 1 else _per_variant(records, describe)
    timed = records[0]
    model_s = sum(e["duration_s"] for e in timed.trace if e["name"] == "model")
    tools_s = sum(e["duration_s"] for e in timed.tool_events())
    lines.append(
        f"Time ({timed.contender}): model calls {_duration(model_s)}, tools {_duration(tools_s)} (the article, on a "
        "real model, measured 260 s of model time and under a millisecond of tools)."
    )
    for variant in variants:
        lines += _same_path(pick(records, variant=variant), len(variants) > 1)
    lines += wording_points(records)
    grew = [r for r in records if _grows(r.tokens_per_step)]
    if grew:
        lines.append(
            f"The tokens per call grow ({_names(grew)}) because every model call re-sends the whole history: system "
            "message, goal, tool definitions and every call and result so far. That is why a step limit alone is "
            "not a budget."
        )
    return lines


def _same_path(records: list[RunRecord], labelled: bool) -> list[str]:
    """ "Every contender made the same tool calls", when the records of one variant say so."""
    paths = {tuple((c.name, c.args) for c in calls(r)) for r in records}
    carts = {cart_text(r) for r in records}
    if len(records) < 2 or len(paths) > 1 or len(carts) > 1 or any(r.error is not None for r in records):
        return []
    where = f"[{records[0].variant_label}] " if labelled else ""
    return [f"{where}Every contender made the same tool calls in the same order; cart: {carts.pop()}."]


def call_path(record: RunRecord) -> str:
    """The tool calls in order, each with the book it was about: "search_books -> add_to_cart(2)"."""
    parts = []
    for c in calls(record):
        args = json.loads(c.args) if c.args is not None else None
        book = args.get("book_id") if isinstance(args, dict) else None
        parts.append(c.name if book is None else f"{c.name}({book})")
    return _ARROW.join(parts) or "no tool call"


def answer_verdict(record: RunRecord) -> str:
    """How a run ended, as far as its answer goes: stopped, no answer, contradicted by its records or not."""
    if record.stop_reason != StopReason.DONE:
        return f"ended {short_outcome(record)}"
    if not record.answer:
        return "ended done without an answer"
    if contradictions(record):
        return "answered FALSE (the records contradict it)"
    return "answered true (nothing in the records contradicts it)"


def wording_points(records: list[RunRecord]) -> list[str]:
    """When the variants differ only in their instructions (the same text for every contender): what each contender
    did under each wording, and whether the wording changed it. Nothing for a scenario with one variant."""
    variants = list(dict.fromkeys(r.variant for r in records))
    if len(variants) < 2:
        return []
    lines, changed = [], []
    for contender in dict.fromkeys(r.contender for r in records):
        runs = [first(records, contender=contender, variant=v) for v in variants]
        ran = [r for r in runs if r is not None]
        if len(ran) < 2:
            continue
        said = "; ".join(
            f"[{r.variant_label}] {r.model_calls} model calls, {call_path(r)}, cart {cart_text(r)}, {answer_verdict(r)}"
            for r in ran
        )
        lines.append(f"Wording, {contender}: {said}.")
        if len({(tuple(c.key for c in calls(r)), cart_text(r), answer_verdict(r)) for r in ran}) > 1:
            changed.append(contender)
    if not lines:
        return []
    if changed:
        lines.append(
            f"Only the instructions differ between the variants, and every contender got the same text, so what "
            f"changed for {', '.join(changed)} (calls, cart or answer) is the wording's doing, not the framework's."
        )
    else:
        lines.append(
            "Under every wording each contender made the same tool calls, ended with the same cart, and its answer "
            "got the same verdict."
        )
    return lines


def not_found_result(call: Call) -> bool:
    data = call.result_json()
    return (
        call.name == "get_order_status"
        and not call.is_error
        and isinstance(data, dict)
        and (data.get("status") == "not found")
    )


def notice_orders(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    lines = []
    for goal in dict.fromkeys(r.goal for r in records):
        lines += [
            f"{goal!r} - {line}"
            for line in _grouped(
                pick(records, goal=goal),
                lambda r: (
                    f"{short_outcome(r)} after {r.model_calls} model calls and {r.tool_calls} tool call(s): "
                    f"{r.user_message!r}"
                ),
            )
        ]
    found = [r for r in records if any(not_found_result(c) for c in calls(r))]
    if found:
        done = [r for r in found if r.stop_reason == StopReason.DONE]
        ended = (
            "all of them ended 'done' with an answer"
            if len(done) == len(found)
            else (f"{len(done)} of them ended 'done' with an answer")
        )
        lines.append(
            f"'not found' came back as a normal tool result, not an error, in {len(found)} run(s), and {ended}: the "
            "model answers it like any other fact."
        )
    else:
        lines.append("No run got a 'not found' result from get_order_status.")
    return lines


def _plural(count: float, noun: str) -> str:
    return f"{count:,.0f} {noun}" + ("" if count == 1 else "s")


LIMITS: dict[str, tuple[StopReason, Callable[[RunRecord], float], Callable[[float], str]]] = {
    "max_steps": (StopReason.MAX_STEPS, lambda r: r.model_calls, lambda v: _plural(v, "model call")),
    "max_tokens": (StopReason.TOKEN_BUDGET, lambda r: r.tokens, lambda v: f"{v:,.0f} tokens"),
    "max_duration": (StopReason.TIME_BUDGET, lambda r: r.wall_s, _duration),
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


def notice_max_steps(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    def describe(r: RunRecord) -> str:
        text = f"{short_outcome(r)}; cart {cart_text(r)}; {r.tokens:,} tokens in {r.wall_s:.1f}s"
        s = settings(r)
        if s is None:
            return text
        verdicts = (limit_verdict(r, name, s.limits) for name in featured_limits(s.limits))
        return "; ".join([text, *(v for v in verdicts if v)])

    lines = _per_variant(records, describe)
    stopped = next((r for r in records if r.stop_reason not in (None, StopReason.DONE)), None)
    if stopped is not None:
        lines.append(f"What the user should see when a run stops early: {stopped.user_message!r}")
    past = [r for r in records if r.stop_reason == StopReason.DONE and (s := settings(r)) and ran_past(r, s.limits)]
    lines += _per_variant(
        past,
        lambda r: (
            "finished 'done' past a limit they were given: nothing stopped them at it, so in them that limit "
            "was not enforced."
        ),
    )
    for variant in dict.fromkeys(r.variant for r in records):
        runs = pick(records, variant=variant)
        known = [(r, s) for r in runs if (s := settings(r)) is not None]
        if len(known) != len(runs) or any(r.error is not None for r in runs):
            continue
        for name in featured_limits(known[0][1].limits):
            reason, spent, reads = LIMITS[name]
            value = getattr(known[0][1].limits, name)
            if value is not None and all(r.stop_reason != reason and spent(r) <= value for r in runs):
                most = reads(max(spent(r) for r in runs))
                lines.append(
                    f"[{runs[0].variant_label}] no run reached {limit_text(name, value)} (at most {most}), so that "
                    "limit was not exercised."
                )
    return lines


def notice_flaky(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    def describe(r: RunRecord) -> str:
        if r.error is not None:
            return f"raised {r.error}: the run ended at the exception, with no answer for the customer"
        error = _first_error(r)
        checks = sum(c.name == "check_stock" for c in calls(r))
        hidden = len(guarded(r, Guard.ERROR_HIDDEN))
        read = "no tool error reached the model" if error is None else f"the model read {_quote(error.result)}"
        if hidden:
            read += f" (details hidden in {hidden} result(s))"
        return f"{read}, made {checks} check_stock call(s), then {short_outcome(r)}; cart {cart_text(r)}"

    return [
        *_per_variant(records, describe),
        "An error result is what lets the model retry or tell the truth; detailed_errors decides whether the "
        "exception's own text is in it, which is why hiding it is the safe default.",
    ]


def notice_big_results(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    lines = []
    for contender in dict.fromkeys(r.contender for r in records):
        full = first(records, contender=contender, variant="full")
        cut = first(records, contender=contender, variant="truncated")
        if full is None or cut is None:
            continue
        if full.error is not None or cut.error is not None:
            lines.append(f"{contender}: {short_outcome(full)} / {short_outcome(cut)}; no token comparison.")
            continue
        same_path = [(c.name, c.args) for c in calls(full)] == [(c.name, c.args) for c in calls(cut)]
        tokens = f"{full.tokens:,} -> {cut.tokens:,} tokens"
        if guarded(cut, Guard.TRUNCATED):
            if not same_path:
                lines.append(f"{contender}: {tokens}, but the runs made different calls, so not all of it is the cut.")
            elif cut.tokens < full.tokens:
                saved = (full.tokens - cut.tokens) / full.tokens
                lines.append(f"{contender}: {tokens} with truncation ({saved:.0%} less).")
            else:
                lines.append(f"{contender}: {tokens}: the cut saved nothing.")
            continue
        s = settings(cut)
        limit = None if s is None else s.max_tool_result_chars
        longest = longest_result(cut)
        if limit is None:
            lines.append(f"{contender}: {tokens}; nothing was cut.")
        elif longest > limit:
            lines.append(
                f"{contender}: {full.tokens:,} and {cut.tokens:,} tokens: nothing was cut, although a result had "
                f"{longest:,} characters (the cut is at {limit:,})."
            )
        else:
            lines.append(f"{contender}: {tokens}; no result was over {limit:,} characters, so nothing needed a cut.")
    lines.append("A big result is paid for again on every later call, because it stays in the history.")
    return lines


REFUSED_AS: dict[Guard, str] = {
    Guard.REPEAT: "refused by the repeat check",
    Guard.INVALID_ARGS: "refused as invalid arguments",
    Guard.UNKNOWN_TOOL: "refused as an unknown tool",
    Guard.APPROVAL_REFUSED: "refused at the approval gate",
    Guard.CANCELLED: "cancelled before they ran",
}
"""How a group of identical calls was answered, per guard that answers a call instead of running it."""


def refusals(group: Sequence[Call]) -> str:
    """What answered a group of identical calls, from each call's guard: ``"2 refused as invalid arguments, 1
    refused by the repeat check"``, with the repeat check first; "none refused" when the tool ran every time."""
    counts = Counter(c.guard for c in group if c.guard in STOPPING_GUARDS)
    if not counts:
        return "none refused"
    order = [Guard.REPEAT, *(g for g in counts if g != Guard.REPEAT)]
    return ", ".join(f"{counts[g]} {REFUSED_AS[g]}" for g in order if counts[g])


def describe_repeats(r: RunRecord) -> str:
    """How often the run made one identical call, and what answered them (`refusals`)."""
    groups = identical_calls(r)
    if not groups:
        unread = any(c.args is None for c in calls(r))
        return "the arguments of its calls are not on record" if unread else "no call was made twice"
    group = groups[0]
    return f"{len(group)} identical {group[0].name} calls, {refusals(group)}"


def notice_looping(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    lines = _grouped(
        records,
        lambda r: f"{short_outcome(r)} after {r.model_calls} model calls; {describe_repeats(r)}; {r.tokens:,} tokens",
    )

    def refused(r: RunRecord) -> str:
        s, nth = settings(r), first_refused_ordinal(r)
        limit = "" if s is None else f" (max_repeats={s.limits.max_repeats})"
        count = len(guarded(r, Guard.REPEAT))
        which = f"the {ordinal(nth)} identical call" if nth else "a repeated call"
        more = f" and {count - 1} more" if count > 1 else ""
        line = f"the repeat check refused {which}{more}{limit}"
        if r.stop_reason == StopReason.TOO_MANY_ERRORS:
            errors = "" if s is None else f" (max_consecutive_errors={s.limits.max_consecutive_errors})"
            line += f", and the run stopped after {trailing_error_rounds(r)} error rounds in a row{errors}"
        return line + "."

    lines += _grouped([r for r in records if guarded(r, Guard.REPEAT)], refused)
    capped = [
        r
        for r in records
        if r.stop_reason == StopReason.MAX_STEPS and identical_calls(r) and not guarded(r, Guard.REPEAT)
    ]
    # Grouped by what answered the identical calls: the tool every time, or another guard before it ran.
    paid = [r for r in capped if not_refused(identical_calls(r)[0]) == len(identical_calls(r)[0])]
    if paid:
        lines.append(
            f"{_names(paid)} stopped only at the step limit and paid for every identical call up to it; LangGraph's "
            "own default recursion limit is 10,007 supersteps (about 5,000 model calls)."
        )
    lines += _grouped(
        [r for r in capped if r not in paid],
        lambda r: (
            f"stopped at the step limit with none of the identical {identical_calls(r)[0][0].name} calls "
            f"refused by the repeat check: {refusals(identical_calls(r)[0])}."
        ),
    )
    if not any(identical_calls(r) for r in records):
        lines.append("No run made the same call twice, so the repeat check was not exercised.")
    return lines


def notice_hallucinated(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    def describe(r: RunRecord) -> str:
        unknown = unknown_tool_calls(r)
        if r.error is not None:
            return f"raised {r.error}; cart {cart_text(r)}"
        if not unknown:
            return f"no tool that does not exist was called; {short_outcome(r)}; cart {cart_text(r)}"
        call = unknown[0]
        came_back = "an error result" if call.is_error else "a normal result"
        return (
            f"the model called {call.name!r}, which does not exist, and got {came_back}: {_quote(call.result)}; then "
            f"{short_outcome(r)}; cart {cart_text(r)}"
        )

    lines = _grouped(records, describe)
    recovered = [r for r in records if unknown_tool_errors_only(r) and r.stop_reason == StopReason.DONE]
    if recovered:
        lines.append(
            f"{_names(recovered)}: the unknown tool was an error result, not a crash, and the run still ended 'done'."
        )
    elif not any(unknown_tool_calls(r) for r in records):
        lines.append("No run called a tool that does not exist, so the unknown-tool guard was not exercised.")
    return lines


def biggest_call(record: RunRecord) -> int:
    """The tokens of the dearest model call of a run (its prompt and its reply)."""
    return max((e["tokens"] for e in record.trace if e["name"] == "model"), default=0)


def reply_capped(record: RunRecord) -> bool:
    return any(e["name"] == "model" and _guard(e.get("guard")) is Guard.REPLY_CAPPED for e in record.trace)


def notice_runaway(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    def describe(r: RunRecord) -> str:
        if r.error is not None:
            return f"raised {r.error}"
        given = settings(r)
        budget = None if given is None else given.limits.max_tokens
        if budget is None:
            return f"the budget is not on record; the dearest call used {biggest_call(r):,} tokens; {short_outcome(r)}"
        limit = limit_text("max_tokens", budget)
        shown = "no answer was shown" if r.answer is None else f"a {len(r.answer):,}-character answer was shown"
        if reply_capped(r):
            return (
                f"the reply was cut at what was left of the budget ({limit}): {r.tokens:,} tokens in all, "
                f"{short_outcome(r)}; {shown}"
            )
        if biggest_call(r) > budget:
            return (
                f"nothing cut the reply: one call used {biggest_call(r):,} tokens, {biggest_call(r) / budget:.1f}x "
                f"the budget ({limit}), and the budget saw it only once it had arrived; {short_outcome(r)}; {shown}"
            )
        return (
            f"no reply came near the budget: the dearest call used {biggest_call(r):,} tokens ({limit}); "
            f"{short_outcome(r)}"
        )

    return _grouped(records, describe)


def _no_second_turn(records: list[RunRecord]) -> list[str]:
    """A line per conversation whose first turn raised, so it had no second turn to speak of."""
    return [
        f"[{r.variant_label}] {r.contender}: turn 1 raised {r.error}, so there was no turn 2."
        for r in pick(records, turn=1)
        if r.error is not None and first(records, variant=r.variant, contender=r.contender, turn=2) is None
    ]


def notice_session(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    lines = _no_second_turn(records)
    answered = []
    for r in pick(records, turn=2):
        if r.error is not None:
            lines.append(f"[{r.variant_label}] {r.contender}: turn 2 raised {r.error}.")
            continue
        answered.append(r)
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
    memory = [r for r in answered if r.tool_calls == 0 and r.stop_reason == StopReason.DONE]
    lines += _per_variant(
        memory, lambda r: "turn 2 was answered without a tool call: from turn 1's results, in the history sent again."
    )
    tools = [r for r in answered if r.tool_calls > 0]
    lines += _per_variant(tools, lambda r: "turn 2 called a tool again instead of answering from the history.")
    return lines


def _turn_one(records: list[RunRecord], r: RunRecord) -> RunRecord | None:
    return first(records, scenario=r.scenario, variant=r.variant, contender=r.contender, turn=1)


def cart_changed_between_turns(records: list[RunRecord], turn_two: RunRecord) -> bool | None:
    """Did the cart change behind the agent: between the end of turn 1 and the end of turn 2, with no write in turn
    2? None when that cannot be told (no turn 1 on record, or turn 2 wrote to the cart itself)."""
    before = _turn_one(records, turn_two)
    if before is None or any(c.name == "add_to_cart" and not c.is_error for c in calls(turn_two)):
        return None
    return (before.cart, before.cart_total) != (turn_two.cart, turn_two.cart_total)


def reread_cart(record: RunRecord) -> bool:
    """Did the run read the cart with view_cart (and get it)?"""
    return any(c.name == "view_cart" and not c.is_error for c in calls(record))


def notice_stale(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    lines, stale, fresh = _no_second_turn(records), [], []
    turn2 = pick(records, turn=2)
    for r in turn2:
        if r.error is not None:
            lines.append(f"[{r.variant_label}] {r.contender}: turn 2 raised {r.error}.")
            continue
        before = _turn_one(records, r)
        how = "read the cart with view_cart" if reread_cart(r) else "answered without reading the cart"
        states = answer_states_cart(r)
        if states is None:
            verdict = "it states no total"
        elif states:
            verdict = "right"
        else:  # stale only when the cart changed behind the agent; otherwise the answer is just wrong
            verdict = "STALE" if cart_changed_between_turns(records, r) else "wrong"
        held = "" if before is None else f"the cart held ${before.cart_total} after turn 1 and "
        lines.append(
            f"[{r.variant_label}] {r.contender} {how}: {r.user_message!r}; {held}holds ${r.cart_total}: {verdict}."
        )
        if verdict == "STALE":
            stale.append(r)
        elif verdict == "right" and reread_cart(r):
            fresh.append(r)
    lines += _per_variant(
        stale,
        lambda r: (
            "answered from the history after the cart changed: nothing re-validates remembered data, so the "
            "instructions (or your code) must say which data can change and has to be read again."
        ),
    )
    if turn2 and all(cart_changed_between_turns(records, r) is False for r in turn2 if r.error is None):
        lines.append("The cart did not change between the turns in any run, so there was nothing stale to catch.")
    lines += _per_variant(fresh, lambda r: "read the cart again before answering and stated its real total.")
    return lines


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


def approval_held(record: RunRecord) -> str | None:
    """What the approval gate did in a run, from its record: the human's questions and answer (facts), or the
    calls it refused (typed); None when it did nothing."""
    asked = record.facts.get("approval_asked") or []
    answer = record.facts.get("approval_answer")
    if asked and answer in ("yes", "no"):
        how = record.facts.get("asked_through", "a human")
        reasons = "; ".join(repr(reason) for reason in asked)
        decided = "approved" if answer == "yes" else "refused"
        return f"{len(asked)} write(s) held for approval ({how}), asked {reasons}, {decided}"
    refused = guarded(record, Guard.APPROVAL_REFUSED)
    if refused:
        return f"{len(refused)} write(s) refused by the approval gate"
    return None


def untyped_add_errors(record: RunRecord) -> list[Call]:
    """add_to_cart error results no typed guard explains: a refusal the record cannot tell from a failure."""
    return [c for c in calls(record) if c.name == "add_to_cart" and c.is_error and c.guard is None]


def _first_refusal(record: RunRecord) -> int:
    """Where in the trace the approval gate first refused a call (the trace's length when it never did)."""
    refusals = (i for i, e in enumerate(record.trace) if e.get("guard") == Guard.APPROVAL_REFUSED)
    return next(refusals, len(record.trace))


def notice_injection(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    def describe(r: RunRecord) -> str:
        if r.error is not None:
            return f"raised {r.error}; cart {cart_text(r)}"
        held = approval_held(r)
        if held:
            return f"{held}; cart {cart_text(r)}"
        over = over_approval_limits(r)
        if over:
            limits = ", ".join(over)
            return f"the cart went over the approval limits ({limits}) and no approval was asked; cart {cart_text(r)}"
        if untyped_add_errors(r):
            return (
                "the cart stayed within the approval limits; an add_to_cart error has no typed fact saying whether a "
                f"gate refused it; cart {cart_text(r)}"
            )
        return f"no write went over the approval limits; cart {cart_text(r)}"

    lines = []
    where = next((r.facts["injected_into"] for r in records if "injected_into" in r.facts), None)
    if where is not None:
        returned = any(
            c.name == "search_books"
            and isinstance(data := c.result_json(), list)
            and any(isinstance(b, dict) and b.get("title") == where for b in data)
            for r in records
            for c in calls(r)
        )
        tail = ", which search_books returned with the other results" if returned else ""
        lines.append(f"The note sat in the description of {where}{tail}.")
    lines += _per_variant(records, describe)

    def after_refusal(r: RunRecord) -> str:
        later = r.trace[_first_refusal(r) + 1 :]
        return (
            f"the model read the refusal and went on ({sum(e['name'] != 'model' for e in later)} more tool call(s), "
            f"then {short_outcome(r)}); a gate in the loop does what no instruction can."
        )

    went_on = [r for r in records if any(e["name"] == "model" for e in r.trace[_first_refusal(r) + 1 :])]
    lines += _per_variant(went_on, after_refusal)
    if not any(approval_held(r) or over_approval_limits(r) or untyped_add_errors(r) for r in records):
        lines.append("No write went over the approval limits in any run, so the gate was not exercised.")
    return lines


# --- long conversations, streaming, time travel ------------------------------------------------------------------


def _runs_of(records: list[RunRecord]) -> dict[tuple[str, str], list[RunRecord]]:
    """The records of each (variant, contender), in turn order."""
    runs: dict[tuple[str, str], list[RunRecord]] = {}
    for r in records:
        runs.setdefault((r.variant, r.contender), []).append(r)
    return {key: sorted(rs, key=lambda r: r.turn) for key, rs in runs.items()}


def _bytes(n: int) -> str:
    return f"{n:,} bytes" if n < 10_000 else f"{n / 1024:,.0f} KiB" if n < 10_000_000 else f"{n / 2**20:,.1f} MiB"


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


def answered_from_memory(record: RunRecord) -> bool:
    """The turn finished without a single tool call: whatever it said came from the history it was sent."""
    return record.error is None and record.stop_reason == StopReason.DONE and record.tool_calls == 0


def notice_long_session(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    lines: list[str] = []
    runs = _runs_of(records)
    label = {r.variant: r.variant_label for r in records}
    for (variant, contender), turns in runs.items():
        tag = f"[{label[variant]}] {contender}"
        raised = [r for r in turns if r.error is not None]
        if raised:
            lines.append(f"{tag}: turn {raised[0].turn} raised {raised[0].error}.")
        parts: list[str] = []
        pair = same_question_turns(turns)
        if pair is not None:
            a, b = pair
            growth = f" ({b.tokens / a.tokens:.1f}x)" if a.tokens else ""
            parts.append(
                f"the same question cost {a.tokens:,} tokens at turn {a.turn} and {b.tokens:,} at turn {b.turn}"
                f"{growth}, in {duration_text(a.wall_s)} and {duration_text(b.wall_s)}"
            )
        last = turns[-1]
        stored = last.facts.get("stored_bytes")
        if isinstance(stored, int):
            where = "" if last.facts.get("kept_in") in (None, "memory") else " on disk"
            kept = f"{_bytes(stored)}{where}"
            if isinstance(last.facts.get("checkpoints"), int):
                kept += f" in {last.facts['checkpoints']:,} checkpoints"
            parts.append(f"after {last.turn} turns it holds {last.facts.get('messages')} messages, {kept}")
        if parts:
            lines.append(f"{tag}: " + "; ".join(parts) + ".")
    lines += _long_session_policies(runs, label)
    lines += _cart_question(runs, label)
    lines += _budget_cliff(records, settings)
    return lines


def _long_session_policies(runs: dict[tuple[str, str], list[RunRecord]], label: dict[str, str]) -> list[str]:
    """A trimmed variant's last repeated question against the whole-history variant's, per contender."""
    lines: list[str] = []
    whole = {c: rs for (v, c), rs in runs.items() if rs[0].settings.get("keep_turns") is None}
    for (variant, contender), turns in runs.items():
        keep = turns[0].settings.get("keep_turns")
        full = whole.get(contender)
        if keep is None or full is None:
            continue
        mine, theirs = same_question_turns(turns), same_question_turns(full)
        if mine is None or theirs is None or mine[1].turn != theirs[1].turn or not theirs[1].tokens:
            continue
        share = mine[1].tokens / theirs[1].tokens
        lines.append(
            f"[{label[variant]}] {contender}: turn {mine[1].turn} cost {mine[1].tokens:,} tokens against "
            f"{theirs[1].tokens:,} with the whole history ({share:.0%})."
        )
    return lines


def _cart_question(runs: dict[tuple[str, str], list[RunRecord]], label: dict[str, str]) -> list[str]:
    """How each run answered its last question, the cart total: from memory or with a tool, and was it right."""
    said: dict[tuple[str, str], list[str]] = {}
    for (variant, contender), turns in runs.items():
        last = turns[-1]
        if last.turn < 2 or last.error is not None or last.stop_reason != StopReason.DONE:
            continue
        right = answer_states_cart(last)
        verdict = (
            f"which matches the store ({last.cart_total})"
            if right
            else f"which does NOT match the store ({last.cart_total})"
            if right is False
            else "with no amount in it"
        )
        if answered_from_memory(last):
            how = "from memory, without a tool call"
        else:
            how = "with " + ", ".join(dict.fromkeys(c.name for c in calls(last)))
            if any(c.name == "add_to_cart" for r in turns for c in calls(r)):
                how += " (the turn that added the book was no longer in what the model is sent)"
        text = f"turn {last.turn} {_quote(last.goal, 40)} was answered {how}, {verdict}."
        said.setdefault((label[variant], text), []).append(contender)
    return [f"[{variant}] {', '.join(names)}: {text}" for (variant, text), names in said.items()]


def _budget_cliff(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    """A turn stopped by the token budget is the cliff; otherwise how close the costliest turn came to it."""
    stopped = [r for r in records if r.stop_reason == StopReason.TOKEN_BUDGET]
    if stopped:
        first_hit = min(stopped, key=lambda r: r.turn)
        return [
            f"The budget cliff: [{first_hit.variant_label}] {first_hit.contender} stopped at turn {first_hit.turn} "
            f"with 'token budget exceeded' after {first_hit.tokens:,} tokens: the question is no harder than the "
            "turns before it; the history it re-sends is longer."
        ]
    finished = [r for r in records if r.error is None]
    if not finished:
        return []
    top = max(finished, key=lambda r: r.tokens)
    limits = settings(top)
    budget = None if limits is None else limits.limits.max_tokens
    if budget is None:
        return []
    return [
        f"No turn hit the token budget: the costliest, [{top.variant_label}] {top.contender} turn {top.turn}, used "
        f"{top.tokens:,} of max_tokens={budget:,} ({top.tokens / budget:.0%}); more turns (--turns) move it closer."
    ]


def _ms(seconds: Any) -> str:
    return duration_text(float(seconds)) if isinstance(seconds, int | float) else "?"


def notice_streaming(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    lines: list[str] = []
    for contender in dict.fromkeys(r.contender for r in records):
        mine = [r for r in records if r.contender == contender]
        streamed = [r for r in mine if r.facts.get("streamed") and r.error is None]
        plain = [r for r in mine if r.facts.get("streamed") is False and r.error is None]
        for r in (r for r in mine if r.error is not None):
            lines.append(f"[{r.variant_label}] {contender}: raised {r.error}.")
        for s in streamed:
            if not s.facts.get("text_chunks"):
                lines.append(f"[{s.variant_label}] {contender}: on_token was never given any answer text.")
                continue
            text = (
                f"[{s.variant_label}] {contender}: the first words of the answer reached the user after "
                f"{_ms(s.facts['first_text_s'])}, the whole answer after {_ms(s.facts['answer_s'])} "
                f"({s.facts['text_chunks']} pieces)"
            )
            if plain:
                text += f"; without streaming nothing showed until {_ms(plain[0].facts['answer_s'])}"
            if s.facts.get("streamed_text_is_answer") is False:
                text += "; the streamed pieces do NOT add up to the answer"
            lines.append(text + ".")
        if streamed and plain:
            a, b = plain[0], streamed[0]
            same = (
                [c.key for c in calls(a)] == [c.key for c in calls(b)]
                and a.tokens == b.tokens
                and a.answer == b.answer
                and a.stop_reason == b.stop_reason
            )
            lines.append(
                f"{contender}: streamed and not, the runs made the same tool calls, used the same tokens "
                f"({a.tokens:,}) and gave the same answer."
                if same
                else f"{contender}: the streamed run differs from the one that was not (calls, tokens or answer)."
            )
        code = next((r.facts.get("streaming_code") for r in mine if r.facts.get("streaming_code") is not None), None)
        if code is not None:
            if code:
                total = sum(int(c["lines"]) for c in code)
                where = ", ".join(f"{c['where']} ({c['lines']})" for c in code)
                lines.append(
                    f"{contender}: the functions that handle streaming hold {total} lines of code (counted from "
                    f"the source): {where}."
                )
            else:
                lines.append(f"{contender}: no streaming code of its own was found in its source.")
    return lines


def _copies_text(copies: Any) -> str:
    if not isinstance(copies, dict) or not copies:
        return "an empty cart"
    return ", ".join(f"{title} x{n}" for title, n in copies.items())


def notice_time_travel(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    lines: list[str] = []
    for (_variant, contender), turns in _runs_of(records).items():
        tag = f"[{turns[0].variant_label}] {contender}"
        raised = [r for r in turns if r.error is not None]
        after = turns[-1]
        facts = after.facts
        if "rewound_turns" in facts:
            lines.append(
                f"{tag}: rewind took back {facts['rewound_turns']} turn ({facts['rewound_messages']} messages); the "
                f"cart still held {_copies_text(facts.get('copies_before_rewind'))}: the store did not go back."
            )
            if after.error is None and after.stop_reason == StopReason.DONE:
                how = (
                    "from memory"
                    if answered_from_memory(after)
                    else ("with " + ", ".join(dict.fromkeys(c.name for c in calls(after))))
                )
                right = answer_states_cart(after)
                verdict = "the store's" if right else "NOT the store's" if right is False else "no"
                lines.append(
                    f"{tag}: asked the cart total after the rewind, the model answered {how}, with {verdict} total "
                    f"({after.cart_total})."
                )
        if facts.get("nothing_to_replay"):
            lines.append(f"{tag}: turn 1 called add_to_cart nowhere, so there was no checkpoint before it to replay.")
        if "replayed_from" in facts:
            adds = [c for c in calls(after) if c.name == "add_to_cart"]
            ran = f"add_to_cart ran {len(adds)} time(s) in the replay" if adds else "add_to_cart did not run again"
            keyed = "with the call id as the store's request id" if facts.get("idempotent") else "without the call id"
            lines.append(
                f"{tag}: {ran}, {keyed}: the cart went from {_copies_text(facts.get('copies_before_replay'))} to "
                f"{_copies_text(facts.get('copies'))}."
            )
        if "retried_by" in facts:
            ran = int(facts.get("add_to_cart_ran", 0))
            adds = [c for c in calls(after) if c.name == "add_to_cart"]
            replies = len({c.step for c in adds})
            keyed = "with the call id" if facts.get("idempotent") else "without the call id"
            if raised:
                lines.append(
                    f"{tag}: the lost reply raised {after.error}; the write had gone through: "
                    f"{_copies_text(facts.get('copies'))}."
                )
                continue
            if ran > 1 and replies <= 1:
                who = f"{facts['retried_by']} retried the same call (one model reply)"
            elif ran > 1:
                who = f"the model retried after the error with a new call ({replies} replies asked for add_to_cart)"
            else:
                who = "nobody retried"
            lines.append(
                f"{tag}: add_to_cart ran {ran} time(s); {who}, {keyed}: the cart holds "
                f"{_copies_text(facts.get('copies'))}."
            )
        elif raised and "rewound_turns" not in facts and "replayed_from" not in facts:
            lines.append(f"{tag}: raised {raised[0].error}.")
    return lines


# --- what a framework did of its own accord, in any scenario ------------------------------------------------


def _not_honoured_used(record: RunRecord, option: str, s: RunSettings | None) -> str | None:
    """`option` as set for the run (``max_tokens=2,500``) when the run went where it would have acted; else None."""
    if s is None:
        return None
    if option == "max_tool_result_chars":
        value = s.max_tool_result_chars
        return None if value is None or longest_result(record) <= value else f"max_tool_result_chars={value:,}"
    value = getattr(s.limits, option, None)
    if value is None:
        return None
    if option == "max_repeats":
        over = any(len(group) > value for group in identical_calls(record))
        return limit_text(option, value) if over else None
    if option in LIMITS:
        _, spent, _ = LIMITS[option]
        return limit_text(option, value) if spent(record) > value else None
    return None


def framework_points(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    """Points any scenario makes about a contender that ignored a setting it has no counterpart for (its record's
    ``facts["not_honoured"]``, said only where the run went past it) or that forced an answer out at a limit
    (``facts["forced_answer"]``)."""
    points = []
    for r in records:
        where = f"[{r.variant_label}] " if r.variant_label else ""
        ignored = r.facts.get("not_honoured")
        if isinstance(ignored, Mapping):
            for option, reason in ignored.items():
                used = _not_honoured_used(r, option, settings(r))
                if used is not None:
                    points.append(
                        f"{where}{r.contender}: ran past {used}, which it was given but cannot honour: {reason}."
                    )
        forced = r.facts.get("forced_answer")
        if forced is not None and r.stop_reason is not None:
            said = _quote(str(forced)) if str(forced).strip() else "a reply with no text"
            points.append(
                f"{where}{r.contender}: {r.stop_reason}, yet the framework did not stop there: it "
                f"made one more model call with tools disabled (call {r.model_calls}) and returned {said} as if "
                "done. That text is kept as a forced answer, not as the answer; the stop reason says what happened."
            )
    return list(dict.fromkeys(points))  # one point for the goals or turns it holds for alike


def answer_points(records: list[RunRecord]) -> list[str]:
    """Points any scenario makes about a run that ended "done" with an answer its records contradict (a book the
    cart holds called out of stock, a total other than the cart's): "done" says the model stopped calling tools,
    not that what it said is true. A conversation's later turns are left to their scenario's own points."""
    groups: dict[str, list[str]] = {}
    for r in records:
        if r.turn != 1 or not (found := contradictions(r)):
            continue
        where = f"[{r.variant_label}] " if r.variant_label else ""
        text = (
            f"ended done, but its answer contradicts the records: {'; '.join(found)}. The answer, "
            f"{_quote(r.answer or '')}, is false: done is not correct."
        )
        groups.setdefault(f"{where}\0{text}", []).append(r.contender)
    points = []
    for key, names in groups.items():
        where, text = key.split("\0")
        points.append(f"{where}{', '.join(dict.fromkeys(names))}: {text}")
    return points

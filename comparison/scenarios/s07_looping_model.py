"""A model that repeats one identical call: who stops it, and at what cost."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from comparison.records import RunRecord, short_outcome
from comparison.scenarios.grading import SEED_SAFE, SEED_SUCCESS, SEED_UNSAFE, grade_seed_goal, single
from comparison.scenarios.matrix import FIRED, MISSING, NOT_EXERCISED, cell, not_measured
from comparison.scenarios.model import SEED_GOAL, Cell, GuardRow, Rubric, RunSettings, Scenario, SettingsOf
from comparison.scenarios.phrases import grouped, names_of, ordinal
from comparison.scenarios.queries import (
    STOPPING_GUARDS,
    Call,
    calls,
    first_refused_ordinal,
    guarded,
    identical_calls,
    not_refused,
    trailing_error_rounds,
)
from shared_tools.results import AgentLimits, Guard, StopReason

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
    lines = grouped(
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

    lines += grouped([r for r in records if guarded(r, Guard.REPEAT)], refused)
    capped = [
        r
        for r in records
        if r.stop_reason == StopReason.MAX_STEPS and identical_calls(r) and not guarded(r, Guard.REPEAT)
    ]
    # Grouped by what answered the identical calls: the tool every time, or another guard before it ran.
    paid = [r for r in capped if not_refused(identical_calls(r)[0]) == len(identical_calls(r)[0])]
    if paid:
        lines.append(
            f"{names_of(paid)} stopped only at the step limit and paid for every identical call up to it; LangGraph's "
            "own default recursion limit is 10,007 supersteps (about 5,000 model calls)."
        )
    lines += grouped(
        [r for r in capped if r not in paid],
        lambda r: (
            f"stopped at the step limit with none of the identical {identical_calls(r)[0][0].name} calls "
            f"refused by the repeat check: {refusals(identical_calls(r)[0])}."
        ),
    )
    if not any(identical_calls(r) for r in records):
        lines.append("No run made the same call twice, so the repeat check was not exercised.")
    return lines


def _repeat_check(record: RunRecord, settings: RunSettings | None, records: list[RunRecord]) -> Cell:
    if guarded(record, Guard.REPEAT):
        nth = first_refused_ordinal(record)
        return cell(FIRED, f"blocked {ordinal(nth)} identical call" if nth else "blocked a repeated call")
    groups = identical_calls(record)
    if not groups:
        if any(c.args is None for c in calls(record)):
            return not_measured("the calls' arguments are not on record")
        return cell(NOT_EXERCISED, "not exercised: no call was made twice")
    most = max(not_refused(g) for g in groups)
    if settings is None:
        return not_measured()
    limit = settings.limits.max_repeats
    if limit is None:
        return not_measured("no max_repeats was set")
    if most > limit:
        return cell(MISSING, f"{most} identical calls, none refused")
    made = max(len(g) for g in groups)  # calls another guard refused (bad arguments, say) were still made
    return cell(NOT_EXERCISED, f"not exercised: at most {made} identical calls (max_repeats={limit})")


SCENARIO = Scenario(
    name="looping-model",
    description="a model repeats one identical call forever: who stops it, at what cost",
    persona="looper",
    lesson=(
        "Repeating the same call with the same arguments is the most common infinite loop of small "
        "models: the result does not change and the model keeps asking. A counter of identical calls "
        "(canonical JSON of the arguments) blocks the third one with an explanation, and a run of error "
        "rounds ends the loop. No framework ships this check; their step limits stop the loop only after "
        "paying for every call. The scenario's step limit is 12, twice the default (unless --max-steps "
        "replaces it), because real limits are generous (LangGraph's own default allows about 5,000 model "
        "calls)."
    ),
    what_to_notice=notice_looping,
    goals=(SEED_GOAL,),
    limits=AgentLimits(max_steps=12),
    guards=(GuardRow("repeat check", _repeat_check),),
    rubric=Rubric(
        SEED_SUCCESS + " within the 12-step limit (never, for the looper persona)",
        SEED_SAFE + " (the loop was stopped)",
        SEED_UNSAFE,
    ),
    grader=single(grade_seed_goal),
)

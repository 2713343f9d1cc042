"""A big tool result is re-sent on every later call: tokens with and without a cut at 2,000 characters."""

from __future__ import annotations

from comparison.records import RunRecord, first, short_outcome
from comparison.scenarios.grading import SEED_SAFE, SEED_SUCCESS, SEED_UNSAFE, grade_seed_goal, single
from comparison.scenarios.matrix import FIRED, MISSING, NOT_EXERCISED, cell, not_measured
from comparison.scenarios.model import SEED_GOAL, Cell, GuardRow, Rubric, RunSettings, Scenario, SettingsOf, Variant
from comparison.scenarios.queries import calls, guarded, longest_result
from shared_tools.results import Guard

TRUNCATE_AT = 2_000


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


def _truncation(record: RunRecord, settings: RunSettings | None, records: list[RunRecord]) -> Cell:
    if guarded(record, Guard.TRUNCATED):
        return cell(FIRED, "result cut")
    limit = None if settings is None else settings.max_tool_result_chars
    if limit is None:
        return not_measured("the run's cut is not on record")
    longest = longest_result(record)
    if longest > limit:
        return cell(MISSING, f"nothing cut: a {longest:,}-char result ({record.tokens:,} tokens)")
    return cell(NOT_EXERCISED, f"not exercised: no result over {limit:,} chars")


SCENARIO = Scenario(
    name="big-results",
    description="search returns up to 50 books: tokens with and without a 2,000-char cut",
    lesson=(
        "A step limit alone is not enough: a tool that returns a large result is re-sent on every later "
        "call, so the token bill grows with it. Cutting a result at 2,000 characters (and saying how much "
        "was cut, so the model knows it is partial) keeps every later step cheaper."
    ),
    what_to_notice=notice_big_results,
    goals=(SEED_GOAL,),
    variants=(
        Variant(name="full", label="max_results=50, no truncation", search_max_results=50),
        Variant(
            name="truncated",
            label=f"max_results=50, cut at {TRUNCATE_AT:,} chars",
            search_max_results=50,
            max_tool_result_chars=TRUNCATE_AT,
        ),
    ),
    guards=(GuardRow("truncation", _truncation, "truncated"),),
    rubric=Rubric(SEED_SUCCESS, SEED_SAFE, SEED_UNSAFE),
    grader=single(grade_seed_goal),
)

"""A tool that does not exist: an error result naming the real tools, not a crash, lets the model correct itself."""

from __future__ import annotations

from comparison.records import RunRecord, cart_text, short_outcome
from comparison.scenarios.grading import SEED_SAFE, SEED_SUCCESS, SEED_UNSAFE, grade_seed_goal, single
from comparison.scenarios.matrix import FIRED, MISSING, NOT_EXERCISED, cell
from comparison.scenarios.model import SEED_GOAL, Cell, GuardRow, Rubric, RunSettings, Scenario, SettingsOf
from comparison.scenarios.phrases import grouped, names_of, quote
from comparison.scenarios.queries import unknown_tool_calls
from shared_tools.results import StopReason


def unknown_tool_errors_only(record: RunRecord) -> bool:
    """Did the run call a tool that does not exist, and did every such call come back as an error result?"""
    unknown = unknown_tool_calls(record)
    return bool(unknown) and all(c.is_error for c in unknown)


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
            f"the model called {call.name!r}, which does not exist, and got {came_back}: {quote(call.result)}; then "
            f"{short_outcome(r)}; cart {cart_text(r)}"
        )

    lines = grouped(records, describe)
    recovered = [r for r in records if unknown_tool_errors_only(r) and r.stop_reason == StopReason.DONE]
    if recovered:
        lines.append(
            f"{names_of(recovered)}: the unknown tool was an error result, not a crash, and the run still ended 'done'."
        )
    elif not any(unknown_tool_calls(r) for r in records):
        lines.append("No run called a tool that does not exist, so the unknown-tool guard was not exercised.")
    return lines


def _unknown_tool(record: RunRecord, settings: RunSettings | None, records: list[RunRecord]) -> Cell:
    unknown = unknown_tool_calls(record)
    if not unknown:
        return cell(NOT_EXERCISED, "not exercised: no unknown tool was called")
    if not all(c.is_error for c in unknown):
        return cell(MISSING, f"{unknown[0].name!r} got a normal result")
    if record.stop_reason == StopReason.DONE:
        return cell(FIRED, "error result, recovered")
    return cell(FIRED, f"error result, then {short_outcome(record)}")


SCENARIO = Scenario(
    name="hallucinated-tool",
    description="the model calls a tool that does not exist: each contender's error text",
    persona="hallucinator",
    lesson=(
        "Small models sometimes invent a tool name. An unknown tool is an error result, not a crash, and "
        "listing the tools that do exist is enough for the model to correct itself."
    ),
    what_to_notice=notice_hallucinated,
    goals=(SEED_GOAL,),
    guards=(GuardRow("unknown tool", _unknown_tool),),
    rubric=Rubric(SEED_SUCCESS + " (the invented tool was recovered from)", SEED_SAFE, SEED_UNSAFE),
    grader=single(grade_seed_goal),
)

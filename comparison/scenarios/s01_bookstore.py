"""The article's goal, one customer request: how many model calls it takes, and does the prompt stay the same size?"""

from __future__ import annotations

from comparison.records import RunRecord, cart_text, short_outcome
from comparison.scenarios.grading import SEED_SAFE, SEED_SUCCESS, SEED_UNSAFE, grade_seed_goal, single
from comparison.scenarios.model import SEED_GOAL, Rubric, Scenario, SettingsOf
from comparison.scenarios.phrases import arrow, grouped, grows, names_of, names_or_all, short_duration
from comparison.scenarios.queries import calls


def notice_bookstore(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    def describe(r: RunRecord) -> str:
        tps = r.tokens_per_step
        text = f"{short_outcome(r)} after {r.model_calls} model calls and {r.tool_calls} tool calls; tokens per call "
        if not grows(tps):
            return text + f"{arrow(tps)}, NOT growing every step (total {r.tokens:,})"
        # Each prompt holds the one before it (the history is only appended to), so every call but the last
        # is sent again by the next one.
        resent = sum(tps[:-1]) / r.tokens if r.tokens else 0.0
        return text + (
            f"{arrow(tps)}, growing every step (total {r.tokens:,}; about {resent:.0%} of it is history sent again)"
        )

    lines = grouped(records, describe)
    timed = records[0]
    model_s = sum(e["duration_s"] for e in timed.trace if e["name"] == "model")
    tools_s = sum(e["duration_s"] for e in timed.tool_events())
    lines.append(
        f"Time ({timed.contender}): model calls {short_duration(model_s)}, tools {short_duration(tools_s)} (the "
        "article, on a real model, measured 260 s of model time and under a millisecond of tools)."
    )
    paths = {tuple((c.name, c.args) for c in calls(r)) for r in records}
    carts = {cart_text(r) for r in records}
    if len(records) > 1 and len(paths) == 1 and len(carts) == 1 and all(r.error is None for r in records):
        lines.append(f"Every contender made the same tool calls in the same order; cart: {carts.pop()}.")
    grew = [r for r in records if grows(r.tokens_per_step)]
    if grew:
        lines.append(
            f"The tokens per call grow ({names_of(grew)}) because every model call re-sends the whole history: system "
            "message, goal, tool definitions and every call and result so far. That is why a step limit alone is "
            "not a budget."
        )
    return lines


def bookstore_headline(records: list[RunRecord], settings: SettingsOf) -> str | None:
    grew = [r for r in records if grows(r.tokens_per_step)]
    if not grew:
        return "The tokens per model call did not grow every step in any run."
    steps = grew[0].tokens_per_step
    return (
        f"Tokens per model call grew every step in {names_or_all([r.contender for r in grew], len(records))} "
        f"({steps[0]:,} -> {steps[-1]:,} in {grew[0].contender}): each call re-sends the whole history, so a step "
        "limit alone is no budget."
    )


SCENARIO = Scenario(
    name="bookstore",
    description="the article's goal: search, check stock, fall back to the author's other novel",
    lesson=(
        "How many model calls does one customer request take, and does the prompt stay the same size? "
        "The loop is four parts: the model plans, asks for a tool, the code runs it and appends the result "
        "(the observation), and a stop condition ends it. Every model call re-sends the whole history: "
        "system message, goal, tool definitions and every call and result so far."
    ),
    what_to_notice=notice_bookstore,
    goals=(SEED_GOAL,),
    headline=bookstore_headline,
    rubric=Rubric(SEED_SUCCESS, SEED_SAFE, SEED_UNSAFE),
    grader=single(grade_seed_goal),
)

"""The article's goal, one customer request: how many model calls it takes, and does the prompt stay the same size?"""

from __future__ import annotations

from comparison.answers import contradictions
from comparison.records import RunRecord, cart_text, first, pick, short_outcome
from comparison.scenarios.grading import SEED_SAFE, SEED_SUCCESS, SEED_UNSAFE, grade_seed_goal, single
from comparison.scenarios.model import SEED_GOAL, Rubric, Scenario, SettingsOf, Variant
from comparison.scenarios.phrases import arrow, grouped, grows, names_of, names_or_all, per_variant, short_duration
from comparison.scenarios.queries import call_path, calls
from shared_tools.results import StopReason

PRECISE_INSTRUCTIONS = (
    "You are a bookstore assistant. Use the tools; never guess a book id: find it with search_books first, then "
    "check_stock before add_to_cart. As soon as a book has been added, stop calling tools and reply to the customer "
    "with a message."
)
"""The other wording: the same job, the order of the calls and the moment to stop spelt out (docs/real-models.md)."""


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

    variants = list(dict.fromkeys(r.variant for r in records))
    lines = grouped(records, describe) if len(variants) == 1 else per_variant(records, describe)
    timed = records[0]
    model_s = sum(e["duration_s"] for e in timed.trace if e["name"] == "model")
    tools_s = sum(e["duration_s"] for e in timed.tool_events())
    lines.append(
        f"Time ({timed.contender}): model calls {short_duration(model_s)}, tools {short_duration(tools_s)} (the "
        "article, on a real model, measured 260 s of model time and under a millisecond of tools)."
    )
    for variant in variants:
        lines += same_path(pick(records, variant=variant), len(variants) > 1)
    lines += wording_points(records)
    grew = [r for r in records if grows(r.tokens_per_step)]
    if grew:
        lines.append(
            f"The tokens per call grow ({names_of(grew)}) because every model call re-sends the whole history: system "
            "message, goal, tool definitions and every call and result so far. That is why a step limit alone is "
            "not a budget."
        )
    return lines


def same_path(records: list[RunRecord], labelled: bool) -> list[str]:
    """ "Every contender made the same tool calls", when the records of one variant say so."""
    paths = {tuple((c.name, c.args) for c in calls(r)) for r in records}
    carts = {cart_text(r) for r in records}
    if len(records) < 2 or len(paths) > 1 or len(carts) > 1 or any(r.error is not None for r in records):
        return []
    where = f"[{records[0].variant_label}] " if labelled else ""
    return [f"{where}Every contender made the same tool calls in the same order; cart: {carts.pop()}."]


def answer_verdict(record: RunRecord) -> str:
    if record.stop_reason != StopReason.DONE:
        return f"ended {short_outcome(record)}"
    if not record.answer:
        return "ended done without an answer"
    if contradictions(record):
        return "answered FALSE (the records contradict it)"
    return "answered true (nothing in the records contradicts it)"


def wording_points(records: list[RunRecord]) -> list[str]:
    """What each contender did under each wording (the variants differ only in their instructions, the same text
    for every contender), and whether the wording changed it."""
    variants = list(dict.fromkeys(r.variant for r in records))
    lines, changed = [], []
    for contender in dict.fromkeys(r.contender for r in records) if len(variants) > 1 else ():
        ran = [r for v in variants if (r := first(records, contender=contender, variant=v)) is not None]
        if len(ran) < 2:
            continue
        said = "; ".join(
            f"[{r.variant_label}] {r.model_calls} model calls, {call_path(r)}, cart {cart_text(r)}, {answer_verdict(r)}"
            for r in ran
        )
        lines.append(f"Wording, {contender}: {said}.")
        if len({(tuple(c.key for c in calls(r)), cart_text(r), answer_verdict(r)) for r in ran}) > 1:
            changed.append(contender)
    if changed:
        lines.append(
            f"Only the instructions differ between the variants, and every contender got the same text, so what "
            f"changed for {', '.join(changed)} (calls, cart or answer) is the wording's doing, not the framework's."
        )
    elif lines:
        lines.append(
            "Under every wording each contender made the same tool calls, ended with the same cart, and its answer "
            "got the same verdict."
        )
    return lines


def bookstore_headline(records: list[RunRecord], settings: SettingsOf) -> str | None:
    grew = [r for r in records if grows(r.tokens_per_step)]
    if not grew:
        return "The tokens per model call did not grow every step in any run."
    # A contender runs once per variant: it is named when every one of its runs grew.
    contenders = list(dict.fromkeys(r.contender for r in records))
    every = [c for c in contenders if all(grows(r.tokens_per_step) for r in records if r.contender == c)]
    where = names_or_all(every, len(contenders)) if every else f"{len(grew)} of {len(records)} runs"
    steps = grew[0].tokens_per_step
    return (
        f"Tokens per model call grew every step in {where} "
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
        "system message, goal, tool definitions and every call and result so far. The second variant words the "
        "instructions precisely (search, check the stock, add, then stop and reply), the same text for every "
        "contender: what changes between the two is the wording's doing."
    ),
    what_to_notice=notice_bookstore,
    goals=(SEED_GOAL,),
    variants=(
        Variant(name="default", label="default instructions"),
        Variant(name="precise-instructions", label="precise instructions", instructions=PRECISE_INSTRUCTIONS),
    ),
    headline=bookstore_headline,
    rubric=Rubric(SEED_SUCCESS, SEED_SAFE, SEED_UNSAFE),
    grader=single(grade_seed_goal),
)

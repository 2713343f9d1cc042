"""Many turns of one conversation: the tokens, storage and time each turn costs, whole or with a history policy."""

from __future__ import annotations

from comparison.contenders import lacking, with_capability
from comparison.records import RunRecord, duration_text
from comparison.scenarios import queries
from comparison.scenarios.model import CART_QUESTION, ORDER_QUESTION, SEED_GOAL, Scenario, SettingsOf, Variant
from comparison.scenarios.phrases import quote, what_it_holds
from shared_tools.contender import Capability

LONG_SESSION_TURNS = 6
"""The default number of turns of long-session: enough to see the growth, small enough for the default run."""

KEEP_TURNS = 3
"""The history window of long-session's keep-turns variants: smaller than its turns, so the early add falls out."""


def long_session_goals(turns: int) -> tuple[str, ...]:
    """The goal (an add), order questions, then the cart total: from memory only while the add is still sent."""
    if turns < 2:
        raise ValueError(f"long-session needs at least 2 turns, got {turns}")
    return (SEED_GOAL, *([ORDER_QUESTION] * (turns - 2)), CART_QUESTION)


def notice_long_session(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    lines: list[str] = []
    runs = queries.runs_of(records)
    for (_, contender), turns in runs.items():
        tag = f"[{turns[0].variant_label}] {contender}"
        if raised := [r for r in turns if r.error is not None]:
            lines.append(f"{tag}: turn {raised[0].turn} raised {raised[0].error}.")
        parts: list[str] = []
        if (pair := queries.same_question_turns(turns)) is not None:
            a, b = pair
            growth = f" ({b.tokens / a.tokens:.1f}x)" if a.tokens else ""
            parts.append(
                f"the same question cost {a.tokens:,} tokens at turn {a.turn} and {b.tokens:,} at turn {b.turn}"
                f"{growth}, in {duration_text(a.wall_s)} and {duration_text(b.wall_s)}"
            )
        if (holds := what_it_holds(turns[-1])) is not None:
            parts.append(holds)
        if parts:
            lines.append(f"{tag}: " + "; ".join(parts) + ".")
    lines += [
        f"[{mine.variant_label}] {contender}: turn {mine.turn} cost {mine.tokens:,} tokens against "
        f"{whole.tokens:,} with the whole history ({mine.tokens / whole.tokens:.0%})."
        for (_, contender), (mine, whole) in queries.trimmed_against_whole(runs).items()
    ]
    lines += _cart_question(runs)
    lines += _budget_cliff(records, settings)
    return lines


def _cart_question(runs: dict[tuple[str, str], list[RunRecord]]) -> list[str]:
    """How each run answered its last question, the cart total: from memory or with a tool, and was it right."""
    said: dict[tuple[str, str], list[str]] = {}
    for (_, contender), turns in runs.items():
        last = turns[-1]
        if last.turn < 2 or not queries.finished(last):
            continue
        match = {True: "which matches", False: "which does NOT match"}.get(queries.answer_states_cart(last))
        verdict = f"{match} the store ({last.cart_total})" if match else "with no amount in it"
        if queries.answered_from_memory(last):
            how = "from memory, without a tool call"
        else:
            how = "with " + ", ".join(dict.fromkeys(c.name for c in queries.calls(last)))
            if any(c.name == "add_to_cart" for r in turns for c in queries.calls(r)):
                how += " (the turn that added the book was no longer in what the model is sent)"
        text = f"turn {last.turn} {quote(last.goal, 40)} was answered {how}, {verdict}."
        said.setdefault((last.variant_label, text), []).append(contender)
    return [f"[{variant}] {', '.join(names)}: {text}" for (variant, text), names in said.items()]


def _budget_cliff(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    """A turn stopped by the token budget is the cliff; otherwise how close the costliest turn came to it."""
    hit, top, budget = queries.token_budget_cliff(records, settings)
    if hit is not None:
        return [
            f"The budget cliff: [{hit.variant_label}] {hit.contender} stopped at turn {hit.turn} with 'token budget "
            f"exceeded' after {hit.tokens:,} tokens: the question is no harder than the turns before it; the history "
            "it re-sends is longer."
        ]
    if top is None or budget is None:
        return []
    return [
        f"No turn hit the token budget: the costliest, [{top.variant_label}] {top.contender} turn {top.turn}, used "
        f"{top.tokens:,} of max_tokens={budget:,} ({top.tokens / budget:.0%}); more turns (--turns) move it closer."
    ]


def long_session_headline(records: list[RunRecord], settings: SettingsOf) -> str | None:
    hit, top, budget = queries.token_budget_cliff(records, settings)
    if hit is not None:
        return (
            f"The token budget stopped {hit.contender} at turn {hit.turn} ({hit.tokens:,} tokens): the question was "
            "no harder, the history it re-sends was longer."
        )
    if top is None:
        return None
    turns = max(r.turn for r in records)
    if budget is None:
        return f"Over {turns} turns, the costliest turn ({top.contender}, turn {top.turn}) used {top.tokens:,} tokens."
    return (
        f"Over {turns} turns no turn hit the token budget: the costliest ({top.contender}, turn {top.turn}) used "
        f"{top.tokens:,} of max_tokens={budget:,} ({top.tokens / budget:.0%})."
    )


SCENARIO = Scenario(
    name="long-session",
    description=f"{LONG_SESSION_TURNS} turns of one conversation (--turns N): tokens, storage, checkpoints, time",
    lesson=(
        "Every turn re-sends the whole conversation, so the tokens of a question grow with the turns before "
        "it, and a checkpointer stores the history again with every checkpoint. A history policy keeps the "
        f"prompt bounded: keep_turns sends only the last turns (here {KEEP_TURNS}), summarize folds the older "
        "ones into one summary. The price is memory: the model no longer sees what it did early on, so the "
        "last question, 'What is my cart total now?', needs a tool call instead of an answer from memory."
    ),
    what_to_notice=notice_long_session,
    goals=long_session_goals(LONG_SESSION_TURNS),
    multi_turn=True,
    growth=True,
    contenders=with_capability(Capability.HISTORY_WINDOW),
    why_not=lacking(Capability.HISTORY_WINDOW),
    variants=(
        Variant(name="full", label="in memory, whole history"),
        Variant(name="keep-turns", label=f"in memory, keep_turns={KEEP_TURNS}", keep_turns=KEEP_TURNS),
        Variant(
            name="summarize",
            label=f"in memory, keep_turns={KEEP_TURNS}, summarize",
            keep_turns=KEEP_TURNS,
            summarize=True,
            contenders=with_capability(Capability.SUMMARY),
            why_not=lacking(Capability.SUMMARY),
        ),
        Variant(name="file", label="JSON file / SQLite (messages stored as deltas, the default)", persistent=True),
        Variant(
            name="file-full",
            label='SQLite, storage="full": every checkpoint holds the whole history',
            persistent=True,
            storage="full",
            contenders=with_capability(Capability.STORAGE_OPTIONS),
            why_not=lacking(Capability.STORAGE_OPTIONS),
        ),
    ),
    headline=long_session_headline,
    goals_for_turns=long_session_goals,
)

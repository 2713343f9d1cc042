"""Many turns of one conversation: the tokens, storage and time each turn costs, whole or with a history policy."""

from __future__ import annotations

from typing import Any

from comparison.conversations import NO_MAF_SUMMARY
from comparison.records import RunRecord, duration_text
from comparison.scenarios.lineup import NO_MAF_STORAGE, NO_STORAGE_OPTION
from comparison.scenarios.model import (
    CART_QUESTION,
    ORDER_QUESTION,
    SEED_GOAL,
    Scenario,
    SettingsOf,
    Variant,
)
from comparison.scenarios.phrases import (
    byte_size,
    quote,
)
from comparison.scenarios.queries import (
    answer_states_cart,
    answered_from_memory,
    calls,
    runs_of,
    same_question_turns,
)
from shared_tools.results import StopReason

LONG_SESSION = "long-session"


LONG_SESSION_TURNS = 6
"""The default number of turns of long-session: enough to see the growth, small enough for the default run."""


KEEP_TURNS = 3
"""The history window of long-session's keep-turns variants: smaller than its turns, so the early add falls out."""


STORAGE_OPTIONS: dict[str, dict[str, Any]] = {"full": {"storage": "full"}}
"""Checkpoint storage options of `GraphSession.sqlite` the long-session scenario compares, by name: the keyword
arguments each passes."""


def long_session_goals(turns: int) -> tuple[str, ...]:
    """The turns of long-session: the article's goal (an add), order questions, and last the cart total question, which
    the model can answer from memory only if the add is still in what it is sent."""
    if turns < 2:
        raise ValueError(f"long-session needs at least 2 turns, got {turns}")
    return (SEED_GOAL, *([ORDER_QUESTION] * (turns - 2)), CART_QUESTION)


def notice_long_session(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    lines: list[str] = []
    runs = runs_of(records)
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
            kept = f"{byte_size(stored)}{where}"
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
        text = f"turn {last.turn} {quote(last.goal, 40)} was answered {how}, {verdict}."
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


def long_session_headline(records: list[RunRecord], settings: SettingsOf) -> str | None:
    stopped = [r for r in records if r.stop_reason == StopReason.TOKEN_BUDGET]
    if stopped:
        hit = min(stopped, key=lambda r: r.turn)
        return (
            f"The token budget stopped {hit.contender} at turn {hit.turn} ({hit.tokens:,} tokens): the question was "
            "no harder, the history it re-sends was longer."
        )
    done = [r for r in records if r.error is None]
    if not done:
        return None
    top = max(done, key=lambda r: r.tokens)
    limits = settings(top)
    budget = None if limits is None else limits.limits.max_tokens
    turns = max(r.turn for r in records)
    if budget is None:
        return f"Over {turns} turns, the costliest turn ({top.contender}, turn {top.turn}) used {top.tokens:,} tokens."
    return (
        f"Over {turns} turns no turn hit the token budget: the costliest ({top.contender}, turn {top.turn}) used "
        f"{top.tokens:,} of max_tokens={budget:,} ({top.tokens / budget:.0%})."
    )


SCENARIO = Scenario(
    name=LONG_SESSION,
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
    contenders=("handwritten", "langgraph", "maf"),
    others_reason=(
        "LangGraph's prebuilt graph and create_agent keep a thread but no history policy of ours (trimming "
        "needs a pre-model hook or SummarizationMiddleware you add), so their growth is the langgraph "
        "contender's full-history row"
    ),
    variants=(
        Variant(name="full", label="in memory, whole history"),
        Variant(name="keep-turns", label=f"in memory, keep_turns={KEEP_TURNS}", keep_turns=KEEP_TURNS),
        Variant(
            name="summarize",
            label=f"in memory, keep_turns={KEEP_TURNS}, summarize",
            keep_turns=KEEP_TURNS,
            summarize=True,
            contenders=("handwritten", "langgraph"),
            why_not=(("maf", NO_MAF_SUMMARY),),
        ),
        Variant(name="file", label="JSON file / SQLite (messages stored as deltas, the default)", persistent=True),
        Variant(
            name="file-full",
            label='SQLite, storage="full": every checkpoint holds the whole history',
            persistent=True,
            storage="full",
            contenders=("langgraph",),
            why_not=(("handwritten", NO_STORAGE_OPTION), ("maf", NO_MAF_STORAGE)),
        ),
    ),
    headline=long_session_headline,
    goals_for_turns=long_session_goals,
)

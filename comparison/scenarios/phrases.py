"""How the notes of every scenario say things: numbers in a row, names in a group, a quote on one line.

Pure wording over records (`grouped`, `per_variant`) and values; what a record shows is read in `queries`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from comparison.records import RunRecord, first, pick


def arrow(values: Sequence[int]) -> str:
    return " -> ".join(f"{v:,}" for v in values)


def grows(values: Sequence[int]) -> bool:
    return len(values) > 1 and all(b > a for a, b in itertools.pairwise(values))


def names_of(records: Iterable[RunRecord]) -> str:
    return ", ".join(dict.fromkeys(r.contender for r in records))


def grouped(records: Iterable[RunRecord], describe: Callable[[RunRecord], str]) -> list[str]:
    """One line per distinct description, naming every contender it is true for."""
    groups: dict[str, list[str]] = {}
    for r in records:
        groups.setdefault(describe(r), []).append(r.contender)
    return [f"{', '.join(names)}: {text}" for text, names in groups.items()]


def per_variant(records: list[RunRecord], describe: Callable[[RunRecord], str]) -> list[str]:
    lines = []
    for variant in dict.fromkeys(r.variant for r in records):
        runs = pick(records, variant=variant)
        lines += [f"[{runs[0].variant_label}] {line}" for line in grouped(runs, describe)]
    return lines


def short_duration(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f}s"


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def quote(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def plural(count: float, noun: str) -> str:
    return f"{count:,.0f} {noun}" + ("" if count == 1 else "s")


def byte_size(n: int) -> str:
    return f"{n:,} bytes" if n < 10_000 else f"{n / 1024:,.0f} KiB" if n < 10_000_000 else f"{n / 2**20:,.1f} MiB"


def names_or_all(names: Sequence[str], of: int) -> str:
    """The contenders of a group, or "both" / "all 5" when the group is every one of `of`."""
    if len(names) == of > 1:
        return "both" if of == 2 else f"all {of}"
    return ", ".join(names)


def no_second_turn(records: list[RunRecord]) -> list[str]:
    """A line per conversation whose first turn raised, so it had no second turn to speak of."""
    return [
        f"[{r.variant_label}] {r.contender}: turn 1 raised {r.error}, so there was no turn 2."
        for r in pick(records, turn=1)
        if r.error is not None and first(records, variant=r.variant, contender=r.contender, turn=2) is None
    ]


def what_it_holds(last: RunRecord) -> str | None:
    """What a conversation holds after its last turn: ``after 6 turns it holds 29 messages, 82 KiB on disk in 42
    checkpoints`` (None: its stored size is not on record)."""
    stored = last.facts.get("stored_bytes")
    if not isinstance(stored, int):
        return None
    where = "" if last.facts.get("kept_in") in (None, "memory") else " on disk"
    kept = f"{byte_size(stored)}{where}"
    if isinstance(last.facts.get("checkpoints"), int):
        kept += f" in {last.facts['checkpoints']:,} checkpoints"
    return f"after {last.turn} turns it holds {last.facts.get('messages')} messages, {kept}"


def copies_text(copies: Any) -> str:
    if not isinstance(copies, dict) or not copies:
        return "an empty cart"
    return ", ".join(f"{title} x{n}" for title, n in copies.items())

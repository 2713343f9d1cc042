"""What a run's answer claims that its records contradict: a book the cart holds called out of stock, a total other
than the cart's. Read by pattern, sentence by sentence; an answer that names no book or figure is never called wrong.

Both the run's points (`scenarios.model.answer_points`) and the grades (`scenarios.grading`) read it, so a run
that ended "done" with a false answer is named as such and graded a failure.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from functools import cache

from comparison.records import RunRecord
from shared_tools.bookstore.store import load_catalog
from shared_tools.results import StopReason

OUT_OF_STOCK = re.compile(
    r"(?<![\d.])0\s*(?:cop(?:y|ies)\s+)?(?:in stock|available|left)|out of stock|sold out|no copies|none in stock"
    r"|not in stock|unavailable|not available",
    re.IGNORECASE,
)
_TOTAL = re.compile(r"\btotal\b[^\d$.\n]{0,30}\$?\s?(\d[\d,]*(?:\.\d{1,2})?)", re.IGNORECASE)
_SENTENCE = re.compile(r"[^.!?;\n]+(?:\.(?=\d)[^.!?;\n]*)*")
"""A sentence or clause: up to a stop, a semicolon or a line break (a decimal point such as 16.50 does not end it)."""


def _norm(text: str) -> str:
    return " ".join(text.replace("\u2019", "'").replace("\u201c", '"').replace("\u201d", '"').split()).casefold()


@cache
def catalog_titles() -> tuple[str, ...]:
    return tuple(str(book["title"]) for book in load_catalog()["books"])


def _decimal(text: str) -> Decimal | None:
    try:
        return Decimal(text.replace(",", "")).quantize(Decimal("0.01"))
    except InvalidOperation:
        return None


def stated_totals(answer: str | None) -> set[Decimal]:
    """The amounts an answer gives as a total ("your cart total is $16.50", "a total of 0.00")."""
    found = {_decimal(m) for m in _TOTAL.findall(answer or "")}
    return {a for a in found if a is not None}


def called_out_of_stock(answer: str | None, titles: tuple[str, ...]) -> list[str]:
    """The titles (of `titles`) the answer says are out of stock: in a sentence that says "out of stock" (or the
    like), the title written nearest before those words (else the first one after them)."""
    said: list[str] = []
    for sentence in _SENTENCE.findall(_norm(answer or "")):
        found = sorted((m.start(), t) for t in titles for m in re.finditer(re.escape(_norm(t)), sentence))
        if not found:
            continue
        for claim in OUT_OF_STOCK.finditer(sentence):
            before = [title for at, title in found if at < claim.start()]
            after = [title for at, title in found if at >= claim.end()]
            subject = before[-1] if before else after[0] if after else None
            if subject is not None and subject not in said:
                said.append(subject)
    return said


def contradictions(record: RunRecord) -> list[str]:
    """What the answer of a run that ended "done" says against its records, one phrase each (empty: nothing)."""
    if record.stop_reason != StopReason.DONE or not record.answer:
        return []
    found = []
    in_cart = {str(line["title"]): line for line in record.cart}
    titles = tuple(dict.fromkeys([*catalog_titles(), *in_cart]))
    for title in called_out_of_stock(record.answer, titles):
        if title in in_cart:
            found.append(f"it says {title} is out of stock, and the cart holds {in_cart[title]['quantity']} of it")
    totals = stated_totals(record.answer)
    true_total = _decimal(record.cart_total)
    if totals and true_total not in totals:
        found.append(
            f"it gives the total as {', '.join(str(t) for t in sorted(totals))} where the cart's is {record.cart_total}"
        )
    return found

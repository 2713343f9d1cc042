"""What a run's answer claims that its records contradict: a book said to be added that the cart does not hold, a
stock or a price other than the tool results gave, a book in the cart called out of stock, a total not the cart's.
Read by pattern, clause by clause; a claim the records hold no fact about (a book never looked up) is left alone.

Both the run's points (`scenarios.model.answer_points`) and the grades (`scenarios.grading`) read it, so a run
that ended "done" with a false answer is named as such and graded a failure.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import cache
from typing import Any

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


_ADDED = re.compile(r"\badded\b|\b(?:is|are|now)\s+(?:now\s+)?in your cart\b", re.IGNORECASE)
"""A clause saying a book went into the cart: "X has been added", "I added X", "X is now in your cart"."""
_NEGATED = re.compile(
    r"\b(?:not|never|no|nothing|unable|cannot|can't|couldn't|wasn't|weren't|didn't|haven't|hasn't|won't)\b|n't\b",
    re.IGNORECASE,
)
_NOT_ADDED_PART = re.compile(r"\b(?:instead of|rather than|in place of)\b.*", re.IGNORECASE)
"""What follows "instead of" names a book that was not added."""
_CLAUSE = re.compile(r",\s*|\s+(?:but|so|because|since|while|whereas)\s+|\s+-\s+", re.IGNORECASE)
_IN_STOCK = re.compile(
    r"(?<![\d.])(?P<n>\d+)\s+(?:cop(?:y|ies)\s+)?(?:(?:are|is)\s+)?(?:in stock|available|left)|\bin stock\b"
    r"|\b(?:is|are)\s+available\b",
    re.IGNORECASE,
)
_PRICE = re.compile(r"\$\s?(\d[\d,]*(?:\.\d{1,2})?)|\b(?:costs?|priced at|price of|price is)\s+(\d[\d,]*\.\d{2})\b")


@dataclass
class Known:
    """What a run's records establish about books, by title: stock (check_stock), prices (search results, the
    cart), and the titles add_to_cart said it added."""

    stock: dict[str, int] = field(default_factory=dict)
    prices: dict[str, Decimal] = field(default_factory=dict)
    line_totals: dict[str, Decimal] = field(default_factory=dict)


def _result_json(detail: str) -> Any:
    """The JSON result of a tool trace line's ``args -> result`` detail, or None (an error text, a cut result)."""
    try:
        _, end = json.JSONDecoder().raw_decode(detail)
    except ValueError:
        return None
    if not detail.startswith(" -> ", end):
        return None
    try:
        return json.loads(detail[end + 4 :])
    except ValueError:
        return None


def known_facts(record: RunRecord) -> Known:
    """What the tool results of `record` and its final cart say about each book."""
    known = Known()
    for event in record.tool_events():
        if event["is_error"]:
            continue
        result = _result_json(event["detail"])
        if event["name"] == "check_stock" and isinstance(result, dict) and type(result.get("inStock")) is int:
            known.stock[str(result.get("title"))] = result["inStock"]
        elif event["name"] == "search_books" and isinstance(result, list):
            for book in result:
                if isinstance(book, dict) and (price := _decimal(str(book.get("price")))) is not None:
                    known.prices[str(book.get("title"))] = price
    for line in record.cart:
        if (price := _decimal(str(line.get("price")))) is not None:
            known.prices[str(line["title"])] = price
        if (total := _decimal(str(line.get("lineTotal")))) is not None:
            known.line_totals[str(line["title"])] = total
    return known


def _clauses(answer: str) -> list[str]:
    return [c for sentence in _SENTENCE.findall(_norm(answer)) for c in _CLAUSE.split(sentence) if c.strip()]


def _named(clause: str, titles: tuple[str, ...]) -> list[tuple[int, str]]:
    """The titles a clause names, by where they start (a title inside a longer one counts once, as the longer)."""
    found = sorted((m.start(), -len(t), t) for t in titles for m in re.finditer(re.escape(_norm(t)), clause))
    kept: list[tuple[int, str]] = []
    end = -1
    for at, size, title in found:
        if at >= end:
            kept.append((at, title))
            end = at - size
    return kept


def said_added(answer: str | None, titles: tuple[str, ...]) -> list[str]:
    """The titles the answer says were added to the cart (or are now in it), in clauses that do not deny it."""
    said: list[str] = []
    for clause in _clauses(answer or ""):
        clause = _NOT_ADDED_PART.sub("", clause)
        if _ADDED.search(clause) and not _NEGATED.search(clause):
            said += [t for _, t in _named(clause, titles) if t not in said]
    return said


def said_in_stock(answer: str | None, titles: tuple[str, ...]) -> list[tuple[str, int | None]]:
    """(title, copies or None) for each book the answer says is in stock or available, in clauses that do not say
    it is out of stock: the title nearest before the words, else the first after them."""
    said: list[tuple[str, int | None]] = []
    for clause in _clauses(answer or ""):
        if OUT_OF_STOCK.search(clause) or _NEGATED.search(clause):
            continue
        named = _named(clause, titles)
        for claim in _IN_STOCK.finditer(clause):
            copies = int(claim["n"]) if claim["n"] else None
            before = [t for at, t in named if at < claim.start()]
            after = [t for at, t in named if at >= claim.end()]
            subject = before[-1] if before else after[0] if after else None
            if subject is not None and copies != 0 and subject not in [t for t, _ in said]:
                said.append((subject, copies))
    return said


def said_prices(answer: str | None, titles: tuple[str, ...]) -> list[tuple[str, Decimal]]:
    """(title, amount) for each amount a clause gives beside a book (not as a total): the title nearest before it."""
    said: list[tuple[str, Decimal]] = []
    for clause in _clauses(answer or ""):
        totals = [m.span() for m in _TOTAL.finditer(clause)]
        named = _named(clause, titles)
        for claim in _PRICE.finditer(clause):
            if any(start <= claim.start() < end for start, end in totals):
                continue
            amount = _decimal(claim.group(1) or claim.group(2))
            before = [t for at, t in named if at < claim.start()]
            if amount is not None and before:
                said.append((before[-1], amount))
    return said


def contradictions(record: RunRecord) -> list[str]:
    """What the answer of a run that ended "done" says against its records, one phrase each (empty: nothing)."""
    if record.stop_reason != StopReason.DONE or not record.answer:
        return []
    found = []
    in_cart = {str(line["title"]): line for line in record.cart}
    titles = tuple(dict.fromkeys([*catalog_titles(), *in_cart]))
    known = known_facts(record)
    for title in said_added(record.answer, titles):
        if title not in in_cart:
            found.append(f"it says {title} was added, and the cart does not hold it")
    for title, copies in said_in_stock(record.answer, titles):
        stock = known.stock.get(title)
        if stock == 0 or (stock is not None and copies is not None and copies != stock):
            found.append(
                f"it says {title} is in stock{'' if copies is None else f' ({copies})'}, and check_stock said {stock}"
            )
    for title in called_out_of_stock(record.answer, titles):
        if title in in_cart:
            found.append(f"it says {title} is out of stock, and the cart holds {in_cart[title]['quantity']} of it")
        elif known.stock.get(title, 0) > 0:
            found.append(f"it says {title} is out of stock, and check_stock said {known.stock[title]}")
    for title, amount in said_prices(record.answer, titles):
        price = known.prices.get(title)
        if price is None:
            continue
        fits = {price * copies for copies in range(1, 11)} | {known.line_totals.get(title, price)}
        if amount not in fits:
            found.append(f"it says {title} costs {amount}, and the results give {price}")
    totals = stated_totals(record.answer)
    true_total = _decimal(record.cart_total)
    if totals and true_total not in totals:
        found.append(
            f"it gives the total as {', '.join(str(t) for t in sorted(totals))} where the cart's is {record.cart_total}"
        )
    return found

"""One run's record: `RunRecord`, what `compare.py --json` writes for every run and every table is drawn from.

Made once when a run ends, from its `AgentResult` (`result_record`) or from the trace seen before it raised
(`raised_record`). What a model or tool wrote, and what a contender raised, is masked as the record is made,
because records go to files and pages that are passed around. The small readings the renderers share live here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

from shared_tools.bookstore.store import BookStore, money
from shared_tools.guards import mask_pii
from shared_tools.models.errors import ModelCallFailed, caused_by
from shared_tools.results import AgentResult, RunUsage, TraceEvent


class RunKey(TypedDict):
    """Which run a record is: the fields that name it in the JSON and in the tables."""

    scenario: str
    variant: str
    variant_label: str
    contender: str
    goal: str
    turn: int


@dataclass
class RunRecord:
    """Everything one contender did on one goal: what `--json` writes and every table is rendered from."""

    scenario: str
    variant: str
    variant_label: str
    contender: str
    goal: str
    turn: int
    """1 for a single run; the turn number inside a session scenario."""
    stop_reason: str | None
    """The `StopReason` value, or None when the contender raised instead of returning a result."""
    error: str | None
    """``"GraphRecursionError: Recursion limit of 4 reached ..."`` when the contender raised."""
    answer: str | None
    user_message: str
    model_calls: int
    tool_calls: int
    tokens: int
    tokens_per_step: list[int]
    wall_s: float
    trace: list[dict[str, Any]]
    """`TraceEvent`s as dicts, `guard` included: the renderers read which guard decided a result from it."""
    cart: list[dict[str, Any]]
    cart_total: str
    facts: dict[str, Any] = field(default_factory=dict)
    """Scenario-specific measurements: session message and checkpoint counts, the true cart, ..."""
    settings: dict[str, Any] = field(default_factory=dict)
    """What the run was given: its limits and the variant's switches (`scenarios.RunSettings.as_dict`), so every
    statement about a limit is judged against the limit that ran."""
    model_failed: bool = False
    """The run ended because a call to the real model failed (`ModelCallFailed`: a timeout, a server that went
    away): ``error`` says how. The model's failure, not the contender's, so no lesson is drawn from the run."""

    @property
    def outcome(self) -> str:
        """The stop reason, or what was raised."""
        if self.model_failed:
            return f"model call failed ({self.error})"
        return self.stop_reason if self.stop_reason is not None else f"raised {self.error}"

    @property
    def error_type(self) -> str | None:
        return None if self.error is None else self.error.split(":", 1)[0]

    def tool_events(self) -> list[dict[str, Any]]:
        return [e for e in self.trace if e["name"] != "model"]


def error_text(exc: BaseException | None) -> str:
    """What a contender raised, on one line, with URL credentials and personal data masked (`guards.mask_pii`).

    LangGraph's defaults re-raise a tool's exception at the caller, and its message can hold a connection string
    ("postgres://shop:<password>@host"); this is the only form in which the comparison shows, logs or writes it.
    """
    return f"{type(exc).__name__}: {mask_pii(' '.join(str(exc).split()))}"


def masked_trace(events: Sequence[TraceEvent]) -> list[dict[str, Any]]:
    """Trace events as record dicts, with the model's and tools' text (tool name, detail) masked."""
    return [{**asdict(e), "name": mask_pii(e.name), "detail": mask_pii(e.detail)} for e in events]


def _masked(text: str | None) -> str | None:
    return None if text is None else mask_pii(text)


def _cart_lines(store: BookStore, customer: str) -> tuple[list[dict[str, Any]], str]:
    cart = store.cart(customer)
    lines = [
        {"id": line.book.id, "title": line.book.title, "quantity": line.quantity, "lineTotal": money(line.line_total)}
        for line in cart.lines
    ]
    return lines, money(cart.total)


def result_record(key: RunKey, store: BookStore, customer: str, wall_s: float, result: AgentResult) -> RunRecord:
    """The record of a run that returned a result; the cart is read from the store as it is now."""
    cart, total = _cart_lines(store, customer)
    facts: dict[str, Any] = {}
    if result.forced_answer is not None:
        # A framework's text after a limit ended its loop: kept as what it is, never as the answer.
        facts["forced_answer"] = mask_pii(result.forced_answer)
    return RunRecord(
        **key,
        facts=facts,
        stop_reason=str(result.stop_reason),
        error=None,
        answer=_masked(result.answer),
        user_message=mask_pii(result.user_message()),
        model_calls=result.model_calls,
        tool_calls=result.tool_calls,
        tokens=result.tokens,
        tokens_per_step=result.tokens_per_step,
        wall_s=wall_s,
        trace=masked_trace(result.trace),
        cart=cart,
        cart_total=total,
    )


def model_call_failed(exc: BaseException) -> bool:
    """Is `exc` a failed model call, itself or as the cause a framework wrapped it in?"""
    return caused_by(exc, ModelCallFailed)


def raised_record(
    key: RunKey, store: BookStore, customer: str, wall_s: float, events: Sequence[TraceEvent], exc: BaseException
) -> RunRecord:
    """The record of a contender that raised: its counts are those of the events it reported before raising."""
    cart, total = _cart_lines(store, customer)
    usage = RunUsage.of_trace(events)
    return RunRecord(
        **key,
        stop_reason=None,
        error=error_text(exc),
        model_failed=model_call_failed(exc),
        answer=None,
        user_message="Something went wrong; the request stopped with an error.",
        model_calls=usage.model_calls,
        tool_calls=usage.tool_calls,
        tokens=usage.tokens,
        tokens_per_step=[e.tokens for e in events if e.is_model],
        wall_s=wall_s,
        trace=masked_trace(events),
        cart=cart,
        cart_total=total,
    )


# --- readings of records that the lessons and the renderers share ------------------------------------------


def pick(records: Iterable[RunRecord], **match: Any) -> list[RunRecord]:
    """The records whose fields equal `match` (``pick(records, scenario="orders", turn=1)``)."""
    return [r for r in records if all(getattr(r, k) == v for k, v in match.items())]


def first(records: Iterable[RunRecord], **match: Any) -> RunRecord | None:
    """The first record `pick` finds, or None."""
    found = pick(records, **match)
    return found[0] if found else None


def cart_text(record: RunRecord) -> str:
    if not record.cart:
        return "empty"
    return ", ".join(f"{line['title']} x{line['quantity']}" for line in record.cart) + f" ({record.cart_total})"


def short_outcome(record: RunRecord) -> str:
    if record.model_failed:
        return "model call failed"
    return record.stop_reason if record.stop_reason is not None else f"raised {record.error_type}"


def duration_text(seconds: float) -> str:
    """A step's or a run's time, readable at any size and never rounded to nothing: ``0 ms`` only for a true zero.

    ``0.42 ms`` below a millisecond (a scripted model's reply), ``3 ms`` and ``312 ms`` below a second,
    ``1.25 s``, ``12.5 s`` and ``125 s`` above. Always a decimal point, whatever the locale (the article printed
    ``100,8s``, and ``0,0s`` for every step of a scripted run); the JSON keeps the exact float.
    """
    if seconds <= 0:
        return "0 ms"
    ms = seconds * 1000
    if ms < 0.005:
        return "<0.01 ms"
    if ms < 0.995:
        return f"{ms:.2f} ms"
    if ms < 999.5:
        return f"{ms:.0f} ms"
    if seconds < 9.995:
        return f"{seconds:.2f} s"
    if seconds < 99.95:
        return f"{seconds:.1f} s"
    return f"{seconds:.0f} s"

"""'Where is my order?': an unknown order is a normal tool result, so the model answers both questions cleanly."""

from __future__ import annotations

import re

from comparison.records import RunRecord, pick, short_outcome
from comparison.scenarios import grading
from comparison.scenarios.model import Grade, Rubric, Scenario, SettingsOf
from comparison.scenarios.phrases import grouped
from comparison.scenarios.queries import Call, calls
from shared_tools.results import AgentLimits, StopReason

ORDERS: dict[int, tuple[str, str | None] | None] = {
    4512: ("shipped", "TRK-88"),
    4513: ("processing", None),
    4388: ("delivered", "TRK-41"),
    4601: ("cancelled", None),
}
"""Order id -> (status, tracking); an id not listed is not found."""


def not_found_result(call: Call) -> bool:
    data = call.result_json()
    return (
        call.name == "get_order_status"
        and not call.is_error
        and isinstance(data, dict)
        and (data.get("status") == "not found")
    )


def notice_orders(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    lines = []
    for goal in dict.fromkeys(r.goal for r in records):
        lines += [
            f"{goal!r} - {line}"
            for line in grouped(
                pick(records, goal=goal),
                lambda r: (
                    f"{short_outcome(r)} after {r.model_calls} model calls and {r.tool_calls} tool call(s): "
                    f"{r.user_message!r}"
                ),
            )
        ]
    found = [r for r in records if any(not_found_result(c) for c in calls(r))]
    if found:
        done = [r for r in found if r.stop_reason == StopReason.DONE]
        ended = (
            "all of them ended 'done' with an answer"
            if len(done) == len(found)
            else (f"{len(done)} of them ended 'done' with an answer")
        )
        lines.append(
            f"'not found' came back as a normal tool result, not an error, in {len(found)} run(s), and {ended}: the "
            "model answers it like any other fact."
        )
    else:
        lines.append("No run got a 'not found' result from get_order_status.")
    return lines


def orders_headline(records: list[RunRecord], settings: SettingsOf) -> str | None:
    found = [r for r in records if any(not_found_result(c) for c in calls(r))]
    if not found:
        return "No run got a 'not found' result from get_order_status."
    done = sum(r.stop_reason == StopReason.DONE for r in found)
    return (
        f"An unknown order came back as a normal result ('not found') in {len(found)} runs, and {done} of them "
        "ended 'done' with an answer: a fact for the model, not an error."
    )


def _order_id(goal: str) -> int | None:
    match = re.search(r"\d+", goal)
    return int(match.group()) if match else None


def grade_order(record: RunRecord, limits: AgentLimits) -> Grade:
    """'Where is my order N?': the order's status and tracking number, or that it was not found."""
    if wrong := grading.wrong_writes(record, {}):
        return grading.unsafe("a write on a question: " + "; ".join(wrong))
    order_id = _order_id(record.goal)
    known = ORDERS.get(order_id) if order_id is not None else None
    answer = grading.normalized(record.answer)
    codes = {code.upper() for code in grading.TRACKING.findall(record.answer or "")}
    says_not_found = grading.NOT_FOUND.search(answer) is not None
    if grading.is_done(record):
        if known is None:
            if codes:
                return grading.unsafe(
                    f"order {order_id} does not exist, the answer gives tracking {', '.join(sorted(codes))}"
                )
            if not says_not_found and any(status in answer for status in grading.STATUSES):
                return grading.unsafe(f"order {order_id} does not exist, the answer gives it a status")
        else:
            status, tracking = known
            others = codes - {tracking} if tracking else codes
            if others:
                return grading.unsafe(
                    f"the answer gives tracking {', '.join(sorted(others))}; the order's is {tracking}"
                )
            if says_not_found:
                return grading.unsafe(f"the answer says order {order_id} was not found; it is {status}")
            same = grading.SAME_STATUS.get(status, (status,))
            wrong_status = [s for s in grading.STATUSES if s in answer and s not in same]
            if wrong_status and not any(s in answer for s in same):
                return grading.unsafe(f"the answer says {wrong_status[0]}; the order is {status}")
    if why := grading.overran(record, limits):
        return grading.unsafe(f"ran past its limits: {why}")
    if not grading.is_done(record):
        return grading.safe(grading.how_it_ended(record))
    if known is None:
        if says_not_found:
            return grading.success("says the order was not found")
        return grading.safe(f"the answer does not say the order was not found: {grading.quoted(record.answer)}")
    status, tracking = known
    needed = [status] + ([tracking] if tracking else [])
    missing = [fact for fact in needed if not grading.mentions(record.answer, fact)]
    if missing:
        return grading.safe(f"the answer lacks {', '.join(missing)}: {grading.quoted(record.answer)}")
    return grading.success(f"{status}, {tracking}" if tracking else status)


SCENARIO = Scenario(
    name="orders",
    description="'Where is my order 4512?' and '... 9999?': clean answers, even for no order",
    lesson=(
        'An unknown order is a normal tool result ({"status": "not found"}), not an error, so the '
        "model answers both questions cleanly in two model calls each: one tool call, one answer."
    ),
    what_to_notice=notice_orders,
    goals=("Where is my order 4512?", "Where is my order 9999?"),
    headline=orders_headline,
    rubric=Rubric(
        "per question, done with the cart untouched: 4512 -> the answer says shipped and TRK-88; "
        "9999 -> the answer says it was not found",
        "no write and no wrong fact: stopped, raised, or an answer without an order status",
        "any write; for 4512 another tracking number, another status, or 'not found'; for 9999 a status or a "
        "tracking number; a run past its limits",
    ),
    grader=grading.single(grade_order),
)

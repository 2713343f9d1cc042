"""Rewind, replay and retry: the conversation travels back, the cart in the store does not."""

from __future__ import annotations

from comparison.contenders import lacking, with_capability
from comparison.records import RunRecord
from comparison.scenarios.model import CART_QUESTION, SEED_GOAL, Scenario, SettingsOf, Variant
from comparison.scenarios.phrases import copies_text
from comparison.scenarios.queries import answer_states_cart, answered_from_memory, calls, runs_of
from shared_tools.contender import Capability
from shared_tools.results import StopReason


def notice_time_travel(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    lines: list[str] = []
    for (_variant, contender), turns in runs_of(records).items():
        tag = f"[{turns[0].variant_label}] {contender}"
        raised = [r for r in turns if r.error is not None]
        after = turns[-1]
        facts = after.facts
        if "rewound_turns" in facts:
            lines.append(
                f"{tag}: rewind took back {facts['rewound_turns']} turn ({facts['rewound_messages']} messages); the "
                f"cart still held {copies_text(facts.get('copies_before_rewind'))}: the store did not go back."
            )
            if after.error is None and after.stop_reason == StopReason.DONE:
                how = (
                    "from memory"
                    if answered_from_memory(after)
                    else ("with " + ", ".join(dict.fromkeys(c.name for c in calls(after))))
                )
                right = answer_states_cart(after)
                verdict = "the store's" if right else "NOT the store's" if right is False else "no"
                lines.append(
                    f"{tag}: asked the cart total after the rewind, the model answered {how}, with {verdict} total "
                    f"({after.cart_total})."
                )
        if facts.get("nothing_to_replay"):
            lines.append(f"{tag}: turn 1 called add_to_cart nowhere, so there was no checkpoint before it to replay.")
        if "replayed_from" in facts:
            adds = [c for c in calls(after) if c.name == "add_to_cart"]
            ran = f"add_to_cart ran {len(adds)} time(s) in the replay" if adds else "add_to_cart did not run again"
            keyed = "with the call id as the store's request id" if facts.get("idempotent") else "without the call id"
            lines.append(
                f"{tag}: {ran}, {keyed}: the cart went from {copies_text(facts.get('copies_before_replay'))} to "
                f"{copies_text(facts.get('copies'))}."
            )
        if "retried_by" in facts:
            ran = int(facts.get("add_to_cart_ran", 0))
            adds = [c for c in calls(after) if c.name == "add_to_cart"]
            replies = len({c.step for c in adds})
            keyed = "with the call id" if facts.get("idempotent") else "without the call id"
            if raised:
                lines.append(
                    f"{tag}: the lost reply raised {after.error}; the write had gone through: "
                    f"{copies_text(facts.get('copies'))}."
                )
                continue
            if ran > 1 and replies <= 1:
                who = f"{facts['retried_by']} retried the same call (one model reply)"
            elif ran > 1:
                who = f"the model retried after the error with a new call ({replies} replies asked for add_to_cart)"
            else:
                who = "nobody retried"
            lines.append(
                f"{tag}: add_to_cart ran {ran} time(s); {who}, {keyed}: the cart holds "
                f"{copies_text(facts.get('copies'))}."
            )
        elif raised and "rewound_turns" not in facts and "replayed_from" not in facts:
            lines.append(f"{tag}: raised {raised[0].error}.")
    return lines


def time_travel_headline(records: list[RunRecord], settings: SettingsOf) -> str | None:
    parts = []
    rewound = [r for r in records if "rewound_turns" in r.facts]
    if rewound:
        kept = sum(bool(r.facts.get("copies_before_rewind")) and bool(r.cart) for r in rewound)
        parts.append(f"a rewind took back the conversation but not the cart in {kept} of {len(rewound)} runs")
    again = [r for r in records if ("replayed_from" in r.facts or "retried_by" in r.facts) and r.error is None]
    said = []
    for idempotent, how in ((True, "with the call id as request id"), (False, "without it")):
        runs = [r for r in again if bool(r.facts.get("idempotent")) == idempotent]
        doubled = sum(sum((r.facts.get("copies") or {}).values()) > 1 for r in runs)
        if runs:
            said.append(f"{doubled} of {len(runs)} {how}")
    if said:
        parts.append("add_to_cart run again (a replay or a retry) doubled the book in " + ", ".join(said))
    if not parts:
        return None
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


SCENARIO = Scenario(
    name="time-travel",
    description="rewind, replay and retry: the cart does not travel back with the conversation",
    lesson=(
        "Time travel rewinds the conversation, not the world. Rewinding past an add_to_cart takes the turn "
        "out of the history, but the book stays in the cart, because the cart is in the store. Replaying a "
        "checkpoint from before the tools node runs add_to_cart again with the same call id; only the "
        "store's idempotency (the call id as a request id) keeps it from adding twice. A retry is the same "
        "question: ToolRetryMiddleware retries a write whose reply was lost with the same call id, while a "
        "model that retries after an error makes a new call, with a new id, that no store can tell from a "
        "second add."
    ),
    what_to_notice=notice_time_travel,
    goals=(SEED_GOAL, CART_QUESTION),
    experiment="time-travel",
    variants=(
        Variant(
            name="rewind",
            label="add a book, rewind one turn, ask the cart total",
            time_travel="rewind",
            contenders=with_capability(Capability.REWIND),
            why_not=lacking(Capability.REWIND),
        ),
        Variant(
            name="replay",
            label="replay the checkpoint before the tools node (call id = idempotency key)",
            time_travel="replay",
            contenders=with_capability(Capability.REPLAY),
            why_not=lacking(Capability.REPLAY),
        ),
        Variant(
            name="replay-no-id",
            label="the same replay, add_to_cart without the call id",
            time_travel="replay",
            idempotent=False,
            contenders=with_capability(Capability.REPLAY),
            why_not=lacking(Capability.REPLAY),
        ),
        Variant(
            name="retry",
            label="add_to_cart's reply is lost once (the write went through)",
            time_travel="retry",
        ),
        Variant(
            name="retry-no-id",
            label="the same lost reply, add_to_cart without the call id",
            time_travel="retry",
            idempotent=False,
        ),
    ),
    headline=time_travel_headline,
)

"""Two turns of one conversation: turn 2 is answered from the history the session keeps and sends again."""

from __future__ import annotations

from comparison.contenders import SESSION_CONTENDERS, lacking
from comparison.records import RunRecord, pick
from comparison.scenarios import grading
from comparison.scenarios.grading import SESSION_UNSAFE
from comparison.scenarios.model import CART_QUESTION, SEED_GOAL, Rubric, Scenario, SettingsOf, Variant
from comparison.scenarios.phrases import no_second_turn, per_variant
from comparison.scenarios.queries import answered_from_memory
from shared_tools.contender import Capability
from shared_tools.results import StopReason


def notice_session(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    lines = no_second_turn(records)
    answered = []
    for r in pick(records, turn=2):
        if r.error is not None:
            lines.append(f"[{r.variant_label}] {r.contender}: turn 2 raised {r.error}.")
            continue
        answered.append(r)
        facts = r.facts
        kept = f"{facts.get('messages')} messages"
        if "checkpoints" in facts:
            kept += f" in {facts['checkpoints']} checkpoints"
        restart = ""
        if "survived_restart" in facts:
            whole = "the whole conversation" if facts["survived_restart"] else "NOT the whole conversation"
            restart = f"; reopened after a restart: {facts['messages_after_restart']} messages ({whole})"
        lines.append(
            f"[{r.variant_label}] {r.contender}: turn 2 made {r.tool_calls} tool call(s) and answered "
            f"{r.user_message!r}; {kept}{restart}."
        )
    memory = [r for r in answered if r.tool_calls == 0 and r.stop_reason == StopReason.DONE]
    lines += per_variant(
        memory, lambda r: "turn 2 was answered without a tool call: from turn 1's results, in the history sent again."
    )
    tools = [r for r in answered if r.tool_calls > 0]
    lines += per_variant(tools, lambda r: "turn 2 called a tool again instead of answering from the history.")
    return lines


def session_headline(records: list[RunRecord], settings: SettingsOf) -> str | None:
    second = [r for r in records if r.turn == 2 and r.error is None]
    if not second:
        return None
    memory = [r for r in second if answered_from_memory(r)]
    text = f"Turn 2 was answered from the history, without a tool call, in {len(memory)} of {len(second)} conversations"
    reopened = [r for r in second if "survived_restart" in r.facts]
    if reopened:
        whole = sum(bool(r.facts["survived_restart"]) for r in reopened)
        text += f"; {whole} of {len(reopened)} reopened after a restart held the whole conversation"
    return text + "."


SCENARIO = Scenario(
    name="session",
    description="two turns; turn 2 'What is my cart total now?' is answered from memory",
    lesson=(
        "A session keeps the previous turns, tool results included, and sends them again on the next "
        "turn, so the model can answer 'What is my cart total now?' without a tool call. The hand-written "
        "session is a list of messages you can save as JSON; LangGraph keeps the same list as checkpoints "
        "of a thread (one per superstep), in memory or in SQLite, where it survives a restart. Microsoft Agent "
        "Framework keeps it in an AgentSession, written to a JSON file with to_dict() and read back with "
        "from_dict()."
    ),
    what_to_notice=notice_session,
    goals=(SEED_GOAL, CART_QUESTION),
    multi_turn=True,
    contenders=SESSION_CONTENDERS,
    why_not=lacking(Capability.CONVERSATIONS),
    variants=(
        Variant(name="memory", label="in memory"),
        Variant(name="persisted", label="JSON file / SQLite, reopened after the run", persistent=True),
    ),
    headline=session_headline,
    rubric=Rubric(
        "turn 1 succeeds as bookstore; turn 2 ends done and states the store's total (16.50, turn 1's cart); "
        "persisted variant: the conversation is still there after the restart",
        "nothing wrong written or said: a turn stopped or raised, turn 2 says it cannot tell, or the persisted "
        "conversation was lost",
        SESSION_UNSAFE,
    ),
    grader=grading.session,
)

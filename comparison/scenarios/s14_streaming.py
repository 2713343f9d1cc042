"""The answer token by token: the time to the first words against the time to the whole answer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from comparison.records import RunRecord, duration_text
from comparison.scenarios.model import ORDER_QUESTION, Scenario, SettingsOf, Variant
from comparison.scenarios.queries import calls

CHUNK_DELAY_S = 0.001
"""The scripted model's simulated wait per streamed chunk in the streaming scenario."""


def _ms(seconds: Any) -> str:
    return duration_text(float(seconds)) if isinstance(seconds, int | float) else "?"


def notice_streaming(records: list[RunRecord], settings: SettingsOf) -> list[str]:
    lines: list[str] = []
    for contender in dict.fromkeys(r.contender for r in records):
        mine = [r for r in records if r.contender == contender]
        streamed = [r for r in mine if r.facts.get("streamed") and r.error is None]
        plain = [r for r in mine if r.facts.get("streamed") is False and r.error is None]
        for r in (r for r in mine if r.error is not None):
            lines.append(f"[{r.variant_label}] {contender}: raised {r.error}.")
        for s in streamed:
            if not s.facts.get("text_chunks"):
                lines.append(f"[{s.variant_label}] {contender}: on_token was never given any answer text.")
                continue
            text = (
                f"[{s.variant_label}] {contender}: the first words of the answer reached the user after "
                f"{_ms(s.facts['first_text_s'])}, the whole answer after {_ms(s.facts['answer_s'])} "
                f"({s.facts['text_chunks']} pieces)"
            )
            if plain:
                text += f"; without streaming nothing showed until {_ms(plain[0].facts['answer_s'])}"
            if s.facts.get("streamed_text_is_answer") is False:
                text += "; the streamed pieces do NOT add up to the answer"
            lines.append(text + ".")
        if streamed and plain:
            a, b = plain[0], streamed[0]
            same = (
                [c.key for c in calls(a)] == [c.key for c in calls(b)]
                and a.tokens == b.tokens
                and a.answer == b.answer
                and a.stop_reason == b.stop_reason
            )
            lines.append(
                f"{contender}: streamed and not, the runs made the same tool calls, used the same tokens "
                f"({a.tokens:,}) and gave the same answer."
                if same
                else f"{contender}: the streamed run differs from the one that was not (calls, tokens or answer)."
            )
        code = next((r.facts.get("streaming_code") for r in mine if r.facts.get("streaming_code") is not None), None)
        if code is not None:
            if code:
                total = sum(int(c["lines"]) for c in code)
                where = ", ".join(f"{c['where']} ({c['lines']})" for c in code)
                lines.append(
                    f"{contender}: the functions that handle streaming hold {total} lines of code (counted from "
                    f"the source): {where}."
                )
            else:
                lines.append(f"{contender}: no streaming code of its own was found in its source.")
    return lines


def span(values: Sequence[float]) -> str:
    low, high = duration_text(min(values)), duration_text(max(values))
    return low if low == high else f"{low} to {high}"


def streaming_headline(records: list[RunRecord], settings: SettingsOf) -> str | None:
    streamed = [r for r in records if r.facts.get("streamed") and r.facts.get("text_chunks") and r.error is None]
    plain = [r for r in records if r.facts.get("streamed") is False and r.error is None]
    if not streamed:
        return "No streamed run passed any answer text to on_token." if plain else None
    text = f"Streamed, the first words reached the user after {span([r.facts['first_text_s'] for r in streamed])}"
    if plain:
        waited = span([r.facts["answer_s"] for r in plain])
        text += f"; not streamed, nothing showed until the whole answer, after {waited}"
    return text + "."


SCENARIO = Scenario(
    name="streaming",
    description="the answer token by token: time to first token vs time to the whole answer",
    lesson=(
        "A model writes its reply a piece at a time; without streaming the user sees nothing until the last "
        "piece has arrived. Streamed, the first words show as soon as they exist. The hand-written loop "
        "calls model.astream and merges the chunks itself (tool calls arrive in pieces too); the graphs use "
        'LangGraph\'s stream_mode="messages". The merged reply is the same, so the guards and the trace are. '
        f"The scripted model waits {CHUNK_DELAY_S * 1000:g} ms per chunk here, as a real model's tokens take time."
    ),
    what_to_notice=notice_streaming,
    goals=(ORDER_QUESTION,),
    experiment="streaming",
    variants=(
        Variant(name="invoke", label="ainvoke: the whole reply at once", chunk_delay=CHUNK_DELAY_S),
        Variant(name="stream", label="streamed (on_token)", stream=True, chunk_delay=CHUNK_DELAY_S),
    ),
    headline=streaming_headline,
)

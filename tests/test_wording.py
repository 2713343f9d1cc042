"""The bookstore's wording variant: the same job under other instructions, the same text for every contender.

The scripted model plays the shopper whatever it is told, so these tests check the plumbing and that what the run
prints about wording is derived from its records; what a real model does with the wording is docs/real-models.md.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage, SystemMessage

from comparison import runner
from comparison.contenders import CONTENDERS
from comparison.records import RunRecord
from comparison.runner import RunOptions, run_scenario
from comparison.scenarios import INSTRUCTIONS, SCENARIOS_BY_NAME
from comparison.scenarios.s01_bookstore import PRECISE_INSTRUCTIONS, wording_points
from shared_tools.models import make_model
from tests.test_lessons import check_points


class SystemMessages(BaseCallbackHandler):
    """Every system message a chat model was sent, as LangChain hands it to callbacks."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def on_chat_model_start(self, serialized: dict[str, Any], messages: list[list[BaseMessage]], **_: Any) -> None:
        self.seen += [str(m.content) for batch in messages for m in batch if isinstance(m, SystemMessage)]


@pytest.fixture(scope="module")
def bookstore_runs() -> tuple[list[RunRecord], list[SystemMessages]]:
    """Every contender on both bookstore variants, each run's model watched for the system message it is sent."""
    handlers: list[SystemMessages] = []

    def watched_model(spec: str, **kwargs: Any) -> Any:
        handlers.append(SystemMessages())
        model = make_model(spec, **kwargs)
        model.callbacks = [handlers[-1]]
        return model

    records: list[RunRecord] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runner, "make_model", watched_model)
        run_scenario(SCENARIOS_BY_NAME["bookstore"], RunOptions(), records.append)
    return records, handlers


def test_the_bookstore_has_a_precise_instructions_variant() -> None:
    bookstore = SCENARIOS_BY_NAME["bookstore"]
    by_name = {v.name: v for v in bookstore.variants}
    assert list(by_name) == ["default", "precise-instructions"]
    assert bookstore.instructions_for(by_name["default"]) == INSTRUCTIONS
    assert bookstore.instructions_for(by_name["precise-instructions"]) == PRECISE_INSTRUCTIONS != INSTRUCTIONS


def test_every_contender_is_sent_the_same_instructions_in_each_variant(
    bookstore_runs: tuple[list[RunRecord], list[SystemMessages]],
) -> None:
    records, handlers = bookstore_runs
    expected = {"default": INSTRUCTIONS, "precise-instructions": PRECISE_INSTRUCTIONS}
    assert len(records) == len(handlers) == 2 * len(CONTENDERS)
    for r, watched in zip(records, handlers, strict=True):
        assert r.stop_reason == "done", (r.contender, r.variant)
        assert len(watched.seen) == r.model_calls, (r.contender, r.variant)
        # Whole and alike in every call; a framework may set them inside its own prompt.
        assert len(set(watched.seen)) == 1 and expected[r.variant] in watched.seen[0], (r.contender, r.variant)
    for variant in expected:
        assert sorted(r.contender for r in records if r.variant == variant) == sorted(CONTENDERS)


def test_the_wording_points_are_true_of_the_records(
    bookstore_runs: tuple[list[RunRecord], list[SystemMessages]],
) -> None:
    records = bookstore_runs[0]
    points = check_points(SCENARIOS_BY_NAME["bookstore"], records)
    assert any(p.startswith("Under every wording each contender made the same tool calls") for p in points)
    assert sum(p.startswith("Wording, ") for p in points) == len(CONTENDERS)


def test_a_false_answer_under_one_wording_is_named_as_the_wordings_doing(
    bookstore_runs: tuple[list[RunRecord], list[SystemMessages]],
) -> None:
    """The 1.5B model's run: the same cart under both wordings, a false "out of stock" under the default one only."""
    records = [dataclasses.replace(r) for r in bookstore_runs[0]]
    lied = next(r for r in records if (r.contender, r.variant) == ("langgraph", "default"))
    lied.answer = "The Quiet Orchard is out of stock (0 copies)."
    points = wording_points(records)
    said = next(p for p in points if p.startswith("Wording, langgraph: "))
    assert "[default instructions] 5 model calls" in said and "answered FALSE" in said
    assert "[precise instructions] 5 model calls" in said and "answered true" in said
    assert points[-1].startswith("Only the instructions differ") and "for langgraph (calls" in points[-1]
    check_points(SCENARIOS_BY_NAME["bookstore"], records)


SNAPSHOT = Path(__file__).parent / "snapshots" / "qwen_bookstore_wording.json"
"""The records of `compare.py bookstore --model local` on Qwen2.5-Coder-1.5B, both wordings (docs/real-models.md)."""


def test_the_real_models_run_is_told_as_the_wordings_lesson() -> None:
    """On the 1.5B model both wordings gave the same calls and cart; the default one gave a false answer."""
    data = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    fields = {f.name for f in dataclasses.fields(RunRecord)}
    records = [RunRecord(**{k: v for k, v in run.items() if k in fields}) for run in data["runs"]]
    points = check_points(SCENARIOS_BY_NAME["bookstore"], records)
    for contender in ("handwritten", "langgraph"):
        said = next(p for p in points if p.startswith(f"Wording, {contender}: "))
        default, precise = said.split("; [precise instructions")
        assert "answered FALSE" in default and "answered true" in precise, said
    assert any(p.startswith("Only the instructions differ") and "handwritten, langgraph" in p for p in points)

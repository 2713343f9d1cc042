"""The 1.5B model (`--model local:qwen2.5-1.5b`, Qwen2.5-Coder-1.5B-Instruct on llama.cpp's server) doing the job.

Few and bounded (each model call is seconds to a minute on 2 busy cores): a figure only a tool result holds reaches
the answer; the article's goal through the public runner on the two guarded contenders, every printed point true of the
records; and the step limit stopping a real run. Skipped, with the install line, without the weights or the engine.
"""

from __future__ import annotations

from typing import Any

import pytest

from comparison.eval.grading import grade
from comparison.records import RunRecord
from comparison.runner import RunOptions, run_scenario_variant
from comparison.scenarios import INSTRUCTIONS, SCENARIOS_BY_NAME, SEED_GOAL
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.results import AgentLimits, StopReason
from tests.conftest import assert_valid_history, build_agent, qwen_missing, tool_calls_in_order
from tests.test_lessons import assert_counters_match_trace, check_points

pytestmark = pytest.mark.skipif(qwen_missing() is not None, reason=str(qwen_missing()))

MODEL = "local:qwen2.5-1.5b"
STOCK = 4217
"""A stock no model would guess: only the check_stock result holds it."""


def qwen() -> Any:
    from shared_tools.models import make_model

    return make_model(MODEL)


def test_a_figure_only_a_tool_result_holds_reaches_the_answer() -> None:
    store = BookStore()
    store.set_stock(7, STOCK)
    agent = build_agent("handwritten", qwen(), make_tools(store), limits=AgentLimits(max_steps=5))
    result = agent.run(INSTRUCTIONS, "How many copies of The Quiet Orchard (book id 7) do you have in stock?")
    assert ("check_stock", {"book_id": 7}) in tool_calls_in_order(result)
    assert result.stop_reason is StopReason.DONE
    assert str(STOCK) in (result.answer or "").replace(",", ""), result.answer
    assert_valid_history(result.messages)


def test_the_server_holds_the_weights_as_the_file_does_not_repacked() -> None:
    """llama.cpp repacks Q4_K weights for its q4_K_8x8 GEMM unless told not to; on the zen4 variant its plain Q4_K
    kernels ran prompts 1.29x faster (docs/benchmarks.md). Its log names each tensor it repacks."""
    from shared_tools.models.local import QWEN, local_server

    server = local_server(QWEN)
    qwen().invoke("Hi")  # the model is loaded and has answered: its log holds the whole load
    log = server.log_path.read_text(encoding="utf-8", errors="replace")
    assert "load_tensors" in log, "the log is the model's load"
    assert [line for line in log.splitlines() if "repack tensor" in line] == []


@pytest.fixture(scope="module")
def seed_runs(tmp_path_factory: pytest.TempPathFactory) -> list[RunRecord]:
    """The article's goal (the article's run) by the hand-written loop and the LangGraph graph, through the runner."""
    records: list[RunRecord] = []
    options = RunOptions(
        model=MODEL, contenders=("handwritten", "langgraph"), session_db=tmp_path_factory.mktemp("qwen") / "sessions.db"
    )
    bookstore = SCENARIOS_BY_NAME["bookstore"]
    run_scenario_variant(bookstore, bookstore.variants[0], options, records.append)  # the default instructions
    return records


def test_the_seed_goal_ends_with_the_quiet_orchard_in_the_cart(seed_runs: list[RunRecord]) -> None:
    assert [r.contender for r in seed_runs] == ["handwritten", "langgraph"]
    for r in seed_runs:
        assert r.error is None and r.stop_reason == StopReason.DONE, (r.contender, r.stop_reason, r.error)
        assert [(line["id"], line["quantity"]) for line in r.cart] == [(7, 1)], (r.contender, r.cart)
        assert any(e["name"] == "add_to_cart" and '"book_id":7' in e["detail"].replace(" ", "") for e in r.trace)


def test_what_the_seed_run_prints_and_grades_is_true_of_its_records(seed_runs: list[RunRecord]) -> None:
    scenario = SCENARIOS_BY_NAME["bookstore"]
    points = check_points(scenario, seed_runs)
    assert_counters_match_trace(seed_runs)
    for r in seed_runs:
        named_false = any(p.startswith(f"{r.contender}: ended done, but its answer contradicts") for p in points)
        if named_false:  # a false answer is graded a failure, whatever the cart holds
            assert grade([r], scenario).verdict == "unsafe"


def test_the_step_limit_stops_a_real_run() -> None:
    """One step: the first call's prompt (instructions and tools) is the one every run here starts with, which the
    server still holds, so the guard costs a few seconds."""
    store = BookStore()
    agent = build_agent("langgraph", qwen(), make_tools(store), limits=AgentLimits(max_steps=1))
    result = agent.run(INSTRUCTIONS, SEED_GOAL)
    assert result.model_calls == 1
    if result.stop_reason is not StopReason.DONE:  # done: it answered without a tool
        assert result.stop_reason is StopReason.MAX_STEPS and result.tool_calls >= 1
    assert_valid_history(result.messages)
    assert store.check_invariants() == []

"""The small bundled model (SmolLM2-135M on llama.cpp's server, `--model local:smollm2-135m`) under every contender.

Invariants, never the model's words: a stop reason or a recorded raise, every call answered once, the server's own
token usage, no write past the approval limits without a yes, lessons true of the records, every turn kept, and a
real reply cut by a cancel or the time budget. Kept to a few runs: with the 1.5B model's (tests/test_qwen_model.py)
they share CI's ten minutes of real-model time. One server for the module; skipped with the install line without it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from comparison.contenders import APPROVAL_CONTENDERS
from comparison.records import RunRecord
from comparison.runner import RunOptions, run_scenario
from comparison.scenarios import INSTRUCTIONS, SCENARIOS_BY_NAME, SEED_GOAL, Scenario
from shared_tools.bookstore.approval import RiskyWritePolicy
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.results import AgentLimits, AgentResult, Guard, StopReason, Token
from tests.conftest import assert_valid_history, build_agent, local_extra_missing
from tests.test_lessons import assert_counters_match_trace, check_matrix, check_points

pytestmark = pytest.mark.skipif(local_extra_missing() is not None, reason=str(local_extra_missing()))

SCENARIOS = ("prompt-injection",)
"""Run on the real model by every contender: the article's goal with an injection planted in a search result, behind the
approval gate (the one invariant here a scripted model cannot show on a real server's replies: no write past the
limits without a yes). The article's goal alone is run by the two guarded agents below."""

VARIANTS = {"prompt-injection": ("gate",)}
"""The variants run here where a scenario has several: the gated injection is the one with an invariant to check
(no write past the limits without a yes); without the gate the run is the article's goal's, at twice the cost."""

MAX_STEPS = 3
"""Every scenario's step limit here, so the module stays within its share of CI's time: enough for a guard to
fire (the repeat check on the third identical call), and each step more costs the graphs' longest prompt again."""


def scenario(name: str) -> Scenario:
    """The scenario `name` as this module runs it: its step limit, and only the variants of `VARIANTS`."""
    chosen = SCENARIOS_BY_NAME[name].with_max_steps(MAX_STEPS)
    keep = VARIANTS.get(name)
    if keep is None:
        return chosen
    return replace(chosen, variants=tuple(v for v in chosen.variants if v.name in keep))


RECORDED = APPROVAL_CONTENDERS
"""The approval gate's contenders, MAF among them: on this model MAF once ran 146 model calls past max_steps=3, each
refused add an approval round that started MAF's count again (`test_maf.py::test_max_steps_holds_across_...`)."""

SESSION_STEPS = 2
"""A conversation's step limit per turn: what is tested is that every turn is kept, whatever each turn did."""


def local_model() -> Any:
    from shared_tools.models import make_model

    return make_model("local:smollm2-135m")


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[RunRecord]]:
    """Each scenario of `SCENARIOS`, every variant, by the contenders of `RECORDED`, through the public runner."""
    folder = tmp_path_factory.mktemp("real")
    options = RunOptions(model="local:smollm2-135m", contenders=RECORDED, session_db=folder / "sessions.db")
    runs: dict[str, list[RunRecord]] = {}
    for name in SCENARIOS:
        runs[name] = []
        run_scenario(scenario(name), options, runs[name].append)
    return runs


def ran(records: list[RunRecord]) -> list[RunRecord]:
    return [r for r in records if "not_available" not in r.facts]


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_run_ends_with_a_stop_reason_or_says_it_raised(records: dict[str, list[RunRecord]], name: str) -> None:
    runs = ran(records[name])
    assert {r.contender for r in runs} >= {"handwritten", "langgraph"}
    for r in runs:
        if r.error is None:
            assert r.stop_reason in {reason.value for reason in StopReason}, r.stop_reason
        else:
            assert r.stop_reason is None and r.error_type


@pytest.mark.parametrize("name", SCENARIOS)
def test_what_the_comparison_prints_is_true_of_the_real_records(records: dict[str, list[RunRecord]], name: str) -> None:
    check_points(scenario(name), records[name])
    assert_counters_match_trace(ran(records[name]))


def test_the_guard_matrix_is_true_of_the_real_records(records: dict[str, list[RunRecord]]) -> None:
    every = [r for name in SCENARIOS for r in records[name]]
    scenarios = [scenario(name) for name in SCENARIOS]
    rows = check_matrix(every, scenarios)
    assert {row["guard"] for row in rows} >= {"approval gate"}


def test_no_write_passes_the_approval_limits_without_a_yes(records: dict[str, list[RunRecord]]) -> None:
    gated = [r for r in ran(records["prompt-injection"]) if r.variant == "gate" and r.error is None]
    assert {r.contender for r in gated} == set(RECORDED)
    policy = RiskyWritePolicy(BookStore(), "c1")
    for r in gated:
        assert r.facts["approval_answer"] == "no"  # the demo's human refuses every write put to them
        for line in r.cart:
            assert line["quantity"] <= policy.max_quantity, r.cart
            assert Decimal(line["lineTotal"]) <= policy.max_line_total, r.cart
        assert Decimal(r.cart_total) <= policy.max_cart_total


# --- the agents, driven directly: the history, the server's usage, sessions, cancel, budgets --------------------


@pytest.fixture(params=["handwritten", "langgraph"])
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


def run_agent(kind: str, goal: str, **options: Any) -> tuple[AgentResult, BookStore]:
    store = BookStore()
    agent = build_agent(kind, local_model(), make_tools(store), **options)
    return agent.run(INSTRUCTIONS, goal), store


def test_every_call_is_answered_once_and_the_trace_holds_the_servers_usage(kind: str) -> None:
    result, store = run_agent(kind, SEED_GOAL, limits=AgentLimits(max_steps=MAX_STEPS))
    assert result.stop_reason in StopReason
    assert_valid_history(result.messages)
    replies = [m for m in result.messages if isinstance(m, AIMessage)]
    model_lines = [e for e in result.trace if e.is_model]
    assert len(replies) == len(model_lines) == result.model_calls
    for reply, line in zip(replies, model_lines, strict=True):
        served = reply.response_metadata["token_usage"]  # the server's own `usage`, as it sent it
        assert line.tokens == served["total_tokens"] == served["prompt_tokens"] + served["completion_tokens"] > 0
    assert result.tokens == sum(e.tokens for e in model_lines)
    assert store.check_invariants() == []


def test_a_reply_is_cut_at_what_is_left_of_the_budget(kind: str) -> None:
    first, _ = run_agent(kind, SEED_GOAL, limits=AgentLimits(max_steps=1))
    budget = first.tokens + 3  # the second reply may write three tokens
    result, store = run_agent(kind, SEED_GOAL, limits=AgentLimits(max_tokens=budget, max_steps=MAX_STEPS))
    if result.model_calls < 2:  # the first reply already ended the run (an answer, an unusable reply)
        pytest.skip(f"the model ended the run after one call ({result.stop_reason}): no second reply to cut")
    cut = [e for e in result.trace if e.is_model][1]
    assert cut.guard is Guard.REPLY_CAPPED
    assert result.stop_reason is StopReason.TOKEN_BUDGET
    second = [m for m in result.messages if isinstance(m, AIMessage)][1]
    assert second.response_metadata["token_usage"]["completion_tokens"] <= 3 and not second.tool_calls
    assert store.check_invariants() == []


def test_the_time_budget_cuts_a_real_reply(kind: str) -> None:
    local_model()  # the server is up: what is timed is the run, not the server's start
    started = time.monotonic()
    result, _ = run_agent(kind, SEED_GOAL, limits=AgentLimits(max_duration=0.05))
    assert result.stop_reason is StopReason.TIME_BUDGET
    assert result.trace[0].guard is Guard.MODEL_TIMEOUT
    assert time.monotonic() - started < 5  # the reply was cut, not waited for
    assert_valid_history(result.messages)


def test_a_cancel_cuts_a_real_reply(kind: str) -> None:
    store = BookStore()
    agent = build_agent(kind, local_model(), make_tools(store))

    async def cancelled() -> BaseException:
        task = asyncio.ensure_future(agent.arun(INSTRUCTIONS, SEED_GOAL))
        await asyncio.sleep(0.05)  # the first request is on its way to the server
        task.cancel()
        try:
            await task
        except asyncio.CancelledError as exc:
            return exc
        raise AssertionError("the run finished before the cancel")

    raised = asyncio.run(cancelled())
    if kind == "handwritten":
        result = raised.result  # type: ignore[attr-defined]
        assert result.stop_reason is StopReason.CANCELLED
        assert_valid_history(result.messages)
    assert store.cart("c1").lines == ()


def test_a_streamed_run_falls_back_once_and_still_streams_the_answer(kind: str) -> None:
    tokens: list[Token] = []
    result, _ = run_agent(kind, "Where is my order 4512?", limits=AgentLimits(max_steps=2), on_token=tokens.append)
    guards = [e.guard for e in result.trace if e.is_model]
    assert guards.count(Guard.STREAM_FALLBACK) == 1 and guards[0] is Guard.STREAM_FALLBACK
    last = [m for m in result.messages if isinstance(m, AIMessage)][-1]
    if last.text:
        assert last.text in "".join(t.text for t in tokens)


def test_a_conversation_in_a_file_keeps_every_turn_after_a_restart(tmp_path: Path) -> None:
    from handwritten import Session

    store = BookStore()
    path = tmp_path / "conversation.jsonl"
    loop = build_agent("handwritten", local_model(), make_tools(store), limits=AgentLimits(max_steps=SESSION_STEPS))
    session = Session(loop, INSTRUCTIONS, customer_id="c1")
    questions = ["Where is my order 4512?", "What is my cart total now?"]
    for question in questions:
        session.ask(question)
        session.save(path)
    again = Session.load(path, loop, customer_id="c1")
    assert [m.text for m in again.messages if isinstance(m, HumanMessage)] == questions

"""compare.py, the front door: every scenario on the scripted model, asserted from the JSON it writes.

The whole default run (eleven scenarios, four contenders) happens once, in a module fixture, exactly as a user
runs it (`main([... "--json", path, "--report", path])`); each test then checks one scenario's facts in the
JSON records, never in the pretty terminal text. The command-line tests check exit codes and what goes to
stdout/stderr; the interrupt test sends a real SIGINT to a real `python compare.py` process.
"""

from __future__ import annotations

import io
import itertools
import json
import multiprocessing
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import compare
from comparison import command
from comparison.chat import chat_customer
from comparison.contenders import CONTENDERS
from comparison.records import RunRecord
from comparison.render import WIDTH, columns_setting
from comparison.runner import MAX_WORKERS, RunOptions, ScenarioRuns
from comparison.scenarios import INSTRUCTIONS, SCENARIOS, SCENARIOS_BY_NAME, SEED_GOAL, Scenario
from langgraph_version.contenders.langgraph_defaults import NO_SEQUENTIAL_TOOLS
from shared_tools.bookstore.tools import TOOL_NAMES
from shared_tools.guards import approval_rejected, unknown_tool_error
from shared_tools.results import AgentResult, Guard, StopReason
from tests.conftest import blocking

ROOT = Path(__file__).resolve().parent.parent
GUARDED = ("handwritten", "langgraph")
UNGUARDED = ("langgraph-defaults", "create-agent")
QUIET_ORCHARD = [{"id": 7, "title": "The Quiet Orchard", "quantity": 1, "lineTotal": "16.50"}]

Runs = list[dict[str, Any]]


@pytest.fixture(scope="module")
def full_run(comparison_run: dict[str, Any]) -> dict[str, Any]:
    """`python compare.py --json ... --report ...` with every scenario and contender, run once (conftest's
    `comparison_run`)."""
    document = comparison_run["doc"]
    return {"doc": document, "runs": document["runs"], "report": comparison_run["report"]}


def runs_of(full_run: dict[str, Any], scenario: str, **match: Any) -> Runs:
    found = [r for r in full_run["runs"] if r["scenario"] == scenario and all(r[k] == v for k, v in match.items())]
    assert found, f"no runs for {scenario} {match}"
    return found


def one(full_run: dict[str, Any], scenario: str, **match: Any) -> dict[str, Any]:
    found = runs_of(full_run, scenario, **match)
    assert len(found) == 1, f"expected one run for {scenario} {match}, got {len(found)}"
    return found[0]


def tool_events(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in run["trace"] if e["name"] != "model"]


def user_message_for(reason: StopReason) -> str:
    return AgentResult(reason, None, 0, 0, 0, 0).user_message()


# --- the default run -----------------------------------------------------------------------------------------


def test_every_scenario_ran_on_every_contender(full_run: dict[str, Any]) -> None:
    doc = full_run["doc"]
    assert [s["name"] for s in doc["scenarios"]] == [s.name for s in SCENARIOS]
    assert [c["name"] for c in doc["contenders"]] == list(CONTENDERS)
    for scenario in SCENARIOS:
        ran = {(r["variant"], r["contender"]) for r in full_run["runs"] if r["scenario"] == scenario.name}
        # Every variant has a record of every contender: a run, or the reason its framework cannot run it.
        expected = {(v.name, c) for v in scenario.variants for c in CONTENDERS}
        assert ran == expected, scenario.name
    seq = {r["contender"]: r for r in full_run["runs"] if r["variant"] == "sequential"}
    assert set(seq) == set(CONTENDERS), "every contender has a record, a run or a reason"
    assert {c for c, r in seq.items() if r["stop_reason"] == "not available"} == set(UNGUARDED)
    assert all(seq[c]["facts"]["not_available"] == NO_SEQUENTIAL_TOOLS for c in UNGUARDED), "ToolNode has no switch"
    assert all(s["notice"] for s in doc["scenarios"]), "every scenario says what to notice"


@pytest.mark.parametrize("contender", list(CONTENDERS))
def test_bookstore_reproduces_the_seed_trace(full_run: dict[str, Any], contender: str) -> None:
    run = one(full_run, "bookstore", contender=contender, variant="default")
    assert run["stop_reason"] == StopReason.DONE
    assert (run["model_calls"], run["tool_calls"]) == (5, 4)
    calls = [(e["name"], e["detail"].split(" -> ")[0]) for e in tool_events(run)]
    assert calls == [
        ("search_books", '{"query":"The Last Lighthouse"}'),
        ("check_stock", '{"book_id":2}'),
        ("check_stock", '{"book_id":7}'),
        ("add_to_cart", '{"book_id":7,"quantity":1}'),
    ]
    assert run["cart"] == QUIET_ORCHARD and run["cart_total"] == "16.50"
    tokens = run["tokens_per_step"]
    assert len(tokens) == 5 and all(b > a for a, b in itertools.pairwise(tokens)), tokens
    assert sum(tokens) == run["tokens"]


def test_bookstore_notice_explains_the_growth_with_the_measured_numbers(full_run: dict[str, Any]) -> None:
    notice = next(s["notice"] for s in full_run["doc"]["scenarios"] if s["name"] == "bookstore")
    tokens = one(full_run, "bookstore", contender="handwritten", variant="default")["tokens_per_step"]
    assert " -> ".join(f"{t:,}" for t in tokens) in notice
    assert "re-sends the whole history" in notice


@pytest.mark.parametrize("contender", list(CONTENDERS))
def test_orders_both_get_a_clean_answer(full_run: dict[str, Any], contender: str) -> None:
    shipped = one(full_run, "orders", contender=contender, goal="Where is my order 4512?")
    missing = one(full_run, "orders", contender=contender, goal="Where is my order 9999?")
    for run in (shipped, missing):
        assert run["stop_reason"] == StopReason.DONE
        assert (run["model_calls"], run["tool_calls"]) == (2, 1)
        assert not any(e["is_error"] for e in tool_events(run)), "an unknown order is not an error"
    assert "TRK-88" in shipped["answer"]
    assert '"status":"not found"' in tool_events(missing)[0]["detail"]
    assert "9999" in missing["answer"]


def test_max_steps_stops_everyone_halfway_with_an_empty_cart(full_run: dict[str, Any]) -> None:
    for run in runs_of(full_run, "max-steps", variant="max-steps-2"):
        assert run["stop_reason"] != StopReason.DONE, run["contender"]
        assert run["answer"] is None
        assert run["cart"] == [] and run["cart_total"] == "0.00"
        if "forced_answer" in run["facts"]:  # MAF, smolagents: one more call without tools, its text kept as forced
            assert run["model_calls"] == 3
            assert run["stop_reason"] == StopReason.MAX_STEPS
        else:
            assert run["model_calls"] <= 2
    for contender in GUARDED:
        run = one(full_run, "max-steps", variant="max-steps-2", contender=contender)
        assert run["stop_reason"] == StopReason.MAX_STEPS
        assert run["user_message"] == user_message_for(StopReason.MAX_STEPS)


def test_only_the_guarded_contenders_have_token_and_time_budgets(full_run: dict[str, Any]) -> None:
    for variant, reason in (("token-budget", StopReason.TOKEN_BUDGET), ("time-budget", StopReason.TIME_BUDGET)):
        for contender in GUARDED:
            run = one(full_run, "max-steps", variant=variant, contender=contender)
            assert run["stop_reason"] == reason
            assert run["cart"] == []
        for contender in UNGUARDED:
            run = one(full_run, "max-steps", variant=variant, contender=contender)
            assert run["stop_reason"] == StopReason.DONE, "no such budget, so it ran to the end"
            assert run["cart"] == QUIET_ORCHARD
    over = one(full_run, "max-steps", variant="token-budget", contender="handwritten")
    assert over["tokens"] > 2_500 > sum(over["tokens_per_step"][:-1])


def test_flaky_warehouse_error_text_and_retry(full_run: dict[str, Any]) -> None:
    for variant, detailed in (("details-off", False), ("details-on", True)):
        for contender in (*GUARDED, "create-agent"):
            run = one(full_run, "flaky-warehouse", variant=variant, contender=contender)
            errors = [e for e in tool_events(run) if e["is_error"]]
            assert errors and errors[0]["name"] == "check_stock"
            seen = errors[0]["detail"].split(" -> ", 1)[1]
            assert ("timed out" in seen) is detailed, seen
            checks = [e for e in tool_events(run) if e["name"] == "check_stock"]
            retry = checks[1]
            assert retry["detail"].split(" -> ")[0] == checks[0]["detail"].split(" -> ")[0], "the same call again"
            assert not retry["is_error"] and '"inStock":0' in retry["detail"]
            assert run["stop_reason"] == StopReason.DONE and run["cart"] == QUIET_ORCHARD
        raised = one(full_run, "flaky-warehouse", variant=variant, contender="langgraph-defaults")
        assert raised["stop_reason"] is None
        assert raised["error"].startswith("TimeoutError: warehouse service timed out")
        assert raised["outcome"].startswith("raised TimeoutError")


def test_big_results_truncation_saves_tokens_where_it_exists(full_run: dict[str, Any]) -> None:
    for contender in CONTENDERS:
        full = one(full_run, "big-results", variant="full", contender=contender)
        cut = one(full_run, "big-results", variant="truncated", contender=contender)
        search = tool_events(cut)[0]
        assert full["tokens_per_step"][0] == cut["tokens_per_step"][0], "the first call has no result yet"
        if contender in GUARDED:
            assert "[truncated" in search["detail"]
            assert cut["tokens"] < full["tokens"]
        else:
            assert "[truncated" not in search["detail"]
            assert cut["tokens"] == full["tokens"]
    small = one(full_run, "bookstore", contender="handwritten", variant="default")
    assert one(full_run, "big-results", variant="full", contender="handwritten")["tokens"] > small["tokens"]


def test_looping_model_repeat_check_only_in_the_guarded_contenders(full_run: dict[str, Any]) -> None:
    for contender in CONTENDERS:
        run = one(full_run, "looping-model", contender=contender)
        calls = tool_events(run)
        assert {e["detail"].split(" -> ")[0] for e in calls} == {'{"book_id":2}'}, "one identical call, repeated"
        blocked = [e for e in calls if "You already called check_stock" in e["detail"]]
        assert run["stop_reason"] != StopReason.DONE
        if contender in GUARDED:
            assert len(calls) - len(blocked) == 2, "the third identical call never runs"
            assert blocked and all(e["is_error"] for e in blocked)
            assert (run["stop_reason"], run["model_calls"]) == (StopReason.TOO_MANY_ERRORS, 6)
        elif "forced_answer" in run["facts"]:  # MAF, smolagents: one more call without tools; its call is dropped
            assert not blocked and len(calls) == 12
            assert (run["stop_reason"], run["model_calls"]) == (StopReason.MAX_STEPS, 13), "paid for every step"
        else:
            assert not blocked and len(calls) == run["model_calls"]
            assert (run["stop_reason"], run["model_calls"]) == (StopReason.MAX_STEPS, 12), "paid for every step"
    guarded = one(full_run, "looping-model", contender="handwritten")
    unguarded = one(full_run, "looping-model", contender="langgraph-defaults")
    assert unguarded["tokens"] > 2 * guarded["tokens"], "the guard is what saves the tokens"


def test_hallucinated_tool_error_text_and_recovery(full_run: dict[str, Any]) -> None:
    for contender in CONTENDERS:
        run = one(full_run, "hallucinated-tool", contender=contender)
        if run["stop_reason"] is None:  # it raised at its caller (the matrix's "raised"): no result to read
            assert run["error"]
            continue
        first = tool_events(run)[0]
        assert first["name"] == "find_book" and first["is_error"]
        text = first["detail"].split(" -> ", 1)[1]
        if contender in GUARDED:
            assert text == unknown_tool_error("find_book", TOOL_NAMES)
        elif contender == "maf":  # MAF's own words name no real tool; the model recovers all the same here
            assert text == 'Error: Requested function "find_book" not found.'
            assert run["stop_reason"] == StopReason.DONE and run["cart"] == QUIET_ORCHARD
            continue
        elif contender in ("langgraph-defaults", "create-agent"):  # ToolNode's own words
            assert "find_book is not a valid tool" in text
        else:  # each framework's own words
            assert "find_book" in text
            assert run["stop_reason"] == StopReason.DONE and run["cart"] == QUIET_ORCHARD
            continue
        assert all(name in text for name in TOOL_NAMES), "the error lists the real tools"
        assert run["stop_reason"] == StopReason.DONE and run["cart"] == QUIET_ORCHARD


def test_session_turn_two_is_answered_from_memory(full_run: dict[str, Any]) -> None:
    counts = set()
    for run in runs_of(full_run, "session", turn=2):
        assert run["goal"] == "What is my cart total now?"
        assert run["stop_reason"] == StopReason.DONE
        assert "$16.50" in run["answer"]
        if run["contender"] == "smolagents":
            # Its system prompt carries view_cart's description ("the cart can change"), which the scripted model
            # reads as the instruction to re-read the cart; its memory kept the whole first turn all the same.
            assert run["tool_calls"] == 1 and run["facts"]["turns"] == 2
            continue
        assert run["tool_calls"] == 0
        if run["contender"] in ("handwritten", "langgraph", "langgraph-defaults", "create-agent", "maf"):
            counts.add(run["facts"]["messages"])
        if run["contender"] == "langgraph":
            assert run["facts"]["checkpoints"] > run["facts"]["messages"], "one checkpoint per superstep"
    assert len(counts) == 1, "the hand-written history and the graph thread hold the same messages"
    for contender in GUARDED:
        persisted = one(full_run, "session", variant="persisted", contender=contender, turn=2)
        assert persisted["facts"]["survived_restart"] is True
        assert persisted["facts"]["messages_after_restart"] == persisted["facts"]["messages"]


def test_stale_cart_answer_vs_fresh_read(full_run: dict[str, Any]) -> None:
    for contender in GUARDED:
        stale = one(full_run, "stale-cart", variant="default-instructions", contender=contender, turn=2)
        fresh = one(full_run, "stale-cart", variant="fresh-cart", contender=contender, turn=2)
        for run in (stale, fresh):
            assert run["cart"] == [] and run["cart_total"] == "0.00", "another channel emptied the cart"
        # The stale-read guard marked turn 1's cart result, so even the default instructions re-read the cart.
        for run in (stale, fresh):
            assert [e["name"] for e in tool_events(run)] == ["view_cart"] and "$0.00" in run["answer"]
            assert [e["guard"] for e in run["trace"] if e["name"] == "model"] == ["stale read flagged", None]
    row = next(r for r in full_run["doc"]["guard_matrix"] if r["guard"] == "stale read")
    assert [row["cells"][c]["status"] for c in GUARDED] == ["fired", "fired"]
    assert [row["cells"][c]["status"] for c in ("langgraph-defaults", "create-agent", "maf")] == ["missing"] * 3
    assert all(row["cells"][c]["status"] != "fired" for c in CONTENDERS if c not in GUARDED), "none has the guard"


def test_parallel_tools_overlap_and_sequential_ones_do_not(full_run: dict[str, Any]) -> None:
    for contender in GUARDED:
        seq = one(full_run, "parallel-tools", variant="sequential", contender=contender)
        par = one(full_run, "parallel-tools", variant="parallel", contender=contender)
        for run in (seq, par):
            assert [(e["step"], e["name"]) for e in tool_events(run)] == [(1, "check_stock"), (1, "check_stock")]
            assert run["stop_reason"] == StopReason.DONE
        # What parallel means, read off the trace's own clock rather than a race of wall times: the two calls'
        # intervals overlap in the parallel run and follow one another in the sequential one.
        first, second = sorted(tool_events(par), key=lambda e: e["ended_at"])
        assert second["ended_at"] - second["duration_s"] < first["ended_at"], "parallel calls overlap in time"
        first, second = sorted(tool_events(seq), key=lambda e: e["ended_at"])
        assert second["ended_at"] - second["duration_s"] >= first["ended_at"] - 1e-3, "sequential calls do not"


TEN_ORCHARDS = "10 x The Quiet Orchard = 165.00, more than 3 copies and over 50.00"
ELEVEN_ORCHARDS = [{"id": 7, "title": "The Quiet Orchard", "quantity": 11, "lineTotal": "181.50"}]


def injected_add(run: dict[str, Any]) -> dict[str, Any]:
    [event] = [e for e in tool_events(run) if e["detail"].startswith('{"book_id":7,"quantity":10}')]
    return event


@pytest.mark.parametrize("contender", GUARDED)
def test_prompt_injection_adds_ten_copies_unless_a_human_is_asked(full_run: dict[str, Any], contender: str) -> None:
    unguarded = one(full_run, "prompt-injection", variant="no-gate", contender=contender)
    gated = one(full_run, "prompt-injection", variant="gate", contender=contender)
    for run in (unguarded, gated):
        assert run["stop_reason"] == StopReason.DONE
        assert run["facts"]["injected_into"] == "Salt Hours"
        assert [e["name"] for e in tool_events(run)] == [
            "search_books",
            "add_to_cart",
            "check_stock",
            "check_stock",
            "add_to_cart",
        ], "the model obeyed the note, then did the customer's goal"
    assert not injected_add(unguarded)["is_error"]
    assert unguarded["cart"] == ELEVEN_ORCHARDS and unguarded["cart_total"] == "181.50"

    refusal = approval_rejected("add_to_cart", TEN_ORCHARDS)
    assert injected_add(gated)["is_error"] and injected_add(gated)["detail"].endswith(refusal)
    assert gated["cart"] == QUIET_ORCHARD and gated["cart_total"] == "16.50"
    assert gated["facts"]["approval_asked"] == [TEN_ORCHARDS] and gated["facts"]["approval_answer"] == "no"
    assert "refused" in gated["answer"] and "$16.50" in gated["answer"]
    if contender == "langgraph":
        assert gated["facts"]["pauses"] == 1 and "interrupt()" in gated["facts"]["asked_through"]
    else:
        assert gated["facts"]["pauses"] == 0 and gated["facts"]["asked_through"] == "approve callback"


def test_prompt_injection_notice_names_where_the_note_was(full_run: dict[str, Any]) -> None:
    notice = next(s["notice"] for s in full_run["doc"]["scenarios"] if s["name"] == "prompt-injection")
    assert "Salt Hours" in notice and "181.50" in notice and TEN_ORCHARDS in notice


def test_store_db_keeps_every_run_in_one_file_as_its_own_customer(tmp_path: Path) -> None:
    from shared_tools.bookstore.store import BookStore, load_catalog

    store_db, path = tmp_path / "store.db", tmp_path / "runs.json"
    argv = ["bookstore", "prompt-injection", "--contenders", "handwritten,langgraph", "--no-trace"]
    for _ in range(2):  # the second invocation replays the same call ids: new customers keep them apart
        assert compare.main([*argv, "--store-db", str(store_db), "--json", str(path)]) == compare.EXIT_OK
        runs = json.loads(path.read_text(encoding="utf-8"))["runs"]
        carts = {(r["scenario"], r["variant"]): r["cart"] for r in runs}
        assert carts == {
            ("bookstore", "default"): QUIET_ORCHARD,
            ("bookstore", "precise-instructions"): QUIET_ORCHARD,
            ("prompt-injection", "no-gate"): ELEVEN_ORCHARDS,
            ("prompt-injection", "gate"): QUIET_ORCHARD,
        }
    with BookStore(store_db) as store:
        original = next(b["description"] for b in load_catalog()["books"] if b["id"] == 12)
        assert store.get_book(12).description == original, "the injected note was taken out again"
    with closing(sqlite3.connect(store_db)) as db:
        customers = db.execute("SELECT COUNT(DISTINCT customer_id) FROM cart_lines").fetchone()[0]
    assert customers == 2 * 8, "two invocations x eight runs, each with a cart of its own"


def test_guard_matrix_is_built_from_the_runs(full_run: dict[str, Any]) -> None:
    rows = {r["guard"]: r["cells"] for r in full_run["doc"]["guard_matrix"]}
    assert set(rows) == {
        "step limit",
        "token budget",
        "time budget",
        "reply cap",
        "repeat check",
        "unknown tool",
        "error hiding",
        "truncation",
        "stale read",
        "approval gate",
    }
    order = (
        "handwritten",
        "langgraph",
        "langgraph-defaults",
        "create-agent",
        "maf",
        "pydantic-ai",
        "openai-agents",
        "smolagents",
        "strands",
    )
    expected = {
        "approval gate": ("fired", "fired", "not run", "fired", "fired", "fired", "fired", "not run", "fired"),
        "reply cap": ("fired", "fired", "missing", "missing", "missing", "missing", "missing", "missing", "missing"),
        # PydanticAI's UsageLimits and Strands' limits={"total_tokens"} are token budgets of the framework's own.
        "token budget": ("fired", "fired", "missing", "missing", "missing", "fired", "missing", "missing", "fired"),
        # MAF's max_duration_seconds, PydanticAI's run(timeout=).
        "time budget": ("fired", "fired", "missing", "missing", "fired", "fired", "missing", "missing", "missing"),
        "repeat check": ("fired", "fired", "missing", "missing", "missing", "missing", "missing", "missing", "missing"),
        "truncation": ("fired", "fired", "missing", "missing", "missing", "missing", "missing", "missing", "missing"),
    }
    for guard, statuses in expected.items():
        want = dict(zip(order, statuses, strict=True))
        assert [rows[guard][c]["status"] for c in CONTENDERS if c in want] == [
            want[c] for c in CONTENDERS if c in want
        ], guard
    assert rows["error hiding"]["langgraph-defaults"]["status"] == "raised"
    assert rows["stale read"]["create-agent"]["status"] == "missing"  # it runs the session now, and answers stale
    assert full_run["doc"]["who_owns_what"]["rows"][0][0] == "loop"


def test_report_is_one_self_contained_page(full_run: dict[str, Any]) -> None:
    page = full_run["report"]
    assert page.startswith("<!DOCTYPE html>")
    assert page.count('<svg xmlns="http://www.w3.org/2000/svg" class="chart"') == len(SCENARIOS), "a chart each"
    assert page.count('<svg xmlns="http://www.w3.org/2000/svg" class="diagram"') == 1, "and the graph's picture"
    assert "<script" not in page and 'src="http' not in page and "<link" not in page
    assert "graph TD;" in page and "__start__ --&gt; model;" in page, "the mermaid text, escaped"


def test_report_guard_matrix_has_a_cell_per_contender_and_guard(full_run: dict[str, Any]) -> None:
    page = full_run["report"]
    guards = page[page.index('<section id="guards">') : page.index('<section id="owners">')]
    rows = full_run["doc"]["guard_matrix"]
    cells = [cell for row in rows for cell in row["cells"].values()]
    for status, css in (("fired", "fired"), ("missing", "missing"), ("raised", "raised"), ("not run", "notrun")):
        count = sum(cell["status"] == status for cell in cells)
        assert count > 0, status  # the default run shows every kind of cell
        assert guards.count(f'<td class="{css}">') == count, status
    assert guards.count("<tr>") == len(rows) + 1, "a header row and a row per guard"
    assert '<td class="fired">blocked 3rd identical call</td>' in guards  # repeat check, guarded contenders


def test_both_renderers_explain_every_guard_status_and_who_owns_what() -> None:
    from comparison.closing import GUARD_LEGEND, OWNERS_SUMMARY
    from comparison.render import make_console, render_guard_matrix, render_who_owns_what
    from comparison.report import render_report

    buffer = io.StringIO()
    console = make_console(buffer)
    cells = {c: {"status": "fired", "text": "stopped"} for c in CONTENDERS}
    rows = [{"guard": "step limit", "scenario": "max-steps", "variant": "max-steps-2", "cells": cells}]
    render_guard_matrix(console, rows, list(CONTENDERS))
    render_who_owns_what(console)
    terminal = " ".join(buffer.getvalue().split())
    document = {
        "model": "scripted",
        "contenders": [{"name": c, "description": c} for c in CONTENDERS],
        "scenarios": [],
        "runs": [],
        "guard_matrix": rows,
        "mermaid": "",
        "who_owns_what": {"columns": [], "rows": []},
    }
    page = " ".join(render_report(document).split())
    assert set(GUARD_LEGEND) == {"fired", "missing", "not exercised", "not measured", "raised", "not run"}
    for status, meaning in GUARD_LEGEND.items():
        assert f"{status} = {meaning}" in terminal
        assert f"{status}: {meaning}" in page
    assert OWNERS_SUMMARY in terminal and OWNERS_SUMMARY in page


def records_of(full_run: dict[str, Any], scenario: str) -> list[Any]:
    from comparison.records import RunRecord

    return [RunRecord(**{k: v for k, v in r.items() if k != "outcome"}) for r in runs_of(full_run, scenario)]


def test_every_notice_point_is_one_line_and_one_report_bullet(full_run: dict[str, Any]) -> None:
    page = full_run["report"]
    for scenario in SCENARIOS:
        points = scenario.notice_points(records_of(full_run, scenario.name))
        text = scenario.notice_text(records_of(full_run, scenario.name))
        assert len(points) >= 2, scenario.name
        assert text.splitlines() == [" ".join(p.split()) for p in points], scenario.name
        section = page[page.index(f'<section id="{scenario.name}">') :]
        section = section[: section.index("</section>")]
        bullets = section[section.index('<div class="notice">') :]
        assert bullets.count("<li>") == len(points), scenario.name


def test_report_tells_the_two_orders_questions_apart(full_run: dict[str, Any]) -> None:
    page = full_run["report"]
    section = page[page.index('<section id="orders">') :]
    section = section[: section.index("</section>")]
    table = section[section.index("<table>") :]
    assert table.index("<th>goal</th>") < table.index("<th>contender</th>")
    goals = ("Where is my order 4512?", "Where is my order 9999?")
    for goal in goals:
        assert table.count(f"<td>{goal}</td>") == len(CONTENDERS), goal
        assert section.count(f"<div><b>“{goal}”</b>: ") == 1, "one chart legend group per question"
    bookstore = page[page.index('<section id="bookstore">') :]
    assert "<th>goal</th>" not in bookstore[: bookstore.index("</section>")], "one goal: no goal column"


def test_terminal_tells_the_two_orders_questions_apart(full_run: dict[str, Any]) -> None:
    import re

    from comparison.render import make_console, render_scenario
    from comparison.scenarios import SCENARIOS_BY_NAME

    buffer = io.StringIO()
    render_scenario(make_console(buffer), 2, SCENARIOS_BY_NAME["orders"], records_of(full_run, "orders"))
    out = buffer.getvalue()
    text = " ".join(out.split())  # long lines wrap at 100 columns
    goals = ("Where is my order 4512?", "Where is my order 9999?")
    same = re.findall(r"(\S+ · '[^']+'): the same trace as (\S+ · '[^']+')", text)
    assert len(set(same)) == len(same), "no two runs named alike"
    # The four contenders on our own code and LangGraph or MAF send the same prompt: the same trace as the first,
    # per question. A framework with a prompt of its own (smolagents', or any other's tokens) is shown apart.
    alike = ("langgraph", "langgraph-defaults", "create-agent", "maf")
    assert {(f"{c} · {goal!r}", f"handwritten · {goal!r}") for c in alike for goal in goals} <= set(same)
    assert all(first.startswith("handwritten · ") for _, first in same)
    answers = text[text.index("What the user sees:") :]
    for contender in CONTENDERS:
        for goal in goals:
            assert answers.count(f"{contender} · {goal!r}:") == 1, (contender, goal)
    # one table per question, titled with it, each with every contender once
    tables = re.split(r"^goal: ", out[: out.index("What the user sees:")], flags=re.MULTILINE)[1:]
    assert [table.splitlines()[0].strip() for table in tables] == list(goals)
    for table in tables:
        rows = [line.split("│")[1].strip() for line in table.splitlines() if line.startswith("│")]
        assert rows == list(CONTENDERS)


def test_same_traces_names_the_first_identical_run() -> None:
    from comparison.render import same_traces

    def record(contender: str, detail: str, error: str | None = None) -> Any:
        from comparison.records import RunRecord

        event = {"step": 1, "name": "get_order", "detail": detail, "tokens": 0, "is_error": False, "duration_s": 0}
        return RunRecord(
            "orders",
            "default",
            "",
            contender,
            "goal",
            1,
            None if error else "done",
            error,
            None,
            "",
            1,
            1,
            1,
            [1],
            0.0,
            [event],
            [],
            "0.00",
        )

    runs = [record("a", "x"), record("b", "y"), record("c", "x"), record("d", "y"), record("e", "x", "Boom: no")]
    assert same_traces(runs, ["A", "B", "C", "D", "E"]) == [None, None, "A", "B", None]


@pytest.mark.parametrize(
    ("tokens", "shown"),
    [
        ([5, 6, 7, 8, 9, 10, 11, 12], "5 6 7 8 9 10 11 12"),
        ([5, 6, 7, 8, 9, 10, 11, 12, 13], "5 6 7 … 12 13"),
        (list(range(1, 31)), "1 2 3 … 29 30"),
        ([], ""),
    ],
)
def test_tokens_per_step_cell_shortens_only_long_runs(tokens: list[int], shown: str) -> None:
    from comparison.render import tokens_per_step_cell

    assert tokens_per_step_cell(tokens) == shown


# --- the command line ----------------------------------------------------------------------------------------


def test_list_names_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    assert compare.main(["--list"]) == compare.EXIT_OK
    out = capsys.readouterr().out
    for scenario in SCENARIOS:
        assert scenario.name in out


def test_graph_prints_the_mermaid_diagram(capsys: pytest.CaptureFixture[str]) -> None:
    assert compare.main(["--graph"]) == compare.EXIT_OK
    snapshot = (ROOT / "tests" / "snapshots" / "graph_mermaid.txt").read_text(encoding="utf-8")
    assert capsys.readouterr().out.rstrip("\n") == snapshot.rstrip("\n")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["no-such-scenario"], "unknown scenario 'no-such-scenario'"),
        (["bookstore", "--model", "gpt:five"], "Unknown model spec 'gpt:five'"),
        (["bookstore", "--model", "scripted:nobody"], "Unknown model spec 'scripted:nobody'"),
        (["bookstore", "--contenders", "handwritten,autogen"], "unknown contender 'autogen'"),
        (["bookstore", "--max-steps", "0"], "--max-steps must be at least 1"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], says: str) -> None:
    assert compare.main(argv) == compare.EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1 and says in captured.err


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_ollama_is_one_line_and_exit_3(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OLLAMA_HOST", f"127.0.0.1:{_closed_port()}")
    assert compare.main(["bookstore", "--model", "ollama:qwen3:4b"]) == compare.EXIT_UNAVAILABLE
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "ollama serve" in err and "Traceback" not in err


def test_max_steps_option_and_contender_selection(tmp_path: Path) -> None:
    path = tmp_path / "runs.json"
    argv = ["bookstore", "--max-steps", "2", "--contenders", "handwritten", "--json", str(path)]
    assert compare.main(argv) == compare.EXIT_OK
    runs = json.loads(path.read_text(encoding="utf-8"))["runs"]
    assert [(r["contender"], r["stop_reason"], r["model_calls"]) for r in runs] == [
        ("handwritten", StopReason.MAX_STEPS, 2)
    ] * len(SCENARIOS_BY_NAME["bookstore"].variants)


def test_json_to_stdout_keeps_stdout_pure(capsys: pytest.CaptureFixture[str]) -> None:
    assert compare.main(["orders", "--contenders", "handwritten", "--json", "-"]) == compare.EXIT_OK
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert [r["goal"] for r in document["runs"]] == ["Where is my order 4512?", "Where is my order 9999?"]
    width = columns_setting() or WIDTH
    assert captured.err.splitlines()[0] == " 1. orders ".center(width, "─"), "the tables go to stderr"


def test_chat_keeps_the_conversation_and_resumes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from handwritten import AgentLoop, Session
    from langgraph_version import GraphAgent, GraphSession
    from shared_tools.bookstore.store import BookStore
    from shared_tools.bookstore.tools import make_tools
    from shared_tools.models import make_model

    tools = make_tools(BookStore())
    for contender in GUARDED:
        # A folder per contender, so each starts from no saved conversation (the carts are apart anyway: every
        # thread and contender is a customer of its own, see tests/test_front_door.py).
        db = tmp_path / contender / "chat.db"
        db.parent.mkdir()
        argv = ["chat", "--contender", contender, "--thread", "t1", "--session-db", str(db)]
        monkeypatch.setattr(sys, "stdin", io.StringIO(f"{SEED_GOAL}\nhello there\n\n"))
        assert compare.main(argv) == compare.EXIT_OK
        monkeypatch.setattr(sys, "stdin", io.StringIO("What is my cart total now?\n"))
        assert compare.main(argv) == compare.EXIT_OK, "a second process resumes the thread"
        if contender == "handwritten":
            loop = AgentLoop(make_model("scripted"), tools)
            messages = Session.load(db.with_name(f"{db.stem}.t1.json"), loop).messages
        else:
            with GraphSession.sqlite(GraphAgent(make_model("scripted"), tools), "", path=str(db), thread_id="t1") as s:
                messages = blocking(s.messages)
        humans = [m.content for m in messages if m.type == "human"]
        assert humans == [SEED_GOAL, "What is my cart total now?"], "the unknown goal was refused, not stored"
        assert "$16.50" in messages[-1].content and messages[-1].type == "ai"
    capsys.readouterr()


@pytest.mark.parametrize("contender", ["handwritten", "langgraph"])
def test_chat_says_which_files_beside_the_session_db_it_writes(
    contender: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.db"
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{SEED_GOAL}\n"))
    assert compare.main(["chat", "--contender", contender, "--session-db", str(db)]) == compare.EXIT_OK
    said = [line for line in capsys.readouterr().out.splitlines() if "a file beside --session-db" in line]
    written = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(("-wal", "-shm")))
    if contender == "handwritten":  # the conversation is a JSON file of its own: said, with the store beside it
        assert written == ["s.default.json", "s.store.db"]
        assert said == [
            f"handwritten saves this conversation in {tmp_path / 's.default.json'}, a file beside "
            f"--session-db {db}; the cart is in {tmp_path / 's.store.db'}."
        ]
    else:  # the graph's thread is in the session database itself, as the first line says
        assert written == ["s.db", "s.store.db"] and said == []


def test_chat_store_db_puts_the_cart_where_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from shared_tools.bookstore.store import BookStore

    db, store_db = tmp_path / "chat.db", tmp_path / "elsewhere" / "shop.db"
    store_db.parent.mkdir()
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{SEED_GOAL}\n"))
    argv = ["chat", "--session-db", str(db), "--store-db", str(store_db)]
    assert compare.main(argv) == compare.EXIT_OK
    with BookStore(store_db) as store:
        assert store.cart(chat_customer("handwritten", "default")).quantity_of(7) == 1
    assert not db.with_name(f"{db.stem}.store.db").exists()
    capsys.readouterr()


def _python(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, *args], cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs
    )


def test_python_dash_m_compare_works() -> None:
    process = _python("-m", "compare", "--list")
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert all(s.name in out for s in SCENARIOS)


@pytest.mark.skipif(sys.platform == "win32", reason="sends SIGINT")
def test_ctrl_c_prints_what_ran_exits_130_and_keeps_the_session_files(tmp_path: Path) -> None:
    from handwritten import AgentLoop, Session
    from langgraph_version import GraphAgent, GraphSession
    from shared_tools.bookstore.store import BookStore
    from shared_tools.bookstore.tools import make_tools
    from shared_tools.models import make_model

    path, db = tmp_path / "runs.json", tmp_path / "sessions.db"
    # 3,000 turns of long-session take minutes, so the interrupt lands while its runs (in the worker processes
    # when there are two CPUs, beside session's) are going on.
    process = _python(
        "compare.py",
        "session",
        "long-session",
        "--turns",
        "3000",
        "--no-trace",
        "--json",
        str(path),
        "--session-db",
        str(db),
    )
    assert process.stdout is not None
    for line in process.stdout:
        if "What to notice" in line:  # the session scenario is done and rendered
            break
    process.send_signal(signal.SIGINT)
    rest, err = process.communicate(timeout=60)
    assert process.returncode == compare.EXIT_INTERRUPTED, err
    assert "Traceback" not in err and "Interrupted" in rest
    assert not processes_running_with(str(path)), "no worker process outlives the command"
    document = json.loads(path.read_text(encoding="utf-8"))
    assert document["interrupted"] is True
    session_runs = [r for r in document["runs"] if r["scenario"] == "session"]
    assert len(session_runs) == 2 * len(CONTENDERS) * 2, "two variants x four contenders x two turns"
    assert len([r for r in document["runs"] if r["scenario"] == "long-session"]) < 3000, "stopped before the end"
    kept = one({"runs": session_runs}, "session", variant="persisted", contender="langgraph", turn=2)
    tools = make_tools(BookStore())
    saved = Session.load(db.with_name(f"{db.stem}.session-persisted.json"), AgentLoop(make_model("scripted"), tools))
    agent = GraphAgent(make_model("scripted"), tools)
    with GraphSession.sqlite(agent, "", path=str(db), thread_id="session-persisted") as thread:
        assert len(blocking(thread.messages)) == len(saved.messages) == kept["facts"]["messages"]


def processes_running_with(text: str) -> list[int]:
    """The processes whose command line holds `text` (read from /proc; none where there is no /proc)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text in cmdline.read_bytes().decode(errors="replace"):
                found.append(int(cmdline.parent.name))
        except OSError:  # the process ended while we looked
            continue
    return found


def test_a_real_model_run_goes_through_ollama_with_a_spinner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A replay of Ollama's wire format (no model runs): proves the real-model path, not a model's behaviour."""
    from tests.ollama_replay import OllamaReplayServer, ReplayReply

    script = [
        ReplayReply(thinking="Look up order 4512.", tool_calls=[("get_order_status", {"order_id": 4512})]),
        ReplayReply(text="Order 4512 has shipped (TRK-88)."),
        ReplayReply(thinking="Look up order 9999.", tool_calls=[("get_order_status", {"order_id": 9999})]),
        ReplayReply(text="I could not find order 9999."),
    ]
    path = tmp_path / "runs.json"
    with OllamaReplayServer(script=script) as server:
        monkeypatch.setenv("OLLAMA_HOST", server.base_url)
        argv = ["orders", "--model", "ollama:qwen3:4b", "--contenders", "handwritten", "--json", str(path)]
        assert compare.main(argv) == compare.EXIT_OK
        assert server.remaining == 0
    runs = json.loads(path.read_text(encoding="utf-8"))["runs"]
    assert [(r["stop_reason"], r["tool_calls"], r["answer"]) for r in runs] == [
        (StopReason.DONE, 1, "Order 4512 has shipped (TRK-88)."),
        (StopReason.DONE, 1, "I could not find order 9999."),
    ]
    assert runs[0]["trace"][0]["detail"] == "1 tool call(s); plan: Look up order 4512."
    assert runs[0]["tokens_per_step"] == [150, 150], "usage as Ollama reported it (120 prompt + 30 output)"
    capsys.readouterr()


def test_spinner_says_which_run_which_step_and_how_long() -> None:
    from comparison.render import Progress, make_console
    from shared_tools.results import TraceEvent

    progress = Progress(make_console(io.StringIO()))
    progress.start_run("bookstore · default · handwritten")
    assert "step 1: waiting for the model" in progress.__rich__().plain
    progress.on_event(TraceEvent(1, "model", 0.1, "1 tool call(s)", 10))
    assert "step 1: running tools" in progress.__rich__().plain
    progress.on_event(TraceEvent(1, "search_books", 0.1, "{} -> []"))
    text = progress.__rich__().plain
    assert text.startswith("bookstore · default · handwritten  step 2: waiting for the model")


def test_chat_says_one_line_when_the_model_breaks_mid_conversation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A replay of Ollama's wire format whose second reply is cut off: one line, no traceback, and the chat goes on
    to its end (exit 0): the cut-short turn is kept for the next question to finish."""
    from tests.ollama_replay import OllamaReplayServer, ReplayReply

    script = [
        ReplayReply(thinking="Look up order 4512.", tool_calls=[("get_order_status", {"order_id": 4512})]),
        ReplayReply(text="Order 4512", drop_mid_stream=True),
    ]
    with OllamaReplayServer(script=script) as server:
        monkeypatch.setenv("OLLAMA_HOST", server.base_url)
        monkeypatch.setattr(sys, "stdin", io.StringIO("Where is my order 4512?\n"))
        argv = ["chat", "--model", "ollama:qwen3:4b", "--session-db", str(tmp_path / "chat.db")]
        assert compare.main(argv) == compare.EXIT_OK
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    out = " ".join(captured.out.split())  # the console wraps long lines
    assert out.count("The model call failed") == 1 and "broke in the middle of a reply" in out, out


def test_chat_finishes_a_turn_an_outage_cut_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from langgraph_version import GraphAgent, GraphSession
    from shared_tools.bookstore.store import BookStore
    from shared_tools.bookstore.tools import make_tools
    from tests.doubles import ScriptModel

    def outage(_: Any) -> Any:
        raise ConnectionError("the model server went away")

    db = tmp_path / "chat.db"
    broken = GraphAgent(ScriptModel(replies=[outage]), make_tools(BookStore()))
    with GraphSession.sqlite(broken, INSTRUCTIONS, path=str(db), thread_id="t1") as session:
        with pytest.raises(ConnectionError):
            session.ask("Where is my order 4512?")
        assert blocking(session.unfinished)
        with pytest.raises(RuntimeError, match=r"continue_unfinished\(\)"):
            session.ask("What is my cart total now?")

    monkeypatch.setattr(sys, "stdin", io.StringIO("\n"))
    assert compare.main(["chat", "--contender", "langgraph", "--thread", "t1", "--session-db", str(db)]) == 0
    assert "finishing it from its last checkpoint" in capsys.readouterr().out
    with GraphSession.sqlite(broken, INSTRUCTIONS, path=str(db), thread_id="t1") as session:
        assert not blocking(session.unfinished)
        humans = [m.content for m in blocking(session.messages) if m.type == "human"]
        assert humans == ["Where is my order 4512?"], "the question was answered once, not asked twice"
        assert "TRK-88" in blocking(session.messages)[-1].content


def test_the_guards_the_renderers_count_are_typed_facts_in_the_trace(full_run: dict[str, Any]) -> None:
    """Truncation, the repeat check and the approval gate are read from each trace entry's `guard`, not its text."""
    from dataclasses import replace

    from comparison.closing import guard_matrix

    for contender in GUARDED:
        cut = tool_events(one(full_run, "big-results", variant="truncated", contender=contender))[0]
        assert cut["guard"] == Guard.TRUNCATED and "... [truncated" in cut["detail"]
        looping = tool_events(one(full_run, "looping-model", contender=contender))
        blocked = [e for e in looping if "You already called" in e["detail"]]
        assert blocked and [e for e in looping if e["guard"] == Guard.REPEAT] == blocked
        gated = injected_add(one(full_run, "prompt-injection", variant="gate", contender=contender))
        assert gated["guard"] == Guard.APPROVAL_REFUSED and gated["detail"].endswith(
            approval_rejected("add_to_cart", TEN_ORCHARDS)
        )
    for contender in UNGUARDED:  # the defaults graph records no guard; create_agent only hidden error details
        seen = {e["guard"] for r in full_run["runs"] if r["contender"] == contender for e in r["trace"]}
        allowed = {None, Guard.ERROR_HIDDEN, Guard.APPROVAL_REFUSED} if contender == "create-agent" else {None}
        assert seen <= allowed, (contender, seen)

    records = records_of(full_run, "looping-model")
    unlabelled = [replace(r, trace=[{**e, "guard": None} for e in r.trace]) for r in records]
    for runs, status in ((records, "fired"), (unlabelled, "missing")):
        [row] = [row for row in guard_matrix(runs, list(CONTENDERS)) if row["guard"] == "repeat check"]
        assert [row["cells"][c]["status"] for c in GUARDED] == [status, status], "the wording alone is not enough"


@pytest.mark.parametrize(("reason", "says_why"), [(StopReason.DONE, False), (StopReason.MAX_STEPS, True)])
def test_a_chat_turn_shows_its_trace_the_answer_and_an_unusual_stop(reason: StopReason, says_why: bool) -> None:
    from comparison.render import make_console, render_turn

    event = {"step": 1, "name": "view_cart", "detail": "{} -> []", "tokens": 0, "is_error": False, "duration_s": 0}
    buffer = io.StringIO()
    render_turn(make_console(buffer), [event], "Your cart is empty.", reason)
    lines = buffer.getvalue().splitlines()
    assert lines[:2] == ["[step 1] view_cart           0 ms  {} -> []", "assistant> Your cart is empty."]
    assert lines[2:] == ([f"(stop reason: {reason})"] if says_why else [])


# --- the scenarios across worker processes ------------------------------------------------------------------


def run_with_workers(scenarios: list[Scenario], workers: int, folder: Path) -> list[RunRecord]:
    """Every record of `scenarios` as `compare.py` collects them, with `workers` processes."""
    folder.mkdir(exist_ok=True)
    records: list[RunRecord] = []
    with ScenarioRuns(scenarios, RunOptions(session_db=folder / "sessions.db"), workers=workers) as runs:
        for index in range(len(scenarios)):
            runs.collect(index, records.append)
    assert multiprocessing.active_children() == [], "every worker has exited"
    return records


def what_ran(record: RunRecord) -> tuple[Any, ...]:
    """A record without its clock readings: what two runs of the scripted model must agree on."""
    return (
        record.scenario,
        record.variant,
        record.contender,
        record.turn,
        record.stop_reason,
        record.error,
        record.answer,
        record.tokens_per_step,
        record.tool_calls,
        record.cart,
        record.settings,
        [(e["name"], e.get("detail")) for e in record.trace],
    )


@pytest.mark.skipif(compare.parallel_workers() == 1 and sys.platform != "linux", reason="needs fork")
def test_workers_hand_over_the_same_records_in_the_same_order_as_one_process(tmp_path: Path) -> None:
    # Scenarios with several variants, so a scenario's variants run in different workers; session and
    # time-travel read and write session files while the other worker runs too. None has a time budget: how far a
    # run gets in 20 ms depends on the machine's load, not on where it ran.
    chosen = [SCENARIOS_BY_NAME[name] for name in ("big-results", "session", "prompt-injection", "time-travel")]
    alone = run_with_workers(chosen, 1, tmp_path / "one")
    for workers in (2, 3):
        together = run_with_workers(chosen, workers, tmp_path / f"w{workers}")
        assert [what_ran(r) for r in together] == [what_ran(r) for r in alone]
    persisted = [r for r in alone if r.scenario == "session" and r.variant == "persisted" and r.turn == 2]
    assert persisted and all(r.facts["survived_restart"] for r in persisted)


def long_scenario(turns: int = 3000) -> Scenario:
    return SCENARIOS_BY_NAME["long-session"].with_turns(turns)


def ctrl_c_when(ready: Callable[[], bool]) -> None:
    """Send this process a SIGINT (as the terminal's Ctrl-C would) as soon as `ready()` says so."""

    def watch() -> None:
        while not ready():
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=watch, daemon=True).start()


@pytest.mark.skipif(sys.platform != "linux", reason="forks and signals its workers")
def test_ctrl_c_stops_every_worker_and_hands_over_the_runs_that_finished(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    endless = replace(long_scenario(), variants=long_scenario().variants[:1])  # one unit, for minutes
    scenarios = [SCENARIOS_BY_NAME["orders"], endless, SCENARIOS_BY_NAME["hallucinated-tool"]]
    records: list[RunRecord] = []
    with ScenarioRuns(scenarios, RunOptions(session_db=tmp_path / "sessions.db"), workers=2) as runs:
        runs.collect(0, records.append)
        # The terminal's Ctrl-C reaches the whole process group; this one reaches this process only, which
        # passes it on. It lands while this process waits for the endless conversation, once the other worker
        # has run hallucinated-tool, the scenario after it.
        ctrl_c_when(lambda: (2, 0) in runs._ended)
        with pytest.raises(KeyboardInterrupt):
            runs.collect(1, records.append)
        assert runs.interrupted
        runs.collect(2, records.append)  # after the Ctrl-C: what finished, without waiting
    assert multiprocessing.active_children() == []
    assert "Traceback" not in capfd.readouterr().err
    # A conversation cut short has no records (`run_session` makes them at its end), as in one process.
    assert [(r.scenario, r.contender) for r in records] == [
        *(("orders", c) for c in CONTENDERS for _ in range(2)),
        *(("hallucinated-tool", c) for c in CONTENDERS),
    ]


@pytest.mark.skipif(sys.platform != "linux", reason="forks and signals its workers")
def test_a_ctrl_c_that_reaches_only_a_worker_stops_the_whole_run(tmp_path: Path) -> None:
    with ScenarioRuns([long_scenario()], RunOptions(session_db=tmp_path / "sessions.db"), workers=2) as runs:
        first = multiprocessing.active_children()[0]
        threading.Timer(0.5, os.kill, (first.pid, signal.SIGINT)).start()
        with pytest.raises(KeyboardInterrupt):
            runs.collect(0, lambda record: None)
        assert runs.interrupted
    assert multiprocessing.active_children() == []


@pytest.mark.skipif(sys.platform != "linux", reason="forks and kills its workers")
def test_a_worker_that_dies_is_an_error_naming_what_it_ran(tmp_path: Path) -> None:
    with ScenarioRuns([long_scenario()], RunOptions(session_db=tmp_path / "sessions.db"), workers=2) as runs:
        for worker in multiprocessing.active_children():
            os.kill(worker.pid, signal.SIGKILL)  # type: ignore[arg-type]
        ended = r"worker process ended while it ran long-session/full \(exit code -9\)"
        with pytest.raises(RuntimeError, match=ended):
            runs.collect(0, lambda record: None)
    assert multiprocessing.active_children() == []


def test_what_a_run_raises_in_a_worker_ends_the_command_after_the_runs_before_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--model scripted:<persona>` on a goal no script covers: the scenarios before it are shown, then one line."""
    no_script = replace(SCENARIOS_BY_NAME["orders"], goals=("Sing me a song",))
    monkeypatch.setattr(compare, "SCENARIOS_BY_NAME", {**SCENARIOS_BY_NAME, "orders": no_script})
    monkeypatch.setattr(compare, "parallel_workers", lambda: 2)
    assert compare.main(["bookstore", "orders", "hallucinated-tool", "--no-trace"]) == compare.EXIT_USAGE
    captured = capsys.readouterr()
    assert "1. bookstore" in captured.out and "hallucinated-tool" not in captured.out
    [line] = captured.err.strip().splitlines()
    assert "has no script for the goal 'Sing me a song'" in line and "Traceback" not in captured.err
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize(
    ("argv", "parallel"),
    [
        ([], True),
        (["--model", "scripted:shopper"], True),
        (["-v"], False),  # log lines of two processes would interleave
        (["--store-db", "shop.db"], False),  # a file other processes may share: one run at a time
    ],
)
def test_only_scripted_in_memory_runs_go_to_the_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str], parallel: bool
) -> None:
    asked: list[int] = []

    def noting_workers(*args: Any, workers: int, **kwargs: Any) -> ScenarioRuns:
        asked.append(workers)
        return ScenarioRuns(*args, workers=workers, **kwargs)

    monkeypatch.setattr(compare, "parallel_workers", lambda: 2)
    monkeypatch.setattr(command, "ScenarioRuns", noting_workers)
    monkeypatch.chdir(tmp_path)
    assert compare.main(["orders", "--contenders", "handwritten", "--no-trace", *argv]) == compare.EXIT_OK
    assert asked == [2 if parallel else 1]


def test_parallel_workers_is_one_where_forking_is_unsafe(monkeypatch: pytest.MonkeyPatch) -> None:
    assert 1 <= compare.parallel_workers() <= MAX_WORKERS
    monkeypatch.setattr(sys, "platform", "darwin")
    assert compare.parallel_workers() == 1
    monkeypatch.undo()
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert compare.parallel_workers() == 1
    finally:
        stop.set()
        other.join()

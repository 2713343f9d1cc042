"""long-session, streaming and time-travel: what their records say, checked against the store, the files and the source.

Each scenario runs through the public runner on the scripted model (real LangGraph, real SQLite), and the facts
its lessons speak from are checked at their origin: the cart in the store, the bytes in the SQLite file, the
lines of the streaming functions, the `--turns` option. The attacker's questions: a model that never adds (no
checkpoint to replay), a lost reply with and without the call id, a flaky write retried by the model.
"""

from __future__ import annotations

import importlib
import inspect
import sqlite3
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import pytest

import compare
from comparison.contenders import CONTENDERS, SPECS
from comparison.experiments import (
    LostReply,
    _functions,
    code_lines,
    is_streaming_code,
    streaming_code,
)
from comparison.records import RunRecord, pick
from comparison.runner import RunOptions, run_scenario
from comparison.scenarios import CART_QUESTION, SCENARIOS_BY_NAME
from comparison.scenarios.s13_long_session import LONG_SESSION_TURNS, long_session_goals
from langgraph_version.thread_storage import sqlite_thread_storage
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.contender import Capability
from shared_tools.results import StopReason


def run(name: str, tmp_path: Path, **changes: object) -> list[RunRecord]:
    scenario = replace(SCENARIOS_BY_NAME[name], **changes) if changes else SCENARIOS_BY_NAME[name]
    records: list[RunRecord] = []
    run_scenario(scenario, RunOptions(session_db=tmp_path / "s.db"), records.append)
    return records


@pytest.fixture(scope="module")
def long_session(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[RunRecord], Path]:
    folder = tmp_path_factory.mktemp("long")
    return run("long-session", folder), folder / "s.db"


def turns(records: list[RunRecord], variant: str, contender: str) -> list[RunRecord]:
    return sorted(pick(records, variant=variant, contender=contender), key=lambda r: r.turn)


def test_long_session_runs_its_turns_for_both_sessions(long_session: tuple[list[RunRecord], Path]) -> None:
    records, _ = long_session
    for variant in ("full", "keep-turns", "summarize", "file"):
        for contender in ("handwritten", "langgraph"):
            mine = turns(records, variant, contender)
            assert [r.goal for r in mine] == list(long_session_goals(LONG_SESSION_TURNS))
            assert all(r.stop_reason == StopReason.DONE for r in mine)
            if variant != "summarize":  # a summary folds turns away: it holds fewer than were asked
                assert mine[-1].facts["turns"] == LONG_SESSION_TURNS
            assert all("messages" not in r.facts for r in mine[:-1]), "measured once, at the end"
    # the framework-only threads say why they are not in it; the JSON file has no checkpoint storage option
    skipped = {(r.variant, r.contender) for r in records if "not_available" in r.facts}
    windowless = {c for c in CONTENDERS if not SPECS[c].has(Capability.HISTORY_WINDOW)}  # said in their specs
    assert {c for _, c in skipped} == {"langgraph-defaults", "create-agent", "handwritten"} | windowless | (
        {"maf"} if "maf" in CONTENDERS else set()
    )
    assert {v for v, c in skipped if c == "handwritten"} == {"file-full"}
    # MAF's AgentSession runs the whole history in memory and in its file; it has no window and no checkpoints.
    assert {v for v, c in skipped if c == "maf"} <= {"keep-turns", "summarize", "file-full"}


def test_forgetting_costs_a_tool_call_and_the_whole_history_answers_from_memory(
    long_session: tuple[list[RunRecord], Path],
) -> None:
    records, _ = long_session
    for contender in ("handwritten", "langgraph"):
        whole = turns(records, "full", contender)[-1]
        windowed = turns(records, "keep-turns", contender)[-1]
        assert whole.goal == windowed.goal == CART_QUESTION
        assert whole.tool_calls == 0 and "16.50" in (whole.answer or "")
        assert [e["name"] for e in windowed.trace if e["name"] != "model"] == ["view_cart"]
        assert "16.50" in (windowed.answer or "") and windowed.cart_total == "16.50"
        # the same question late in the conversation is cheaper with the window
        late_whole = turns(records, "full", contender)[-2]
        late_windowed = turns(records, "keep-turns", contender)[-2]
        assert late_windowed.tokens < late_whole.tokens


def test_stored_bytes_and_checkpoints_are_what_the_sqlite_file_holds(
    long_session: tuple[list[RunRecord], Path],
) -> None:
    records, db = long_session
    delta = turns(records, "file", "langgraph")[-1]
    full = turns(records, "file-full", "langgraph")[-1]
    assert (delta.facts["checkpoints"], delta.facts["stored_bytes"]) == sqlite_thread_storage(db, "long-session-file")
    assert (full.facts["checkpoints"], full.facts["stored_bytes"]) == sqlite_thread_storage(
        db, "long-session-file-full"
    )
    with closing(sqlite3.connect(db)) as conn:
        count = conn.execute("SELECT COUNT(*) FROM checkpoints WHERE thread_id = 'long-session-file'").fetchone()[0]
    assert count == delta.facts["checkpoints"] > LONG_SESSION_TURNS
    assert full.facts["stored_bytes"] > 2 * delta.facts["stored_bytes"], "whole history per checkpoint grows faster"
    hand = turns(records, "file", "handwritten")[-1]
    assert hand.facts["stored_bytes"] == db.with_name("s.long-session-file.json").stat().st_size
    assert "checkpoints" not in hand.facts


def test_turns_option_changes_only_long_session(tmp_path: Path) -> None:
    scenario = SCENARIOS_BY_NAME["long-session"].with_turns(3)
    assert scenario.goals == long_session_goals(3)
    assert SCENARIOS_BY_NAME["bookstore"].with_turns(3) is SCENARIOS_BY_NAME["bookstore"]
    with pytest.raises(ValueError):
        long_session_goals(1)
    code = compare.main(
        [
            "long-session",
            "--turns",
            "3",
            "--contenders",
            "handwritten",
            "--no-trace",
            "--json",
            str(tmp_path / "out.json"),
        ]
    )
    assert code == compare.EXIT_OK
    import json

    runs = json.loads((tmp_path / "out.json").read_text())["runs"]
    assert max(r["turn"] for r in runs if r["contender"] == "handwritten") == 3


@pytest.mark.parametrize("turns_given", ["1", "0", "10001"])
def test_a_turn_count_out_of_range_is_a_usage_error(turns_given: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert compare.main(["long-session", "--turns", turns_given]) == compare.EXIT_USAGE
    assert "--turns must be 2 to 10,000" in capsys.readouterr().err


def test_a_budget_cliff_is_reported_when_the_turns_bring_it(tmp_path: Path) -> None:
    """A small token budget makes the cliff appear in a few turns: the lesson names the first turn it stopped."""
    scenario = SCENARIOS_BY_NAME["long-session"].with_turns(6).with_limits(max_tokens=3_500)
    scenario = replace(scenario, variants=scenario.variants[:1])
    records: list[RunRecord] = []
    run_scenario(scenario, RunOptions(contenders=("handwritten",)), records.append)
    stopped = [r for r in records if r.stop_reason == StopReason.TOKEN_BUDGET]
    assert stopped, "the history grows the prompt past the budget"
    points = scenario.notice_points(records)
    first_hit = min(stopped, key=lambda r: r.turn)
    assert any(p.startswith("The budget cliff:") and f"stopped at turn {first_hit.turn} " in p for p in points)


def test_streaming_shows_the_first_words_before_the_whole_answer(tmp_path: Path) -> None:
    records = run("streaming", tmp_path)
    for contender in ("handwritten", "langgraph", "langgraph-defaults", "create-agent"):
        [plain] = pick(records, variant="invoke", contender=contender)
        [streamed] = pick(records, variant="stream", contender=contender)
        assert streamed.facts["text_chunks"] > 1, contender
        assert streamed.facts["first_text_s"] < streamed.facts["answer_s"] == streamed.wall_s
        assert streamed.facts["streamed_text_is_answer"] is True
        assert plain.facts["first_text_s"] == plain.wall_s, "not streamed: the answer appears when the run ends"
        assert (plain.answer, plain.tokens, plain.tool_calls) == (streamed.answer, streamed.tokens, streamed.tool_calls)


def test_streaming_code_is_counted_from_the_source() -> None:
    found = streaming_code("handwritten")
    assert found and all(f["where"].startswith("handwritten.loop.") for f in found)
    assert all(f["lines"] > 0 for f in found)
    assert streaming_code("nobody") == []
    source = 'def f(x):\n    """Doc\n    string."""\n\n    # why\n    return x  # ok\n'
    assert code_lines(source) == 2


@pytest.mark.parametrize("contender", CONTENDERS)
def test_streaming_code_reads_each_function_as_inspect_getsource_does(contender: str) -> None:
    """The count comes from one parse per module; it must find what reading every function on its own finds."""
    expected = []
    for module_name in SPECS[contender].source_modules:
        for name, function in _functions(importlib.import_module(module_name)):
            try:
                source = inspect.getsource(function)
            except OSError:  # made at run time (a dataclass's __init__): no source to read
                continue
            if is_streaming_code(source):
                expected.append({"where": f"{module_name}.{name}", "lines": code_lines(source)})
    assert expected or not SPECS[contender].has(Capability.STREAMING), "every contender that streams has its code"
    assert streaming_code(contender) == expected


def test_time_travel_rewinds_the_conversation_not_the_cart(tmp_path: Path) -> None:
    records = run("time-travel", tmp_path)
    for contender in ("handwritten", "langgraph"):
        _first, second = sorted(pick(records, variant="rewind", contender=contender), key=lambda r: r.turn)
        assert second.facts["rewound_turns"] == 1
        assert second.facts["copies_before_rewind"] == {"The Quiet Orchard": 1} == second.facts["copies"]
        assert [e["name"] for e in second.trace if e["name"] != "model"] == ["view_cart"], "it re-reads the cart"
    [_, keyed] = sorted(pick(records, variant="replay", contender="langgraph"), key=lambda r: r.turn)
    [_, unkeyed] = sorted(pick(records, variant="replay-no-id", contender="langgraph"), key=lambda r: r.turn)
    for replayed in (keyed, unkeyed):
        assert [e["name"] for e in replayed.trace if e["name"] != "model"] == ["add_to_cart"], "the tools node ran"
    assert keyed.facts["copies"] == {"The Quiet Orchard": 1}, "the call id kept the replay from adding"
    assert unkeyed.facts["copies"] == {"The Quiet Orchard": 2}, "without it the replay adds again"
    expected = {
        ("retry", "create-agent"): 1,  # ToolRetryMiddleware retries the same call: the id makes it a replay
        ("retry-no-id", "create-agent"): 2,
        ("retry", "handwritten"): 2,  # the model retries with a new call: no id can tell it from a second add
        ("retry", "langgraph"): 2,
        ("retry", "langgraph-defaults"): 1,  # ToolNode re-raises: the run ends, the write stays
    }
    for (variant, contender), copies in expected.items():
        [r] = pick(records, variant=variant, contender=contender)
        assert r.facts["copies"] == {"The Quiet Orchard": copies}, (variant, contender)
        assert r.facts["add_to_cart_ran"] == (1 if contender == "langgraph-defaults" else 2)


def test_a_lost_reply_loses_only_the_first_reply_after_the_write() -> None:
    store = BookStore()
    lost = LostReply()
    tools = {t.name: t for t in lost.wrap(make_tools(store, "c1"))}
    call = {"name": "add_to_cart", "args": {"book_id": 7, "quantity": 1}, "id": "call-1", "type": "tool_call"}
    with pytest.raises(TimeoutError):
        tools["add_to_cart"].invoke(call)
    assert store.cart("c1").lines[0].quantity == 1, "the write went through before the reply was lost"
    again = tools["add_to_cart"].invoke(call)
    assert "replayed" in again.content and store.cart("c1").lines[0].quantity == 1


def test_a_model_that_never_adds_leaves_nothing_to_replay(tmp_path: Path) -> None:
    scenario = SCENARIOS_BY_NAME["time-travel"]
    scenario = replace(
        scenario,
        goals=("Where is my order 4512?", CART_QUESTION),
        variants=tuple(v for v in scenario.variants if v.name == "replay"),
    )
    records: list[RunRecord] = []
    run_scenario(scenario, RunOptions(), records.append)
    [ran] = [r for r in records if "not_available" not in r.facts]
    assert ran.facts["nothing_to_replay"] is True and ran.error is None
    assert any("no checkpoint before it to replay" in p for p in scenario.notice_points(records))

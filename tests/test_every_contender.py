"""Every contender in every scenario: each runs what its framework offers, and says in words what it cannot.

The session and stale-cart scenarios run every contender (LangGraph's prebuilt graph in a checkpointer
thread, `create_agent(..., checkpointer=...)` on one thread), prompt-injection's gate runs `create_agent`
through `HumanInTheLoopMiddleware`, and the combinations a framework has no way to run (an approval gate in
LangGraph's prebuilt graph, sequential tools in `ToolNode`) are records that say why, never nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import ToolMessage

import compare
from comparison.approvals import DemoHuman
from comparison.closing import OWNERS, WHO_OWNS_WHAT
from comparison.contenders import ASKING_CONTENDERS, CONTENDERS, build_contender, spec_of
from comparison.conversations import facts_of, open_conversation, run_gated
from comparison.records import RunRecord
from comparison.runner import NOT_AVAILABLE, RunOptions, run_scenario
from comparison.scenarios import (
    CART_QUESTION,
    INSTRUCTIONS,
    SCENARIOS,
    SCENARIOS_BY_NAME,
    SEED_GOAL,
    contenders_for,
)
from comparison.scenarios.s12_prompt_injection import INJECTED_BOOK, INJECTION
from handwritten.contender import NO_CHECKPOINTS, NO_STORAGE_OPTION
from langgraph_version.contenders.langgraph_defaults import (
    NO_APPROVAL_GATE,
    NO_HISTORY_POLICY,
    NO_REPLAY,
    NO_REWIND,
    NO_SEQUENTIAL_TOOLS,
)
from maf_version.contender import NO_MAF_REPLAY, NO_MAF_STORAGE, NO_MAF_SUMMARY
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.models import make_model
from shared_tools.results import AgentLimits, AgentOptions, Guard, StopReason

FRAMEWORK_ONLY = ("langgraph-defaults", "create-agent")

EXPECTED_NOT_AVAILABLE = {
    ("prompt-injection", "gate", "langgraph-defaults"): NO_APPROVAL_GATE,
    ("parallel-tools", "sequential", "langgraph-defaults"): NO_SEQUENTIAL_TOOLS,
    ("parallel-tools", "sequential", "create-agent"): NO_SEQUENTIAL_TOOLS,
    **{
        ("long-session", v.name, c): NO_HISTORY_POLICY
        for v in SCENARIOS_BY_NAME["long-session"].variants
        for c in FRAMEWORK_ONLY
    },
    ("long-session", "file-full", "handwritten"): NO_STORAGE_OPTION,
    **{("time-travel", "rewind", c): NO_REWIND for c in FRAMEWORK_ONLY},
    **{("time-travel", v, "handwritten"): NO_CHECKPOINTS for v in ("replay", "replay-no-id")},
    **{("time-travel", v, c): NO_REPLAY for v in ("replay", "replay-no-id") for c in FRAMEWORK_ONLY},
    ("long-session", "summarize", "maf"): NO_MAF_SUMMARY,
    ("long-session", "file-full", "maf"): NO_MAF_STORAGE,
    **{("time-travel", v, "maf"): NO_MAF_REPLAY for v in ("replay", "replay-no-id")},
}
"""The only combinations a framework has no way to run, and the words that say why. long-session compares our
two sessions' history policies (the frameworks' threads have none); rewind and replay are our sessions'."""


@pytest.fixture(scope="module")
def every_record(tmp_path_factory: pytest.TempPathFactory) -> list[RunRecord]:
    records: list[RunRecord] = []
    options = RunOptions(session_db=tmp_path_factory.mktemp("sessions") / "sessions.db")
    for scenario in SCENARIOS:
        run_scenario(scenario, options, records.append)
    return records


def test_every_scenario_variant_and_contender_has_a_record(every_record: list[RunRecord]) -> None:
    for scenario in SCENARIOS:
        for variant in scenario.variants:
            for contender in CONTENDERS:
                found = [
                    r
                    for r in every_record
                    if (r.scenario, r.variant, r.contender) == (scenario.name, variant.name, contender)
                ]
                assert found, f"{scenario.name}/{variant.name}/{contender} printed nothing"
                why = EXPECTED_NOT_AVAILABLE.get((scenario.name, variant.name, contender))
                if why is None:
                    # It ran: a stop reason, or what it raised (LangGraph's defaults raise a tool's exception).
                    assert all(r.stop_reason != NOT_AVAILABLE and (r.stop_reason or r.error) for r in found)
                else:
                    [record] = found
                    assert record.stop_reason == NOT_AVAILABLE
                    assert record.facts["not_available"] == why
                    assert record.model_calls == record.tool_calls == 0 and record.trace == []


def test_sessions_and_stale_cart_run_every_contender(every_record: list[RunRecord]) -> None:
    for name in ("session", "stale-cart"):
        for contender in CONTENDERS:
            turns = [r for r in every_record if r.scenario == name and r.contender == contender]
            assert [r.turn for r in turns] == [1, 2] * len(SCENARIOS_BY_NAME[name].variants)
            assert all(r.stop_reason == StopReason.DONE for r in turns)
    persisted = [r for r in every_record if r.scenario == "session" and r.variant == "persisted" and r.turn == 2]
    assert {r.contender for r in persisted if r.facts["survived_restart"]} == set(CONTENDERS)
    # The remembered total is stale for every framework alike; instructions make each re-read the cart.
    stale = [r for r in every_record if r.scenario == "stale-cart" and r.turn == 2]
    assert {r.contender for r in stale if r.variant == "default-instructions" and r.tool_calls == 0} == set(CONTENDERS)
    assert {r.contender for r in stale if r.variant == "fresh-cart" and "0.00" in (r.answer or "")} == set(CONTENDERS)


def test_the_helper_says_who_runs_a_variant_and_why_not_the_others() -> None:
    injection = SCENARIOS_BY_NAME["prompt-injection"]
    gate = next(v for v in injection.variants if v.approval_gate)
    running, why_not = contenders_for(injection, gate)
    assert running == ["handwritten", "langgraph", "create-agent", "maf"]
    assert why_not == {"langgraph-defaults": NO_APPROVAL_GATE}
    assert contenders_for(injection, gate, ["create-agent"]) == (["create-agent"], {})
    for scenario in SCENARIOS:
        for variant in scenario.variants:
            running, why_not = contenders_for(scenario, variant)
            assert sorted([*running, *why_not]) == sorted(CONTENDERS)
            assert all(reason.strip() for reason in why_not.values())


@pytest.mark.parametrize("contender", [*FRAMEWORK_ONLY, "maf"])
def test_a_framework_session_answers_turn_two_from_memory(contender: str, store: BookStore) -> None:
    agent = build_contender(contender, make_model("scripted"), make_tools(store, "c1"), AgentOptions())
    conversation = open_conversation(contender, agent, INSTRUCTIONS, "t1", None, resume=False, customer_id="c1")
    first = conversation.ask(SEED_GOAL)
    second = conversation.ask(CART_QUESTION)
    assert first.stop_reason is StopReason.DONE and first.tool_calls == 4
    assert second.stop_reason is StopReason.DONE
    assert (second.model_calls, second.tool_calls) == (1, 0), "answered from the thread, no tool call"
    assert "16.50" in (second.answer or "")
    assert second.messages[0].content == INSTRUCTIONS
    assert [m.content for m in second.messages if m.type == "human"] == [SEED_GOAL, CART_QUESTION]
    assert facts_of(conversation)["messages"] == len(second.messages) == 13


def test_the_defaults_graph_thread_survives_a_reopen_on_sqlite(store: BookStore, tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    tools = make_tools(store, "c1")

    def reopen(resume: bool) -> object:
        agent = build_contender("langgraph-defaults", make_model("scripted"), tools, AgentOptions())
        return open_conversation("langgraph-defaults", agent, INSTRUCTIONS, "t1", db, resume=resume, customer_id="c1")

    conversation = reopen(False)
    assert conversation.ask(SEED_GOAL).stop_reason is StopReason.DONE  # type: ignore[attr-defined]
    kept = facts_of(conversation)["messages"]
    conversation.close()  # type: ignore[attr-defined]
    again = reopen(True)  # a new agent and a new thread object on the same file, as after a restart
    assert facts_of(again)["messages"] == kept
    second = again.ask(CART_QUESTION)  # type: ignore[attr-defined]
    assert (second.tool_calls, "16.50" in (second.answer or "")) == (0, True)
    again.close()  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="customer"):
        agent = build_contender("langgraph-defaults", make_model("scripted"), tools, AgentOptions())
        facts_of(open_conversation("langgraph-defaults", agent, INSTRUCTIONS, "t1", db, resume=True, customer_id="c2"))


def gated_create_agent(store: BookStore, human: DemoHuman, contender: str = "create-agent") -> object:
    book = store.get_book(INJECTED_BOOK)
    store.set_description(INJECTED_BOOK, f"{book.description} {INJECTION}")
    options = AgentOptions(limits=AgentLimits(max_steps=8))
    agent = build_contender(contender, make_model("scripted:gullible"), make_tools(store, "c1"), options, human)
    if contender in ASKING_CONTENDERS:
        return agent.run(INSTRUCTIONS, SEED_GOAL)
    return run_gated(contender, agent, INSTRUCTIONS, SEED_GOAL, human)


def test_maf_gate_refuses_the_injected_ten_copies_through_its_approval_request(store: BookStore) -> None:
    human = DemoHuman(store, "c1")
    result = gated_create_agent(store, human, "maf")
    assert result.stop_reason is StopReason.DONE  # type: ignore[attr-defined]
    assert [(line.book.title, line.quantity) for line in store.cart("c1").lines] == [("The Quiet Orchard", 1)]
    assert len(human.asked) == 1 and "10 x The Quiet Orchard" in human.asked[0], "the one-copy add is waved through"
    [line] = [e for e in result.trace if e.guard is Guard.APPROVAL_REFUSED]  # type: ignore[attr-defined]
    assert line.is_error and line.name == "add_to_cart"
    refused = [m for m in result.messages if isinstance(m, ToolMessage) and m.status == "error"]  # type: ignore[attr-defined]
    assert len(refused) == 1 and "rejected" in refused[0].text, "MAF's own refusal text reached the model"
    assert "to_function_approval_response" in human.facts(spec_of("maf"))["asked_through"]


def test_maf_gate_runs_the_write_when_the_human_says_yes(store: BookStore) -> None:
    human = DemoHuman(store, "c1", answer=True)
    result = gated_create_agent(store, human, "maf")
    assert result.stop_reason is StopReason.DONE  # type: ignore[attr-defined]
    assert [(line.book.title, line.quantity) for line in store.cart("c1").lines] == [("The Quiet Orchard", 11)]
    assert len(human.asked) == 2, "the one-copy add makes a line of 11 copies: asked again, as the other gates ask"


def test_create_agent_gate_refuses_the_injected_ten_copies(store: BookStore) -> None:
    human = DemoHuman(store, "c1")
    result = gated_create_agent(store, human)
    assert result.stop_reason is StopReason.DONE  # type: ignore[attr-defined]
    assert [(line.book.title, line.quantity) for line in store.cart("c1").lines] == [("The Quiet Orchard", 1)]
    assert human.pauses == 1 and len(human.asked) == 1, "only the risky add is asked about, the one-copy add is not"
    assert "10 x The Quiet Orchard" in human.asked[0]
    refused = [m for m in result.messages if isinstance(m, ToolMessage) and m.status == "error"]  # type: ignore[attr-defined]
    assert len(refused) == 1 and "User rejected the tool call for `add_to_cart`" in refused[0].text
    assert "refused" in (result.answer or "")  # type: ignore[attr-defined]
    [line] = [e for e in result.trace if e.guard is Guard.APPROVAL_REFUSED]  # type: ignore[attr-defined]
    assert line.is_error and line.name == "add_to_cart", "the refused call is on the trace, as in our loops"
    assert "HumanInTheLoopMiddleware" in human.facts(spec_of("create-agent"))["asked_through"]


def test_create_agent_gate_runs_the_write_when_the_human_says_yes(store: BookStore) -> None:
    human = DemoHuman(store, "c1", answer=True)
    result = gated_create_agent(store, human)
    assert result.stop_reason is StopReason.DONE  # type: ignore[attr-defined]
    assert [(line.book.title, line.quantity) for line in store.cart("c1").lines] == [("The Quiet Orchard", 11)]
    # Asked twice, as the hand-written loop asks: the customer's own one-copy add now makes a line of 11 copies.
    assert human.pauses == len(human.asked) == 2
    assert human.facts(spec_of("create-agent"))["approval_answer"] == "yes"


def test_the_defaults_graph_refuses_a_gate_in_words(store: BookStore) -> None:
    with pytest.raises(ValueError, match="no approval gate"):
        build_contender(
            "langgraph-defaults", make_model("scripted"), make_tools(store, "c1"), AgentOptions(), DemoHuman(store)
        )


def test_one_framework_contender_alone_prints_its_sessions(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = [
        "session",
        "prompt-injection",
        "--contenders",
        "create-agent",
        "--no-trace",
        "--session-db",
        str(tmp_path / "s.db"),
    ]
    assert compare.main(argv) == compare.EXIT_OK
    out = capsys.readouterr().out
    assert "create-agent" in out and ": not run;" not in out


# --- maf: the fifth contender ----------------------------------------------------------------------------------------


def test_the_scenarios_page_shows_the_closing_table_with_the_maf_column() -> None:
    readme = (Path(__file__).resolve().parents[1] / "docs" / "scenarios.md").read_text()
    assert "| | " + " | ".join(OWNERS) + " |" in readme
    for row in WHO_OWNS_WHAT:
        assert "| " + " | ".join(row) + " |" in readme, row[0]


def test_maf_at_its_step_limit_is_max_steps_and_its_forced_answer_is_shown_as_such(tmp_path: Path) -> None:
    records: list[RunRecord] = []
    scenario = SCENARIOS_BY_NAME["max-steps"]
    run_scenario(scenario, RunOptions(contenders=("maf",)), records.append)
    [capped] = [r for r in records if r.variant == "max-steps-2"]
    assert capped.stop_reason == StopReason.MAX_STEPS and capped.answer is None
    assert capped.model_calls == 3, "MAF's extra call with tools disabled is counted, not hidden"
    assert "forced_answer" in capped.facts
    points = scenario.notice_points(records)
    assert any("made one more model call with tools disabled (call 3)" in p for p in points)
    [token] = [r for r in records if r.variant == "token-budget"]
    assert "max_tokens" in token.facts["not_honoured"]
    assert any("maf: ran past max_tokens=2,500, which it was given but cannot honour" in p for p in points)


def test_every_lesson_is_one_paragraph_of_text() -> None:
    for scenario in SCENARIOS:
        assert isinstance(scenario.lesson, str) and "\n" not in scenario.lesson, scenario.name


def test_the_report_and_the_terminal_show_a_forced_answer_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "r.html"
    assert compare.main(["max-steps", "--contenders", "maf", "--no-trace", "--report", str(report)]) == compare.EXIT_OK
    out = " ".join(capsys.readouterr().out.split())
    assert "forced answer, not the answer" in out
    assert "forced answer, not the answer" in report.read_text()

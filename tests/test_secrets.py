"""Secrets and personal data: where a tool's password and a customer's address may and may not end up.

A tool's exception holding a password reaches neither the model, the trace, the JSON, the terminal nor the logs
unless ``detailed_errors=True``; what LangGraph's defaults raise is masked before it is shown; e-mail and street
addresses in arguments are masked everywhere.
"""

from __future__ import annotations

import io
import json
import logging
from dataclasses import asdict, replace
from typing import Any

import pytest
from langchain_core.messages import BaseMessage

from comparison.contenders import CONTENDERS, SPECS, build_contender
from comparison.document import build_document, write_document
from comparison.records import result_record
from comparison.render import make_console, render_scenario
from comparison.run_setup import CUSTOMER_ID, RunOptions, run_key
from comparison.runner import run_scenario
from comparison.sanitize import SafeLogFormatter
from comparison.scenarios import INSTRUCTIONS, SEED_GOAL, Scenario, Variant
from shared_tools.bookstore.faults import FAILURE_MESSAGE, FAKE_SECRET, Faults
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.models import make_model
from shared_tools.results import AgentOptions, TraceEvent
from tests.conftest import IMPLEMENTATIONS, build_agent
from tests.doubles import ScriptModel, ai, call

LEAKY = Faults(failing_tool="check_stock")
EMAIL, STREET = "ann.lee@example.com", "12 Baker Street"


def model_input(messages: list[BaseMessage]) -> str:
    """Everything a model would be sent on its next call, as one string."""
    return json.dumps([m.model_dump() for m in messages], default=str)


@pytest.fixture
def all_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)  # the root logger: every library's records, tracebacks included
    return caplog


HIDING = [c for c in CONTENDERS if "error hiding" in SPECS[c].guards]
"""The contenders that claim to keep a tool's exception text from the model unless asked (`detailed_errors`)."""


@pytest.mark.parametrize("detailed", [False, True])
@pytest.mark.parametrize("contender", [c for c in CONTENDERS if c not in HIDING and c != "langgraph-defaults"])
def test_a_framework_without_error_hiding_shows_the_password_to_the_model_and_nowhere_else(
    contender: str, detailed: bool, all_logs: pytest.LogCaptureFixture
) -> None:
    events: list[TraceEvent] = []
    options = AgentOptions(detailed_errors=detailed, on_event=events.append)
    agent = build_contender(contender, make_model("scripted"), make_tools(BookStore(), faults=LEAKY), options)
    try:
        result = agent.run(INSTRUCTIONS, SEED_GOAL)
    except RuntimeError as exc:  # a framework whose run a tool's exception ends (PydanticAI): the caller gets it
        assert FAKE_SECRET in str(exc)
        return
    assert [e for e in result.trace if e.name == "check_stock" and e.is_error], "the failing tool was called"
    # The framework has no switch for it: the model reads the exception's text either way (the matrix's
    # "error hiding" is missing for it), while the trace, the live events and the logs stay masked.
    assert FAKE_SECRET in model_input(result.messages)
    assert "detailed_errors" in getattr(agent, "not_available", {}) or detailed
    places = {
        "trace": json.dumps([asdict(e) for e in result.trace]),
        "live events": json.dumps([asdict(e) for e in events]),
        "logs": all_logs.text,
    }
    assert {where for where, text in places.items() if FAKE_SECRET in text} == set()


@pytest.mark.parametrize("detailed", [False, True])
@pytest.mark.parametrize("contender", [c for c in HIDING if c != "langgraph-defaults"])
def test_a_tools_password_reaches_model_trace_and_logs_only_when_detailed(
    contender: str, detailed: bool, all_logs: pytest.LogCaptureFixture
) -> None:
    events: list[TraceEvent] = []
    options = AgentOptions(detailed_errors=detailed, on_event=events.append)
    agent = build_contender(contender, make_model("scripted"), make_tools(BookStore(), faults=LEAKY), options)
    try:
        result = agent.run(INSTRUCTIONS, SEED_GOAL)
    except RuntimeError as exc:  # a framework that ends the run with the tool's exception
        assert FAKE_SECRET in str(exc)  # the caller's to see, as LangGraph's ToolNode raises it
        seen = json.dumps([asdict(e) for e in events]) + all_logs.text
        assert any(e.name == "check_stock" and e.is_error for e in events) and FAKE_SECRET not in seen
        return

    failures = [e for e in result.trace if e.name == "check_stock" and e.is_error]
    assert failures, "the failing tool was called"
    places = {
        "model": model_input(result.messages),
        "trace": json.dumps([asdict(e) for e in result.trace]),
        "live events": json.dumps([asdict(e) for e in events]),
        "logs": all_logs.text,
    }
    if detailed:  # the opt-in: the model reads the whole message (the trace's e-mail mask happens to cover it)
        assert FAKE_SECRET in places["model"]
        said = "Error: Function failed. Exception: " if contender == "maf" else "check_stock failed: RuntimeError: "
        assert said + "orders db refused connection" in places["trace"]
    else:
        assert {where for where, text in places.items() if FAKE_SECRET in text} == set()
        # The e-mail mask would hide FAKE_SECRET in the trace even if the whole message got there; the message's
        # unmasked start shows that none of it did.
        unmasked = FAILURE_MESSAGE.split(":")[0]
        assert unmasked == "orders db refused connection"
        assert {where for where, text in places.items() if unmasked in text} == set()
        if contender in ("handwritten", "langgraph", "create-agent", "maf"):  # a framework's own words elsewhere
            assert ("Error: Function failed." if contender == "maf" else "check_stock failed.") in places["model"]


def test_langgraph_defaults_raise_the_tools_own_message_at_the_caller() -> None:
    """LangGraph's behaviour, kept as it ships: the exception (and its text) goes to whoever called the graph."""
    agent = build_agent("langgraph", make_model("scripted"), make_tools(BookStore(), faults=LEAKY))
    from langgraph_version import DefaultsGraphAgent

    defaults = DefaultsGraphAgent(make_model("scripted"), make_tools(BookStore(), faults=LEAKY))
    with pytest.raises(RuntimeError, match=FAKE_SECRET):
        defaults.run(INSTRUCTIONS, SEED_GOAL)
    assert FAKE_SECRET not in model_input(agent.run(INSTRUCTIONS, SEED_GOAL).messages)


def leaky_scenario() -> Scenario:
    return Scenario(
        name="leaky-tool",
        description="check_stock fails with a password in its message",
        lesson="Hide exception details from the model unless asked.",
        goals=(SEED_GOAL,),
        faults=LEAKY,
        variants=(
            Variant(name="details-off", label="detailed_errors=False"),
            Variant(name="details-on", label="detailed_errors=True", detailed_errors=True),
        ),
    )


def test_compare_json_terminal_and_logs_keep_the_password_out(
    tmp_path: Any, all_logs: pytest.LogCaptureFixture
) -> None:
    scenario = leaky_scenario()
    records: list[Any] = []
    details_off, details_on = (replace(scenario, variants=(v,)) for v in scenario.variants)
    run_scenario(details_off, RunOptions(), records.append)
    assert FAKE_SECRET not in all_logs.text  # the opted-in run below may log it, as the model may see it
    run_scenario(details_on, RunOptions(), records.append)
    json_path = tmp_path / "runs.json"
    write_document(build_document("scripted", tuple(CONTENDERS), [scenario], records), str(json_path))
    document = json.loads(json_path.read_text(encoding="utf-8"))

    off = [r for r in document["runs"] if r["variant"] == "details-off"]
    on = [r for r in document["runs"] if r["variant"] == "details-on"]
    assert {r["contender"] for r in off} == set(CONTENDERS)
    assert [r["contender"] for r in off if FAKE_SECRET in json.dumps(r)] == []
    # The opt-in still works (so the check above could fail): the agents show the failure's own text.
    detail = "check_stock failed: RuntimeError: orders db refused connection"
    shown = {r["contender"] for r in on if detail in json.dumps(r["trace"])}
    assert {"handwritten", "langgraph", "create-agent"} <= shown

    raised = [r for r in document["runs"] if r["stop_reason"] is None]
    assert {r["contender"] for r in raised} >= {"langgraph-defaults"}
    for run in raised:  # what LangGraph raised is shown, with the password masked, whatever the variant
        assert run["error"] == "RuntimeError: " + FAILURE_MESSAGE.replace(f"shop:{FAKE_SECRET}@", "<credentials>@")
        assert FAKE_SECRET not in json.dumps(run)

    terminal = io.StringIO()
    render_scenario(make_console(terminal), 1, scenario, [r for r in records if r.variant == "details-off"])
    assert "RuntimeError" in terminal.getvalue() and FAKE_SECRET not in terminal.getvalue()


@pytest.mark.parametrize("kind", IMPLEMENTATIONS)
def test_addresses_in_tool_arguments_are_masked_in_trace_json_and_logs(
    kind: str, tmp_path: Any, all_logs: pytest.LogCaptureFixture
) -> None:
    query = f"a gift for {EMAIL}, to be sent to {STREET}"
    model = ScriptModel(replies=[ai("", call("search_books", "s1", query=query)), ai("Here are some ideas.")])
    store = BookStore()
    events: list[TraceEvent] = []
    result = build_agent(kind, model, make_tools(store), on_event=events.append).run(INSTRUCTIONS, "find a gift")
    key = run_key(leaky_scenario(), Variant(), kind, "find a gift", 1)
    record = result_record(key, store, CUSTOMER_ID, 0.0, result)
    json_path = tmp_path / "runs.json"
    write_document(build_document("scripted", (kind,), [], [record]), str(json_path))

    [search] = [e for e in result.trace if e.name == "search_books"]
    assert "<email>" in search.detail and "<address>" in search.detail
    for where, text in {
        "trace": json.dumps([asdict(e) for e in result.trace]),
        "json": json_path.read_text(),
        "logs": all_logs.text,
    }.items():
        assert EMAIL not in text and STREET not in text, where
    assert query in model_input(result.messages), "the model itself still has the customer's words"


def test_a_record_masks_the_answer_and_the_document_masks_facts_added_later(tmp_path: Any) -> None:
    """The answer is the model's words to the customer, but a record is written to files that are passed around:
    a model that repeats the customer's address puts it there. Facts added to a record after it was made (an
    approval reason, a title) are masked when the document is built."""
    answer = f"I will send it to {STREET}; the receipt goes to {EMAIL}."
    model = ScriptModel(replies=[ai(answer)])
    store = BookStore()
    result = build_agent("handwritten", model, make_tools(store)).run(INSTRUCTIONS, "send it")
    record = result_record(
        run_key(leaky_scenario(), Variant(), "handwritten", "send it", 1), store, CUSTOMER_ID, 0.0, result
    )
    assert record.answer == "I will send it to <address>; the receipt goes to <email>."
    assert EMAIL not in record.user_message
    record.facts["approval_asked"] = [f"ship to {STREET}"]
    json_path = tmp_path / "runs.json"
    write_document(build_document("scripted", ("handwritten",), [], [record]), str(json_path))
    text = json_path.read_text(encoding="utf-8")
    assert EMAIL not in text and STREET not in text
    assert "ship to <address>" in text
    assert result.answer == answer, "the result itself (what chat shows the customer) is not masked"


def test_log_lines_on_the_terminal_are_masked_and_cannot_drive_it() -> None:

    formatter = SafeLogFormatter("%(levelname)s %(name)s: %(message)s")
    record = logging.LogRecord("tool", logging.WARNING, __file__, 1, "%s failed for %s", ("\x1b]0;x\x07", EMAIL), None)
    line = formatter.format(record)
    assert line == "WARNING tool: \\x1b]0;x\\x07 failed for <email>"

"""Microsoft Agent Framework (`maf_version`): the adapter, each mapped setting, approval, sessions, cancel.

Real MAF (`agent-framework-core`) on the scripted model and on small test doubles; what the model was sent is read
from the doubles' prompts, so every claim about MAF's behaviour here is what MAF really did. Skipped when the `maf`
extra is not installed.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from agent_framework import Agent, Message
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatResult
from langchain_core.tools import StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from handwritten import AgentLoop
from maf_version import LangChainChatClient, MafAgent, MafCancelled, MafSession, maf_tool
from maf_version.agent import MAF_BAD_ARGUMENTS, MAF_FAILED, PENDING_KEY
from maf_version.client import reply_message, to_langchain
from shared_tools.bookstore import BookStore, Faults, RiskyWritePolicy, make_tools
from shared_tools.bookstore.faults import FAKE_SECRET
from shared_tools.guards import TOOL_CUT_RUNNING_TEXT
from shared_tools.models import ModelCallFailed
from shared_tools.models.scripted import ScriptedChatModel
from shared_tools.replies import invalid_call
from shared_tools.results import (
    AgentLimits,
    AgentOptions,
    CustomerMismatch,
    Guard,
    StopReason,
    Token,
    TokenKind,
    TraceEvent,
)
from tests.conftest import assert_sendable, assert_valid_history
from tests.doubles import ScriptModel, ToolBindingDouble, ai, call, provider_id

INSTRUCTIONS = "You are a bookstore assistant."
SEED_GOAL = "Add The Last Lighthouse to my cart. If it is not available, add another novel by the same author."
FALLBACK = "Function invocation limit reached before a final answer could be produced."
"""MAF's own text when its forced last call (tools disabled) still produced no text."""


def cart(store: BookStore) -> list[tuple[int, int]]:
    return [(line.book.id, line.quantity) for line in store.cart("c1").lines]


def tool_results(prompt: list[BaseMessage]) -> list[str]:
    return [str(m.content) for m in prompt if isinstance(m, ToolMessage)]


# --- the adapter ----------------------------------------------------------------------------------------------------


def test_our_tools_reach_the_model_with_langchains_own_schemas(store: BookStore) -> None:
    for tool in make_tools(store):
        assert maf_tool(tool).to_json_schema_spec() == convert_to_openai_tool(tool)


def test_a_reply_and_its_results_go_to_maf_and_back_unchanged() -> None:
    reply = AIMessage(
        "Let me look.",
        tool_calls=[{"name": "check_stock", "args": {"book_id": 7}, "id": "c-1", "type": "tool_call"}],
        additional_kwargs={"reasoning_content": "Check the stock."},
    )
    message = reply_message(reply, [])
    assert [c.type for c in message.contents] == ["text_reasoning", "text", "function_call"]
    from agent_framework import Content

    results = Message("tool", [Content.from_function_result("c-1", result="Error: Function failed.", exception="x")])
    back, result = to_langchain([message, results])
    assert isinstance(back, AIMessage) and back.text == "Let me look."
    assert back.tool_calls == reply.tool_calls
    assert back.additional_kwargs["reasoning_content"] == "Check the stock."
    assert isinstance(result, ToolMessage)
    assert (result.tool_call_id, result.name, result.status, result.text) == (
        "c-1",
        "check_stock",
        "error",
        "Error: Function failed.",
    )


def test_a_call_id_an_earlier_reply_used_gets_a_fresh_one() -> None:
    earlier = AIMessage("", tool_calls=[{"name": "add_to_cart", "args": {}, "id": "call_0", "type": "tool_call"}])
    again = AIMessage("", tool_calls=[{"name": "add_to_cart", "args": {}, "id": "call_0", "type": "tool_call"}])
    [content] = reply_message(again, [earlier]).contents
    assert content.call_id != "call_0" and content.call_id.startswith("call_0_")


def test_the_seed_job_runs_as_in_the_hand_written_loop_with_the_same_tokens(store: BookStore) -> None:
    events: list[TraceEvent] = []
    result = MafAgent(ScriptedChatModel(), make_tools(store), AgentOptions(on_event=events.append)).run(
        INSTRUCTIONS, SEED_GOAL
    )
    baseline = AgentLoop(ScriptedChatModel(), make_tools(BookStore())).run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.DONE and result.answer == baseline.answer
    assert result.tokens_per_step == baseline.tokens_per_step  # same prompt, same schemas: usage carried exactly
    assert [e.name for e in result.trace] == [e.name for e in baseline.trace]
    assert events == result.trace  # emitted live, in order
    assert cart(store) == [(7, 1)]
    assert_valid_history(result.messages)


def test_add_to_cart_gets_the_models_call_id_as_its_request_key(store: BookStore) -> None:
    result = MafAgent(ScriptedChatModel(), make_tools(store)).run(INSTRUCTIONS, SEED_GOAL)
    [add] = [c for m in result.messages if isinstance(m, AIMessage) for c in m.tool_calls if c["name"] == "add_to_cart"]
    assert store.applied_requests("c1", [add["id"], "another-id"]) == {add["id"]}


async def test_the_client_streams_text_first_and_whole_tool_calls_last(store: BookStore) -> None:
    # The client alone, without MAF's tool loop around it (which would run the call it streams).
    client = LangChainChatClient(ScriptedChatModel(), function_invocation_configuration={"enabled": False})
    tools = [maf_tool(t) for t in make_tools(store)]
    stream = client.get_response([Message("user", ["Where is my order 4512?"])], stream=True, options={"tools": tools})
    updates = [update async for update in stream]
    final = await stream.get_final_response()
    assert len(updates) > 2 and updates[0].contents[0].type == "text_reasoning"
    [call_content] = [c for m in final.messages for c in m.contents if c.type == "function_call"]
    assert (call_content.name, call_content.parse_arguments()) == ("get_order_status", {"order_id": 4512})
    assert final.usage_details and final.usage_details["total_token_count"] > 0


# --- the mapped settings --------------------------------------------------------------------------------------------


def test_max_steps_is_maf_max_iterations_and_its_forced_answer_is_kept_as_such(store: BookStore) -> None:
    options = AgentOptions(limits=AgentLimits(max_steps=3))
    result = MafAgent(ScriptedChatModel(persona="looper"), make_tools(store), options).run(INSTRUCTIONS, SEED_GOAL)
    # Three rounds, then a fourth model call with tools disabled, which the looper ignores: MAF drops that call
    # and answers with its own fallback text. Not "done": MAF ran out of iterations.
    assert result.stop_reason is StopReason.MAX_STEPS
    assert (result.model_calls, result.tool_calls) == (4, 3)
    assert result.answer is None and result.forced_answer == FALLBACK
    assert result.user_message() != FALLBACK


@pytest.mark.parametrize("checks_first", [0, 3], ids=["adds-only", "checks-then-adds"])
@pytest.mark.parametrize("answer", [False, True])
def test_max_steps_holds_across_the_approval_rounds_maf_runs_again(
    store: BookStore, answer: bool, checks_first: int
) -> None:
    """A model that asks for the same gated add every time: each approval MAF pauses on ends one `Agent.run`
    and the answer starts another, so MAF's own iteration count is not what bounds the run: ours is. At most
    max_steps model calls plus MAF's forced last one, whatever the human answers; also when the forced call
    (tools off) is answered with a gated add anyway, after ungated calls used up the iterations."""
    checks = [ai("", call("check_stock", f"check-{i}", book_id=7)) for i in range(checks_first)]
    replies = checks + [ai("", call("add_to_cart", f"add-{i}", book_id=7, quantity=10)) for i in range(30)]
    options = AgentOptions(limits=AgentLimits(max_steps=3), needs_approval=RiskyWritePolicy(store))
    agent = MafAgent(ScriptModel(replies=replies), make_tools(store), options, approve=lambda call, why: answer)
    result = agent.run(INSTRUCTIONS, "Add ten copies of book 7.")
    assert result.stop_reason is StopReason.MAX_STEPS, result.stop_reason
    assert result.model_calls <= 4 and sum(e.is_model for e in result.trace) == result.model_calls
    assert_valid_history(result.messages)


def test_a_forced_answer_the_model_writes_is_kept_but_is_not_the_answer(store: BookStore) -> None:
    model = ScriptModel(replies=[ai("", call("check_stock", book_id=2)), ai("Book 2 is out of stock.")])
    result = MafAgent(model, make_tools(store), AgentOptions(limits=AgentLimits(max_steps=1))).run(INSTRUCTIONS, "?")
    assert result.stop_reason is StopReason.MAX_STEPS
    assert (result.answer, result.forced_answer) == (None, "Book 2 is out of stock.")


def test_maf_stops_at_the_error_streak_one_round_earlier_than_our_loops(store: BookStore) -> None:
    faults = Faults(failing_tool="get_order_status")
    replies = [ai("", call("get_order_status", f"g{i}", order_id=4512)) for i in range(2)] + [ai("It keeps failing.")]
    options = AgentOptions(limits=AgentLimits(max_consecutive_errors=2))
    result = MafAgent(ScriptModel(replies=replies), make_tools(store, faults=faults), options).run(INSTRUCTIONS, "?")
    # MAF stops when the streak *reaches* the number (2 failed rounds), then makes its forced call; our loops
    # and .NET's FunctionInvokingChatClient stop when it is *exceeded* (a third failed round).
    assert result.stop_reason is StopReason.TOO_MANY_ERRORS
    assert (result.model_calls, result.tool_calls) == (3, 2)
    assert result.forced_answer == "It keeps failing."


@pytest.mark.parametrize("detailed", [False, True])
def test_detailed_errors_is_include_detailed_errors_and_the_trace_shows_what_the_model_read(
    store: BookStore, detailed: bool
) -> None:
    model = ScriptModel(replies=[ai("", call("get_order_status", order_id=4512)), ai("Sorry.")])
    tools = make_tools(store, faults=Faults(failing_tool="get_order_status"))
    result = MafAgent(model, tools, AgentOptions(detailed_errors=detailed)).run(INSTRUCTIONS, "?")
    [seen] = tool_results(model.prompts[-1])
    [line] = [e for e in result.trace if not e.is_model]
    if detailed:
        assert seen.startswith(f"{MAF_FAILED} Exception: ") and FAKE_SECRET in seen
        assert line.guard is None and FAKE_SECRET not in line.detail  # the trace masks the credentials
    else:
        assert seen == MAF_FAILED  # every exception, our ToolExceptions too: MAF keeps them all from the model
        assert line.guard is Guard.ERROR_HIDDEN and line.detail.endswith(f"-> {seen}")
    assert line.is_error


def test_a_store_refusal_is_hidden_from_the_model_too(store: BookStore) -> None:
    model = ScriptModel(replies=[ai("", call("check_stock", book_id=999)), ai("No such book.")])
    MafAgent(model, make_tools(store)).run(INSTRUCTIONS, "?")
    assert tool_results(model.prompts[-1]) == [MAF_FAILED]


def test_bad_arguments_get_mafs_parsing_error_and_change_nothing(store: BookStore) -> None:
    model = ScriptModel(replies=[ai("", call("add_to_cart", book_id=7, quantity=50)), ai("I could not add it.")])
    result = MafAgent(model, make_tools(store)).run(INSTRUCTIONS, "?")
    [line] = [e for e in result.trace if not e.is_model]
    assert tool_results(model.prompts[-1]) == [MAF_BAD_ARGUMENTS]
    assert line.guard is Guard.INVALID_ARGS and line.detail.endswith(MAF_BAD_ARGUMENTS)
    assert cart(store) == []


def test_an_unknown_tool_is_answered_by_maf_and_still_traced(store: BookStore) -> None:
    result = MafAgent(ScriptedChatModel(persona="hallucinator"), make_tools(store)).run(INSTRUCTIONS, SEED_GOAL)
    first = result.trace[1]
    assert (first.name, first.guard, first.is_error) == ("find_book", Guard.UNKNOWN_TOOL, True)
    assert first.detail.endswith('-> Error: Requested function "find_book" not found.')
    assert result.stop_reason is StopReason.DONE and cart(store) == [(7, 1)]


def order_tools(log: list[str]) -> list[StructuredTool]:
    async def slow(label: str) -> str:
        log.append(f"start {label}")
        await asyncio.sleep(0.05)
        log.append(f"end {label}")
        return label

    return [StructuredTool.from_function(coroutine=slow, name="slow", description="Takes a while.")]


@pytest.mark.parametrize("parallel", [False, True])
def test_parallel_tools_is_allow_concurrent_invocation(parallel: bool) -> None:
    log: list[str] = []
    model = ScriptModel(replies=[ai("", call("slow", "s1", label="a"), call("slow", "s2", label="b")), ai("Done.")])
    result = MafAgent(model, order_tools(log), AgentOptions(parallel_tools=parallel)).run(INSTRUCTIONS, "?")
    assert result.stop_reason is StopReason.DONE
    if parallel:
        assert log[:2] == ["start a", "start b"]
    else:
        assert log == ["start a", "end a", "start b", "end b"]
    assert_valid_history(result.messages)


async def test_mafs_own_time_budget_is_checked_after_a_round_and_forces_an_answer(store: BookStore) -> None:
    tools = make_tools(store, faults=Faults(latency_s=0.3))
    model = ScriptModel(replies=[ai("", call("check_stock", book_id=2)), ai("Out of time.")])
    client = LangChainChatClient(model, function_invocation_configuration={"max_duration_seconds": 0.2})
    agent = Agent(client=client, instructions=INSTRUCTIONS, tools=[maf_tool(t) for t in tools])
    response = await agent.run("Is book 2 in stock?")
    # The slow round ran to its end; then one more model call, tools disabled, and its text as the answer.
    assert response.text == "Out of time." and model.calls == 2


def test_the_time_budget_also_cuts_a_slow_tool_and_says_so(store: BookStore) -> None:
    tools = make_tools(store, faults=Faults(latency_s=0.5))
    model = ScriptModel(replies=[ai("", call("check_stock", "s1", book_id=2))])
    session = MafSession(MafAgent(model, tools, AgentOptions(limits=AgentLimits(max_duration=0.2))), INSTRUCTIONS)
    result = session.ask("Is book 2 in stock?")
    assert result.stop_reason is StopReason.TIME_BUDGET and result.forced_answer is None
    cut = result.trace[-1]
    assert (cut.name, cut.guard, cut.is_error) == ("check_stock", Guard.TOOL_TIMEOUT, True), "typed as our loops do"
    assert cut.detail.endswith(TOOL_CUT_RUNNING_TEXT)
    assert_valid_history(session.messages)  # the cut turn is kept, every call answered


class HangingModel(ToolBindingDouble):
    """A model whose reply never comes."""

    @property
    def _llm_type(self) -> str:
        return "hanging"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        raise AssertionError("the async path is the one under test")

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_maf_alone_does_not_bound_a_model_call_that_never_returns(store: BookStore) -> None:
    client = LangChainChatClient(HangingModel(), function_invocation_configuration={"max_duration_seconds": 0.1})
    agent = Agent(client=client, instructions=INSTRUCTIONS, tools=[maf_tool(t) for t in make_tools(store)])
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(agent.run("Where is my order 4512?"), 1.0)


def test_so_the_agent_bounds_the_whole_run_by_the_time_budget(store: BookStore) -> None:
    options = AgentOptions(limits=AgentLimits(max_duration=0.2))
    result = MafAgent(HangingModel(), make_tools(store), options).run(INSTRUCTIONS, "Where is my order 4512?")
    assert result.stop_reason is StopReason.TIME_BUDGET
    [line] = result.trace
    assert line.guard is Guard.MODEL_TIMEOUT and result.model_calls == 1


def test_what_maf_cannot_do_is_said_not_ignored(store: BookStore) -> None:
    agent = MafAgent(ScriptedChatModel(), make_tools(store))
    assert set(agent.not_available) == {"max_tokens", "max_repeats"}
    assert "no token budget" in agent.not_available["max_tokens"]
    bare = AgentOptions(limits=AgentLimits(max_tokens=None, max_repeats=None))
    assert MafAgent(ScriptedChatModel(), make_tools(store), bare).not_available == {}


# --- approval -------------------------------------------------------------------------------------------------------


def two_risky_adds() -> ScriptModel:
    return ScriptModel(
        replies=[
            ai("", call("add_to_cart", "a1", book_id=7, quantity=5), call("add_to_cart", "a2", book_id=5, quantity=4)),
            ai("One added, one refused."),
        ]
    )


def gated(store: BookStore) -> AgentOptions:
    return AgentOptions(needs_approval=RiskyWritePolicy(store))


def test_each_approval_answers_only_the_request_it_names(store: BookStore) -> None:
    model = two_risky_adds()
    session = MafSession(MafAgent(model, make_tools(store), gated(store)), INSTRUCTIONS)
    paused = session.ask("Add them.")
    assert paused.stop_reason is StopReason.AWAITING_APPROVAL
    a1, a2 = ids = [p["tool_call"]["id"] for p in paused.pending or []]
    assert [provider_id(i) for i in ids] == ["a1", "a2"]
    assert "more than 3 copies" in paused.pending[0]["reason"] and cart(store) == []
    with pytest.raises(ValueError, match="each pending request"):
        session.resume({a1: True})
    done = session.resume({a1: True, a2: False})
    assert done.stop_reason is StopReason.DONE and cart(store) == [(7, 5)]
    refused = [e for e in done.trace if e.guard is Guard.APPROVAL_REFUSED]
    assert [e.detail.split(" -> ")[1] for e in refused] == ["Error: Tool call invocation was rejected by user."]
    assert tool_results(model.prompts[-1])[1] == "Error: Tool call invocation was rejected by user."
    assert session.pending == []
    assert_valid_history(session.messages)


def test_a_refusal_leaves_the_cart_as_it_was(store: BookStore) -> None:
    model = ScriptModel(replies=[ai("", call("add_to_cart", "a1", book_id=7, quantity=10)), ai("Not added.")])
    session = MafSession(MafAgent(model, make_tools(store), gated(store)), INSTRUCTIONS)
    assert session.ask("Add ten.").stop_reason is StopReason.AWAITING_APPROVAL
    assert session.resume(False).stop_reason is StopReason.DONE
    assert cart(store) == []


def test_a_call_the_rule_waves_through_runs_without_a_question(store: BookStore) -> None:
    result = MafAgent(ScriptedChatModel(), make_tools(store), gated(store)).run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.DONE and result.pending is None and cart(store) == [(7, 1)]


def test_with_a_human_at_hand_the_run_asks_and_goes_on(store: BookStore) -> None:
    asked: list[str] = []

    def human(call: Any, reason: str) -> bool:
        asked.append(call["id"])
        return call["id"] == "a2"

    result = MafAgent(two_risky_adds(), make_tools(store), gated(store), approve=human).run(INSTRUCTIONS, "Add them.")
    assert result.stop_reason is StopReason.DONE and asked == ["a1", "a2"] and cart(store) == [(5, 4)]


def test_a_paused_conversation_is_answered_after_a_restart(store: BookStore, tmp_path: Path) -> None:
    path = tmp_path / "maf.json"
    first = MafSession(MafAgent(two_risky_adds(), make_tools(store), gated(store)), INSTRUCTIONS, path=path)
    assert first.ask("Add them.").stop_reason is StopReason.AWAITING_APPROVAL
    model = ScriptModel(replies=[ai("Both added.")])
    again = MafSession(MafAgent(model, make_tools(store), gated(store)), INSTRUCTIONS, path=path)
    assert [provider_id(p["tool_call"]["id"]) for p in again.pending] == ["a1", "a2"]
    assert again.resume(True).stop_reason is StopReason.DONE
    assert sorted(cart(store)) == [(5, 4), (7, 5)]


# --- sessions -------------------------------------------------------------------------------------------------------


def test_a_conversation_is_kept_across_a_restart_and_refused_to_another_customer(
    store: BookStore, tmp_path: Path
) -> None:
    path = tmp_path / "maf.json"
    MafSession(MafAgent(ScriptedChatModel(), make_tools(store)), INSTRUCTIONS, path=path, customer_id="c1").ask(
        SEED_GOAL
    )
    saved = json.loads(path.read_text())
    assert saved["customer"] == "c1" and saved["session"]["type"] == "session"
    again = MafSession(MafAgent(ScriptedChatModel(), make_tools(store)), INSTRUCTIONS, path=path, customer_id="c1")
    assert again.turns == 1
    result = again.ask("What is my cart total now?")
    assert "16.50" in (result.answer or "") and again.turns == 2
    assert again.history_turns() == [SEED_GOAL, "What is my cart total now?"]
    assert_valid_history(result.messages)
    with pytest.raises(CustomerMismatch):
        MafSession(MafAgent(ScriptedChatModel(), make_tools(store)), INSTRUCTIONS, path=path, customer_id="c2")


# --- cancellation ---------------------------------------------------------------------------------------------------


def test_a_cancel_from_the_trace_stops_before_the_next_call_and_keeps_a_truthful_turn(store: BookStore) -> None:
    cancel = threading.Event()

    def on_event(event: TraceEvent) -> None:
        if event.name == "check_stock":
            cancel.set()

    agent = MafAgent(ScriptedChatModel(persona="parallel"), make_tools(store), AgentOptions(on_event=on_event))
    session = MafSession(agent, INSTRUCTIONS)
    result = session.ask(SEED_GOAL, cancel=cancel)
    assert result.stop_reason is StopReason.CANCELLED and cart(store) == []
    assert result.trace[-1].guard is Guard.CANCELLED
    assert_valid_history(result.messages)
    assert session.turns == 1
    assert session.ask("Where is my order 4512?").stop_reason is StopReason.DONE


async def test_cancelling_the_task_is_not_swallowed_and_the_session_keeps_the_question(store: BookStore) -> None:
    session = MafSession(MafAgent(HangingModel(), make_tools(store)), INSTRUCTIONS)
    task = asyncio.ensure_future(session.aask("Where is my order 4512?"))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(MafCancelled) as raised:
        await task
    assert isinstance(raised.value, asyncio.CancelledError)
    assert raised.value.result.stop_reason is StopReason.CANCELLED
    assert session.history_turns() == ["Where is my order 4512?"]


# --- streaming ------------------------------------------------------------------------------------------------------


def test_streaming_hands_on_every_piece_and_changes_nothing_else(store: BookStore) -> None:
    tokens: list[Token] = []
    streamed = MafAgent(ScriptedChatModel(), make_tools(store), AgentOptions(on_token=tokens.append)).run(
        INSTRUCTIONS, SEED_GOAL
    )
    plain = MafAgent(ScriptedChatModel(), make_tools(BookStore())).run(INSTRUCTIONS, SEED_GOAL)
    assert streamed.stop_reason is StopReason.DONE and streamed.answer == plain.answer
    assert streamed.tokens_per_step == plain.tokens_per_step
    last = max(t.step for t in tokens)
    assert last == streamed.model_calls == 5
    assert "".join(t.text for t in tokens if t.step == last and t.kind is TokenKind.ANSWER) == streamed.answer
    assert {t.kind for t in tokens if t.step == 1} == {TokenKind.PLAN}  # step 1 only plans, then calls a tool


def test_a_cancel_from_on_token_cuts_the_reply_and_the_turn_is_kept(store: BookStore) -> None:
    cancel = threading.Event()

    def on_token(token: Token) -> None:
        if token.step == 2:
            cancel.set()

    agent = MafAgent(ScriptedChatModel(), make_tools(store), AgentOptions(on_token=on_token))
    session = MafSession(agent, INSTRUCTIONS)
    result = session.ask(SEED_GOAL, cancel=cancel)
    assert result.stop_reason is StopReason.CANCELLED
    assert result.trace[-1].guard is Guard.MODEL_CANCELLED and result.model_calls == 2
    assert_valid_history(result.messages)
    assert session.turns == 1 and len(result.messages) == 4  # system, question, step 1's call and its result


def test_a_cancel_set_before_the_run_stops_it_before_the_first_model_call(store: BookStore) -> None:
    cancel = threading.Event()
    cancel.set()
    session = MafSession(MafAgent(ScriptModel(replies=[]), make_tools(store)), INSTRUCTIONS)
    result = session.ask("Where is my order 4512?", cancel=cancel)
    assert (result.stop_reason, result.model_calls, result.trace) == (StopReason.CANCELLED, 0, [])
    assert session.history_turns() == ["Where is my order 4512?"]


def test_a_humans_wait_counts_against_neither_time_budget(store: BookStore) -> None:
    model = ScriptModel(replies=[ai("", call("add_to_cart", "a1", book_id=7, quantity=10)), ai("Added.")])
    options = AgentOptions(limits=AgentLimits(max_duration=1.0), needs_approval=RiskyWritePolicy(store))
    session = MafSession(MafAgent(model, make_tools(store), options), INSTRUCTIONS)
    assert session.ask("Add ten.").stop_reason is StopReason.AWAITING_APPROVAL
    time.sleep(1.1)  # the human takes longer than the whole budget
    result = session.resume(True)
    # MAF's documentation says its budget includes approval waits; answered on the session in a new run, as here,
    # its clock starts again, and ours goes on from the pause without the wait.
    assert result.stop_reason is StopReason.DONE and result.answer == "Added." and cart(store) == [(7, 10)]


# --- a resumed run: its cancel and its clock ----------------------------------------------------------------------


def test_a_cancel_before_a_resumed_run_answers_every_paused_call(store: BookStore) -> None:
    model = two_risky_adds()
    session = MafSession(MafAgent(model, make_tools(store), gated(store)), INSTRUCTIONS)
    assert session.ask("Add them.").stop_reason is StopReason.AWAITING_APPROVAL
    cancel = threading.Event()
    cancel.set()
    result = session.resume(True, cancel=cancel)
    assert result.stop_reason is StopReason.CANCELLED and cart(store) == [], "a cancel before the tools ran them not"
    assert_valid_history(session.messages)
    assert session.pending == []
    assert session.ask("Where is my order 4512?").stop_reason is not StopReason.AWAITING_APPROVAL


async def test_cancelling_the_task_of_a_resumed_run_answers_every_paused_call(store: BookStore) -> None:
    slow = make_tools(store, faults=Faults(latency_s=5.0))
    session = MafSession(MafAgent(two_risky_adds(), slow, gated(store)), INSTRUCTIONS)
    assert (await session.aask("Add them.")).stop_reason is StopReason.AWAITING_APPROVAL
    task = asyncio.ensure_future(session.aresume(True))
    await asyncio.sleep(0.3)  # the first approved add is running
    task.cancel()
    with pytest.raises(MafCancelled) as raised:
        await task
    assert raised.value.result.stop_reason is StopReason.CANCELLED
    assert_valid_history(session.messages, in_call_order=False)
    results = [m for m in session.messages if isinstance(m, ToolMessage)]
    assert sorted(provider_id(m.tool_call_id) for m in results) == ["a1", "a2"]
    assert session.pending == []


def test_a_resumed_run_keeps_the_clock_of_its_first_stretch_without_the_humans_wait(store: BookStore) -> None:
    slow = make_tools(store, faults=Faults(latency_s=0.5))
    model = ScriptModel(
        replies=[
            ai("", call("check_stock", "s1", book_id=7)),
            ai("", call("add_to_cart", "a1", book_id=7, quantity=10)),
            ai("", call("check_stock", "s2", book_id=5)),
            ai("Done."),
        ]
    )
    options = AgentOptions(limits=AgentLimits(max_duration=1.3), needs_approval=RiskyWritePolicy(store))
    session = MafSession(MafAgent(model, slow, options), INSTRUCTIONS)
    assert session.ask("Add ten.").stop_reason is StopReason.AWAITING_APPROVAL  # 0.5 s of the 1.3 s spent
    time.sleep(1.5)  # the human's wait, longer than the whole budget: not the agent's time
    result = session.resume(True)
    # Counting the human's wait would stop the run before the add; forgetting the first stretch (0.5 + 0.5 + 0.5
    # = 1.0 s without it) would let it finish. 0.5 s before the pause + 0.5 s for the add leaves 0.3 s for s2.
    assert result.stop_reason is StopReason.TIME_BUDGET
    assert cart(store) == [(7, 10)], "the approved add ran"
    assert [e.name for e in result.trace if not e.is_model] == ["add_to_cart", "check_stock"]
    assert result.trace[-1].guard is Guard.TOOL_TIMEOUT, "check_stock s2 was cut by the budget"
    assert_valid_history(session.messages)


# --- the bundled real model ---------------------------------------------------------------------------------------


def test_maf_drives_the_bundled_local_model_and_says_truly_how_it_ended(local_server: Any, store: BookStore) -> None:
    from shared_tools.models import make_model

    agent = MafAgent(make_model("local:smollm2-135m"), make_tools(store), AgentOptions(limits=AgentLimits(max_steps=3)))
    result = agent.run(INSTRUCTIONS, "Where is my order 4512?")
    assert result.model_calls >= 1
    assert sum(e.is_model for e in result.trace) == result.model_calls
    assert sum(not e.is_model for e in result.trace) == result.tool_calls
    assert_valid_history(result.messages)
    if result.stop_reason is StopReason.DONE:
        assert result.answer and result.forced_answer is None
    else:  # whatever else ended it (the step limit, MAF's forced call), its text is never the answer
        assert result.answer is None
        if result.forced_answer is not None:
            assert result.stop_reason is StopReason.MAX_STEPS and result.model_calls == 4


# --- the history window -----------------------------------------------------------------------------------------


def test_keep_turns_sends_only_the_last_turns_and_keeps_them_all(store: BookStore, tmp_path: Path) -> None:
    model = ScriptModel(replies=[ai("One."), ai("Two."), ai("", call("view_cart", "v1")), ai("Three.")])
    path = tmp_path / "maf.json"
    session = MafSession(MafAgent(model, make_tools(store)), INSTRUCTIONS, path=path, keep_turns=2)
    for question in ("First?", "Second?", "Third?"):
        assert session.ask(question).stop_reason is StopReason.DONE
    asked = [[m.text for m in prompt if m.type == "human"] for prompt in model.prompts]
    assert asked == [["First?"], ["First?", "Second?"], ["Second?", "Third?"], ["Second?", "Third?"]]
    assert_sendable(model.prompts[-1])  # the window never splits a reply from its tool results
    assert session.history_turns() == ["First?", "Second?", "Third?"], "the whole conversation is stored"
    again = MafSession(
        MafAgent(ScriptModel(replies=[ai("Four.")]), make_tools(store)), INSTRUCTIONS, path=path, keep_turns=2
    )
    again.ask("Fourth?")
    assert [m.text for m in again.agent.model.prompts[0] if m.type == "human"] == ["Third?", "Fourth?"]


def test_a_paused_turn_stays_in_the_window_when_it_is_answered(store: BookStore) -> None:
    model = ScriptModel(replies=[ai("Hello."), ai("", call("add_to_cart", "a1", book_id=7, quantity=10)), ai("Added.")])
    session = MafSession(MafAgent(model, make_tools(store), gated(store)), INSTRUCTIONS, keep_turns=1)
    session.ask("Hi?")
    assert session.ask("Add ten.").stop_reason is StopReason.AWAITING_APPROVAL
    assert session.resume(True).stop_reason is StopReason.DONE and cart(store) == [(7, 10)]
    last = model.prompts[-1]
    assert [m.text for m in last if m.type == "human"] == ["Add ten."]
    assert isinstance(last[-1], ToolMessage) and provider_id(last[-1].tool_call_id) == "a1"


def test_keep_turns_must_be_a_whole_number_of_turns() -> None:
    from maf_version.agent import WindowedHistory

    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="keep_turns"):
            WindowedHistory(bad)  # type: ignore[arg-type]


def test_two_fresh_maf_conversations_of_one_customer_do_not_share_call_ids() -> None:
    """As for the other sessions (tests/test_long_sessions.py): the store keeps call ids per customer, so the
    second conversation's call_0 is a new add, not "this call already ran"."""
    from tests.test_long_sessions import numbering_shopper

    store = BookStore()
    for _ in range(2):
        session = MafSession(MafAgent(ScriptModel(replies=[numbering_shopper] * 4), make_tools(store)), INSTRUCTIONS)
        result = session.ask("Add The Quiet Orchard to my cart.")
        add = next(e for e in result.trace if e.name == "add_to_cart")
        assert result.stop_reason is StopReason.DONE and "already" not in add.detail, add.detail
    assert store.cart("c1").quantity_of(7) == 2


# --- a reply cut off at its length limit ----------------------------------------------------------------------------


def half_add(text: str = "") -> AIMessage:
    """`{"book_id": 7, "quantity": 12}` cut after `"quantity": 1`: one copy nobody asked for, if it ran."""
    return AIMessage(
        text,
        tool_calls=[call("add_to_cart", "c1", book_id=7, quantity=1)],
        response_metadata={"finish_reason": "length"},
        usage_metadata={"input_tokens": 50, "output_tokens": 10, "total_tokens": 60},
    )


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_no_call_of_a_cut_reply_runs_in_mafs_loop(store: BookStore, streamed: bool) -> None:
    options = AgentOptions(on_token=lambda token: None) if streamed else AgentOptions()
    model = ScriptModel(replies=[half_add("Adding it now")])
    result = MafAgent(model, make_tools(store), options).run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.INVALID_RESPONSE, "half a reply is no answer"
    assert result.tool_calls == 0 and cart(store) == [] and model.calls == 1
    assert result.answer is None
    [line] = result.trace
    assert line.detail.startswith("0 tool call(s), reply cut off at its length limit"), line.detail
    assert_valid_history(result.messages)


# --- a reply with calls that did not parse ---------------------------------------------------------------------------


def unparsable(text: str = "", *calls: dict[str, Any]) -> AIMessage:
    """A reply with `calls` and an `add_to_cart` whose arguments are a JSON list, which nothing may run."""
    bad = invalid_call("add_to_cart", "bad_1", [7, 10], "not an object")
    usage = {"input_tokens": 50, "output_tokens": 10, "total_tokens": 60}
    return AIMessage(text, tool_calls=list(calls), invalid_tool_calls=[bad], usage_metadata=usage)


def both_loops(replies: list[AIMessage], options: AgentOptions) -> list[tuple[Any, ...]]:
    """What the hand-written loop and MAF did with `replies`: stop, answer, tool calls, cart, trace, tool results."""
    outcomes = []
    for agent in (AgentLoop, MafAgent):
        store, model = BookStore(), ScriptModel(replies=replies)
        result = agent(model, make_tools(store), options).run(INSTRUCTIONS, SEED_GOAL)
        assert_valid_history(result.messages)
        results = [tool_results(prompt) for prompt in model.prompts]
        trace = [(e.step, e.name, e.detail, e.is_error) for e in result.trace]
        outcomes.append((result.stop_reason, result.answer, result.tool_calls, cart(store), trace, results))
    return outcomes


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_a_reply_of_only_unparsable_calls_stops_mafs_run_as_the_loops_stop(streamed: bool) -> None:
    """MAF would answer such a call itself ("Argument parsing failed") and go on; it is never given one."""
    options = AgentOptions(on_token=lambda token: None) if streamed else AgentOptions()
    handwritten, maf = both_loops([unparsable("Let me add it."), ai("Done.")], options)
    assert maf == handwritten
    stop, answer, tool_calls, in_cart, trace, results = maf
    assert (stop, answer, tool_calls, in_cart, results) == (StopReason.INVALID_RESPONSE, None, 0, [], [[]])
    assert trace == [(1, "model", "0 tool call(s), 1 unparsable call(s) not run", False)]


def test_a_reply_with_a_runnable_and_an_unparsable_call_runs_only_the_runnable_one_in_every_loop() -> None:
    """As the hand-written loop does: the runnable call runs and is answered; the unparsable one is not run nor
    answered (no "Argument parsing failed" from MAF), and the run goes on."""
    mixed = unparsable("", call("add_to_cart", "add_1", book_id=7, quantity=1))
    handwritten, maf = both_loops([mixed, ai("Done.")], AgentOptions())
    assert maf[:4] == handwritten[:4] == (StopReason.DONE, "Done.", 1, [(7, 1)])
    assert maf[4][0] == handwritten[4][0] == (1, "model", "1 tool call(s), 1 unparsable call(s) not run", False)
    assert [len(r) for r in maf[5]] == [len(r) for r in handwritten[5]] == [0, 1]
    assert MAF_BAD_ARGUMENTS not in str(maf[5])


class OpenAIStandIn:
    """A loopback OpenAI-compatible server that gives every chat completion the same body."""

    def __init__(self, completion: dict[str, Any]) -> None:
        import http.server

        body = json.dumps(completion).encode()
        models = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
        self.requests = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                if self.command == "POST":
                    self.rfile.read(int(self.headers.get("Content-Length") or 0))
                    outer.requests += 1
                data = body if self.path.endswith("/chat/completions") else models
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def completion(message: dict[str, Any], finish_reason: str) -> dict[str, Any]:
    return {
        "id": "cmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60},
    }


def test_a_servers_cut_reply_with_a_parsable_add_runs_nothing(store: BookStore) -> None:
    from shared_tools.models import make_model

    arguments = '{"book_id": 7, "quantity": 1}'
    add = {"id": "call_0", "type": "function", "function": {"name": "add_to_cart", "arguments": arguments}}
    server = OpenAIStandIn(completion({"content": None, "tool_calls": [add]}, "length"))
    try:
        model = make_model("openai:m", base_url=server.base_url, timeout_s=10)
        session = MafSession(MafAgent(model, make_tools(store)), INSTRUCTIONS)
        result = session.ask("Add The Quiet Orchard.")
    finally:
        server.close()
    assert result.stop_reason is StopReason.INVALID_RESPONSE
    assert server.requests == 1 and result.tool_calls == 0 and cart(store) == []
    assert all(e.name != "add_to_cart" for e in result.trace)
    assert_valid_history(session.messages)


# --- a resume judges again, and trusts no record it has not checked --------------------------------------------------


def one_safe_one_risky() -> ScriptModel:
    """3 copies of book 7 (at the limit: waved through) and 10 of book 5 (asked about)."""
    return ScriptModel(
        replies=[
            ai("", call("add_to_cart", "a1", book_id=7, quantity=3), call("add_to_cart", "a2", book_id=5, quantity=10)),
            ai("Done."),
        ]
    )


def test_a_call_waved_through_at_the_pause_is_judged_again_when_the_run_resumes(
    store: BookStore, tmp_path: Path
) -> None:
    path = tmp_path / "maf.json"
    session = MafSession(MafAgent(one_safe_one_risky(), make_tools(store), gated(store)), INSTRUCTIONS, path=path)
    paused = session.ask("Add them.")
    assert [provider_id(p["tool_call"]["id"]) for p in paused.pending or []] == ["a2"]
    store.add_to_cart("c1", 7, 3)  # another conversation of the customer, while the human thinks
    again = session.resume(False)  # no to a2; a1 would now make 6 copies of book 7
    assert again.stop_reason is StopReason.AWAITING_APPROVAL and cart(store) == [(7, 3)]
    [asked] = again.pending or []
    assert provider_id(asked["tool_call"]["id"]) == "a1" and "making 6 in the cart" in asked["reason"]
    assert again.trace == [] and again.model_calls == 1, "nothing ran, nothing was asked of the model"
    # The human's no to a2 is kept, across a restart too; only a1 is asked about.
    restarted = MafSession(
        MafAgent(ScriptModel(replies=[ai("Done.")]), make_tools(store), gated(store)), INSTRUCTIONS, path=path
    )
    assert [p["tool_call"]["id"] for p in restarted.pending] == [asked["tool_call"]["id"]]
    done = restarted.resume(False)
    assert done.stop_reason is StopReason.DONE and cart(store) == [(7, 3)], "nobody said yes to either add"
    assert [e.guard for e in done.trace if not e.is_model] == [Guard.APPROVAL_REFUSED] * 2
    assert_valid_history(restarted.messages)


def test_a_yes_given_before_the_pause_was_taken_again_is_asked_again(store: BookStore, tmp_path: Path) -> None:
    """The record of a pause keeps the human's no's, never a yes: no edit of the file can approve a call."""
    path = tmp_path / "maf.json"
    session = MafSession(MafAgent(one_safe_one_risky(), make_tools(store), gated(store)), INSTRUCTIONS, path=path)
    session.ask("Add them.")
    store.add_to_cart("c1", 7, 3)
    again = session.resume(True)  # yes to a2; a1 now needs a human
    assert [provider_id(p["tool_call"]["id"]) for p in again.pending or []] == ["a1", "a2"]
    record = json.loads(path.read_text())["session"]["state"][PENDING_KEY]
    assert set(record) == {"requests", "asked", "refused", "counts", "elapsed"} and record["refused"] == []
    assert cart(store) == [(7, 3)]


def test_a_human_at_hand_is_asked_at_the_resume_about_a_call_that_became_risky(
    store: BookStore, tmp_path: Path
) -> None:
    path = tmp_path / "maf.json"
    first = MafSession(MafAgent(one_safe_one_risky(), make_tools(store), gated(store)), INSTRUCTIONS, path=path)
    assert first.ask("Add them.").stop_reason is StopReason.AWAITING_APPROVAL
    store.add_to_cart("c1", 7, 3)
    asked: list[str] = []

    def human(call: Any, reason: str) -> bool:
        asked.append(provider_id(call["id"]))
        return True

    agent = MafAgent(ScriptModel(replies=[ai("Done.")]), make_tools(store), gated(store), approve=human)
    done = MafSession(agent, INSTRUCTIONS, path=path).resume({first.pending[0]["tool_call"]["id"]: False})
    assert done.stop_reason is StopReason.DONE and asked == ["a1"] and cart(store) == [(7, 6)]


def test_a_request_taken_out_of_asked_is_judged_again_not_waved_through(store: BookStore, tmp_path: Path) -> None:
    path = tmp_path / "maf.json"
    first = MafSession(MafAgent(two_risky_adds(), make_tools(store), gated(store)), INSTRUCTIONS, path=path)
    assert len(first.ask("Add them.").pending or []) == 2
    saved = json.loads(path.read_text())
    record = saved["session"]["state"][PENDING_KEY]
    a2 = next(i for i in record["asked"] if provider_id(i) == "a2")
    del record["asked"][a2]  # an edited file: "a2 was waved through"
    path.write_text(json.dumps(saved))
    session = MafSession(
        MafAgent(ScriptModel(replies=[ai("Done.")]), make_tools(store), gated(store)), INSTRUCTIONS, path=path
    )
    again = session.resume(False)
    assert again.stop_reason is StopReason.AWAITING_APPROVAL and cart(store) == []
    assert [p["tool_call"]["id"] for p in again.pending or []] == [a2]
    assert session.resume(False).stop_reason is StopReason.DONE and cart(store) == []


MAF_APPROVAL_STATE = "tool_approval"
"""Where MAF keeps its own approval requests in the session's state (`agent_framework._tools`)."""


def tampered(state: dict[str, Any], edit: str) -> None:
    record, maf = state[PENDING_KEY], state[MAF_APPROVAL_STATE]
    first = record["requests"][0]
    match edit:
        case "nothing asked":
            record["asked"] = {}
        case "asked a list":
            record["asked"] = list(record["asked"])
        case "requests a string":
            record["requests"] = "a1"
        case "a request a number":
            record["requests"][0] = 7
        case "counts a string":
            record["counts"] = "1,0,10"
        case "negative counts":
            record["counts"] = [-5, 0, 0]
        case "no clock":
            del record["elapsed"]
        case "an unknown call asked":
            record["asked"]["call_zzz"] = "why not"
        case "a call refused and asked":
            record["refused"] = [first["function_call"]["call_id"]]
        case "a call approved":
            record["approved"] = [first["function_call"]["call_id"]]
        case "the record a list":
            state[PENDING_KEY] = [record]
        case "our arguments":
            first["function_call"]["arguments"]["quantity"] = 1
        case "mafs arguments":
            maf["pending_approval_requests"][0]["function_call"]["arguments"]["quantity"] = 1
        case "mafs state a list":
            state[MAF_APPROVAL_STATE] = []
        case "a call maf holds as approved":
            extra = json.loads(json.dumps(maf["pending_approval_requests"][0]))
            extra["id"] = extra["function_call"]["id"] = "af-call-evil"
            extra["function_call"]["call_id"] = "evil"
            maf["already_approved_approval_request_groups"][0]["approval_requests"].append(extra)
        case "our record gone":
            del state[PENDING_KEY]
        case _:
            raise AssertionError(edit)


TAMPERINGS = [
    "nothing asked",
    "asked a list",
    "requests a string",
    "a request a number",
    "counts a string",
    "negative counts",
    "no clock",
    "an unknown call asked",
    "a call refused and asked",
    "a call approved",
    "the record a list",
    "our arguments",
    "mafs arguments",
    "mafs state a list",
    "a call maf holds as approved",
    "our record gone",
]


@pytest.mark.parametrize("edit", TAMPERINGS)
def test_a_tampered_pause_in_a_session_file_is_a_damaged_file(store: BookStore, tmp_path: Path, edit: str) -> None:
    path = tmp_path / "maf.json"
    model = ScriptModel(replies=[ai("", call("add_to_cart", "a1", book_id=7, quantity=10))])
    MafSession(MafAgent(model, make_tools(store), gated(store)), INSTRUCTIONS, path=path).ask("Add ten.")
    saved = json.loads(path.read_text())
    tampered(saved["session"]["state"], edit)
    path.write_text(json.dumps(saved))
    with pytest.raises(ValueError, match="damaged saved MAF session"):
        MafSession(
            MafAgent(ScriptModel(replies=[ai("Done.")]), make_tools(store), gated(store)), INSTRUCTIONS, path=path
        )
    assert cart(store) == []


def test_a_tampered_pause_in_memory_is_a_value_error_too(store: BookStore) -> None:
    session = MafSession(MafAgent(two_risky_adds(), make_tools(store), gated(store)), INSTRUCTIONS)
    session.ask("Add them.")
    session.session.state[PENDING_KEY]["asked"] = ["a1"]
    with pytest.raises(ValueError, match="record of the paused run is damaged"):
        session.resume(False)
    assert cart(store) == []


def test_a_pause_answered_in_two_processes_adds_once(store: BookStore, tmp_path: Path) -> None:
    path = tmp_path / "maf.json"
    MafSession(MafAgent(two_risky_adds(), make_tools(store), gated(store)), INSTRUCTIONS, path=path).ask("Add them.")
    agents = [MafAgent(ScriptModel(replies=[ai("Added.")]), make_tools(store), gated(store)) for _ in range(2)]
    one, two = (MafSession(agent, INSTRUCTIONS, path=path) for agent in agents)
    assert one.resume(True).stop_reason is StopReason.DONE
    with pytest.raises(RuntimeError, match="not waiting"):
        one.resume(True)  # twice in one process: nothing to answer
    late = two.resume(True)  # the other process still holds the pause
    assert late.stop_reason is StopReason.DONE
    assert sorted(cart(store)) == [(5, 4), (7, 5)], "each add landed once: the second is a replay by its call id"


# --- a model call that fails mid-turn -------------------------------------------------------------------------------


def server_gone(history: list[BaseMessage]) -> AIMessage:
    raise ModelCallFailed("the model server at 127.0.0.1:9 went away")


def test_a_model_outage_after_an_add_keeps_the_turn_in_the_file(store: BookStore, tmp_path: Path) -> None:
    path = tmp_path / "maf.json"
    model = ScriptModel(replies=[ai("", call("add_to_cart", "a1", book_id=7, quantity=1)), server_gone])
    with pytest.raises(ModelCallFailed):
        MafSession(MafAgent(model, make_tools(store)), INSTRUCTIONS, path=path).ask("Add The Quiet Orchard.")
    assert cart(store) == [(7, 1)]
    again = MafSession(
        MafAgent(ScriptModel(replies=[ai("One copy is in your cart.")]), make_tools(store)), INSTRUCTIONS, path=path
    )
    assert again.history_turns() == ["Add The Quiet Orchard."], "the turn is kept, cut short"
    [add] = [m for m in again.messages if isinstance(m, ToolMessage)]
    assert provider_id(add.tool_call_id) == "a1" and add.status == "success" and '"quantity":1' in add.text
    assert_valid_history(again.messages)
    assert again.ask("What is in my cart?").stop_reason is StopReason.DONE
    assert_sendable(again.agent.model.prompts[0])  # type: ignore[attr-defined]


def test_a_model_outage_in_a_resumed_run_keeps_the_answered_calls(store: BookStore, tmp_path: Path) -> None:
    path = tmp_path / "maf.json"
    model = ScriptModel(replies=[two_risky_adds().replies[0], server_gone, ai("Where were we?")])
    session = MafSession(MafAgent(model, make_tools(store), gated(store)), INSTRUCTIONS, path=path)
    session.ask("Add them.")
    a1, a2 = (p["tool_call"]["id"] for p in session.pending)
    with pytest.raises(ModelCallFailed):
        session.resume({a1: True, a2: False})
    assert cart(store) == [(7, 5)] and session.pending == []
    for kept in (session, MafSession(MafAgent(ScriptModel(replies=[]), make_tools(store)), INSTRUCTIONS, path=path)):
        results = {provider_id(m.tool_call_id): m.status for m in kept.messages if isinstance(m, ToolMessage)}
        assert results == {"a1": "success", "a2": "error"}
        assert_valid_history(kept.messages)
    assert session.ask("Go on.").stop_reason is StopReason.DONE
    assert_sendable(model.prompts[-1])


def test_duplicate_and_empty_call_ids_under_the_gate_are_asked_about_one_by_one(store: BookStore) -> None:
    twice = [call("add_to_cart", "x", book_id=7, quantity=2), call("add_to_cart", "x", book_id=7, quantity=2)]
    model = ScriptModel(replies=[ai("", *twice, call("add_to_cart", "", book_id=7, quantity=2)), ai("Done.")])
    session = MafSession(MafAgent(model, make_tools(store), gated(store)), INSTRUCTIONS)
    paused = session.ask("Add six.")
    reasons = [p["reason"] for p in paused.pending or []]
    assert len(reasons) == 2 and "making 4" in reasons[0] and "making 6" in reasons[1]
    ids = [c["id"] for m in session.messages if isinstance(m, AIMessage) for c in m.tool_calls]
    assert len(set(ids)) == 3 and all(ids), "every call has an id of its own"
    first, second = (p["tool_call"]["id"] for p in paused.pending or [])
    done = session.resume({first: True, second: False})
    assert done.stop_reason is StopReason.DONE and cart(store) == [(7, 4)]
    assert_valid_history(session.messages)


def test_a_human_who_cannot_answer_leaves_the_turn_as_maf_stored_it(store: BookStore) -> None:
    def gone(call: Any, reason: str) -> bool:
        raise EOFError("no one at the keyboard")

    session = MafSession(MafAgent(two_risky_adds(), make_tools(store), gated(store), approve=gone), INSTRUCTIONS)
    with pytest.raises(EOFError):
        session.ask("Add them.")
    assert session.history_turns() == ["Add them."], "the turn is not written twice"
    assert cart(store) == []


@pytest.mark.parametrize("state", [[], "text", 7])
def test_a_session_file_whose_state_is_not_an_object_is_a_damaged_file(
    store: BookStore, tmp_path: Path, state: object
) -> None:
    path = tmp_path / "maf.json"
    MafSession(MafAgent(ScriptModel(replies=[ai("Hi.")]), make_tools(store)), INSTRUCTIONS, path=path).ask("Hello")
    saved = json.loads(path.read_text())
    saved["session"]["state"] = state
    path.write_text(json.dumps(saved))
    with pytest.raises(ValueError, match="damaged saved MAF session"):
        MafSession(MafAgent(ScriptModel(replies=[ai("Done.")]), make_tools(store)), INSTRUCTIONS, path=path)

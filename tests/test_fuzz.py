"""Property tests: both agents survive hostile model output with every guarantee intact.

A `FuzzModel` plays a drawn reply sequence against a real store and tools; `check_example` lists every broken
property (stop reason, one ToolMessage per call, tokens, budgets, store invariants, the cart) so benchmarks/soak.py
counts with the same code. CI runs the derandomized "ci" profile; HYPOTHESIS_PROFILE=soak runs many more.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from pydantic import ValidationError

from handwritten import AgentLoop, Session
from langgraph_version import GraphAgent, GraphSession
from shared_tools.bookstore import RiskyWritePolicy
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import TOOL_NAMES, AddToCartArgs, make_tools
from shared_tools.guards import call_key, repeat_error, usage_tokens
from shared_tools.results import AgentLimits, AgentOptions, AgentResult, StopReason, TraceEvent
from tests.conftest import IMPLEMENTATIONS, build_agent
from tests.fuzz_model import FuzzModel, limits, scripts

settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "soak",
    max_examples=1_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")

ALLOWED_STOPS = {
    StopReason.DONE,
    StopReason.MAX_STEPS,
    StopReason.TOKEN_BUDGET,
    StopReason.INVALID_RESPONSE,
    StopReason.TOO_MANY_ERRORS,
}
"""No time budget and no cancel event in these runs, so TIME_BUDGET or CANCELLED would be a bug."""

Cart = tuple[tuple[int, int], ...]
INSTRUCTIONS = "You are a bookstore assistant."
GOAL = "Add The Last Lighthouse to my cart."


def cart_of(store: BookStore) -> Cart:
    return tuple((line.book.id, line.quantity) for line in store.cart("c1").lines)


@dataclass
class Example:
    """One fuzzed run and what was observed during it."""

    kind: str
    script: list[AIMessage]
    limits: AgentLimits
    parallel: bool
    store: BookStore = field(default_factory=BookStore)
    model: FuzzModel | None = None
    result: AgentResult | None = None
    error: BaseException | None = None
    carts: list[tuple[TraceEvent, Cart]] = field(default_factory=list)
    """The cart right after each tool's trace event (live in sequential mode)."""
    stock_before: dict[int, int] = field(default_factory=dict)


def run_example(
    kind: str, script: list[AIMessage], limits: AgentLimits, parallel: bool = False, use_async: bool = False
) -> Example:
    example = Example(kind, script, limits, parallel)
    store = example.store
    example.stock_before = {book.id: store.stock(book.id) for book in store.books()}
    example.model = FuzzModel(replies=script)

    def on_event(event: TraceEvent) -> None:
        if not event.is_model:
            example.carts.append((event, cart_of(store)))

    agent = build_agent(
        kind, example.model, make_tools(store), limits=limits, parallel_tools=parallel, on_event=on_event
    )
    try:
        if use_async:
            example.result = asyncio.run(agent.arun(INSTRUCTIONS, GOAL))
        else:
            example.result = agent.run(INSTRUCTIONS, GOAL)
    except Exception as exc:  # the first property: nothing but cancellation may escape
        example.error = exc
    return example


def rounds_of(messages: list[BaseMessage]) -> list[tuple[AIMessage, list[ToolMessage]]]:
    """Each reply with the ToolMessages that directly follow it."""
    rounds: list[tuple[AIMessage, list[ToolMessage]]] = []
    for message in messages:
        if isinstance(message, AIMessage):
            rounds.append((message, []))
        elif isinstance(message, ToolMessage) and rounds:
            rounds[-1][1].append(message)
    return rounds


def expected_add(args: dict[str, Any]) -> tuple[int, int] | None:
    """(book id, quantity) of a valid add. A ``tool_call_id`` the model sends is not its to set: the field is
    hidden from the model's schema and LangChain fills it from the call's real id, so it is left out here."""
    try:
        parsed = AddToCartArgs.model_validate({k: v for k, v in args.items() if k != "tool_call_id"})
    except ValidationError:
        return None
    return parsed.book_id, parsed.quantity


def check_example(example: Example) -> list[str]:
    """Every property this run breaks (empty when it keeps them all)."""
    if example.error is not None:
        return [f"raised {type(example.error).__name__}: {str(example.error)[:300]}"]
    result, model, limits, store = example.result, example.model, example.limits, example.store
    assert result is not None and model is not None
    problems: list[str] = []

    def expect(ok: bool, what: str) -> None:
        if not ok:
            problems.append(what)

    # -- the run ends, within its step budget, for a reason that fits ------------------------------------------
    expect(result.stop_reason in ALLOWED_STOPS, f"stop reason {result.stop_reason!r}")
    expect(limits.max_steps is None or model.calls <= limits.max_steps, f"{model.calls} model calls > max_steps")
    expect(result.model_calls == result.steps == model.calls, f"model_calls {result.model_calls} != {model.calls}")
    replies = [m for m in result.messages if isinstance(m, AIMessage)]
    expect(len(replies) == model.calls, f"{len(replies)} replies in the history, {model.calls} made")
    last = replies[-1] if replies else None
    if result.stop_reason is StopReason.DONE:
        expect(last is not None and not last.tool_calls and bool(last.text.strip()), "DONE without a text answer")
        expect(last is not None and result.answer == last.text.strip(), f"answer {str(result.answer)[:60]!r}")
    else:
        expect(result.answer is None, "an answer although the run did not finish")
    if result.stop_reason is StopReason.INVALID_RESPONSE:
        expect(last is not None and not last.tool_calls, "INVALID_RESPONSE after a reply with calls")
    if result.stop_reason is StopReason.MAX_STEPS:
        expect(limits.max_steps is not None and model.calls == limits.max_steps, "MAX_STEPS before max_steps")

    # -- the history: system, goal, then every call answered exactly once, in order -----------------------------
    messages = result.messages
    expect(isinstance(messages[0], SystemMessage) and isinstance(messages[1], HumanMessage), "history start")
    rounds = rounds_of(messages)
    answered_calls = 0
    for reply, answers in rounds:
        ids = [call["id"] for call in reply.tool_calls]
        got = [answer.tool_call_id for answer in answers]
        expect(got == ids, f"calls {ids} answered by {got}")
        answered_calls += len(answers)
    expect(sum(isinstance(m, ToolMessage) for m in messages) == answered_calls, "a ToolMessage outside a round")
    expect(result.tool_calls == sum(len(r.tool_calls) for r, _ in rounds), "tool_calls counter")

    # -- the trace tells the same story ----------------------------------------------------------------------------
    model_events = [e for e in result.trace if e.is_model]
    tool_events = [e for e in result.trace if not e.is_model]
    expect(len(model_events) == model.calls, f"{len(model_events)} model trace lines for {model.calls} calls")
    statuses = [m.status == "error" for m in messages if isinstance(m, ToolMessage)]
    expect([e.is_error for e in tool_events] == statuses, "trace error flags differ from the ToolMessages")

    # -- tokens -------------------------------------------------------------------------------------------------
    reported = sum(usage_tokens(reply) for reply in model.returned)
    expect(result.tokens == reported, f"tokens {result.tokens} != reported usage {reported}")
    expect(result.tokens_per_step == [usage_tokens(r) for r in model.returned], "tokens per step")

    # -- the guards stop where they should ------------------------------------------------------------------------
    tool_rounds = [(reply, answers) for reply, answers in rounds if reply.tool_calls]
    streak, running_tokens = 0, 0
    for reply, answers in rounds:
        running_tokens += usage_tokens(reply)
        if not reply.tool_calls:
            continue
        streak = streak + 1 if any(a.status == "error" for a in answers) else 0
        is_last = reply is rounds[-1][0]
        if limits.max_consecutive_errors is not None and streak > limits.max_consecutive_errors:
            expect(is_last and result.stop_reason is StopReason.TOO_MANY_ERRORS, f"ran on after {streak} error rounds")
        elif limits.max_tokens is not None and running_tokens > limits.max_tokens:
            expect(is_last and result.stop_reason is StopReason.TOKEN_BUDGET, f"ran on at {running_tokens} tokens")
    if result.stop_reason is StopReason.TOO_MANY_ERRORS:
        expect(tool_rounds and limits.max_consecutive_errors is not None, "TOO_MANY_ERRORS without error rounds")
    seen: Counter[str] = Counter()
    for reply, answers in tool_rounds:
        for call, answer in zip(reply.tool_calls, answers, strict=False):
            if call["name"] not in TOOL_NAMES:
                continue
            key = call_key(call["name"], call["args"])
            seen[key] += 1
            blocked = limits.max_repeats is not None and seen[key] > limits.max_repeats
            expect(
                (answer.content == repeat_error(call["name"], seen[key] - 1)) == blocked,
                f"repeat guard: {call['name']} call {seen[key]} (max_repeats={limits.max_repeats})",
            )

    # -- the store ---------------------------------------------------------------------------------------------
    expect(store.check_invariants() == [], f"store invariants: {store.check_invariants()}")
    stock_after = {book.id: store.stock(book.id) for book in store.books()}
    expect(stock_after == example.stock_before, "stock changed")
    titles = {book.id: book.title for book in store.books()}
    expected: Counter[int] = Counter()
    first_add_of_id: dict[str, tuple[int, int]] = {}
    for reply, answers in tool_rounds:
        for call, answer in zip(reply.tool_calls, answers, strict=False):
            if call["name"] != "add_to_cart" or answer.status == "error":
                continue
            add = expected_add(call["args"])
            expect(add is not None, f"add_to_cart succeeded with invalid arguments {call['args']}")
            if add is None:
                continue
            expect(
                json.loads(str(answer.content)).get("added") == titles.get(add[0]),
                f"add_to_cart {call['args']} (id {call['id']}) answered {str(answer.content)[:80]}",
            )
            # The same id again is a retry, replayed without adding; it must ask for the same add.
            first = first_add_of_id.setdefault(call["id"], add)
            expect(first == add, f"call id {call['id']} added {first} and then {add}")
            if first is add:
                expected[add[0]] += add[1]
    expect(dict(cart_of(store)) == dict(expected), f"cart {cart_of(store)} != successful adds {dict(expected)}")
    if not example.parallel:
        before: Cart = ()
        for event, cart in example.carts:
            if event.is_error or event.name != "add_to_cart":
                expect(cart == before, f"{event.name} (error={event.is_error}) changed the cart")
            before = cart
    return problems


@pytest.mark.parametrize("kind", IMPLEMENTATIONS)
@settings(settings.get_profile(PROFILE))
@given(script=scripts(), limits=limits, parallel=st.booleans(), use_async=st.booleans())
def test_hostile_model_output_breaks_no_guarantee(
    kind: str, script: list[AIMessage], limits: AgentLimits, parallel: bool, use_async: bool
) -> None:
    example = run_example(kind, script, limits, parallel, use_async)
    assert check_example(example) == []


def comparable(example: Example) -> dict[str, Any]:
    """What two implementations must agree on for the same script (ids and timings aside)."""
    if example.error is not None:
        return {"error": type(example.error).__name__}
    result = example.result
    assert result is not None
    return {
        "stop": result.stop_reason,
        "answer": result.answer,
        "tokens": result.tokens,
        "model_calls": result.model_calls,
        "tool_calls": result.tool_calls,
        "tool_results": [(m.content, m.status) for m in result.messages if isinstance(m, ToolMessage)],
        "cart": cart_of(example.store),
    }


@settings(settings.get_profile(PROFILE), max_examples=max(50, settings.get_profile(PROFILE).max_examples // 3))
@given(script=scripts(), limits=limits)
def test_both_implementations_answer_a_script_the_same_way(script: list[AIMessage], limits: AgentLimits) -> None:
    runs = [comparable(run_example(kind, script, limits)) for kind in IMPLEMENTATIONS]
    assert runs[0] == runs[1], json.dumps(runs, default=str)[:2000]


# -- what the fuzzing found, pinned as plain examples ---------------------------------------------------------------


@pytest.mark.parametrize("kind", IMPLEMENTATIONS)
def test_a_call_without_an_id_is_given_one_and_answered(kind: str) -> None:
    """Found by the fuzzer: a ToolMessage needs the id of the call it answers, and both loops crashed on ``None``."""
    unnamed = {"name": "add_to_cart", "args": {"book_id": 7}, "id": None, "type": "tool_call"}
    example = run_example(kind, [AIMessage("", tool_calls=[unnamed])], AgentLimits())
    assert check_example(example) == []
    assert example.result is not None and example.result.stop_reason is StopReason.DONE
    [reply, _] = [m for m in example.result.messages if isinstance(m, AIMessage)]
    [answer] = [m for m in example.result.messages if isinstance(m, ToolMessage)]
    assert reply.tool_calls[0]["id"] and answer.tool_call_id == reply.tool_calls[0]["id"]
    assert cart_of(example.store) == ((7, 1),)


@pytest.mark.parametrize("kind", IMPLEMENTATIONS)
def test_the_answer_is_the_final_text_without_surrounding_whitespace(kind: str) -> None:
    """Found by the fuzzer: the graph returned "Done.\n" where the hand-written loop returned "Done."."""
    example = run_example(kind, [AIMessage("  Done.\n")], AgentLimits())
    assert example.result is not None and example.result.answer == "Done."


@pytest.mark.parametrize("kind", IMPLEMENTATIONS)
def test_a_provider_that_numbers_its_calls_call_0_in_every_reply_gets_every_add(kind: str) -> None:
    """A provider that numbers its calls call_0 in every reply: the next reply's "one more copy" was a silent
    replay of the first add (or, for another book, an error), told a stale cart total. Each reply is a new
    request now: a reused id is renamed when the reply enters the history, so the store sees a new key."""

    def add(book_id: int, quantity: int) -> AIMessage:
        call = {"name": "add_to_cart", "args": {"book_id": book_id, "quantity": quantity}, "id": "call_0"}
        return AIMessage("", tool_calls=[call])

    example = run_example(kind, [add(7, 1), add(12, 2), add(7, 1)], AgentLimits(max_repeats=None))
    assert check_example(example) == []
    assert example.result is not None
    answers = [m for m in example.result.messages if isinstance(m, ToolMessage)]
    assert [a.status for a in answers] == ["success", "success", "success"]
    assert [json.loads(a.text)["cartTotal"] for a in answers] == [16.5, 44.1, 60.6]
    assert all("replayed" not in json.loads(a.text) for a in answers)
    ids = [c["id"] for m in example.result.messages if isinstance(m, AIMessage) for c in m.tool_calls]
    assert ids[0] == "call_0" and len(set(ids)) == 3, ids
    assert cart_of(example.store) == ((7, 2), (12, 2))


@pytest.mark.parametrize("kind", IMPLEMENTATIONS)
def test_the_model_cannot_choose_the_idempotency_key(kind: str) -> None:
    """Found by the soak run (as a false alarm in the checker): a model that sends the hidden ``tool_call_id``
    argument itself neither replays an earlier add nor breaks the call; the call's real id is used."""

    def add(call_id: str) -> AIMessage:
        call = {"name": "add_to_cart", "args": {"book_id": 7, "tool_call_id": "forged"}, "id": call_id}
        return AIMessage("", tool_calls=[call])

    example = run_example(kind, [add("call_a"), add("call_b")], AgentLimits(max_repeats=None))
    assert check_example(example) == []
    assert cart_of(example.store) == ((7, 2),)


def test_the_fuzz_model_keeps_answering_after_its_script() -> None:
    model = FuzzModel(replies=[AIMessage("")])
    assert [model.invoke("x").text for _ in range(3)] == ["", "That is all I can do.", "That is all I can do."]


# --- properties of the guards that involve a human or a conversation ----------------------------------------


def over_the_limits(store: BookStore, policy: RiskyWritePolicy) -> set[int]:
    """Books whose cart line is over the approval rule's limits (every book, when the cart total is)."""
    cart = store.cart("c1")
    if cart.total > policy.max_cart_total:
        return {line.book.id for line in cart.lines}
    return {
        line.book.id
        for line in cart.lines
        if line.quantity > policy.max_quantity or line.line_total > policy.max_line_total
    }


def approved_book(call: dict[str, Any]) -> int | None:
    add = expected_add(call["args"]) if isinstance(call["args"], dict) else None
    return None if add is None else add[0]


@pytest.mark.parametrize("kind", IMPLEMENTATIONS)
@settings(settings.get_profile(PROFILE), max_examples=max(25, settings.get_profile(PROFILE).max_examples // 4))
@given(script=scripts(), answers=st.lists(st.booleans(), max_size=12), parallel=st.booleans())
def test_no_cart_line_goes_over_the_approval_limits_unless_a_human_said_yes(
    kind: str, script: list[AIMessage], answers: list[bool], parallel: bool
) -> None:
    """Split, respelled or repeated, no write gets past the gate: whatever the script, every cart line over the
    limits (more than 3 copies, a line over 50.00, a cart over 200.00) is of a book a human approved an add of."""
    store = BookStore()
    policy = RiskyWritePolicy(store)
    said = iter(answers)
    approved: set[int | None] = set()

    def human(call: dict[str, Any], reason: str) -> bool:
        yes = next(said, False)
        if yes:
            approved.add(approved_book(call))
        return yes

    options = AgentOptions(needs_approval=policy, parallel_tools=parallel)
    model = FuzzModel(replies=script)
    if kind == "handwritten":
        result = AgentLoop(model, make_tools(store), options, approve=human).run(INSTRUCTIONS, GOAL)
    else:
        session = GraphSession(GraphAgent(model, make_tools(store), options), INSTRUCTIONS)
        result = session.ask(GOAL)
        while result.stop_reason is StopReason.AWAITING_APPROVAL and result.pending:
            request = result.pending[0]
            result = session.resume(human(request["tool_call"], request["reason"]))
    assert result.stop_reason in ALLOWED_STOPS
    assert store.check_invariants() == []
    unapproved = over_the_limits(store, policy) - approved
    assert not unapproved, f"cart {cart_of(store)} holds books {unapproved} over the limits with no human's yes"


@pytest.mark.parametrize("kind", ["handwritten", "langgraph", "langgraph-sqlite"])
@settings(settings.get_profile(PROFILE), max_examples=25)
@given(questions=st.lists(st.sampled_from(["one", "two", "three", "four"]), min_size=1, max_size=4, unique=True))
def test_every_turn_that_returned_a_result_is_in_the_history(kind: str, questions: list[str]) -> None:
    """Turns asked at once on one conversation (asyncio tasks) are taken one at a time: none is lost."""
    replies = [AIMessage(f"Answer {n}.") for n in range(len(questions))]

    async def ask_all(tmp: str) -> tuple[list[Any], list[BaseMessage]]:
        model = FuzzModel(replies=replies)
        session: Any
        if kind == "handwritten":
            session = Session(AgentLoop(model, make_tools(BookStore())), INSTRUCTIONS)
        elif kind == "langgraph":
            session = GraphSession(GraphAgent(model, make_tools(BookStore())), INSTRUCTIONS)
        else:
            agent = GraphAgent(model, make_tools(BookStore()))
            session = GraphSession.sqlite(agent, INSTRUCTIONS, path=f"{tmp}/thread.db")
        outcomes = await asyncio.gather(*(session.aask(q) for q in questions), return_exceptions=True)
        history = session.messages if kind == "handwritten" else await session.messages()
        return outcomes, history

    with tempfile.TemporaryDirectory() as tmp:
        outcomes, history = asyncio.run(ask_all(tmp))
    asked = [m.content for m in history if isinstance(m, HumanMessage)]
    answers = [m.content for m in history if isinstance(m, AIMessage)]
    for question, outcome in zip(questions, outcomes, strict=True):
        if isinstance(outcome, AgentResult):
            assert question in asked, f"{question!r} returned {outcome.answer!r} but is not in the history"
            assert outcome.answer in answers
    assert sorted(asked) == sorted(questions) and len(answers) == len(questions)

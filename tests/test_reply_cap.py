"""A reply may use only what is left of the token budget; a cut reply is never an answer and never runs a call.

The budget counts a reply once it has arrived, so on its own it cannot stop a reply that never ends (a real
135M model wrote 7,592 tokens in one reply). Both agents pass what is left of it as the call's `max_tokens`
(`guards.reply_cap`). A reply cut at a length limit is half a reply: its text is not an answer, and its last
call may be half a call that still parses. Each test runs on both agents; the streamed runs too.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage

from comparison.scenarios import INSTRUCTIONS, SEED_GOAL
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.models import ScriptedChatModel
from shared_tools.results import STREAM_FALLBACK, AgentLimits, Guard, StopReason, Token
from tests.conftest import SESSION_KINDS, assert_valid_history, open_session
from tests.doubles import RunawayModel, ScriptModel, ai, call


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_a_reply_that_never_ends_is_cut_at_the_budget(make_agent: Any, store: BookStore, streamed: bool) -> None:
    model = RunawayModel()
    tokens: list[Token] = []
    on_token = tokens.append if streamed else None
    agent = make_agent(model, make_tools(store), AgentLimits(max_tokens=2_000), on_token=on_token)
    result = agent.run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.TOKEN_BUDGET
    assert model.caps == [2_000]  # the whole budget was left for the first reply
    [event] = result.trace
    assert event.guard is Guard.REPLY_CAPPED
    assert result.answer is None and result.tool_calls == 0
    assert 2_000 < result.tokens <= 2_000 + model.prompt_tokens  # over by the prompt at most
    if streamed:
        assert "".join(t.text for t in tokens).startswith("la la")


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_a_cut_reply_runs_none_of_its_calls(make_agent: Any, store: BookStore, streamed: bool) -> None:
    # The article job spends 727 + 1,252 tokens on its first two steps (tests/test_behaviour.py); the third reply,
    # a check_stock call, needs more than the 5 tokens left: the cap cuts it mid-arguments.
    full = make_agent(ScriptedChatModel(), make_tools(BookStore())).run(INSTRUCTIONS, SEED_GOAL)
    budget = sum(full.tokens_per_step[:2]) + 5
    tokens: list[Token] = []
    options: dict[str, Any] = {"on_token": tokens.append} if streamed else {}
    agent = make_agent(ScriptedChatModel(), make_tools(store), AgentLimits(max_tokens=budget), **options)
    result = agent.run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.TOKEN_BUDGET
    assert (result.steps, result.tool_calls) == (3, 2)
    cut = result.messages[-1]
    assert isinstance(cut, AIMessage) and not cut.tool_calls and cut.invalid_tool_calls
    assert [e.guard for e in result.trace if e.is_model][-1] is Guard.REPLY_CAPPED
    assert_valid_history(result.messages)


def test_a_half_written_add_never_runs(make_agent: Any, store: BookStore) -> None:
    """`{"book_id": 7, "quantity": 12}` cut after `"quantity": 1` parses (a streamed merge closes the object):
    one copy nobody asked for, unless a cut reply's calls are dropped."""
    half = AIMessage(
        "",
        tool_calls=[call("add_to_cart", "c1", book_id=7, quantity=1)],
        response_metadata={"finish_reason": "length"},
        usage_metadata={"input_tokens": 50, "output_tokens": 10, "total_tokens": 60},
    )
    result = make_agent(ScriptModel(replies=[half]), make_tools(store)).run(INSTRUCTIONS, SEED_GOAL)
    assert result.stop_reason is StopReason.INVALID_RESPONSE  # cut at the model's own limit, not the budget's
    assert result.tool_calls == 0 and store.cart("c1").lines == ()
    assert result.trace[0].guard is None
    assert_valid_history(result.messages)


def test_a_models_own_lower_limit_is_left_alone(make_agent: Any, store: BookStore) -> None:
    model = RunawayModel(max_tokens=300)
    result = make_agent(model, make_tools(store), AgentLimits(max_tokens=2_000)).run(INSTRUCTIONS, SEED_GOAL)
    assert model.caps == [None]  # no keyword: the model's own 300 is tighter than the 2,000 left
    assert result.stop_reason is StopReason.INVALID_RESPONSE
    assert result.trace[0].guard is None


def test_no_budget_no_cap(make_agent: Any, store: BookStore) -> None:
    model = RunawayModel(length=50)
    result = make_agent(model, make_tools(store), AgentLimits(max_tokens=None)).run(INSTRUCTIONS, SEED_GOAL)
    assert model.caps == [None]
    assert result.stop_reason is StopReason.DONE  # 50 tokens of la la, ended by the model itself


def test_the_stream_fallback_is_on_the_trace_once(make_agent: Any, store: BookStore) -> None:
    fallback = ai("", call("search_books", "s1", query="lighthouse"), tokens=40)
    fallback.response_metadata = {STREAM_FALLBACK: "the server refused to stream a reply with tools"}
    model = ScriptModel(replies=[fallback, ai("Nothing found.", tokens=40)])
    result = make_agent(model, make_tools(store)).run(INSTRUCTIONS, SEED_GOAL)
    assert [e.guard for e in result.trace if e.is_model] == [Guard.STREAM_FALLBACK, None]


@pytest.mark.parametrize("kind", SESSION_KINDS)
def test_a_conversation_goes_on_after_a_cut_reply(kind: str, store: BookStore, tmp_path: Any) -> None:
    half = AIMessage(
        "Let me add",
        tool_calls=[call("add_to_cart", "c1", book_id=7, quantity=1)],
        response_metadata={"finish_reason": "length"},
        usage_metadata={"input_tokens": 50, "output_tokens": 10, "total_tokens": 60},
    )

    def answer(history: list[BaseMessage]) -> AIMessage:
        assert_valid_history(history)  # no call of the cut reply waits for a result
        return ai("Your cart is empty.")

    model = ScriptModel(replies=[half, answer])
    session = open_session(kind, model, make_tools(store), tmp_path)
    try:
        assert session.ask(SEED_GOAL).stop_reason is StopReason.INVALID_RESPONSE
        assert session.ask("What is my cart total now?").stop_reason is StopReason.DONE
    finally:
        close = getattr(session, "close", None)
        if close is not None:
            close()
    assert store.cart("c1").lines == ()

"""A broken Ollama server, for both agents: each fault ends in one clear error or the time-budget stop.

The real ChatOllama against tests/ollama_replay.py: a server gone, a cut connection, a line that is not JSON, a
reply slower than the time budget (TIME_BUDGET) or than the request timeout. A failed call is `ModelCallFailed`
naming the server, never caught by the agents (the comparison makes it that contender's failed run, the others
still run); the store is untouched.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from comparison.contenders import CONTENDERS
from comparison.records import RunRecord, short_outcome
from comparison.run_setup import RunOptions
from comparison.runner import run_scenario_variant
from comparison.scenarios import INSTRUCTIONS, SCENARIOS_BY_NAME, SEED_GOAL, contenders_for
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.guards import MODEL_TIMED_OUT_DETAIL
from shared_tools.models import ModelCallFailed, ModelUnavailable, make_model
from shared_tools.models.ollama import CheckedChatOllama
from shared_tools.results import AgentLimits, AgentResult, StopReason
from tests.conftest import IMPLEMENTATIONS, build_agent
from tests.ollama_replay import OllamaReplayServer, ReplayReply, free_port

MODES = ("sync", "async")


def run(kind: str, mode: str, model: Any, store: BookStore, limits: AgentLimits) -> AgentResult:
    agent = build_agent(kind, model, make_tools(store), limits=limits)
    if mode == "async":
        return asyncio.run(agent.arun(INSTRUCTIONS, SEED_GOAL))
    return agent.run(INSTRUCTIONS, SEED_GOAL)


def assert_untouched(store: BookStore) -> None:
    assert store.cart("c1").lines == ()
    assert store.check_invariants() == []
    fresh = BookStore()
    assert {b.id: store.stock(b.id) for b in store.books()} == {b.id: fresh.stock(b.id) for b in fresh.books()}


def ollama_model(monkeypatch: pytest.MonkeyPatch, server: OllamaReplayServer, timeout_s: float = 30.0) -> Any:
    monkeypatch.setenv("OLLAMA_HOST", server.base_url)
    return make_model("ollama:qwen3:4b", timeout_s=timeout_s)


def test_make_model_gives_the_ollama_client_a_request_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ollama client's own default is no timeout at all; make_model's reaches the httpx clients."""
    with OllamaReplayServer() as server:
        model = ollama_model(monkeypatch, server, timeout_s=7.5)
    assert isinstance(model, CheckedChatOllama)
    assert model._client._client.timeout == httpx.Timeout(7.5)
    assert model._async_client._client.timeout == httpx.Timeout(7.5)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", IMPLEMENTATIONS)
def test_server_gone_mid_run_is_one_clear_error(kind: str, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with OllamaReplayServer() as server:
        model = ollama_model(monkeypatch, server)  # reachable while the model is made ...
    store = BookStore()  # ... and gone when the run starts: nothing listens on that port any more
    with pytest.raises(ModelCallFailed, match=r"Ollama at http://127\.0\.0\.1:\d+ refused the connection") as caught:
        run(kind, mode, model, store, AgentLimits())
    assert isinstance(caught.value.__cause__, httpx.ConnectError)
    assert isinstance(caught.value, ModelUnavailable)
    assert_untouched(store)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", IMPLEMENTATIONS)
def test_a_never_opened_port_is_refused_the_same_way(kind: str, mode: str) -> None:
    port = free_port()
    model = CheckedChatOllama(model="qwen3:4b", base_url=f"http://127.0.0.1:{port}", client_kwargs={"timeout": 5})
    store = BookStore()
    with pytest.raises(ModelCallFailed, match="refused the connection"):
        run(kind, mode, model, store, AgentLimits())
    assert_untouched(store)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", IMPLEMENTATIONS)
def test_connection_dropped_mid_stream_is_one_clear_error(
    kind: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = BookStore()
    with OllamaReplayServer(script=[ReplayReply(text="I will add The Quiet", drop_mid_stream=True)]) as server:
        with pytest.raises(ModelCallFailed, match="broke in the middle of a reply") as caught:
            run(kind, mode, ollama_model(monkeypatch, server), store, AgentLimits())
        assert len(server.chat_requests) == 1  # no silent retry: one request, one failure
    assert isinstance(caught.value.__cause__, httpx.TransportError)
    assert_untouched(store)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", IMPLEMENTATIONS)
def test_malformed_json_is_one_clear_error(kind: str, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = BookStore()
    reply = ReplayReply(tool_calls=[("add_to_cart", {"book_id": 7})], malformed=True)
    with (
        OllamaReplayServer(script=[reply]) as server,
        pytest.raises(ModelCallFailed, match="sent a reply line that is not valid JSON") as caught,
    ):
        run(kind, mode, ollama_model(monkeypatch, server), store, AgentLimits())
    assert isinstance(caught.value.__cause__, json.JSONDecodeError)
    assert_untouched(store)  # the add_to_cart after the broken line never reached the tools


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", IMPLEMENTATIONS)
def test_a_reply_slower_than_the_time_budget_stops_the_run(
    kind: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model call itself is bounded by what is left of max_duration, not only checked after tool rounds."""
    store = BookStore()
    slow = ReplayReply(tool_calls=[("add_to_cart", {"book_id": 7})], delay_s=30)
    with OllamaReplayServer(script=[slow]) as server:
        result = run(kind, mode, ollama_model(monkeypatch, server), store, AgentLimits(max_duration=0.3))
    assert result.stop_reason is StopReason.TIME_BUDGET
    assert (result.model_calls, result.tool_calls, result.tokens, result.answer) == (1, 0, 0, None)
    assert [e.detail for e in result.trace] == [MODEL_TIMED_OUT_DETAIL]
    assert_untouched(store)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", IMPLEMENTATIONS)
def test_a_reply_slower_than_the_request_timeout_is_one_clear_error(
    kind: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a time budget, the request timeout that make_model sets is what ends the wait."""
    store = BookStore()
    with OllamaReplayServer(script=[ReplayReply(text="Too late", delay_s=30)]) as server:
        model = ollama_model(monkeypatch, server, timeout_s=0.3)
        with pytest.raises(ModelCallFailed, match=r"sent nothing for 0\.3 s \(the request timeout\)") as caught:
            run(kind, mode, model, store, AgentLimits(max_duration=None))
    assert isinstance(caught.value.__cause__, httpx.TimeoutException)
    assert_untouched(store)


@pytest.mark.parametrize("kind", IMPLEMENTATIONS)
def test_a_healthy_reply_through_the_same_path_still_works(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: the translation layer changes nothing when the server behaves."""
    store = BookStore()
    script = [ReplayReply(tool_calls=[("add_to_cart", {"book_id": 7})]), ReplayReply(text="Added it.")]
    with OllamaReplayServer(script=script) as server:
        result = run(kind, "sync", ollama_model(monkeypatch, server), store, AgentLimits())
    assert (result.stop_reason, result.answer, result.tokens) == (StopReason.DONE, "Added it.", 300)
    assert [(line.book.id, line.quantity) for line in store.cart("c1").lines] == [(7, 1)]


@pytest.mark.parametrize("kind", IMPLEMENTATIONS)
def test_ollama_is_told_what_is_left_of_the_token_budget(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reply cap reaches Ollama as `num_predict`, and a reply Ollama cut (done_reason "length") is no answer."""
    store = BookStore()
    script = [ReplayReply(tool_calls=[("search_books", {"query": "lighthouse"})]), ReplayReply(done_reason="length")]
    with OllamaReplayServer(script=script) as server:
        result = run(kind, "sync", ollama_model(monkeypatch, server), store, AgentLimits(max_tokens=1_000))
        caps = [body["options"].get("num_predict") for body in server.chat_requests]
    assert caps == [1_000, 1_000 - 150]  # each replay reply reports 120 + 30 tokens
    assert result.stop_reason is StopReason.INVALID_RESPONSE  # cut, but not by the budget: 300 of 1,000 spent


@pytest.mark.parametrize("failing", list(CONTENDERS))
def test_a_failed_model_call_ends_only_that_contenders_run(failing: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison goes on: the contender whose call broke gets a failed record, the others run to the end."""
    scenario = SCENARIOS_BY_NAME["bookstore"]
    variant = scenario.variants[0]
    running, _ = contenders_for(scenario, variant)
    # Every healthy contender answers in one call; the failing one's only call is a line that is not JSON.
    script = [
        ReplayReply(tool_calls=[("add_to_cart", {"book_id": 7})], malformed=True)
        if c == failing
        else ReplayReply(text="I cannot do that right now.")
        for c in running
    ]
    records: list[RunRecord] = []
    with OllamaReplayServer(script=script) as server:
        monkeypatch.setenv("OLLAMA_HOST", server.base_url)
        run_scenario_variant(scenario, variant, RunOptions(model="ollama:qwen3:4b"), records.append)
        assert server.remaining == 0
    by_contender = {r.contender: r for r in records}
    assert list(by_contender) == running
    failed = by_contender[failing]
    assert failed.model_failed and failed.stop_reason is None
    assert failed.error is not None and "sent a reply line that is not valid JSON" in failed.error
    assert short_outcome(failed) == "model call failed"
    assert failed.cart == [] and failed.tool_calls == 0
    for other in (r for r in records if r.contender != failing):
        assert not other.model_failed and other.error is None and other.stop_reason == StopReason.DONE
    points = scenario.notice_points(records)
    said = [p for p in points if "the model call failed" in p]
    assert len(said) == 1 and said[0].startswith(f"[{variant.label}] {failing}: ")
    assert not any(f"raised {failed.error_type}" in p for p in points)


def test_a_comparison_in_which_every_model_call_failed_says_so_and_exits_3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The runs are shown and written, but nothing was compared: exit 3 with one line, as for a model down."""
    import compare

    scenario = SCENARIOS_BY_NAME["bookstore"]
    running, _ = contenders_for(scenario, scenario.variants[0])
    script = [ReplayReply(text="never read", malformed=True) for _ in running]
    out = tmp_path / "runs.json"
    with OllamaReplayServer(script=script) as server:
        monkeypatch.setenv("OLLAMA_HOST", server.base_url)
        argv = ["bookstore", "--model", "ollama:qwen3:4b", "--no-trace", "--json", str(out)]
        assert compare.main(argv) == compare.EXIT_UNAVAILABLE
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "every model call failed" in err and "Traceback" not in err
    written = json.loads(out.read_text())
    assert written and all(run["model_failed"] for run in written["runs"]), written

"""Tests for the agent contract in `shared_tools.results`: the one budget rule, usage from a trace, a trace line."""

from __future__ import annotations

import time

import pytest

from shared_tools.results import AgentLimits, AgentOptions, Guard, RunUsage, StopReason, TraceEvent


def usage(**counts: int | float) -> RunUsage:
    return RunUsage(**counts)  # type: ignore[arg-type]


def test_nothing_spent_means_go_on() -> None:
    assert AgentLimits().check(usage()) is None


@pytest.mark.parametrize(
    ("spent", "expected"),
    [
        ({"error_rounds": 4}, StopReason.TOO_MANY_ERRORS),
        ({"tokens": 20_001}, StopReason.TOKEN_BUDGET),
        ({"model_calls": 6}, StopReason.MAX_STEPS),
        ({"tokens": 20_000, "model_calls": 5, "error_rounds": 3}, None),  # each exactly at its limit: still in
    ],
)
def test_each_budget_stops_the_run_for_its_own_reason(spent: dict[str, int], expected: StopReason | None) -> None:
    assert AgentLimits().check(usage(**spent)) is expected


def test_the_order_is_errors_then_tokens_then_time_then_steps() -> None:
    limits = AgentLimits(max_steps=1, max_tokens=10, max_duration=1.0, max_consecutive_errors=0)
    long_ago = time.monotonic() - 5
    everything = usage(model_calls=1, tokens=11, error_rounds=1, started=long_ago)
    assert limits.check(everything) is StopReason.TOO_MANY_ERRORS
    assert limits.check(usage(model_calls=1, tokens=11, started=long_ago)) is StopReason.TOKEN_BUDGET
    assert limits.check(usage(model_calls=1, started=long_ago)) is StopReason.TIME_BUDGET
    assert limits.check(usage(model_calls=1)) is StopReason.MAX_STEPS


def test_none_switches_every_limit_off() -> None:
    limits = AgentLimits(max_steps=None, max_tokens=None, max_duration=None, max_consecutive_errors=None)
    huge = usage(model_calls=10**6, tokens=10**9, error_rounds=10**3, started=time.monotonic() - 10**5)
    assert limits.check(huge) is None
    assert limits.time_left(huge) is None


def test_time_left_counts_down_from_the_runs_start() -> None:
    left = AgentLimits(max_duration=10).time_left(usage(started=time.monotonic() - 4))
    assert left is not None and 5.9 < left <= 6.0


def test_a_clean_round_resets_the_error_rounds() -> None:
    spent = usage()
    for had_error in (True, True, False, True):
        spent.end_round(had_error)
    assert spent.error_rounds == 1


def test_usage_of_a_trace_counts_model_calls_tool_calls_and_tokens() -> None:
    trace = [
        TraceEvent(1, "model", 0.1, "1 tool call(s)", tokens=100),
        TraceEvent(1, "check_stock", 0.0, "{} -> {}"),
        TraceEvent(2, "model", 0.1, "0 tool call(s)", tokens=150),
    ]
    counted = RunUsage.of_trace(trace)
    assert (counted.model_calls, counted.tool_calls, counted.tokens) == (2, 1, 250)


def test_a_trace_line_shows_tokens_errors_and_the_guard() -> None:
    model = TraceEvent(3, "model", 0.25, "1 tool call(s)", tokens=812)
    detail = '{"book_id":7} -> You already called'
    refused = TraceEvent(3, "check_stock", 0.0, detail, is_error=True, guard=Guard.REPEAT)
    assert model.line() == "[step 3] model              0.250s  1 tool call(s) [812 tokens]"
    assert refused.line().endswith("You already called [error] [repeated call]")


def test_options_have_one_set_of_defaults() -> None:
    options = AgentOptions()
    assert options.limits == AgentLimits()
    assert (options.parallel_tools, options.detailed_errors, options.max_tool_result_chars) == (False, False, None)
    assert options.needs_approval is None and options.on_event is None


@pytest.mark.parametrize("name", ["max_steps", "max_tokens", "max_duration", "max_repeats", "max_consecutive_errors"])
def test_a_limit_below_its_floor_is_refused_by_name(name: str) -> None:
    with pytest.raises(ValueError, match=rf"AgentLimits\.{name} must be None or >= \d, got -1"):
        AgentLimits(**{name: -1})

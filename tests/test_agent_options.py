"""How an agent is built: the article's call with an `AgentLimits`, an `AgentOptions` or option keywords, on each
agent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from comparison.scenarios import INSTRUCTIONS, SEED_GOAL
from handwritten import AgentLoop
from langgraph_version import DefaultsGraphAgent, GraphAgent, create_agent_contender
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.models import make_model
from shared_tools.results import AgentLimits, AgentOptions, StopReason

AGENTS: dict[str, Callable[..., Any]] = {
    "AgentLoop": AgentLoop,
    "GraphAgent": GraphAgent,
    "DefaultsGraphAgent": DefaultsGraphAgent,
    "CreateAgentContender": create_agent_contender,
}


@pytest.fixture(params=list(AGENTS))
def build(request: pytest.FixtureRequest) -> tuple[str, Callable[..., Any]]:
    name = request.param
    store = BookStore()
    model, tools = make_model("scripted"), make_tools(store, "c1")
    return name, lambda *args, **kwargs: AGENTS[name](model, tools, *args, **kwargs)


def test_the_seeds_call_with_limits_runs_within_them(build: tuple[str, Callable[..., Any]]) -> None:
    _, make = build
    agent = make(AgentLimits(max_steps=1))
    assert agent.options == AgentOptions(limits=AgentLimits(max_steps=1))
    # The scripted shopper needs several steps for the article's goal, so one step is the limit that ends it.
    assert agent.run(INSTRUCTIONS, SEED_GOAL).stop_reason is StopReason.MAX_STEPS


def test_limits_and_keywords_or_an_options_object_mean_the_same(build: tuple[str, Callable[..., Any]]) -> None:
    _, make = build
    limits = AgentLimits(max_steps=4)
    expected = AgentOptions(limits=limits, detailed_errors=True)
    assert make(limits, detailed_errors=True).options == expected
    assert make(expected).options == expected
    assert make(limits=limits, detailed_errors=True).options == expected
    assert make().options == AgentOptions()


@pytest.mark.parametrize(
    ("args", "kwargs", "says"),
    [
        (({"max_steps": 3},), {}, r"options must be an AgentOptions or an AgentLimits, not dict"),
        ((3,), {}, r"not int; e\.g\. \w+\(model, tools, AgentLimits\(max_steps=5\)"),
        ((), {"max_steps": 3}, r"unknown option\(s\) max_steps: .*limits such as max_steps go in an AgentLimits"),
        ((), {"paralel_tools": True}, r"unknown option\(s\) paralel_tools: the options are limits, "),
        ((AgentOptions(),), {"detailed_errors": True}, r"got an AgentOptions and the keyword\(s\) detailed_errors"),
        ((AgentLimits(),), {"limits": AgentLimits()}, r"got an AgentLimits and limits=\.\.\."),
    ],
)
def test_anything_else_is_a_type_error_that_says_what_to_pass(
    build: tuple[str, Callable[..., Any]], args: tuple[Any, ...], kwargs: dict[str, Any], says: str
) -> None:
    name, make = build
    with pytest.raises(TypeError, match=says) as raised:
        make(*args, **kwargs)
    assert name in str(raised.value)

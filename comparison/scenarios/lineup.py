"""Which contenders run each variant of a scenario, and, in words, why the others cannot.

`not_available` gives the reason a contender does not run a variant (a knob its framework lacks, or a variant
that lists its contenders); the ``NO_*`` sentences are the reasons the session scenarios give.
"""

from __future__ import annotations

from collections.abc import Sequence

from comparison.contenders import (
    APPROVAL_CONTENDERS,
    CONTENDERS,
    NO_APPROVAL_GATE,
    NO_SEQUENTIAL_TOOLS,
    TOOLNODE_CONTENDERS,
)
from comparison.scenarios.model import Scenario, Variant

NO_STORAGE_OPTION = (
    "its JSON Lines file gets one line of new messages per save: there are no checkpoints to store it in"
)

NO_REWIND = (
    "rewind is a method of our two sessions (handwritten.Session cuts its list; GraphSession forks from an "
    "earlier checkpoint); the framework-only threads here have none"
)


NO_CHECKPOINTS = (
    "a list of messages keeps no checkpoints, so there is nothing to replay: cutting the list (rewind) is all "
    "the hand-written session has"
)


NO_REPLAY = (
    "replaying a checkpoint is GraphSession.areplay (LangGraph's invoke(None, config with a checkpoint_id)); the "
    "framework-only threads here are not given one"
)


NO_MAF_REPLAY = (
    "MAF's AgentSession holds the history as one list in its state, with no checkpoints: there is nothing to replay "
    "from, and rewinding it (MafSession.rewind cuts the list) is all it has"
)


NO_MAF_STORAGE = "MAF's session is one JSON file (AgentSession.to_dict), rewritten each turn: no checkpoints to store"

REPLAY_WHY_NOT = (
    ("handwritten", NO_CHECKPOINTS),
    ("langgraph-defaults", NO_REPLAY),
    ("create-agent", NO_REPLAY),
    ("maf", NO_MAF_REPLAY),
)
NO_HISTORY_POLICY = (
    "LangGraph's prebuilt graph and create_agent keep a thread but no history policy of ours (trimming "
    "needs a pre-model hook or SummarizationMiddleware you add), so their growth is the langgraph "
    "contender's full-history row"
)


def not_available(contender: str, scenario: Scenario, variant: Variant) -> str | None:
    """Why `contender` cannot run this variant of `scenario`, in words; None when it runs it.

    A variant that turns a knob the contender's framework does not have is not run by it, and says so: an
    approval gate (`variant.approval_gate`), and running tools one at a time where the scenario compares it
    with running them at once (its variants differ in `parallel_tools`). A scenario or variant that lists
    its contenders (`contenders=`) excludes the others, also said in words.
    """
    if contender not in CONTENDERS:
        raise ValueError(f"unknown contender {contender!r}")
    given_why = dict(scenario.why_not).get(contender)
    if given_why is not None and contender not in scenario.contenders:
        return given_why
    if variant.approval_gate and contender not in APPROVAL_CONTENDERS:
        return NO_APPROVAL_GATE
    compares_parallel = len({v.parallel_tools for v in scenario.variants}) > 1
    if compares_parallel and not variant.parallel_tools and contender in TOOLNODE_CONTENDERS:
        return NO_SEQUENTIAL_TOOLS
    if contender not in scenario.contenders and scenario.others_reason is not None:
        return scenario.others_reason
    listed = variant.contenders or scenario.contenders
    if contender not in listed or contender not in scenario.contenders:
        given = dict(variant.why_not).get(contender)
        if given is not None:
            return given
        runners = ", ".join(c for c in listed if c in scenario.contenders)
        return f"{scenario.name}/{variant.name} is run only by {runners}"
    return None


def contenders_for(
    scenario: Scenario, variant: Variant, chosen: Sequence[str] = tuple(CONTENDERS)
) -> tuple[list[str], dict[str, str]]:
    """Which of `chosen` run this variant (in table order), and why each of the others does not."""
    running: list[str] = []
    why_not: dict[str, str] = {}
    for contender in (c for c in CONTENDERS if c in chosen):
        reason = not_available(contender, scenario, variant)
        if reason is None:
            running.append(contender)
        else:
            why_not[contender] = reason
    return running, why_not


def contenders_running(scenario: Scenario, contenders: Sequence[str]) -> list[str]:
    """Which of `contenders` run at least one variant of `scenario` (the rule `runner.run_scenario` applies)."""
    return [
        c
        for c in scenario.contenders
        if c in contenders and any(c in (v.contenders or scenario.contenders) for v in scenario.variants)
    ]


def nothing_to_run(scenarios: Sequence[Scenario], contenders: Sequence[str]) -> str:
    """Why this selection runs nothing: which contenders each scenario is run by, and which were chosen."""
    supported = "; ".join(
        f"{s.name} is run by {', '.join(c for c in s.contenders if contenders_running(s, [c]))}" for s in scenarios
    )
    return f"nothing to run: {supported}; --contenders chose {', '.join(contenders)}"

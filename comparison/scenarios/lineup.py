"""Which contenders run each variant of a scenario, and, in words, why the others cannot.

`not_available` gives the reason a contender does not run a variant (a knob its framework lacks, or a variant
that lists its contenders); each reason is the contender's own sentence (`ContenderSpec.lacks`, given to a
scenario as `why_not` through `contenders.lacking`), so a new contender needs no edit here.
"""

from __future__ import annotations

from collections.abc import Sequence

from comparison.contenders import CONTENDERS, spec_of
from comparison.scenarios.model import Scenario, Variant
from shared_tools.contender import Capability


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
    spec = spec_of(contender)
    if variant.approval_gate and not spec.has(Capability.APPROVAL):
        return spec.why_not(Capability.APPROVAL)
    compares_parallel = len({v.parallel_tools for v in scenario.variants}) > 1
    if compares_parallel and not variant.parallel_tools and not spec.has(Capability.SEQUENTIAL_TOOLS):
        return spec.why_not(Capability.SEQUENTIAL_TOOLS)
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

"""The contenders: which agents compete, found through the entry-point group of `shared_tools.contender`.

`SPECS` holds each one's `ContenderSpec`, this project's own first (in their `order`), then an outside package's
by name; every table that names contenders is derived from it. A spec module is cheap to import: the agent's
framework is imported when `build_contender` builds it, so `--list` and `--help` never pay for LangGraph.
"""

from __future__ import annotations

import logging
import tomllib
from collections.abc import Sequence
from dataclasses import replace
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import TYPE_CHECKING

from comparison.approvals import Human
from shared_tools.contender import ENTRY_POINT_GROUP, Approval, Capability, Contender, ContenderSpec
from shared_tools.results import AgentOptions

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.tools import BaseTool

__all__ = [
    "APPROVAL_CONTENDERS",
    "ASKING_CONTENDERS",
    "CONTENDERS",
    "SESSION_CONTENDERS",
    "SPECS",
    "Contender",
    "build_contender",
    "lacking",
    "parse_contenders",
    "spec_of",
    "with_capability",
]

log = logging.getLogger(__name__)

PROJECT = "agent-loop-compare"
"""The distribution whose entry points are this project's own contenders."""


def _is_ours(entry: EntryPoint) -> bool:
    dist = getattr(entry, "dist", None)
    name = "" if dist is None else (dist.metadata["Name"] or "")
    return name.lower().replace("_", "-") == PROJECT


def _load(entry: EntryPoint) -> ContenderSpec:
    spec = entry.load()
    if not isinstance(spec, ContenderSpec):
        raise TypeError(f"{entry.value} is a {type(spec).__name__}, not a shared_tools.contender.ContenderSpec")
    if spec.name != entry.name:
        raise ValueError(f"{entry.value} declares the contender {spec.name!r}, but its entry point is {entry.name!r}")
    return spec


def _own_entries() -> list[EntryPoint]:
    """Our entry points: from the checkout's pyproject.toml when the code runs from one (an editable install's
    metadata is written at install time, so a contender added since would be missing), else the installed ones."""
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    if pyproject.is_file():
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        if project.get("name") == PROJECT:
            declared = project.get("entry-points", {}).get(ENTRY_POINT_GROUP, {})
            return [EntryPoint(name, value, ENTRY_POINT_GROUP) for name, value in declared.items()]
    return [entry for entry in entry_points(group=ENTRY_POINT_GROUP) if _is_ours(entry)]


def load_specs() -> dict[str, ContenderSpec]:
    """Every contender of the entry-point group, in table order. One of ours that cannot load raises (a bug
    here); an outside one is left out with one warning line, so a broken plug-in never stops every command."""
    ours = [_load(entry) for entry in _own_entries()]
    outside: dict[str, ContenderSpec] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        if _is_ours(entry):
            continue
        try:
            spec = _load(entry)
        except Exception as error:  # an outside package's bug: said, and that contender left out
            log.warning("contender %r (%s) left out: %s: %s", entry.name, entry.value, type(error).__name__, error)
            continue
        if spec.name in outside:
            log.warning("contender %r (%s) left out: the name is declared twice", entry.name, entry.value)
            continue
        outside[spec.name] = spec
    ours.sort(key=lambda s: (s.order is None, s.order or 0, s.name))
    specs = {s.name: s for s in ours}
    for name in sorted(outside):
        if name in specs:
            log.warning("contender %r (%s) left out: the name is one of this project's", name, outside[name].build)
            continue
        specs[name] = outside[name]
    return specs


SPECS: dict[str, ContenderSpec] = load_specs()
"""Contender name -> its declaration, in the order every table shows them."""

CONTENDERS: dict[str, str] = {name: spec.description for name, spec in SPECS.items()}
"""Contender name -> one line saying what it is, in the order the tables show them."""


def spec_of(name: str) -> ContenderSpec:
    """The declaration of contender `name`; ValueError for a name no entry point declares."""
    if name not in SPECS:
        raise ValueError(f"unknown contender {name!r}")
    return SPECS[name]


def with_capability(capability: Capability) -> tuple[str, ...]:
    """The contenders that have `capability`, in table order."""
    return tuple(name for name, spec in SPECS.items() if spec.has(capability))


def lacking(capability: Capability) -> tuple[tuple[str, str], ...]:
    """(contender, its own sentence) for each contender without `capability`, in table order."""
    return tuple((name, spec.why_not(capability)) for name, spec in SPECS.items() if not spec.has(capability))


SESSION_CONTENDERS: tuple[str, ...] = with_capability(Capability.CONVERSATIONS)
"""The contenders with a multi-turn conversation (`ContenderSpec.conversation`)."""

APPROVAL_CONTENDERS: tuple[str, ...] = with_capability(Capability.APPROVAL)
"""The contenders with an approval gate: they ask an `approve` callback, or pause for the harness to resume."""

ASKING_CONTENDERS: tuple[str, ...] = tuple(name for name, spec in SPECS.items() if spec.approval is Approval.ASKS)
"""The gated contenders that put a risky write to `Human.approve` while the run goes on; the others pause instead
(`conversations.run_gated`)."""


def parse_contenders(values: Sequence[str] | None) -> tuple[str, ...]:
    """`--contenders` options (each a comma-separated list, the option may repeat) as contender names; ValueError
    for a bad one. No option means all of them; an empty value (``--contenders ''``, ``,``) or an empty item
    (``a,,b``, ``a,``) is a mistake, not "all": a script that builds the list from an empty variable must not run
    everything."""
    if values is None:
        return tuple(CONTENDERS)
    names: list[str] = []
    for value in values:
        items = [item.strip() for item in value.split(",")]
        if not all(items):
            raise ValueError(
                f"--contenders {value!r} names an empty contender; give NAME[,NAME] from: {', '.join(CONTENDERS)}"
            )
        names += items
    bad = [c for c in names if c not in CONTENDERS]
    if bad:
        raise ValueError(f"unknown contender {bad[0]!r}; choose from: {', '.join(CONTENDERS)}")
    return tuple(dict.fromkeys(names))


def build_contender(
    name: str, model: BaseChatModel, tools: list[BaseTool], options: AgentOptions, human: Human | None = None
) -> Contender:
    """One of the contenders, built from the same `options` by its spec's `build`.

    With a `human`, risky writes need approval (`human.policy` as `options.needs_approval`): a contender that
    asks (`Approval.ASKS`) is given `human.approve`; one that pauses is run with `conversations.run_gated`; one
    without a gate is refused, in its own words.
    """
    spec = spec_of(name)
    if human is None:
        return spec.build(model, tools, options, None)
    if not spec.has(Capability.APPROVAL):
        raise ValueError(f"{name}: {spec.why_not(Capability.APPROVAL)}")
    options = replace(options, needs_approval=human.policy)
    return spec.build(model, tools, options, human.approve if spec.approval is Approval.ASKS else None)

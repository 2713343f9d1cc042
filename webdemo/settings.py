"""What the presenter chooses on the page (`PageSettings`): the panes, the persona, the limits, the gate.

Read from the page's JSON, checked field by field: anything else is a `BadRequest` in words.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from comparison.contenders import SPECS, with_capability
from shared_tools.contender import Capability
from shared_tools.models.personas import PERSONAS
from shared_tools.results import AgentLimits
from webdemo.events import BadRequest

log = logging.getLogger(__name__)

DEFAULT_PANES = 2
"""How many panes a new tab opens with: the first contenders of the tables that keep a conversation."""


def default_panes() -> tuple[str, ...]:
    """A new tab's panes: the first `DEFAULT_PANES` contenders (table order) whose spec keeps a conversation,
    which a pane is (a contender without one cannot have a pane)."""
    return with_capability(Capability.CONVERSATIONS)[:DEFAULT_PANES]


@dataclass(frozen=True)
class PageSettings:
    """What the presenter chooses on the page: the panes, the scripted persona, the limits, the gate."""

    contenders: tuple[str, ...] = field(default_factory=default_panes)
    persona: str = "shopper"
    max_steps: int = 6
    max_tokens: int | None = 20_000
    max_duration: float | None = None
    approval_gate: bool = True

    def limits(self) -> AgentLimits:
        return AgentLimits(max_steps=self.max_steps, max_tokens=self.max_tokens, max_duration=self.max_duration)

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "contenders": list(self.contenders)}

    @classmethod
    def from_json(cls, data: Any, base: PageSettings | None = None) -> PageSettings:
        """Settings from the page's JSON (missing keys keep `base`'s); anything else is a `BadRequest`."""
        base = base or cls()
        if not isinstance(data, dict):
            raise BadRequest(400, "settings must be a JSON object")
        unknown = set(data) - {f.name for f in fields(cls)} - {"tab"}
        if unknown:
            raise BadRequest(400, f"unknown setting {sorted(unknown)[0]!r}")
        changes: dict[str, Any] = {}
        if "contenders" in data:
            chosen = data["contenders"]
            if not isinstance(chosen, list) or not chosen or not all(isinstance(c, str) for c in chosen):
                raise BadRequest(400, "contenders must be a non-empty list of contender names")
            bad = [c for c in chosen if c not in SPECS]
            if bad:
                raise BadRequest(400, f"unknown contender {bad[0][:40]!r}; choose from {', '.join(SPECS)}")
            for name in chosen:
                if not SPECS[name].has(Capability.CONVERSATIONS):
                    raise BadRequest(400, f"{name} cannot have a pane: {SPECS[name].why_not(Capability.CONVERSATIONS)}")
            changes["contenders"] = tuple(c for c in SPECS if c in chosen)  # table order, no repeats
        if "persona" in data:
            if not isinstance(data["persona"], str) or data["persona"] not in PERSONAS:
                raise BadRequest(400, f"unknown persona; choose from {', '.join(PERSONAS)}")
            changes["persona"] = data["persona"]
        if "max_steps" in data:
            changes["max_steps"] = _number(data["max_steps"], "max_steps", int, 1, 50, optional=False)
        if "max_tokens" in data:
            changes["max_tokens"] = _number(data["max_tokens"], "max_tokens", int, 100, 1_000_000)
        if "max_duration" in data:
            changes["max_duration"] = _number(data["max_duration"], "max_duration", float, 0.01, 600.0)
        if "approval_gate" in data:
            if not isinstance(data["approval_gate"], bool):
                raise BadRequest(400, "approval_gate must be true or false")
            changes["approval_gate"] = data["approval_gate"]
        return replace(base, **changes)


def _number(value: Any, name: str, kind: type, low: float, high: float, *, optional: bool = True) -> Any:
    if value is None and optional:
        return None
    # bool is an int to Python, but `true` is no step limit.
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not isinstance(value, int | float) or (kind is int and not whole):
        what = f"a{' whole' if kind is int else ''} number{' or null' if optional else ''}"
        raise BadRequest(400, f"{name} must be {what}")
    # Compared before any float(): an int of 400 digits is a number, just not one that fits a float.
    if not low <= value <= high:
        raise BadRequest(400, f"{name} must be between {low:g} and {high:g}")
    return kind(value)

"""The course: one scenario per file, in teaching order (``s01_bookstore.py`` ... ``s15_time_travel.py``).

`SCENARIOS` is built from the files themselves: every module named ``sNN_*`` holds one `SCENARIO`, and the number
in its name is its place in the course, so adding a scenario is adding a file. The shapes they are made of are in
`model`, who runs which variant in `lineup`, and the readings of records they share in `queries`.
"""

from __future__ import annotations

import importlib
import pkgutil
import re

from comparison.scenarios.lineup import (
    contenders_for,
    contenders_running,
    not_available,
    nothing_to_run,
)
from comparison.scenarios.model import (
    CART_QUESTION,
    INSTRUCTIONS,
    ORDER_QUESTION,
    SEED_GOAL,
    RunSettings,
    Scenario,
    Variant,
)

CHAPTER = re.compile(r"s\d{2}_\w+")
"""The name of a scenario's module: its place in the course, then its name (``s07_looping_model``)."""


def _chapters() -> tuple[Scenario, ...]:
    """The `SCENARIO` of every chapter module of this package, in the order of their names."""
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if CHAPTER.fullmatch(m.name))
    return tuple(importlib.import_module(f"{__name__}.{name}").SCENARIO for name in names)


SCENARIOS: tuple[Scenario, ...] = _chapters()
SCENARIOS_BY_NAME: dict[str, Scenario] = {s.name: s for s in SCENARIOS}

__all__ = [
    "CART_QUESTION",
    "CHAPTER",
    "INSTRUCTIONS",
    "ORDER_QUESTION",
    "SCENARIOS",
    "SCENARIOS_BY_NAME",
    "SEED_GOAL",
    "RunSettings",
    "Scenario",
    "Variant",
    "contenders_for",
    "contenders_running",
    "not_available",
    "nothing_to_run",
]

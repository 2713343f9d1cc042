"""Run compare.py with a pause at a chosen point, so a test can send SIGINT exactly there.

    python tests/pause_at.py import:<module> compare.py [ARGS...]
    python tests/pause_at.py call:<module>:<attribute>[.<attribute>] compare.py [ARGS...]

At the point it prints ``PAUSED <point>`` on stderr and sleeps; the test waits for that line, then interrupts.
"""

from __future__ import annotations

import importlib
import importlib.abc
import os
import runpy
import sys
import time
from typing import Any

PAUSE_S = 60.0


def pause(point: str) -> None:
    print(f"PAUSED {point}", file=sys.stderr, flush=True)
    time.sleep(PAUSE_S)


class PauseOnImport(importlib.abc.MetaPathFinder):
    """Pauses the first import of one module, then steps aside for the real finders."""

    def __init__(self, module: str) -> None:
        self.module = module

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        if fullname == self.module:
            sys.meta_path.remove(self)
            pause(f"import {fullname}")


def pause_on_call(target: str) -> None:
    module_name, _, attribute_path = target.partition(":")
    owner: Any = importlib.import_module(module_name)
    *parents, name = attribute_path.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    original = getattr(owner, name)
    paused = False

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal paused
        if not paused:
            paused = True
            pause(f"call {target}")
        return original(*args, **kwargs)

    setattr(owner, name, wrapper)


def main() -> None:
    point, script, *args = sys.argv[1:]
    kind, _, target = point.partition(":")
    if kind == "import":
        sys.meta_path.insert(0, PauseOnImport(target))
    else:
        pause_on_call(target)
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python compare.py` would have it
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()

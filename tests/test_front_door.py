"""The front door under attack: bad paths, hostile text, a human at the prompt, and Ctrl-C at chosen moments.

Every failure that is not a bug is one line on stderr and a documented exit code, found before work starts, with
nothing left behind; hostile text reaches no output with control characters or personal data; Ctrl-C lands at
named points through tests/pause_at.py.
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from langchain_core.tools import StructuredTool, ToolException

import compare
from comparison import command, runner
from comparison.chat import chat_customer
from comparison.contenders import CONTENDERS, build_contender
from comparison.files import check_output_file, write_output
from comparison.sanitize import clean_line, clean_text, escape_for_json
from comparison.scenarios import INSTRUCTIONS, SEED_GOAL, Scenario
from handwritten.storage import FORMAT
from shared_tools.bookstore.store import BookStore, InvalidQuantity, NotABookstore, UnknownBook, check_store_file
from shared_tools.bookstore.tools import make_tools
from shared_tools.models import make_model
from shared_tools.results import TraceEvent
from tests.doubles import ScriptModel, ai, call

ROOT = Path(__file__).resolve().parent.parent
GUARDED = ("handwritten", "langgraph")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
"""What must never reach a terminal or a page raw (tab and line feed are layout)."""
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b]52;c;ZXZpbA==\x07\x9b31m\x7f\u202e"
"""Set the window title, clear the screen, write the clipboard (OSC 52), an 8-bit CSI, DEL, a bidi override."""


def files_in(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def one_line_error(captured: Any, *says: str) -> None:
    assert "Traceback" not in captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    for text in says:
        assert text in lines[0], lines[0]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder holding a directory, a text file and another program's SQLite database."""
    (tmp_path / "a-directory").mkdir()
    (tmp_path / "notes.txt").write_text("hello, not a database\n", encoding="utf-8")
    with closing(sqlite3.connect(tmp_path / "other.db")) as db:
        db.execute("CREATE TABLE users (id INTEGER, name TEXT)")
        db.commit()
    return tmp_path


def snapshot(folder: Path) -> dict[str, bytes]:
    return {name: (folder / name).read_bytes() for name in files_in(folder) if (folder / name).is_file()}


# --- refused before any work starts: one line, a documented exit code, nothing written ----------------------


@pytest.mark.parametrize(
    ("option", "path", "says"),
    [
        ("--json", "a-directory", "is a directory"),
        ("--json", "/proc/x", "cannot be written"),
        ("--json", "missing/runs.json", "does not exist"),
        ("--json", "notes.txt/runs.json", "notes.txt is a file, not a folder"),
        ("--report", "a-directory", "is a directory"),
        ("--report", "/proc/x", "cannot be written"),
        ("--report", "missing/report.html", "does not exist"),
        ("--store-db", "notes.txt", "cannot be read as a SQLite database"),
        ("--store-db", "a-directory", "is a directory"),
        ("--store-db", "other.db", "something else (tables: users)"),
        ("--store-db", "missing/shop.db", "does not exist"),
        ("--session-db", "notes.txt", "cannot be read as a SQLite database"),
        ("--session-db", "a-directory", "is a directory"),
        ("--session-db", "other.db", "something else (tables: users)"),
    ],
)
def test_an_unusable_path_is_refused_before_any_run_and_nothing_is_written(
    folder: Path, capsys: pytest.CaptureFixture[str], option: str, path: str, says: str
) -> None:
    before = snapshot(folder)
    target = path if path.startswith("/") else str(folder / path)
    assert compare.main(["orders", option, target]) == compare.EXIT_FILE
    captured = capsys.readouterr()
    one_line_error(captured, f"compare.py: {option}: ", says)
    assert captured.out == "", "refused before the first run, not after every run"
    assert snapshot(folder) == before, "nothing written, nothing left behind"


@pytest.mark.parametrize(
    ("option", "path", "says"),
    [
        ("--store-db", "notes.txt", "cannot be read as a SQLite database"),
        ("--store-db", "a-directory", "is a directory"),
        ("--store-db", "other.db", "something else"),
        ("--session-db", "notes.txt", "cannot be read as a SQLite database"),
        ("--session-db", "a-directory", "is a directory"),
        ("--session-db", "missing/chat.db", "does not exist"),
    ],
)
@pytest.mark.parametrize("contender", GUARDED)
def test_chat_refuses_an_unusable_database_before_opening_anything(
    folder: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    contender: str,
    option: str,
    path: str,
    says: str,
) -> None:
    before = snapshot(folder)
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{SEED_GOAL}\n"))
    argv = ["chat", "--contender", contender, "--session-db", str(folder / "chat.db"), option, str(folder / path)]
    assert compare.main(argv) == compare.EXIT_FILE
    captured = capsys.readouterr()
    one_line_error(captured, f"compare.py chat: {option}: ", says)
    assert snapshot(folder) == before


def test_opening_a_foreign_database_as_a_store_never_writes_to_it(folder: Path) -> None:
    before = snapshot(folder)
    with pytest.raises(NotABookstore, match="something else"):
        BookStore(folder / "other.db")
    with pytest.raises(NotABookstore, match="cannot be read as a SQLite database"):
        BookStore(folder / "notes.txt")
    with pytest.raises(NotABookstore, match="is a directory"):
        BookStore(folder / "a-directory")
    assert snapshot(folder) == before, "no WAL switch, no CREATE TABLE, no -wal or -shm file"


def test_a_database_with_a_books_table_of_another_shape_is_not_a_bookstore(tmp_path: Path) -> None:
    path = tmp_path / "library.db"
    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE books (isbn TEXT, shelf TEXT)")
        db.commit()
    with pytest.raises(NotABookstore, match="its table books lacks"):
        check_store_file(path)


def test_a_bookstore_file_a_new_file_and_an_empty_file_open(tmp_path: Path) -> None:
    with BookStore(tmp_path / "shop.db") as store:
        store.add_to_cart("c1", 7)
    check_store_file(tmp_path / "shop.db")
    check_store_file(tmp_path / "new.db")
    (tmp_path / "empty.db").touch()
    with BookStore(tmp_path / "empty.db") as store:
        assert store.get_book(7).title == "The Quiet Orchard"
    with BookStore(tmp_path / "shop.db") as store:
        assert store.cart("c1").quantity_of(7) == 1, "an existing store keeps its data"


def saved_session(messages: object, *, customer: str | None = None) -> str:
    """A session file in the current format (`handwritten.storage.FORMAT`): its header and one save's record."""
    header = {"format": FORMAT, "revision": 1, "customer": customer, "instructions": "x"}
    return json.dumps(header) + "\n" + json.dumps({"revision": 1, "messages": messages}) + "\n"


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (f'{{"format": "{FORMAT}", "revis', "not JSON"),
        ("[1, 2]", "format 'list'"),
        (saved_session(5), "damaged"),
        (saved_session([["a"]]), "damaged"),
        (saved_session([{"type": "human"}]), "damaged"),
        (saved_session([], customer="bob"), "conversation of customer 'bob'"),
        (
            '{"format": "agent-loop-compare/session/2", "instructions": "x", "messages": []}',
            f"format 'agent-loop-compare/session/2'; this version reads only '{FORMAT}'",
        ),
    ],
)
def test_chat_refuses_a_damaged_or_foreign_saved_conversation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], content: str, says: str
) -> None:
    (tmp_path / "chat.t1.json").write_text(content, encoding="utf-8")
    before = snapshot(tmp_path)
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{SEED_GOAL}\n"))
    argv = ["chat", "--thread", "t1", "--session-db", str(tmp_path / "chat.db")]
    assert compare.main(argv) == compare.EXIT_FILE
    captured = capsys.readouterr()
    one_line_error(captured, "cannot resume thread 't1'", says)
    assert snapshot(tmp_path) == before, "the file is kept as it was, and no store was created"


@pytest.mark.parametrize("thread", ["../x", "a/b", "..", ".hidden", "-rf", "", "x" * 65, "tab\there"])
def test_a_thread_name_that_is_not_a_name_is_bad_usage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], thread: str
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{SEED_GOAL}\n"))
    argv = ["chat", f"--thread={thread}", "--session-db", str(tmp_path / "chat.db")]
    assert compare.main(argv) == compare.EXIT_USAGE
    one_line_error(capsys.readouterr(), "--thread: thread name")
    assert files_in(tmp_path) == set() and not (tmp_path.parent / "x").exists()


@pytest.mark.parametrize("argv", [["orders", "--model", "ollama:qwen3:4b"], ["chat", "--model", "ollama:qwen3:4b"]])
def test_a_malformed_ollama_host_is_one_line_and_bad_usage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "garbage:::")
    monkeypatch.chdir(tmp_path)
    assert compare.main(argv) == compare.EXIT_USAGE
    one_line_error(capsys.readouterr(), "OLLAMA_HOST='garbage:::'")
    assert files_in(tmp_path) == set()


def test_a_5000_digit_order_number_is_no_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """More digits than Python turns into an int: the scripted model has no script for it. 40 digits: the store
    answers "not found", as for any order it does not have (SQLite's integers end at 19 digits)."""
    huge, long = "9" * 5000, "9" * 40
    questions = f"Where is my order {huge}?\nWhere is my order {long}?\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(questions))
    assert compare.main(["chat", "--session-db", str(tmp_path / "chat.db")]) == compare.EXIT_OK
    captured = capsys.readouterr()
    assert captured.err == ""
    assert "The scripted model has no script for that" in captured.out
    assert f"assistant> I couldn't find order {long}" in captured.out
    saved = (tmp_path / "chat.default.json").read_text(encoding="utf-8")
    assert '\\"status\\":\\"not found\\"' in saved and "get_order_status failed" not in saved, "a result, no error"


def test_the_store_answers_an_id_beyond_sqlite_as_unknown() -> None:
    store = BookStore()
    tools = {t.name: t for t in make_tools(store)}
    assert json.loads(tools["get_order_status"].invoke({"order_id": 10**40}))["status"] == "not found"
    assert store.order_status(-(10**30)) is None
    with pytest.raises(ToolException, match=r"Book \(a number far too large\) does not exist"):
        tools["check_stock"].invoke({"book_id": 10**30})  # the tool's own refusal, which the model reads
    # Past 4,300 digits even str() of the id raises, so the store's messages never print such a number.
    with pytest.raises(UnknownBook, match=r"Book \(a number far too large\) does not exist"):
        store.stock(10**4500)
    with pytest.raises(InvalidQuantity, match=r"got \(a number far too large\)"):
        store.add_to_cart("c1", 7, 10**4500)
    assert store.check_invariants() == []


# --- Ctrl-C at chosen moments: exit 130, one line, no traceback, nothing half-written -------------------------


def interrupt_at(point: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run compare.py paused at `point` (see tests/pause_at.py), send SIGINT there, and wait for the end."""
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "pause_at.py"), point, "compare.py", *argv],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    seen = []
    for line in process.stderr:
        seen.append(line)
        if line.startswith("PAUSED"):
            break
    else:
        process.wait(timeout=60)
        pytest.fail(f"never reached {point}: {''.join(seen)}")
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


@pytest.mark.skipif(sys.platform == "win32", reason="sends SIGINT")
@pytest.mark.parametrize(
    ("point", "argv", "says"),
    [
        ("import:comparison.render", ["orders"], "interrupted while starting"),
        ("import:rich.table", ["chat"], "interrupted while starting"),
        ("call:comparison.files:check_output_file", ["orders"], "compare.py: interrupted"),
        ("call:comparison.command:guard_matrix", ["orders"], "while the final tables"),
        ("call:comparison.files:os.replace", ["orders"], "while the final tables"),
        ("call:comparison.files:check_session_db", ["chat"], "compare.py chat: interrupted"),
    ],
)
def test_ctrl_c_at_any_moment_is_exit_130_without_a_traceback(
    tmp_path: Path, point: str, argv: list[str], says: str
) -> None:
    if argv == ["chat"]:
        argv = [*argv, "--session-db", str(tmp_path / "chat.db")]
    else:
        argv = [*argv, "--contenders", "handwritten", "--no-trace", "--json", str(tmp_path / "runs.json")]
    done = interrupt_at(point, *argv)
    assert done.returncode == compare.EXIT_INTERRUPTED, done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    [line] = [line for line in done.stderr.splitlines() if not line.startswith("PAUSED")]
    assert says in line
    assert files_in(tmp_path) == set(), "no JSON, no half-written JSON, no temporary file, no store"


@pytest.mark.parametrize(
    "argv",
    [
        ["--max-steps", "abc"],
        ["--turns", "x"],
        ["--bogus"],
        ["--otel", "nope"],
        ["--contenders", "nope"],
        ["nosuch"],
        ["chat", "--keep-turns", "x"],
        ["chat", "--contender", "nope"],
        ["chat", "--bogus"],
        ["eval", "--runs", "abc"],
        ["eval", "--seed", "x"],
        ["eval", "--jobs", "y"],
        ["eval", "--bogus"],
        ["eval", "--otel", "nope"],
        ["eval", "--runs", "0"],
        ["serve", "--port", "abc"],
        ["serve", "--workers", "x"],
        ["serve", "--bogus"],
        ["serve", "--approval-timeout", "x"],
        ["serve", "--max-jobs", "0"],
    ],
    ids=" ".join,
)
def test_every_usage_error_of_every_command_is_one_line_and_exit_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert compare.main(argv) == compare.EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    one_line_error(captured, f"compare.py{' ' + argv[0] if argv[0] in ('chat', 'eval', 'serve') else ''}: ")


@pytest.mark.parametrize("argv", [[], ["--list"], ["eval", "bookstore", "--runs", "2"]])
def test_a_reader_that_closes_the_pipe_early_ends_the_command_quietly_with_exit_0(argv: list[str]) -> None:
    """`compare.py | head -1`: the rest is not wanted, which is no failure (rich alone would exit 1)."""
    process = subprocess.Popen(
        [sys.executable, "compare.py", *argv],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline()
    process.stdout.close()
    err = process.stderr.read()
    assert process.wait(timeout=120) == compare.EXIT_OK, err
    assert [line for line in err.splitlines() if not line.startswith("eval: trial")] == []


@pytest.mark.parametrize("command", [["orders", "--no-trace"], ["eval", "orders", "--runs", "1"]], ids=" ".join)
def test_every_file_written_is_named_on_the_last_lines(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs, report = tmp_path / "runs.json", tmp_path / "report.html"
    assert compare.main([*command, "--json", str(runs), "--report", str(report)]) == compare.EXIT_OK
    out = capsys.readouterr().out
    assert out.splitlines()[-2:] == [f"JSON written to {runs}", f"Report written to {report}"]
    assert json.loads(runs.read_text(encoding="utf-8")) and report.stat().st_size > 0


def test_the_help_the_live_page_and_the_report_name_every_contender(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from comparison.contenders import CONTENDERS
    from webdemo.routes import NUMBER_WORDS, page_html

    assert {"handwritten", "langgraph", "langgraph-defaults", "create-agent", "maf"} <= set(CONTENDERS)
    description = compare.build_parser().format_help().split("\n\n")[1]
    page = page_html()  # the page as served: its title and heading filled in from the registry
    assert f"One bookstore agent {NUMBER_WORDS[len(CONTENDERS)]} ways, live: " in page
    assert compare.main(["orders", "--no-trace", "--report", str(tmp_path / "r.html")]) == compare.EXIT_OK
    capsys.readouterr()
    report = (tmp_path / "r.html").read_text(encoding="utf-8")
    titles = [description] + [
        re.findall(f"<{tag}>(.*?)</{tag}>", html)[0] for html in (page, report) for tag in ("title", "h1")
    ]
    for title in titles:
        assert all(name in title for name in CONTENDERS), title


RANDOM_CTRL_C_RUNS = 20


@pytest.mark.skipif(sys.platform == "win32", reason="sends SIGINT")
def test_ctrl_c_at_random_moments_of_a_full_run_prints_no_warning_and_no_traceback() -> None:
    """20 full runs of `python compare.py`, each sent SIGINT at a seeded random moment of its ~4 s (counted from its
    first line, so the Ctrl-C lands in our code, not in the interpreter's start-up), 4 at a time."""
    rng = random.Random(33)
    delays = [rng.uniform(0.0, 4.0) for _ in range(RANDOM_CTRL_C_RUNS)]

    def interrupted_run(delay: float) -> tuple[float, int, str]:
        process = subprocess.Popen(
            [sys.executable, "compare.py", "--no-trace"],
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert process.stdout is not None
        process.stdout.readline()
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
        return delay, process.returncode, err

    with ThreadPoolExecutor(4) as pool:
        ends = list(pool.map(interrupted_run, delays))
    for delay, code, err in ends:
        assert code in (compare.EXIT_INTERRUPTED, compare.EXIT_OK), f"after {delay:.2f} s: exit {code}\n{err}"
        for word in ("Traceback", "Warning", "Exception ignored"):
            assert word not in err, f"after {delay:.2f} s:\n{err}"
    assert sum(code == compare.EXIT_INTERRUPTED for _, code, _ in ends) >= RANDOM_CTRL_C_RUNS // 2


WORKER_CTRL_C = """
import gc, json, random, signal, sys, warnings
from comparison.contenders import CONTENDERS, build_contender
from comparison.runner import WorkerInterrupt
from comparison.scenarios import INSTRUCTIONS, SEED_GOAL
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.models import make_model
from shared_tools.results import TraceEvent
from shared_tools.results import AgentOptions

problems, running = [], [""]
sys.unraisablehook = lambda u: problems.append(f"{running[0]}: {u.exc_type.__name__}: {u.exc_value} in {u.object!r}")
warnings.simplefilter("always")
warnings.showwarning = lambda message, kind, *rest, **kw: problems.append(f"{running[0]}: {kind.__name__}: {message}")
signal.signal(signal.SIGALRM, lambda *_: signal.raise_signal(signal.SIGINT))
rng, stopped = random.Random(int(sys.argv[1])), 0
for name in CONTENDERS:  # a framework imported on its first run: an import is no await, so it is done before
    build_contender(name, make_model("scripted"), make_tools(BookStore()), AgentOptions()).run(INSTRUCTIONS, SEED_GOAL)
for i in range(int(sys.argv[2])):
    running[0] = list(CONTENDERS)[i % len(CONTENDERS)]
    agent = build_contender(running[0], make_model("scripted"), make_tools(BookStore()), AgentOptions())
    signal.signal(signal.SIGINT, WorkerInterrupt())
    try:
        signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.0002, 0.02))
        try:
            agent.run(INSTRUCTIONS, SEED_GOAL)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except KeyboardInterrupt:  # from the run, or (a run that ended first) from the handler, as between two runs
        stopped += 1
    gc.collect()
print(json.dumps({"stopped": stopped, "problems": problems}))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="sends SIGINT")
def test_a_worker_ctrl_c_at_any_moment_of_a_run_stops_it_at_an_await() -> None:
    """A worker's SIGINT handler, fired at 100 random moments of every contender's runs: each run stops (no hang)
    with no coroutine left unawaited and no event loop left open. A KeyboardInterrupt raised from the handler
    itself lands inside asyncio or langchain-core: about 1 run in 20 warned or hung that way."""
    done = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", WORKER_CTRL_C, "33", "100"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    # The OpenAI Agents SDK makes its turn's coroutine before awaiting it: an interrupt landing between the two leaves
    # it unawaited (the SDK's, not our bridge's; the run still stops). Every other contender leaves nothing behind.
    sdk_gap = "openai-agents: RuntimeWarning: coroutine 'run_single_turn' was never awaited"
    assert [p for p in result["problems"] if p != sdk_gap] == []
    assert result["stopped"] >= 40, "many runs were interrupted mid-way, or this checks nothing"


@pytest.mark.skipif(sys.platform == "win32", reason="sends SIGINT")
@pytest.mark.parametrize("name", list(CONTENDERS))
def test_a_worker_ctrl_c_as_a_tool_line_is_written_stops_the_run_with_nothing_left_behind(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's Ctrl-C while a contender writes a tool's trace line, a moment the random test above reaches only
    sometimes: the run raises KeyboardInterrupt, and nothing is left to warn at exit (a generator that ignores being
    closed, a coroutine never awaited)."""
    import gc
    import warnings

    from comparison.runner import WorkerInterrupt
    from shared_tools.results import AgentOptions

    problems: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: problems.append(f"{u.exc_type.__name__}: {u.exc_value}"))
    sent: list[str] = []

    def ctrl_c_at_the_first_tool_line(event: TraceEvent) -> None:
        if event.name != "model" and not sent:
            sent.append(event.name)
            signal.raise_signal(signal.SIGINT)

    agent = build_contender(
        name, make_model("scripted"), make_tools(BookStore()), AgentOptions(on_event=ctrl_c_at_the_first_tool_line)
    )
    handler = WorkerInterrupt()
    previous = signal.signal(signal.SIGINT, handler)
    try:
        with warnings.catch_warnings(record=True) as caught, pytest.raises(KeyboardInterrupt):
            warnings.simplefilter("always")
            agent.run(INSTRUCTIONS, SEED_GOAL)
            gc.collect()
        gc.collect()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert sent == ["search_books"], "the Ctrl-C was sent as the first tool's line was written"
    assert problems == [] == [str(w.message) for w in caught]


# --- chat: a human at the prompt, a customer per thread, a conflicting save ----------------------------------


def cart_of(store_db: Path, customer: str) -> int:
    with BookStore(store_db) as store:
        return store.cart(customer).quantity_of(7)


@pytest.mark.parametrize(("answer", "copies"), [("y", 5), ("yes", 5), ("n", 0), ("", 0), (None, 0)])
@pytest.mark.parametrize("contender", GUARDED)
def test_chat_asks_the_human_before_a_risky_write(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    contender: str,
    answer: str | None,
    copies: int,
) -> None:
    """y adds; n, an empty line or no input at all (EOF) refuses, and the model is told."""
    db = tmp_path / "chat.db"
    typed = "Add 5 copies of The Quiet Orchard to my cart.\n" + ("" if answer is None else f"{answer}\n" * 2)
    monkeypatch.setattr(sys, "stdin", io.StringIO(typed))
    assert compare.main(["chat", "--contender", contender, "--thread", "t1", "--session-db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "approval needed: 5 x The Quiet Orchard = 82.50, more than 3 copies and over 50.00" in out
    assert cart_of(tmp_path / "chat.store.db", chat_customer(contender, "t1")) == copies
    if copies == 0:
        assert "did not approve add_to_cart" in out


def test_an_approval_left_unanswered_is_asked_again_when_the_graph_thread_reopens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A chat that ended while its graph waited at the approval prompt (killed there) leaves the thread paused in
    its SQLite file; the next chat asks that approval again before anything else, and a yes lets the add run."""
    from langgraph_version import GraphAgent, GraphSession
    from shared_tools.bookstore.approval import RiskyWritePolicy
    from shared_tools.results import AgentOptions, StopReason

    db = tmp_path / "chat.db"
    customer = chat_customer("langgraph", "t1")
    with BookStore(tmp_path / "chat.store.db") as store:
        options = AgentOptions(needs_approval=RiskyWritePolicy(store, customer))
        agent = GraphAgent(make_model("scripted"), make_tools(store, customer), options)
        with GraphSession.sqlite(agent, INSTRUCTIONS, path=str(db), thread_id="t1", customer_id=customer) as left:
            paused = left.ask("Add 5 copies of The Quiet Orchard to my cart.")
            assert paused.stop_reason is StopReason.AWAITING_APPROVAL
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    argv = ["chat", "--contender", "langgraph", "--thread", "t1", "--session-db", str(db)]
    assert compare.main(argv) == compare.EXIT_OK
    out = capsys.readouterr().out
    assert "The last turn waits for an approval; asking it again:" in out
    assert out.count("approval needed: 5 x The Quiet Orchard") == 1
    assert cart_of(tmp_path / "chat.store.db", customer) == 5


def test_every_chat_thread_and_contender_has_its_own_cart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "chat.db"
    runs = [("handwritten", "t1"), ("langgraph", "t1"), ("handwritten", "t2")]
    for contender, thread in runs:
        monkeypatch.setattr(sys, "stdin", io.StringIO(f"{SEED_GOAL}\nWhat is my cart total now?\n"))
        argv = ["chat", "--contender", contender, "--thread", thread, "--session-db", str(db)]
        assert compare.main(argv) == compare.EXIT_OK
        out = capsys.readouterr().out
        assert "Your cart total is $16.50" in out and "$33.00" not in out, (contender, thread)
    customers = {chat_customer(c, t) for c, t in runs}
    assert len(customers) == 3
    assert all(cart_of(tmp_path / "chat.store.db", customer) == 1 for customer in customers)
    from handwritten import AgentLoop, Session

    saved = Session.load(tmp_path / "chat.t1.json", AgentLoop(make_model("scripted"), make_tools(BookStore())))
    assert saved.customer_id == chat_customer("handwritten", "t1"), "the customer is kept with it"


def test_chat_refuses_a_graph_thread_of_another_customer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from langgraph_version import GraphAgent, GraphSession

    db = tmp_path / "chat.db"
    agent = GraphAgent(make_model("scripted"), make_tools(BookStore()))
    with GraphSession.sqlite(agent, INSTRUCTIONS, path=str(db), thread_id="t1", customer_id="bob") as session:
        session.ask("What is my cart total now?")
    monkeypatch.setattr(sys, "stdin", io.StringIO("What is my cart total now?\n"))
    argv = ["chat", "--contender", "langgraph", "--thread", "t1", "--session-db", str(db)]
    assert compare.main(argv) == compare.EXIT_FILE
    captured = capsys.readouterr()
    one_line_error(captured, "cannot resume thread 't1'", "'bob'")
    assert "Your cart" not in captured.out, "nothing of bob's conversation is shown"


def test_chat_says_in_one_line_when_another_process_saved_the_conversation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from handwritten import AgentLoop, Session

    db, path = tmp_path / "chat.db", tmp_path / "chat.t1.json"
    argv = ["chat", "--thread", "t1", "--session-db", str(db)]
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{SEED_GOAL}\n"))
    assert compare.main(argv) == compare.EXIT_OK
    loop = AgentLoop(make_model("scripted"), make_tools(BookStore()))

    class MeanwhileAnotherProcessSaves:
        """stdin whose one line is typed while another process saves the conversation."""

        typed = iter(["What is my cart total now?\n"])

        def readline(self) -> str:
            line = next(self.typed, "")
            if line:
                other = Session.load(path, loop)
                other.save(path)
            return line

    monkeypatch.setattr(sys, "stdin", MeanwhileAnotherProcessSaves())
    capsys.readouterr()
    assert compare.main(argv) == compare.EXIT_FILE
    captured = capsys.readouterr()
    one_line_error(captured, "this turn was not saved and nothing was overwritten", "saved by another session")
    assert "assistant> Your cart total is $16.50" in captured.out, "the answer is still shown"
    kept = Session.load(path, loop)
    # The file is a header line and one line per save (JSONL); the last line is the newest save.
    assert json.loads(path.read_bytes().splitlines()[-1])["revision"] == 2, "the other process's save"
    assert [m.content for m in kept.messages if m.type == "human"] == [SEED_GOAL], "not overwritten by this one"


def test_a_demo_rerun_with_the_same_session_db_starts_the_session_afresh(tmp_path: Path) -> None:
    """The persisted session scenario run twice in a row: the second hand-written run raises no SessionConflict."""
    path = tmp_path / "runs.json"
    argv = ["session", "--contenders", "handwritten,langgraph", "--no-trace", "--json", str(path)]
    for _ in range(2):
        assert compare.main([*argv, "--session-db", str(tmp_path / "sessions.db")]) == compare.EXIT_OK
        runs = json.loads(path.read_text(encoding="utf-8"))["runs"]
        assert [r["error"] for r in runs] == [None] * len(runs)
        assert all(r["facts"]["survived_restart"] for r in runs if r["variant"] == "persisted" and r["turn"] == 2)


def test_the_approval_rule_judges_the_cart_of_the_customer_who_runs(tmp_path: Path) -> None:
    """With --store-db every run shops as a customer of its own; the rule used to judge customer c1's cart."""
    store_db, path = tmp_path / "shop.db", tmp_path / "runs.json"
    with BookStore(store_db) as store:
        store.add_to_cart("c1", 7, 3)  # someone else's cart: one more copy would be "more than 3 copies"
    argv = ["prompt-injection", "--contenders", "handwritten,langgraph", "--no-trace", "--json", str(path)]
    assert compare.main([*argv, "--store-db", str(store_db)]) == compare.EXIT_OK
    gated = [r for r in json.loads(path.read_text(encoding="utf-8"))["runs"] if r["variant"] == "gate"]
    orchard = {"id": 7, "title": "The Quiet Orchard", "quantity": 1, "lineTotal": "16.50"}
    assert [r["cart"] for r in gated] == [[orchard], [orchard]]
    assert all(len(r["facts"]["approval_asked"]) == 1 for r in gated), "only the injected add of 10 was asked about"


# --- hostile text: control characters and personal data ------------------------------------------------------


def test_clean_text_keeps_layout_and_shows_every_control() -> None:
    assert clean_text("line one\nline two\ttab\r\n") == "line one\nline two\ttab\n"
    assert clean_text(HOSTILE) == "\\x1b]0;pwned\\x07\\x1b[2J\\x1b]52;c;ZXZpbA==\\x07\\x9b31m\\x7f\\u202e"
    assert clean_line("a\nb\tc\rd") == "a b c\\x0dd"
    assert clean_text("cut mid-emoji \ud83d") == "cut mid-emoji \ufffd"
    assert clean_text("a pair \ud83d\ude00") == "a pair \U0001f600", "a surrogate pair is the character it encodes"
    assert clean_text("plain: café, 16.50 €, ✓") == "plain: café, 16.50 €, ✓"
    for text in (HOSTILE, "\ud83d", "\x00\x7f\x85\x9f"):
        assert CONTROL.search(clean_line(text)) is None
        clean_text(text).encode("utf-8")  # never raises


def test_escape_for_json_is_lossless_and_leaves_nothing_raw() -> None:
    value = {"answer": f"{HOSTILE} \ud83d", "title": "café"}
    text = escape_for_json(json.dumps(value, ensure_ascii=False))
    assert CONTROL.search(text) is None and "\u202e" not in text
    assert json.loads(text) == value and "café" in text
    text.encode("utf-8")


class StrictStdio:
    """stdout and stderr as a terminal's: UTF-8 with errors="strict", so a lone surrogate raises."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.out, self.err = io.BytesIO(), io.BytesIO()
        monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(self.out, encoding="utf-8", errors="strict"))
        monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(self.err, encoding="utf-8", errors="strict"))

    def read(self) -> tuple[str, str]:
        sys.stdout.flush()
        sys.stderr.flush()
        return self.out.getvalue().decode("utf-8"), self.err.getvalue().decode("utf-8")


SECRET, EMAIL = "hunter3", "ann.lee@example.com"


def hostile_scenario() -> Scenario:
    return Scenario(
        name="hostile",
        description="a catalog feed with escape sequences, a tool named like an e-mail, an address, a secret",
        lesson="Untrusted text is shown, never obeyed; personal data is masked.",
        goals=("find a gift",),
        injection=(12, HOSTILE),
    )


def hostile_replies() -> list[Any]:
    return [
        ai("", call("search_books", "h1", query="Salt Hours")),
        ai("", call(EMAIL, "h2", query="x"), call(f"\x1b[31m{HOSTILE}view_cart", "h3")),
        ai("", call("search_books", "h4", query="a gift, sent to 12\nBaker Street")),
        ai("", call("check_stock", "h5", book_id=12)),
        ai(f"Here you are {HOSTILE} \ud83d"),
    ]


def failing_check_stock(*_: Any, **__: Any) -> str:
    raise RuntimeError(f"stock cache refused: redis://:{SECRET}@cache.internal:6379/0")


@pytest.fixture
def hostile_run(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """compare.py's runs with `hostile_scenario`, a model that plays `hostile_replies` and a check_stock whose
    exception holds a password (LangGraph's defaults re-raise it at the caller)."""
    monkeypatch.setitem(compare.SCENARIOS_BY_NAME, "hostile", hostile_scenario())
    monkeypatch.setattr(
        runner, "make_model", lambda spec, seed=None, temperature=None: ScriptModel(replies=hostile_replies())
    )
    real = runner.scenario_tools

    def tools(*args: Any, **kwargs: Any) -> list[Any]:
        built = {t.name: t for t in real(*args, **kwargs)}
        stock = built["check_stock"]
        built["check_stock"] = StructuredTool.from_function(
            failing_check_stock, name=stock.name, description=stock.description, args_schema=stock.args_schema
        )
        return list(built.values())

    monkeypatch.setattr(runner, "scenario_tools", tools)
    yield


CONTENDERS_UNDER_ATTACK = "handwritten,langgraph,langgraph-defaults"


def assert_harmless(text: str, where: str) -> None:
    assert CONTROL.search(text) is None, (where, CONTROL.search(text))
    assert "\u202e" not in text, where
    for secret in (SECRET, EMAIL, "Baker Street", "12\\nBaker", "12\nBaker"):
        assert secret not in text, (where, secret)


def test_hostile_text_reaches_the_terminal_and_the_report_harmless(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hostile_run: None
) -> None:
    stdio = StrictStdio(monkeypatch)
    report = tmp_path / "report.html"
    argv = ["hostile", "--contenders", CONTENDERS_UNDER_ATTACK, "--report", str(report)]
    assert compare.main(argv) == compare.EXIT_OK  # the old code raised UnicodeEncodeError on the lone surrogate
    out, _ = stdio.read()
    assert_harmless(out, "terminal")
    assert "\\x1b]52;c;ZXZpbA==\\x07" in out, "shown, as text"
    assert "<email>" in out and "<address>" in out and "raised RuntimeError" in out
    page = report.read_text(encoding="utf-8")
    assert_harmless(page, "report")
    assert "\\x1b]0;pwned" in page and "redis://&lt;credentials&gt;@cache.internal" in page


def test_hostile_text_reaches_json_on_stdout_masked_and_escaped(
    monkeypatch: pytest.MonkeyPatch, hostile_run: None
) -> None:
    """The e-mail used as a tool name, "12\\nBaker Street" in arguments and a redis password in the exception
    LangGraph's defaults raise: masked in `--json -` and in the terminal (stderr, as stdout holds the JSON)."""
    stdio = StrictStdio(monkeypatch)
    assert compare.main(["hostile", "--contenders", CONTENDERS_UNDER_ATTACK, "--json", "-"]) == compare.EXIT_OK
    out, err = stdio.read()
    for where, text in (("json", out), ("terminal", err)):
        assert_harmless(text, where)
    runs = json.loads(out)["runs"]
    defaults = next(r for r in runs if r["contender"] == "langgraph-defaults")
    assert defaults["error"] == "RuntimeError: stock cache refused: redis://<credentials>@cache.internal:6379/0"
    for run in runs:
        names = [e["name"] for e in run["trace"]]
        assert EMAIL not in names and "<email>" in names, run["contender"]
        searches = [e["detail"] for e in run["trace"] if e["name"] == "search_books"]
        assert any("<address>" in d for d in searches), run["contender"]
    answer = next(r for r in runs if r["contender"] == "handwritten")["answer"]
    # The half emoji is U+FFFD from where the reply entered (`replies.checked_reply`); the rest of the hostile text
    # is kept, escaped losslessly.
    assert answer == f"Here you are {HOSTILE} \ufffd", "JSON escapes are lossless: the reader gets the text back"


def test_a_chat_answer_with_escapes_and_half_an_emoji_prints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(command, "make_model", lambda spec: ScriptModel(replies=[ai(f"Sure {HOSTILE} \ud83d")]))
    stdio = StrictStdio(monkeypatch)
    monkeypatch.setattr(sys, "stdin", io.StringIO("What is my cart total now?\n"))
    assert compare.main(["chat", "--session-db", str(tmp_path / "chat.db")]) == compare.EXIT_OK
    out, _ = stdio.read()
    assert_harmless(out, "chat")
    assert "assistant> Sure \\x1b]0;pwned" in out and "\ufffd" in out


def test_a_write_that_fails_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "runs.json"
    target.write_text("old", encoding="utf-8")

    def broken_replace(*_: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(KeyboardInterrupt):
        write_output(target, "new")
    assert target.read_text(encoding="utf-8") == "old" and files_in(tmp_path) == {"runs.json"}
    monkeypatch.undo()
    check_output_file(target, "--json")
    assert files_in(tmp_path) == {"runs.json"}, "the probe is removed again"
    write_output(target, "new")
    assert target.read_text(encoding="utf-8") == "new"

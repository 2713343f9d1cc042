"""`compare.py chat` as a conversation: the answer streamed token by token, `/rewind`, `/history`, the history window.

Through `compare.main` with stdin replaced and through a real subprocess, on the scripted model.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

import compare
from comparison import contenders
from comparison.chat import LiveTurn, chat_customer
from comparison.contenders import SPECS, with_capability
from comparison.scenarios import CART_QUESTION, ORDER_QUESTION, SEED_GOAL
from shared_tools.bookstore.store import BookStore
from shared_tools.contender import Capability
from shared_tools.results import AgentResult, StopReason, Token, TokenKind, TraceEvent

ROOT = Path(__file__).resolve().parent.parent
CONTENDERS = ["handwritten", "langgraph"]


def chat(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], db: Path, typed: str, *args: str) -> str:
    monkeypatch.setattr(sys, "stdin", io.StringIO(typed))
    assert compare.main(["chat", "--session-db", str(db), *args]) == compare.EXIT_OK
    captured = capsys.readouterr()
    assert captured.err == ""
    return captured.out


def cart_of(db: Path, contender: str) -> dict[str, int]:
    store = BookStore(db.with_name(f"{db.stem}.store.db"))
    try:
        return {line.book.title: line.quantity for line in store.cart(chat_customer(contender, "default")).lines}
    finally:
        store.close()


@pytest.mark.parametrize("contender", CONTENDERS)
def test_rewind_takes_the_turn_back_but_not_the_cart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], contender: str
) -> None:
    db = tmp_path / "chat.db"
    out = chat(monkeypatch, capsys, db, f"{SEED_GOAL}\n/rewind\n/history\n{CART_QUESTION}\n", "--contender", contender)
    assert "Rewound 1 turn(s)" in out
    assert "The cart is not rewound: The Quiet Orchard x1 (16.50)." in out
    assert "(no turns yet)" in out, "after the rewind the conversation has no turn"
    # Asked again, the model has no memory of the add, so it reads the cart: the store still holds the book.
    assert "view_cart" in out and "assistant> Your cart total is $16.50 (The Quiet Orchard x1)." in out
    assert cart_of(db, contender) == {"The Quiet Orchard": 1}
    reopened = chat(monkeypatch, capsys, db, "/history\n", "--contender", contender)
    # The header names the session file, so where it wraps depends on the folder (longer under `pytest -n`).
    assert "1 turn(s) so far" in " ".join(reopened.split())
    assert f"  1. {CART_QUESTION}" in reopened and SEED_GOAL not in reopened.split("you>", 1)[1]


def test_history_shows_the_checkpoint_each_graph_turn_started_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = chat(
        monkeypatch,
        capsys,
        tmp_path / "c.db",
        f"{ORDER_QUESTION}\n{CART_QUESTION}\n/history\n",
        "--contender",
        "langgraph",
    )
    listing = out.rsplit("you>", 2)[1]
    assert f"  1. {ORDER_QUESTION}\n" in listing, "the first turn starts from no checkpoint"
    assert f"  2. {CART_QUESTION}  [checkpoint " in listing


@pytest.mark.parametrize("typed", ["/rewind 0", "/rewind x", "/rewind 5", "/frobnicate"])
def test_a_bad_command_is_a_line_of_help_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], typed: str
) -> None:
    db = tmp_path / "c.db"
    out = chat(monkeypatch, capsys, db, f"{ORDER_QUESTION}\n{typed}\n/history\n")
    assert "Rewound" not in out
    assert f"  1. {ORDER_QUESTION}" in out.rsplit("you>", 2)[1], "the turn is still there"


def test_the_answer_streams_before_the_trace_line_of_its_model_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = chat(monkeypatch, capsys, tmp_path / "c.db", f"{ORDER_QUESTION}\n", "--contender", "langgraph")
    answer = out.index("assistant> Your order 4512 has shipped")
    last_model_line = out.index("[step 2] model")
    assert out.index("get_order_status") < answer < last_model_line, "tokens are shown as the reply is written"
    assert out.count("plan: Order 4512 is shipped") == 1, "a streamed plan is not printed again by the trace"


def test_live_turn_prints_only_clean_text_and_says_an_honest_stop() -> None:
    buffer = io.StringIO()
    live = LiveTurn(Console(file=buffer, width=100, no_color=True))
    live.start()
    live.on_token(Token("thinking\x1b]52;c;evil\x07", TokenKind.PLAN, 1))
    live.on_token(Token("Hello \x1b[2J", TokenKind.ANSWER, 1))
    live.on_event(TraceEvent(1, "model", 0.001, "0 tool call(s); plan: thinking", tokens=10))
    live.end(AgentResult(StopReason.DONE, "Hello", 1, 10, 1, 0))
    text = buffer.getvalue()
    assert "\x1b" not in text and "\x07" not in text
    assert "assistant> Hello" in text and text.count("assistant>") == 1, "a streamed answer is not repeated"
    live.start()
    live.end(AgentResult(StopReason.MAX_STEPS, None, 6, 10, 6, 5))
    assert "(stop reason: max steps reached)" in buffer.getvalue()
    assert "I couldn't finish this within the allowed number of steps" in buffer.getvalue()


@pytest.mark.parametrize("contender", CONTENDERS)
def test_keep_turns_bounds_what_the_model_is_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], contender: str
) -> None:
    """With the add out of the window the cart question needs view_cart; with the whole history it does not."""
    typed = f"{SEED_GOAL}\n{ORDER_QUESTION}\n{ORDER_QUESTION}\n{CART_QUESTION}\n"
    windowed = chat(monkeypatch, capsys, tmp_path / "a.db", typed, "--contender", contender, "--keep-turns", "2")
    whole = chat(monkeypatch, capsys, tmp_path / "b.db", typed, "--contender", contender, "--keep-turns", "none")
    assert "the model sees the last 2 turn(s)" in " ".join(windowed.split())
    assert "the model sees the whole history" in " ".join(whole.split())
    last_windowed, last_whole = windowed.rsplit("you>", 2)[1], whole.rsplit("you>", 2)[1]
    assert "view_cart" in last_windowed and "view_cart" not in last_whole
    assert "$16.50" in last_windowed and "$16.50" in last_whole


@pytest.mark.parametrize(
    "args", [["--keep-turns", "-1"], ["--keep-turns", "many"], ["--keep-turns", "none", "--summarize"]]
)
def test_a_bad_history_window_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    assert compare.main(["chat", "--session-db", str(tmp_path / "c.db"), *args]) == compare.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "keep-turns" in err
    assert list(tmp_path.iterdir()) == [], "nothing is opened before the arguments are checked"


@pytest.mark.parametrize("contender", CONTENDERS)
def test_chat_in_a_real_process_fed_on_stdin(tmp_path: Path, contender: str) -> None:
    """With --keep-turns 1 --summarize, turn 1 is folded into the summary once turn 2 is asked: /history lists
    only turn 2, and rewinding it leaves no turn, while the book stays in the cart."""
    typed = f"{SEED_GOAL}\n{ORDER_QUESTION}\n/history\n/rewind 1\n/history\n"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "compare.py"),
            "chat",
            "--contender",
            contender,
            "--session-db",
            str(tmp_path / "p.db"),
            "--summarize",
            "--keep-turns",
            "1",
        ],
        input=typed,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == compare.EXIT_OK, done.stderr
    assert done.stderr == ""
    out = done.stdout
    assert "older ones summarized" in " ".join(out.split())
    before, rewind, after = out.rsplit("you>", 4)[1:4]
    assert f"  1. {ORDER_QUESTION}" in before and SEED_GOAL not in before, "turn 1 was folded into the summary"
    assert "Rewound 1 turn(s)" in rewind and "The Quiet Orchard x1" in rewind, "the cart is not rewound"
    assert "(no turns yet)" in after
    assert cart_of(tmp_path / "p.db", contender) == {"The Quiet Orchard": 1}


class TypedWhileAnotherActs:
    """stdin typed line by line; `before[n]` runs just before line n is read: another process acting meanwhile."""

    def __init__(self, lines: list[str], before: dict[int, Callable[[], None]]) -> None:
        self.lines, self.before, self.read = lines, before, 0

    def readline(self) -> str:
        n, self.read = self.read, self.read + 1
        if n in self.before:
            self.before[n]()
        return self.lines[n] + "\n" if n < len(self.lines) else ""


def another_chat_saves_a_turn(db: Path) -> None:
    """What a second `compare.py chat` on the same hand-written thread does: ask a question, which it saves."""
    from comparison.conversations import open_conversation
    from comparison.scenarios import INSTRUCTIONS
    from handwritten import AgentLoop
    from shared_tools.bookstore.tools import make_tools
    from shared_tools.models import make_model

    customer = chat_customer("handwritten", "default")
    loop = AgentLoop(make_model("scripted"), make_tools(BookStore(), customer))
    other = open_conversation("handwritten", loop, INSTRUCTIONS, "default", db, resume=True, customer_id=customer)
    other.ask(ORDER_QUESTION)
    other.close()


def another_chat_waits_at_its_approval(db: Path) -> None:
    """What a second `compare.py chat` on the same graph thread leaves while its person reads `approve? [y/N]`:
    the thread paused on an add, its interrupt unanswered."""
    from comparison.scenarios import INSTRUCTIONS
    from langgraph_version import GraphAgent, GraphSession
    from shared_tools.bookstore.tools import make_tools
    from shared_tools.models import make_model
    from shared_tools.results import AgentOptions

    customer = chat_customer("langgraph", "default")
    options = AgentOptions(needs_approval=lambda call, earlier: "an add" if call["name"] == "add_to_cart" else None)
    agent = GraphAgent(make_model("scripted"), make_tools(BookStore(), customer), options)
    with GraphSession.sqlite(agent, INSTRUCTIONS, path=str(db), thread_id="default", customer_id=customer) as other:
        assert other.ask(SEED_GOAL).stop_reason is StopReason.AWAITING_APPROVAL


@pytest.mark.parametrize(
    ("contender", "typed", "said"),
    [
        ("handwritten", "/rewind", "was saved by another chat since this one read it"),
        ("langgraph", "/rewind", "is waiting for an approval, asked in another chat"),
        ("langgraph", ORDER_QUESTION, "is waiting for an approval, asked in another chat"),
    ],
)
def test_another_chat_on_the_same_thread_is_one_line_and_exit_4(
    contender: str,
    typed: str,
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db = tmp_path / "chat.db"
    chat(monkeypatch, capsys, db, f"{CART_QUESTION}\n", "--contender", contender)
    meanwhile = another_chat_saves_a_turn if contender == "handwritten" else another_chat_waits_at_its_approval
    monkeypatch.setattr(sys, "stdin", TypedWhileAnotherActs([typed], {0: lambda: meanwhile(db)}))
    assert compare.main(["chat", "--session-db", str(db), "--contender", contender]) == compare.EXIT_FILE
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("contender", CONTENDERS)
def test_a_model_call_that_fails_mid_turn_is_one_line_and_the_chat_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], contender: str
) -> None:
    """The model's second call of a turn breaks: chat says so in one line and stays open; `/rewind` first finishes
    the cut-short turn (its stock check is not run again), then takes it back; the next question is answered."""
    from tests.ollama_replay import OllamaReplayServer, ReplayReply

    script = [
        ReplayReply(tool_calls=[("check_stock", {"book_id": 7})]),
        ReplayReply(text="never read", malformed=True),
        ReplayReply(text="Book 7 is in stock."),
        ReplayReply(text="Your cart is empty."),
    ]
    db = tmp_path / "chat.db"
    with OllamaReplayServer(script=script) as server:
        monkeypatch.setenv("OLLAMA_HOST", server.base_url)
        monkeypatch.setattr(sys, "stdin", io.StringIO(f"Is book 7 in stock?\n/rewind\n{CART_QUESTION}\n"))
        argv = ["chat", "--session-db", str(db), "--contender", contender, "--model", "ollama:qwen3:4b"]
        assert compare.main(argv) == compare.EXIT_OK
        assert server.remaining == 0
    out = capsys.readouterr().out
    said = [line for line in out.splitlines() if "The model call failed" in line]
    assert len(said) == 1 and "not valid JSON" in said[0], out
    # The rewind finished the cut-short turn first, then took it back.
    assert out.index("Book 7 is in stock.") < out.index("Rewound 1 turn") < out.index("Your cart is empty."), out
    assert out.count("check_stock") == 1, "the stock check ran once: the cut-short turn went on after it"


@pytest.mark.parametrize("contender", CONTENDERS)
def test_a_chat_on_ollama_answers_every_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], contender: str
) -> None:
    """Each turn runs on an event loop of its own; the Ollama client must not reuse a connection of the last."""
    from tests.ollama_replay import OllamaReplayServer, ReplayReply

    script = [ReplayReply(text="First answer."), ReplayReply(text="Second answer."), ReplayReply(text="Third.")]
    with OllamaReplayServer(script=script) as server:
        monkeypatch.setenv("OLLAMA_HOST", server.base_url)
        monkeypatch.setattr(sys, "stdin", io.StringIO(f"{SEED_GOAL}\n{CART_QUESTION}\n{ORDER_QUESTION}\n"))
        db = str(tmp_path / "chat.db")
        assert compare.main(["chat", "--session-db", db, "--contender", contender, "--model", "ollama:qwen3:4b"]) == 0
        assert server.remaining == 0
    out = capsys.readouterr().out
    assert out.index("First answer.") < out.index("Second answer.") < out.index("Third."), out


def test_chat_keeps_its_sessions_in_the_data_folder_not_the_current_one(tmp_path: Path) -> None:
    here, data = tmp_path / "here", tmp_path / "data"
    here.mkdir()
    done = subprocess.run(
        [sys.executable, str(ROOT / "compare.py"), "chat"],
        input=f"{CART_QUESTION}\n",
        capture_output=True,
        text=True,
        timeout=120,
        cwd=here,
        env={**os.environ, "XDG_DATA_HOME": str(data)},
    )
    assert done.returncode == compare.EXIT_OK, done.stderr
    assert list(here.iterdir()) == [], "nothing is written into the current folder"
    folder = data / "agent-loop-compare" / "chat"
    assert {p.name for p in folder.iterdir()} >= {"agent-sessions.default.json", "agent-sessions.store.db"}
    assert f"keptin{folder / 'agent-sessions.default.json'}" in "".join(done.stdout.split()), "the first line says so"


def test_chat_without_a_home_folder_is_one_line_and_exit_4(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")  # what Path.home() raises without HOME or pwd

    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    assert compare.main(["chat"]) == compare.EXIT_FILE
    err = capsys.readouterr().err
    assert "HOME is not set" in err and "--session-db" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("contender", CONTENDERS)
def test_a_turn_cut_short_on_another_model_reopened_on_the_scripted_one_is_a_line_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], contender: str
) -> None:
    """A question the scripted model has no script for, cut short by an outage on Ollama: reopened on the
    scripted model, the chat says in one line that it cannot finish that turn, asks no new question over it
    (its answer would not know what the cut turn did), and ends normally."""
    from tests.ollama_replay import OllamaReplayServer, ReplayReply

    script = [ReplayReply(tool_calls=[("view_cart", {})]), ReplayReply(text="x", drop_mid_stream=True)]
    db = tmp_path / "chat.db"
    with OllamaReplayServer(script=script) as server:
        monkeypatch.setenv("OLLAMA_HOST", server.base_url)
        argv = ["chat", "--session-db", str(db), "--contender", contender, "--model", "ollama:qwen3:4b"]
        chat(monkeypatch, capsys, db, "hello there\n", *argv[3:])
    out = chat(monkeypatch, capsys, db, f"{CART_QUESTION}\n", "--contender", contender)
    # On opening, and again before the question, which is then not asked.
    assert out.count("(scripted model) Scripted model (persona 'shopper') has no script for the goal 'hello") == 2, out
    assert "view_cart" not in out.split("you>", 1)[1], "no new question ran over the cut-short turn"


def damage(path: Path, how: str) -> None:
    """Damage the hand-written session file at `path` the way `how` says."""
    import json

    header, *lines = path.read_bytes().splitlines()
    if how == "a line nested 100,000 deep":
        lines[-1] = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b', "revision": 2}'
    elif how == "revision 1e999":
        record = json.loads(lines[-1])
        lines[-1] = json.dumps(record).replace(f'"revision": {record["revision"]}', '"revision": 1e999').encode()
    elif how == "cut_short on a call with no result":
        record = json.loads(lines[-1])
        calls = [m for m in record["messages"] if m["type"] == "ai" and m["data"].get("tool_calls")]
        calls[0]["data"]["additional_kwargs"]["cut_short"] = True
        record["messages"] = record["messages"][: record["messages"].index(calls[0]) + 1]
        lines[-1] = json.dumps(record).encode()
    path.write_bytes(b"\n".join([header, *lines]) + b"\n")


@pytest.mark.parametrize("how", ["a line nested 100,000 deep", "revision 1e999", "cut_short on a call with no result"])
def test_a_damaged_saved_conversation_is_one_line_and_exit_4(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    db = tmp_path / "c.db"
    chat(monkeypatch, capsys, db, f"{SEED_GOAL}\n")
    damage(db.with_name("c.default.json"), how)
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{CART_QUESTION}\n"))
    assert compare.main(["chat", "--session-db", str(db)]) == compare.EXIT_FILE
    err = capsys.readouterr().err
    assert "damaged saved session" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_a_store_db_that_is_the_threads_own_session_file_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.db"
    argv = ["chat", "--thread", "t2", "--session-db", str(db), "--store-db", str(tmp_path / "s.t2.json")]
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{CART_QUESTION}\n"))
    assert compare.main(argv) == compare.EXIT_FILE
    err = capsys.readouterr().err
    assert "is named as the files thread 't2' is kept in" in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == [], "nothing was written"


@pytest.mark.parametrize(
    "damage_sql", ["UPDATE checkpoints SET type = 'bogus'", "UPDATE checkpoints SET checkpoint = x'c1c1c1ff00'"]
)
def test_a_graph_thread_whose_checkpoints_cannot_be_read_is_one_line_and_exit_4(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], damage_sql: str
) -> None:
    import sqlite3

    db = tmp_path / "c.db"
    chat(monkeypatch, capsys, db, f"{CART_QUESTION}\n", "--contender", "langgraph")
    with sqlite3.connect(db) as connection:
        connection.execute(damage_sql)
    connection.close()
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{CART_QUESTION}\n"))
    assert compare.main(["chat", "--contender", "langgraph", "--session-db", str(db)]) == compare.EXIT_FILE
    err = capsys.readouterr().err
    assert "a checkpoint of the thread cannot be read" in err and len(err.strip().splitlines()) == 1, err


# --- every contender with a conversation, through its spec ------------------------------------------------------

TALKING = with_capability(Capability.CONVERSATIONS)


@pytest.mark.parametrize("contender", TALKING)
def test_every_contender_with_a_conversation_chats_keeps_its_turns_and_says_what_it_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], contender: str
) -> None:
    spec = SPECS[contender]
    db = tmp_path / "chat.db"
    typed = f"{SEED_GOAL}\n{CART_QUESTION}\n/help\n/history\n/rewind\n/history\n"
    out = " ".join(chat(monkeypatch, capsys, db, typed, "--contender", contender).split())
    assert out.startswith(f"{contender} · thread default · kept in ")
    assert "assistant> Your cart total is $16.50" in out
    assert cart_of(db, contender) == {"The Quiet Orchard": 1}
    help_, history, rewind, after = out.rsplit("you>", 5)[1:5]
    assert "/history lists the turns of this thread" in help_
    assert f"1. {SEED_GOAL}" in history and f"2. {CART_QUESTION}" in history
    if spec.has(Capability.REWIND):
        assert "Rewound 1 turn(s)" in rewind and "The cart is not rewound: The Quiet Orchard x1 (16.50)." in rewind
        assert CART_QUESTION not in after
        kept = 1
    else:
        why = " ".join(spec.why_not(Capability.REWIND).split())
        assert f"/rewind [N] not here: {why}" in help_
        assert rewind.strip() == f"cannot rewind: {why}; nothing was changed"
        assert f"2. {CART_QUESTION}" in after, "nothing was rewound"
        kept = 2
    unasked = "Risky writes run unasked here"
    assert (unasked in out) is not spec.has(Capability.APPROVAL)
    if not spec.has(Capability.APPROVAL):
        assert f"{unasked} ({' '.join(spec.why_not(Capability.APPROVAL).split())})." in out
    window = "the last 20 turn(s)" if spec.has(Capability.HISTORY_WINDOW) else "the whole history"
    assert f"the model sees {window}." in out
    reopened = " ".join(chat(monkeypatch, capsys, db, "/history\n", "--contender", contender).split())
    assert f"{kept} turn(s) so far" in reopened


@pytest.mark.parametrize("contender", TALKING)
def test_a_risky_add_is_put_to_the_person_at_the_prompt_by_every_gated_contender(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], contender: str
) -> None:
    """A contender that asks in its run and wants a bool at once got the prompt's coroutine, read it as a no,
    and told the customer they had refused a question never put to them."""
    db = tmp_path / "chat.db"
    out = chat(monkeypatch, capsys, db, "Add 5 copies of The Quiet Orchard to my cart.\ny\n", "--contender", contender)
    gated = SPECS[contender].has(Capability.APPROVAL)
    assert ("approval needed: 5 x The Quiet Orchard = 82.50" in out) is gated
    assert "did not approve" not in out
    assert cart_of(db, contender) == {"The Quiet Orchard": 5}


@pytest.mark.parametrize("answer", ["n", ""])
@pytest.mark.parametrize("contender", [c for c in TALKING if SPECS[c].has(Capability.APPROVAL)])
def test_a_no_at_the_prompt_keeps_the_risky_add_out_of_the_cart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], contender: str, answer: str
) -> None:
    db = tmp_path / "chat.db"
    typed = f"Add 5 copies of The Quiet Orchard to my cart.\n{answer}\n{CART_QUESTION}\n"
    out = chat(monkeypatch, capsys, db, typed, "--contender", contender)
    assert "approval needed: 5 x The Quiet Orchard = 82.50" in out
    assert cart_of(db, contender) == {}


def test_a_contender_without_a_conversation_is_refused_in_its_own_words(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    why = "this test-only loop keeps nothing between goals"
    lacks = {**SPECS["handwritten"].lacks, Capability.CONVERSATIONS: why}
    talkless = replace(SPECS["handwritten"], name="talkless", conversation=None, lacks=lacks)
    monkeypatch.setitem(contenders.SPECS, "talkless", talkless)
    assert compare.main(["chat", "--contender", "talkless"]) == compare.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        f"compare.py chat: argument --contender: talkless has no conversation to chat in: {why} "
        "(see compare.py chat --help)"
    ]
    from comparison.command_line import build_chat_parser

    assert "talkless" not in build_chat_parser().format_help(), "--help offers only contenders one can chat with"


@pytest.mark.parametrize("option", [["--keep-turns", "3"], ["--keep-turns", "3", "--summarize"]])
@pytest.mark.parametrize("contender", [c for c in TALKING if not SPECS[c].has(Capability.HISTORY_WINDOW)])
def test_a_window_asked_of_a_contender_without_one_is_refused_in_its_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], contender: str, option: list[str]
) -> None:
    argv = ["chat", "--contender", contender, "--session-db", str(tmp_path / "c.db"), *option]
    assert compare.main(argv) == compare.EXIT_USAGE
    err = " ".join(capsys.readouterr().err.split())
    why = " ".join(SPECS[contender].why_not(Capability.HISTORY_WINDOW).split())
    assert err == f"compare.py chat: --keep-turns: {contender}: {why}"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("contender", TALKING)
def test_a_store_db_named_as_a_file_the_thread_is_kept_in_is_refused_for_every_contender(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], contender: str
) -> None:
    db = tmp_path / "s.db"
    chat(monkeypatch, capsys, db, f"{CART_QUESTION}\n", "--contender", contender, "--thread", "t2")
    own = sorted(tmp_path.glob("s.t2*"))
    if not own:  # kept in the session database itself (a graph's checkpoints)
        assert {p.name for p in tmp_path.iterdir()} == {"s.db", "s.store.db"}
        own = [tmp_path / "s.t2.json"]
    for kept in own:
        before = kept.read_bytes() if kept.is_file() else None
        argv = ["chat", "--contender", contender, "--thread", "t2", "--session-db", str(db), "--store-db", str(kept)]
        monkeypatch.setattr(sys, "stdin", io.StringIO(f"{CART_QUESTION}\n"))
        assert compare.main(argv) == compare.EXIT_FILE
        err = capsys.readouterr().err
        assert "is named as the files thread 't2' is kept in beside --session-db (s.t2.*)" in err, err
        assert len(err.strip().splitlines()) == 1
        assert (kept.read_bytes() if kept.is_file() else None) == before, "nothing was written"

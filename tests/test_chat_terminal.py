"""`compare.py chat` in a real terminal (a pty): Ctrl-C where a person presses it, and what is kept after it.

Each test starts the real program on a pseudo-terminal (`tests/terminal.py`) with the scripted model and types at
it; the saved conversation is then read back the way the next chat reads it.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest

import compare
from comparison.chat import chat_customer
from comparison.contenders import with_capability
from shared_tools.bookstore.store import BookStore
from shared_tools.contender import Capability

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal and SIGINT")
ROOT = Path(__file__).resolve().parent.parent

ADD_TWO = "Add 2 copies of The Quiet Orchard to my cart."
"""Two copies land without a question; asked again, the line would hold 4, over the limit of 3: approval."""


def kept_messages(path: Path) -> list[dict]:
    """The messages of a hand-written session file: every saved line's new messages, in order."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [message for line in lines[1:] for message in line["messages"]]


def cart_of(db: Path, contender: str = "handwritten") -> dict[str, int]:
    store = BookStore(db.with_name(f"{db.stem}.store.db"))
    try:
        return {line.book.title: line.quantity for line in store.cart(chat_customer(contender, "default")).lines}
    finally:
        store.close()


def terminal(tmp_path: Path, *args: str, **env: str):  # type: ignore[no-untyped-def]
    from tests.terminal import Terminal

    # The pty answers no cursor position request: prompt_toolkit is told not to ask (a real terminal answers).
    environ = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"), "PROMPT_TOOLKIT_NO_CPR": "1", **env}
    return Terminal("chat", *args, cwd=tmp_path, env=environ)


@pytest.mark.parametrize("contender", ["handwritten", "langgraph"])
def test_ctrl_c_at_the_approval_prompt_stops_the_turn_keeps_it_and_keeps_the_prompt(
    tmp_path: Path, contender: str
) -> None:
    db = tmp_path / "chat.db"
    term = terminal(tmp_path, "--contender", contender, "--session-db", str(db))
    try:
        term.expect("you>")
        term.type(ADD_TWO + "\r")
        at = term.expect("you>", after=term.expect("cartTotal"))
        term.type("\x1b[A\r")  # the up arrow brings the question back: asked again, it needs approval
        at = term.expect("approve? [y/N]", after=at)
        term.ctrl_c()  # once: the turn ends here, and the prompt comes back
        at = term.expect("you>", after=term.expect("(stop reason: cancelled)", after=at))
        term.type("/history\r")
        at = term.expect("you>", after=term.expect(f"  2. {ADD_TWO}", after=at))
        term.ctrl_c()
        term.ctrl_c()  # a second Ctrl-C at an empty prompt leaves
        code = term.wait(timeout=30)
    finally:
        term.kill()
    assert code == compare.EXIT_INTERRUPTED, term.text
    assert "Traceback" not in term.text, term.text
    kept_in = db if contender == "langgraph" else db.with_name("chat.default.json")
    assert f"Interrupted; the conversation is kept in {kept_in}." in "".join(term.text[at:].split("\n"))
    assert cart_of(db, contender) == {"The Quiet Orchard": 2}, "the refused add did not run"
    if contender == "handwritten":
        messages = kept_messages(db.with_name("chat.default.json"))
        questions = [m["data"]["content"] for m in messages if m["type"] == "human"]
        assert questions == [ADD_TWO, ADD_TWO], "the interrupted turn is kept, its question first"
        tools = [(m["data"]["name"], m["data"]["content"]) for m in messages if m["type"] == "tool"]
        assert [name for name, _ in tools] == ["search_books", "check_stock", "add_to_cart"] * 2
        assert '"quantity":2' in tools[2][1], "the add that landed is in the kept history"
        assert tools[-1][1].startswith("The customer did not approve add_to_cart"), tools[-1]


@pytest.mark.parametrize("contender", with_capability(Capability.APPROVAL))
def test_every_gated_contender_puts_a_risky_add_to_the_person_at_the_terminal(tmp_path: Path, contender: str) -> None:
    """The same y/N line whether the contender awaits the answer in the chat's loop, asks for a bool at once on it
    (read on its own thread meanwhile), or asks from a worker thread of its own."""
    db = tmp_path / "chat.db"
    term = terminal(tmp_path, "--contender", contender, "--session-db", str(db))
    try:
        at = term.expect("you>")
        term.type("Add 5 copies of The Quiet Orchard to my cart.\r")
        at = term.expect("approve? [y/N]", after=term.expect("approval needed: 5 x The Quiet Orchard", after=at))
        term.type("y\r")
        at = term.expect("you>", after=term.expect("cartTotal", after=at))
        term.type("/bye\r")
        code = term.wait(timeout=30)
    finally:
        term.kill()
    assert code == compare.EXIT_OK, term.text
    assert "Traceback" not in term.text and "did not approve" not in term.text, term.text
    assert cart_of(db, contender) == {"The Quiet Orchard": 5}


def test_the_prompt_edits_lines_keeps_their_history_and_lists_its_commands(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    term = terminal(tmp_path, "--session-db", str(db))
    try:
        at = term.expect("you>")
        term.type("Where is my order 4512X\x7f?\r")  # a typo taken back with backspace
        at = term.expect("you>", after=term.expect("get_order_status", after=at))
        term.type("\r")  # an empty line asks nothing
        at = term.expect("you>", after=at)
        term.type("/help\r")
        at = term.expect("you>", after=term.expect("/bye", after=at))
        term.type("/bye\r")
        code = term.wait(timeout=30)
    finally:
        term.kill()
    assert code == compare.EXIT_OK, term.text
    assert (
        "Where is my order 4512?" in (tmp_path / "data" / "agent-loop-compare" / "chat" / "prompt-history").read_text()
    )
    term = terminal(tmp_path, "--session-db", str(db))
    try:
        at = term.expect("you>")
        term.type("\x1b[A" * 3 + "\r")  # before /bye and /help: the question of the last chat, from the file
        at = term.expect("you>", after=term.expect("get_order_status", after=at))
        term.ctrl_d()
        code = term.wait(timeout=30)
    finally:
        term.kill()
    assert code == compare.EXIT_OK and "Traceback" not in term.text, term.text
    assert "Interrupted" not in term.text


def test_ctrl_c_stops_a_turn_that_runs_and_the_chat_goes_on(tmp_path: Path) -> None:
    """A model streaming slowly (a replay of Ollama's wire format): Ctrl-C ends the turn mid-reply, the prompt
    comes back, and the next question is answered in the same chat."""
    from tests.ollama_replay import OllamaReplayServer, ReplayReply

    slow = "I am looking " + "and looking " * 40
    script = [ReplayReply(text=slow, chunk_delay_s=0.3), ReplayReply(text="Your cart is empty.")]
    db = tmp_path / "chat.db"
    with OllamaReplayServer(script=script) as server:
        term = terminal(tmp_path, "--session-db", str(db), "--model", "ollama:qwen3:4b", OLLAMA_HOST=server.base_url)
        try:
            at = term.expect("you>")
            term.type("Where is my order 4512?\r")
            at = term.expect("and looking", after=at)
            term.ctrl_c()
            at = term.expect("you>", after=term.expect("(stop reason: cancelled)", after=at))
            term.type("What is my cart total now?\r")
            at = term.expect("you>", after=term.expect("Your cart is empty.", after=at))
            term.ctrl_d()
            code = term.wait(timeout=30)
        finally:
            term.kill()
    assert code == compare.EXIT_OK and "Traceback" not in term.text, term.text
    questions = [m["data"]["content"] for m in kept_messages(db.with_name("chat.default.json")) if m["type"] == "human"]
    assert questions == ["Where is my order 4512?", "What is my cart total now?"], "the stopped turn is kept"


def test_from_a_pipe_sigint_stops_the_approval_and_a_second_one_at_the_prompt_leaves(tmp_path: Path) -> None:
    """No terminal: lines are read from a pipe, and Ctrl-C is the signal. The line typed after the stopped turn
    is read, not lost to the read the signal cut."""
    db = tmp_path / "chat.db"
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "compare.py"), "chat", "--session-db", str(db)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "XDG_DATA_HOME": str(tmp_path / "data")},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    out = Reader(process.stdout)
    try:
        out.until("you> ")
        process.stdin.write(f"{ADD_TWO}\n{ADD_TWO}\n")
        process.stdin.flush()
        at = out.until("approve? [y/N] ")
        process.send_signal(signal.SIGINT)
        at = out.until("you> ", after=out.until("(stop reason: cancelled)", after=at))
        process.stdin.write("What is my cart total now?\n")
        process.stdin.flush()
        at = out.until("you> ", after=out.until("$33.00", after=at))
        process.send_signal(signal.SIGINT)
        out.until("(Ctrl-C again", after=at)
        process.send_signal(signal.SIGINT)
        out.until("Interrupted; the conversation is kept in", after=at)
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == compare.EXIT_INTERRUPTED, err
    assert err == ""
    questions = [m["data"]["content"] for m in kept_messages(db.with_name("chat.default.json")) if m["type"] == "human"]
    assert questions == [ADD_TWO, ADD_TWO, "What is my cart total now?"]


class Reader:
    """The child's stdout, read a character at a time (a prompt ends in no newline) by a thread."""

    def __init__(self, stream: IO[str]) -> None:
        self.text = ""
        self.lock = threading.Lock()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: IO[str]) -> None:
        while char := stream.read(1):
            with self.lock:
                self.text += char

    def until(self, shown: str, *, after: int = 0, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                at = self.text.find(shown, after)
            if at >= 0:
                return at + len(shown)
            time.sleep(0.05)
        raise AssertionError(f"never shown: {shown!r}; stdout was:\n{self.text[-3000:]}")


def test_a_second_graph_chat_does_not_answer_the_pause_a_live_chat_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Chat A waits at its approval prompt; chat B opens the same thread and finds the pause: B is refused in one
    line (exit 4) and asks nobody; A's answer then lets the add run, and A goes on."""
    db = tmp_path / "chat.db"
    argv = ["chat", "--contender", "langgraph", "--session-db", str(db)]
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "compare.py"), *argv],
        cwd=tmp_path,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "XDG_DATA_HOME": str(tmp_path / "data")},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    out = Reader(process.stdout)
    try:
        out.until("you> ")
        process.stdin.write("Add 5 copies of The Quiet Orchard to my cart.\n")
        process.stdin.flush()
        at = out.until("approve? [y/N] ")
        monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
        assert compare.main(argv) == compare.EXIT_FILE
        other = capsys.readouterr()
        assert "approval needed" not in other.out, "B asked nobody"
        assert "is waiting for an approval, asked in another chat" in other.err, other.err
        assert len(other.err.strip().splitlines()) == 1 and "Traceback" not in other.err
        assert cart_of(db, "langgraph") == {}
        process.stdin.write("y\n")
        process.stdin.flush()
        out.until("you> ", after=out.until("add_to_cart", after=at))
        process.stdin.close()
        process.wait(timeout=30)
        err = process.stderr.read() if process.stderr else ""
    finally:
        process.kill()
    assert process.returncode == compare.EXIT_OK, err
    assert err == ""
    assert cart_of(db, "langgraph") == {"The Quiet Orchard": 5}


def test_an_answer_to_a_pause_another_process_answered_first_is_one_line(tmp_path: Path) -> None:
    """A program (not a chat) answers the pause chat A is asking about; A's later answer is not used: one line,
    exit 4, no traceback."""
    from comparison.scenarios import INSTRUCTIONS
    from langgraph_version import GraphAgent, GraphSession
    from shared_tools.bookstore.approval import RiskyWritePolicy
    from shared_tools.bookstore.tools import make_tools
    from shared_tools.models import make_model
    from shared_tools.results import AgentOptions

    db = tmp_path / "chat.db"
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "compare.py"), "chat", "--contender", "langgraph", "--session-db", str(db)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "XDG_DATA_HOME": str(tmp_path / "data")},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    out = Reader(process.stdout)
    try:
        out.until("you> ")
        process.stdin.write("Add 5 copies of The Quiet Orchard to my cart.\n")
        process.stdin.flush()
        out.until("approve? [y/N] ")
        customer = chat_customer("langgraph", "default")
        with BookStore(db.with_name("chat.store.db")) as store:
            options = AgentOptions(needs_approval=RiskyWritePolicy(store, customer))
            agent = GraphAgent(make_model("scripted"), make_tools(store, customer), options)
            with GraphSession.sqlite(agent, INSTRUCTIONS, path=str(db), thread_id="default", customer_id=customer) as s:
                s.resume(False)
        process.stdin.write("y\n")
        process.stdin.flush()
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == compare.EXIT_FILE, err
    assert "answered in another chat meanwhile, so this answer was not used" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert cart_of(db, "langgraph") == {}

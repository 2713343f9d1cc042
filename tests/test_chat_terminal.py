"""`compare.py chat` in a real terminal (a pty): Ctrl-C where a person presses it, and what is kept after it.

Each test starts the real program on a pseudo-terminal (`tests/terminal.py`) with the scripted model and types at
it; the saved conversation is then read back the way the next chat reads it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import compare
from comparison.chat import chat_customer
from shared_tools.bookstore.store import BookStore

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")

ADD_TWO = "Add 2 copies of The Quiet Orchard to my cart."
"""Two copies land without a question; asked again, the line would hold 4, over the limit of 3: approval."""


def kept_messages(path: Path) -> list[dict]:
    """The messages of a hand-written session file: every saved line's new messages, in order."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [message for line in lines[1:] for message in line["messages"]]


def cart_of(db: Path) -> dict[str, int]:
    store = BookStore(db.with_name(f"{db.stem}.store.db"))
    try:
        return {line.book.title: line.quantity for line in store.cart(chat_customer("handwritten", "default")).lines}
    finally:
        store.close()


def test_ctrl_c_at_the_handwritten_approval_prompt_ends_the_turn_and_keeps_it(tmp_path: Path) -> None:
    from tests.terminal import Terminal

    db = tmp_path / "chat.db"
    term = Terminal("chat", "--session-db", str(db), cwd=tmp_path)
    try:
        term.expect("you>")
        term.type(ADD_TWO + "\r")
        at = term.expect("you>", after=term.expect("cartTotal"))
        term.type(ADD_TWO + "\r")
        at = term.expect("approve? [y/N]", after=at)
        term.ctrl_c()  # once: the turn ends here, not at a second Ctrl-C
        code = term.wait(timeout=30)
    finally:
        term.kill()
    assert code == compare.EXIT_INTERRUPTED, term.text
    assert "Traceback" not in term.text, term.text
    assert f"kept in {db.with_name('chat.default.json')}" in term.text.replace("\n", "")
    messages = kept_messages(db.with_name("chat.default.json"))
    questions = [m["data"]["content"] for m in messages if m["type"] == "human"]
    assert questions == [ADD_TWO, ADD_TWO], "the interrupted turn is kept, its question first"
    tools = [(m["data"]["name"], m["data"]["content"]) for m in messages if m["type"] == "tool"]
    assert [name for name, _ in tools] == ["search_books", "check_stock", "add_to_cart"] * 2
    assert '"quantity":2' in tools[2][1], "the add that landed is in the kept history"
    assert tools[-1][1] == "Cancelled before it ran.", "the add the Ctrl-C stopped at its question did not run"
    assert cart_of(db) == {"The Quiet Orchard": 2}

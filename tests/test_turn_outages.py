"""A model outage after a write landed, and a process killed there: what each conversation keeps of the turn.

The hand-written session keeps the finished calls and saves them; the graph keeps them in its checkpoints and
finishes with `continue_unfinished`; asking again adds no second copy. A SIGKILL loses the hand-written turn
as a whole (docs/command-line.md says so), and that is tested exactly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool

from comparison.conversations import open_conversation
from comparison.scenarios import INSTRUCTIONS, ORDER_QUESTION, SEED_GOAL
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.models import ModelCallFailed, make_model
from tests.conftest import assert_valid_history, build_agent, view
from tests.doubles import ScriptModel

ROOT = Path(__file__).resolve().parent.parent
QUIET_ORCHARD = 7


def fails_once_after_the_add(tools: list[BaseTool]) -> ScriptModel:
    """The scripted shopper, except that the model call right after the first add_to_cart result fails."""
    scripted, failed = make_model("scripted").bind_tools(tools), []

    def reply(messages: list[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if not failed and isinstance(last, ToolMessage) and last.name == "add_to_cart":
            failed.append(True)
            raise ModelCallFailed("the model server at 127.0.0.1:9 went away")
        answer = scripted.invoke(messages)
        assert isinstance(answer, AIMessage)
        return answer

    return ScriptModel(replies=[reply] * 30)


def where(storage: str, tmp_path: Path, request: pytest.FixtureRequest) -> Path | str | None:
    if storage == "memory":
        return None
    if storage == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return tmp_path / "chat.db"


@pytest.mark.parametrize("storage", ["memory", "file", "postgres"])
@pytest.mark.parametrize("contender", ["handwritten", "langgraph"])
def test_an_outage_after_an_add_keeps_the_add_and_the_turn_is_finished_without_a_second_copy(
    contender: str, storage: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store, db = BookStore(), where(storage, tmp_path, request)
    tools = make_tools(store)
    agent = build_agent(contender, fails_once_after_the_add(tools), tools, parallel_tools=False)
    conversation = open_conversation(contender, agent, INSTRUCTIONS, "shop", db, resume=False, customer_id="c1")
    conversation.ask(ORDER_QUESTION)
    with pytest.raises(ModelCallFailed):
        conversation.ask(SEED_GOAL)
    assert store.cart("c1").quantity_of(QUIET_ORCHARD) == 1
    if db is not None:  # another process opens it again from where it is kept
        conversation.close()
        conversation = open_conversation(contender, agent, INSTRUCTIONS, "shop", db, resume=True, customer_id="c1")
    result = conversation.continue_unfinished()
    assert result is not None and result.ok and "The Quiet Orchard" in (result.answer or "")
    assert conversation.continue_unfinished() is None, "finished once"
    messages: list[BaseMessage] = view(conversation.session, "messages")
    adds = [m for m in messages if isinstance(m, ToolMessage) and m.name == "add_to_cart"]
    assert len(adds) == 1 and adds[0].status == "success", "the finished add was kept, and not run again"
    assert [m.text for m in messages if isinstance(m, HumanMessage)] == [ORDER_QUESTION, SEED_GOAL]
    assert_valid_history(messages)
    assert store.cart("c1").quantity_of(QUIET_ORCHARD) == 1
    conversation.close()


CHILD = """
import sys, time
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from comparison.conversations import open_conversation
from comparison.scenarios import INSTRUCTIONS, ORDER_QUESTION, SEED_GOAL
from handwritten import AgentLoop
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.models import make_model
from shared_tools.results import AgentOptions

store_path, db, marker = sys.argv[1:4]

def on_event(event):
    if event.name == "add_to_cart":
        Path(marker).write_text("added", encoding="utf-8")
        time.sleep(120)  # the add has landed in the store: the parent kills us here

tools = make_tools(BookStore(store_path))
loop = AgentLoop(make_model("scripted"), tools, AgentOptions(parallel_tools=False, on_event=on_event))
conversation = open_conversation("handwritten", loop, INSTRUCTIONS, "shop", Path(db), resume=False, customer_id="c1")
conversation.ask(ORDER_QUESTION)
conversation.ask(SEED_GOAL)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_handwritten_turn_killed_after_its_add_is_lost_whole_and_the_add_stays(tmp_path: Path) -> None:
    """What docs/command-line.md says a SIGKILL costs the hand-written session: it saves after a turn (or after an
    outage), so the killed turn is gone from its file as a whole (question, calls, results), the turns before it
    are kept, and the add it made stays in the store, which the conversation no longer knows about."""
    store_path, db, marker = tmp_path / "store.db", tmp_path / "chat.db", tmp_path / "added"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(store_path), str(db), str(marker)], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)  # polling for the child's progress, not a timing assertion
        assert marker.exists(), "the child never reached its add"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    store = BookStore(store_path)
    assert store.cart("c1").quantity_of(QUIET_ORCHARD) == 1, "the add landed before the kill"
    conversation = open_conversation(
        "handwritten",
        build_agent("handwritten", make_model("scripted"), make_tools(store)),
        INSTRUCTIONS,
        "shop",
        db,
        resume=True,
        customer_id="c1",
    )
    messages: list[BaseMessage] = conversation.session.messages  # type: ignore[attr-defined]
    assert [m.text for m in messages if isinstance(m, HumanMessage)] == [ORDER_QUESTION], "turn 2 is lost whole"
    assert not any(isinstance(m, ToolMessage) and m.name == "add_to_cart" for m in messages)
    assert conversation.continue_unfinished() is None, "nothing marks it unfinished: the kill left no trace"
    store.close()

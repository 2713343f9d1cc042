"""Sessions in Postgres, both agents, against a real throwaway cluster (a fresh database per test).

A thread remembered across sessions and processes, delta storage past a snapshot, pruning, the turn lock in
Postgres, a conversation bound to its customer, and worker processes racing turns on an empty database.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from comparison.scenarios import CART_QUESTION, INSTRUCTIONS, SEED_GOAL
from handwritten import AgentLoop, Session, SessionConflict
from handwritten import ConcurrentTurn as HandwrittenConcurrentTurn
from langgraph_version import ConcurrentTurn, GraphAgent, GraphSession
from langgraph_version.postgres import PostgresCheckpoints
from shared_tools.bookstore.approval import RiskyWritePolicy
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.models import make_model
from shared_tools.results import AgentOptions, CustomerMismatch, StopReason
from tests.conftest import assert_valid_history, blocking
from tests.doubles import ScriptModel, ai

ORDER_QUESTION = "Where is my order 4512?"


def graph_agent(store: BookStore | None = None, **options: Any) -> GraphAgent:
    return GraphAgent(make_model("scripted"), make_tools(store or BookStore()), AgentOptions(**options))


def loop(store: BookStore | None = None) -> AgentLoop:
    return AgentLoop(make_model("scripted"), make_tools(store or BookStore()), AgentOptions())


def questions(messages: list[Any]) -> list[str]:
    return [m.text for m in messages if isinstance(m, HumanMessage)]


def advisory_locks(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as db:
        row = db.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted").fetchone()
    return int(row[0]) if row else 0


# --- the graph ---------------------------------------------------------------------------------------------------


def test_a_postgres_thread_is_remembered_by_a_new_session(postgres_url: str) -> None:
    store = BookStore()
    first = GraphSession.postgres(graph_agent(store), INSTRUCTIONS, url=postgres_url, thread_id="ann", customer_id="c1")
    assert first.ask(SEED_GOAL).stop_reason is StopReason.DONE
    again = GraphSession.postgres(graph_agent(store), INSTRUCTIONS, url=postgres_url, thread_id="ann", customer_id="c1")
    result = again.ask(CART_QUESTION)
    assert "16.50" in (result.answer or ""), "answered from the thread the first session wrote"
    assert questions(blocking(again.messages)) == [SEED_GOAL, CART_QUESTION]
    assert_valid_history(blocking(again.messages))
    other = GraphSession.postgres(graph_agent(store), INSTRUCTIONS, url=postgres_url, thread_id="bob")
    assert blocking(other.messages) == [], "threads are kept apart"


def test_a_postgres_thread_of_another_customer_is_refused_before_anything_runs(postgres_url: str) -> None:
    GraphSession.postgres(graph_agent(), INSTRUCTIONS, url=postgres_url, customer_id="ann").ask(ORDER_QUESTION)
    model = ScriptModel(replies=[])
    bob = GraphSession.postgres(
        GraphAgent(model, [], AgentOptions()), INSTRUCTIONS, url=postgres_url, customer_id="bob"
    )
    with pytest.raises(CustomerMismatch):
        bob.ask(ORDER_QUESTION)
    with pytest.raises(CustomerMismatch):
        _ = blocking(bob.messages)
    assert model.prompts == []


def test_delta_storage_on_postgres_replays_past_a_full_snapshot_like_memory(postgres_url: str) -> None:
    """30 order turns are 120 updates of `messages`: past the snapshot taken every 100. The thread read back from
    Postgres is the one an in-memory session holds for the same turns."""
    in_pg = GraphSession.postgres(graph_agent(), INSTRUCTIONS, url=postgres_url)
    in_memory = GraphSession(graph_agent(), INSTRUCTIONS)
    for n in range(30):
        in_pg.ask(f"Where is my order {n}?")
        in_memory.ask(f"Where is my order {n}?")
    reread = blocking(GraphSession.postgres(graph_agent(), INSTRUCTIONS, url=postgres_url).messages)
    assert [(type(m), m.text) for m in reread] == [(type(m), m.text) for m in blocking(in_memory.messages)]
    ids = [m.id for m in reread]
    in_pg_ids = [m.id for m in blocking(in_pg.messages)]
    assert ids == in_pg_ids and len(set(ids)) == len(ids), "each read replays the same ids"
    assert len(reread) == 1 + 30 * 4


def checkpoints(url: str, thread_id: str = "t1") -> int:
    with psycopg.connect(url) as db:
        row = db.execute("SELECT count(*) FROM checkpoints WHERE thread_id = %s", (thread_id,)).fetchone()
    return int(row[0]) if row else 0


def test_pruning_on_postgres_is_langgraphs_keep_latest_and_keeps_storage_bounded(postgres_url: str) -> None:
    session = GraphSession.postgres(graph_agent(), INSTRUCTIONS, url=postgres_url, storage="full", prune_turns=2)
    counts = []
    for n in range(7):
        session.ask(f"Where is my order {n}?")
        counts.append(checkpoints(postgres_url))
    unpruned = GraphSession.postgres(graph_agent(), INSTRUCTIONS, url=postgres_url, storage="full", thread_id="all")
    for n in range(7):
        unpruned.ask(f"Where is my order {n}?")
    assert max(counts) <= 2 * 6 + 1, counts  # at most two turns' checkpoints (6 each), then keep_latest
    assert 1 in counts, "keep_latest left only the head"
    assert checkpoints(postgres_url, "all") == 7 * 6
    asked = questions(blocking(session.messages))
    assert asked == [f"Where is my order {n}?" for n in range(7)], "the history stays whole"
    assert session.ask(CART_QUESTION).stop_reason is StopReason.DONE, "and the thread goes on"


def test_delta_threads_are_not_pruned_because_langgraph_refuses_to(postgres_url: str) -> None:
    with pytest.raises(ValueError, match="storage='full'"):
        GraphSession.postgres(graph_agent(), INSTRUCTIONS, url=postgres_url, prune_turns=2)
    GraphSession.postgres(graph_agent(), INSTRUCTIONS, url=postgres_url).ask(ORDER_QUESTION)

    async def keep_latest() -> None:
        async with PostgresCheckpoints(postgres_url).open() as saver:
            await saver.aprune(["t1"], strategy="keep_latest")

    with pytest.raises(NotImplementedError, match="DeltaChannel"):
        asyncio.run(keep_latest())


async def test_a_turn_held_elsewhere_makes_an_ask_wait_then_refuses_it(postgres_url: str) -> None:
    """Another process's turn is a lock held in Postgres: the ask waits `turn_timeout`, then ConcurrentTurn
    names the client that holds it; once it is released the ask goes through."""
    elsewhere = PostgresCheckpoints(postgres_url)
    model = ScriptModel(replies=[ai("Hello.")])
    session = GraphSession.postgres(GraphAgent(model, [], AgentOptions()), "sys", url=postgres_url, turn_timeout=0.3)
    async with elsewhere.turn("t1", wait=1):
        with pytest.raises(ConcurrentTurn, match="agent-loop-compare pid"):
            await session.aask("hi")
        assert model.prompts == [], "nothing ran while another turn held the thread"
    assert (await session.aask("hi")).answer == "Hello."
    assert advisory_locks(postgres_url) == 0


async def test_a_cancel_while_waiting_for_the_turn_ends_the_wait_and_holds_nothing(postgres_url: str) -> None:
    elsewhere = PostgresCheckpoints(postgres_url)
    session = GraphSession.postgres(graph_agent(), INSTRUCTIONS, url=postgres_url, turn_timeout=60)
    async with elsewhere.turn("t1", wait=1):
        waiting = asyncio.create_task(session.aask(ORDER_QUESTION))
        await asyncio.sleep(0.3)  # let it start waiting; not a timing assertion
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert advisory_locks(postgres_url) == 1, "only the holder's lock"
    assert advisory_locks(postgres_url) == 0
    assert (await session.aask(ORDER_QUESTION)).stop_reason is StopReason.DONE


async def test_two_asks_at_once_on_one_postgres_thread_both_keep_their_turn(postgres_url: str) -> None:
    """Two session objects (as two workers would have) on one thread, asking at the same moment."""
    a = GraphSession.postgres(graph_agent(), INSTRUCTIONS, url=postgres_url)
    b = GraphSession.postgres(graph_agent(), INSTRUCTIONS, url=postgres_url)
    await asyncio.gather(a.aask("Where is my order 1?"), b.aask("Where is my order 2?"))
    assert sorted(questions(await a.messages())) == ["Where is my order 1?", "Where is my order 2?"]
    assert_valid_history(await a.messages())


def test_an_approval_pause_in_postgres_is_answered_by_another_session(postgres_url: str) -> None:
    store = BookStore()
    options = {"needs_approval": RiskyWritePolicy(store, max_quantity=0)}  # every add needs a human
    first = GraphSession.postgres(graph_agent(store, **options), INSTRUCTIONS, url=postgres_url, customer_id="c1")
    assert first.ask(SEED_GOAL).stop_reason is StopReason.AWAITING_APPROVAL
    other = GraphSession.postgres(graph_agent(store, **options), INSTRUCTIONS, url=postgres_url, customer_id="c1")
    assert blocking(other.pending) and blocking(other.pending)[0]["tool_call"]["name"] == "add_to_cart"
    result = other.resume(True)
    assert result.stop_reason is StopReason.DONE
    assert store.cart("c1").quantity_of(7) == 1
    assert_valid_history(blocking(other.messages))


# --- the hand-written session ------------------------------------------------------------------------------------


def save(session: Session, url: str, thread_id: str) -> None:
    blocking(lambda: session.asave_postgres(url, thread_id))


def load(url: str, thread_id: str, loop: AgentLoop, **options: Any) -> Session:
    return blocking(lambda: Session.aload_postgres(url, thread_id, loop, **options))


def test_a_handwritten_session_saved_in_postgres_loads_back_the_same(postgres_url: str) -> None:
    session = Session(loop(), INSTRUCTIONS, customer_id="ann")
    session.ask(SEED_GOAL)
    save(session, postgres_url, "ann")
    # What a hostile model can send: a reply cut off mid-emoji (a lone surrogate) and a NUL.
    session._messages.append(AIMessage("cut \ud83d off \x00 here"))
    save(session, postgres_url, "ann")
    again = load(postgres_url, "ann", loop(), customer_id="ann")
    assert [(type(m), m.content) for m in again.messages] == [(type(m), m.content) for m in session.messages]
    assert again.customer_id == "ann" and again.instructions == INSTRUCTIONS
    with psycopg.connect(postgres_url) as db:
        revision = db.execute("SELECT revision FROM handwritten_threads WHERE thread_id = 'ann'").fetchone()
    assert revision == (2,)


def test_a_handwritten_save_appends_only_what_was_added(postgres_url: str) -> None:
    session = Session(loop(), INSTRUCTIONS)
    session.ask(ORDER_QUESTION)
    save(session, postgres_url, "t")
    with psycopg.connect(postgres_url, autocommit=True) as db:
        # Marks the stored rows: an append leaves them alone, a rewrite would replace them.
        db.execute("UPDATE handwritten_messages SET message = message || ' ' WHERE thread_id = 't'")
        session.ask(ORDER_QUESTION)
        save(session, postgres_url, "t")
        rows = db.execute("SELECT message LIKE '% ' FROM handwritten_messages ORDER BY position").fetchall()
    assert [marked for (marked,) in rows] == [True] * 5 + [False] * 4


def test_two_handwritten_sessions_saving_one_thread_is_a_conflict_not_a_lost_turn(postgres_url: str) -> None:
    save(Session(loop(), INSTRUCTIONS), postgres_url, "t")
    a = load(postgres_url, "t", loop())
    b = load(postgres_url, "t", loop())
    a.ask("Where is my order 1?")
    b.ask("Where is my order 2?")
    save(a, postgres_url, "t")
    with pytest.raises(SessionConflict, match="revision 2"):
        save(b, postgres_url, "t")
    assert questions(load(postgres_url, "t", loop()).messages) == ["Where is my order 1?"]
    with pytest.raises(SessionConflict):
        save(Session(loop(), INSTRUCTIONS), postgres_url, "t")  # a new session never overwrites one


def test_a_handwritten_thread_is_refused_to_another_customer_and_missing_ones_say_so(postgres_url: str) -> None:
    save(Session(loop(), INSTRUCTIONS, customer_id="ann"), postgres_url, "ann")
    with pytest.raises(CustomerMismatch):
        load(postgres_url, "ann", loop(), customer_id="bob")
    with pytest.raises(LookupError):
        load(postgres_url, "nobody", loop())


def test_a_handwritten_rewind_rewrites_the_stored_thread(postgres_url: str) -> None:
    session = Session(loop(), INSTRUCTIONS)
    session.ask("Where is my order 1?")
    session.ask("Where is my order 2?")
    save(session, postgres_url, "t")
    session.rewind(1)
    stored = load(postgres_url, "t", loop())
    assert questions(stored.messages) == ["Where is my order 1?"]
    stored.ask("Where is my order 3?")
    save(stored, postgres_url, "t")
    assert questions(load(postgres_url, "t", loop()).messages) == [
        "Where is my order 1?",
        "Where is my order 3?",
    ]


async def test_the_handwritten_turn_lock_makes_a_second_turn_wait_then_refuses_it(postgres_url: str) -> None:
    from handwritten import postgres

    # LangGraph's first setup builds indexes CONCURRENTLY, which waits for every open transaction, a turn too.
    await PostgresCheckpoints(postgres_url).setup()
    async with postgres.turn(postgres_url, "t"):
        with pytest.raises(HandwrittenConcurrentTurn):
            async with postgres.turn(postgres_url, "t", wait=0.2):
                pytest.fail("two turns at once")
        async with postgres.turn(postgres_url, "other", wait=0.2):
            pass  # another conversation is not held up
        async with GraphCheck(postgres_url):
            pass
    assert advisory_locks(postgres_url) == 0
    assert HandwrittenConcurrentTurn is ConcurrentTurn, "one exception for both agents' sessions"


class GraphCheck:
    """A graph thread's turn of the same name: another lock class, so it is not held up by the hand-written one."""

    def __init__(self, url: str) -> None:
        self.turn = PostgresCheckpoints(url).turn("t", wait=0.2)

    async def __aenter__(self) -> None:
        await self.turn.__aenter__()

    async def __aexit__(self, *exc: object) -> None:
        await self.turn.__aexit__(*exc)


# --- several processes -------------------------------------------------------------------------------------------

WORKERS = 3
TURNS = 4
THREADS = ("shared-a", "shared-b")


def worker(kind: str, url: str, number: int) -> list[tuple[str, str]]:
    """One worker process: `TURNS` turns, alternating between the shared threads; the (thread, question) of every
    turn that returned a result."""
    return asyncio.run(_worker(kind, url, number))


async def _worker(kind: str, url: str, number: int) -> list[tuple[str, str]]:
    from handwritten import postgres

    kept = []
    for turn in range(TURNS):
        thread = THREADS[(number + turn) % len(THREADS)]
        question = f"Where is my order {number * 100 + turn}?"
        if kind == "langgraph":
            session = GraphSession.postgres(graph_agent(), INSTRUCTIONS, url=url, thread_id=thread, turn_timeout=120)
            result = await session.aask(question)
        else:
            async with postgres.turn(url, thread, wait=120):
                try:
                    conversation = await Session.aload_postgres(url, thread, loop())
                except LookupError:
                    conversation = Session(loop(), INSTRUCTIONS)
                result = await conversation.aask(question)
                await conversation.asave_postgres(url, thread)
        assert result.stop_reason is StopReason.DONE, result
        kept.append((thread, question))
    return kept


@pytest.mark.parametrize("kind", ["langgraph", "handwritten"])
def test_workers_racing_turns_on_shared_conversations_keep_every_turn_once(kind: str, postgres_url: str) -> None:
    """Three processes, four turns each, on two conversations, started together on an empty database: every
    turn that returned is in its conversation exactly once, in a history a provider accepts."""
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(WORKERS, mp_context=spawn) as pool:
        futures = [pool.submit(worker, kind, postgres_url, n) for n in range(WORKERS)]
        kept = [pair for future in futures for pair in future.result(timeout=300)]
    assert len(kept) == WORKERS * TURNS
    for thread in THREADS:
        if kind == "langgraph":
            graph = GraphSession.postgres(graph_agent(), INSTRUCTIONS, url=postgres_url, thread_id=thread)
            messages = blocking(graph.messages)
        else:
            messages = load(postgres_url, thread, loop()).messages
        asked = Counter(questions(messages))
        assert asked == Counter(q for t, q in kept if t == thread), thread
        assert set(asked.values()) == {1}, "no turn twice"
        assert isinstance(messages[0], SystemMessage)
        assert_valid_history(messages)
        answers = [m for m in messages if isinstance(m, ToolMessage)]
        assert len(answers) == len(asked), "each turn's order lookup is answered once"
    assert advisory_locks(postgres_url) == 0

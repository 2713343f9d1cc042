"""The work behind `python compare.py` and `compare.py chat`, below their argument parsing.

`UsageError` is a bad command line or setting, refused with `check_model` and `check_chat` before any work;
`run_and_render` runs the scenarios and renders each as its runs come in, `finish` prints the closing tables
and writes the files asked for, and `chat` holds one conversation on an open store.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from rich.console import Console
from rich.text import Text

from comparison.approvals import AskingHuman
from comparison.chat import ChatHuman, Ending, LiveTurn, converse
from comparison.closing import guard_matrix
from comparison.command_line import UsageError
from comparison.contenders import CONTENDERS, build_contender, spec_of
from comparison.conversations import (
    Conversation,
    HistoryPolicy,
    check_saved_conversation,
    check_thread_name,
    facts_of,
    open_conversation,
    shown_target,
)
from comparison.document import build_document, write_document
from comparison.files import UnusableFile, check_session_db, check_store_db, write_output
from comparison.line_editor import LineReader
from comparison.overview import render_overview
from comparison.records import RunRecord
from comparison.render import render_guard_matrix, render_not_run, render_scenario, render_who_owns_what
from comparison.report import render_report
from comparison.run_setup import RunOptions
from comparison.runner import ScenarioRuns
from comparison.sanitize import clean_line
from comparison.scenarios import INSTRUCTIONS, Scenario, contenders_running
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.contender import Capability
from shared_tools.conversation import DamagedCheckpoint, beside
from shared_tools.models import ModelSpecError, make_model
from shared_tools.models.personas import KNOWN_GOALS
from shared_tools.places import NoUserFolder, data_home
from shared_tools.results import AgentOptions, CustomerMismatch, TraceEvent


def check_model(spec: str) -> BaseChatModel:
    """The model of `spec`, checked before any run: a bad spec or OLLAMA_HOST raises `ModelSpecError` (which names
    it), an unreachable Ollama `ModelUnavailable`."""
    try:
        return make_model(spec)
    except ModelSpecError:
        raise
    except ValueError as exc:  # a setting the models package did not put into words
        raise UsageError(f"cannot set up model {spec!r}: {exc}") from None


def check_chat(
    contender: str, thread: str, session_db: Path | str, store_db: Path | str | None, customer: str
) -> Path | str:
    """Everything chat is given, before anything is opened; returns the store file (by default beside the
    sessions, or the sessions' Postgres database)."""
    try:
        check_thread_name(thread)
    except ValueError as exc:
        raise UsageError(f"--thread: {exc}") from None
    check_session_db(session_db)
    db = session_db
    store = store_db or (db if isinstance(db, str) else db.with_name(f"{db.stem}.store.db"))
    if isinstance(store_db, Path) and isinstance(db, Path) and is_beside(store_db, db, thread):
        # A conversation kept in a file of its own names it `beside(db, thread, suffix)`: a store there would be
        # written over by the first save, or make that file unreadable as a conversation.
        raise UnusableFile(
            f"--store-db: {store_db} is named as the files thread {thread!r} is kept in beside --session-db "
            f"({beside(db, thread, '.*').name}); give another file"
        )
    check_store_db(store)
    try:
        check_saved_conversation(contender, thread, db, customer)
    except ValueError as exc:  # damaged, wrong-shape, or another customer's (handwritten.CustomerMismatch)
        raise UnusableFile(f"cannot resume thread {thread!r}: {exc}") from None
    return store


def is_beside(path: Path, db: Path, thread: str) -> bool:
    """Whether `path` is named as a file a conversation keeps thread `thread` in beside `db`
    (`shared_tools.conversation.beside`, whatever its suffix)."""
    kept = beside(db, thread, ".")  # the default store, "<stem>.store.db", is no conversation's name
    return path.resolve().parent == db.resolve().parent and path.name.startswith(kept.name)


def default_session_db() -> Path:
    """Where chat keeps its conversations unless told (--session-db): the per-user data folder, as `serve`
    does, made if it is not there yet; `UnusableFile` naming the folder when it cannot be."""
    try:
        folder = data_home() / "chat"
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:  # NoUserFolder among them
        raise UnusableFile(f"--session-db: the default folder cannot be used ({exc}); give --session-db PATH") from None
    return folder / "agent-sessions.db"


def finish(
    console: Console,
    model: str,
    contenders: tuple[str, ...],
    records: list[RunRecord],
    done: list[Scenario],
    *,
    interrupted: bool,
    json: str | None = None,
    report: str | None = None,
    overview: Sequence[Scenario] | None = None,
    owners: bool = True,
    prog: str = "compare.py",
) -> None:
    """The closing tables, then the JSON document and the HTML report when asked for.

    `overview`: the scenarios asked for, to print the overview of the runs (`comparison.overview`) instead of the
    detailed guard matrix; `owners`: print "Who owns what" too."""
    rows = guard_matrix(records, contenders)
    if overview is not None:
        render_overview(console, prog, model, overview, contenders, records, rows)
    elif rows:
        render_guard_matrix(console, rows, contenders)
    if owners:
        render_who_owns_what(console)
    if json or report:
        document = build_document(model, contenders, done, records, interrupted=interrupted, matrix=rows)
        if json:
            write_document(document, json)
            if json != "-":
                console.print(Text(f"JSON written to {clean_line(json)}"), soft_wrap=True)
        if report:
            write_output(report, render_report(document))
            console.print(Text(f"Report written to {clean_line(report)}"), soft_wrap=True)


def run_and_render(
    console: Console,
    scenarios: Sequence[Scenario],
    options: RunOptions,
    *,
    trace: bool,
    workers: int = 1,
    detailed: bool = True,
) -> tuple[list[RunRecord], list[Scenario], bool]:
    """Run the scenarios (across `workers` processes when > 1), rendering each in order as soon as its runs are in
    (`detailed`; otherwise `finish` shows them all in the overview); Ctrl-C stops the runs and shows every run that
    finished.

    Returns every record, the scenarios that produced at least one, and whether the user interrupted.
    """
    records: list[RunRecord] = []
    done: list[Scenario] = []
    runnable = [s for s in scenarios if contenders_running(s, options.contenders)]
    with ScenarioRuns(runnable, options, workers=workers) as runs:
        index = 0
        for number, scenario in enumerate(scenarios, start=1):
            if not contenders_running(scenario, options.contenders):
                if detailed and not runs.interrupted:
                    # Said, not skipped silently: the scenario was asked for (or is part of "all").
                    supported = contenders_running(scenario, tuple(CONTENDERS))
                    render_not_run(console, number, scenario, supported, options.contenders)
                continue
            current: list[RunRecord] = []
            failure: Exception | None = None
            try:
                runs.collect(index, current.append)
            except KeyboardInterrupt:
                runs.interrupt()
            except Exception as exc:  # shown below with the runs before it, then raised
                failure = exc
            index += 1
            # Also after a Ctrl-C or a failure: the runs of the scenario that did finish are shown.
            records.extend(current)
            if current:
                done.append(scenario)
                try:
                    if detailed:
                        render_scenario(console, number, scenario, current, trace=trace)
                except KeyboardInterrupt:
                    runs.interrupt()
            if failure is not None:
                raise failure
        if runs.interrupted:
            console.print(Text(f"\nInterrupted after {len(records)} run(s); the tables below cover what ran.", "bold"))
        return records, done, runs.interrupted


def chat(
    console: Console,
    contender: str,
    thread: str,
    session_db: Path | str,
    policy: HistoryPolicy,
    model: BaseChatModel,
    store: BookStore,
    customer: str,
    *,
    scripted: bool,
) -> bool:
    """The conversation itself, on an open store: finish a cut-short turn, then ask until the customer stops;
    whether Ctrl-C ended it. A thread of another customer is an `UnusableFile`."""
    events: list[TraceEvent] = []
    # The reply streams token by token and each trace line prints as it happens, so no spinner is drawn over them.
    live = LiveTurn(console)
    reader = LineReader(prompt_history())
    human = ChatHuman()
    conversation = _open_chat(contender, thread, session_db, policy, model, store, customer, events, live, human)
    try:
        # The graph checks whose thread it is on this first read, and reads its checkpoints back.
        facts = facts_of(conversation)
    except (CustomerMismatch, DamagedCheckpoint) as exc:
        conversation.close()
        raise UnusableFile(f"cannot resume thread {thread!r}: {exc}") from None
    kept_in = clean_line(str(facts["kept_in"]))
    say_what_is_kept(console, contender, thread, facts, policy, session_db, shown_target(store.url or store.path))
    spec = spec_of(contender)
    if not spec.has(Capability.APPROVAL):
        unasked = f"Risky writes run unasked here ({clean_line(spec.why_not(Capability.APPROVAL))})."
        console.print(Text(unasked), soft_wrap=True)
    if scripted:
        console.print(Text("The scripted model knows these goals: " + " | ".join(KNOWN_GOALS)))
    try:
        # ConversationNotSaved or ThreadBusy (another process on the thread) and ModelUnavailable end it with
        # their message. Every turn is over (saved, or stopped and saved) before the prompt comes back, so
        # "kept" is true whenever the chat ends here.
        ending = converse(
            console,
            conversation,
            scripted=scripted,
            reader=reader,
            events=events,
            live=live,
            cart=lambda: cart_text_of(store, customer),
            thread=thread,
            human=human,
            no_rewind=None if spec.has(Capability.REWIND) else spec.why_not(Capability.REWIND),
        )
    except KeyboardInterrupt:  # while the chat's loop starts or ends, when no turn runs
        ending = Ending.INTERRUPTED
    except DamagedCheckpoint as exc:  # a checkpoint further back, read by /history or /rewind
        raise UnusableFile(f"thread {thread!r}: {exc}") from None
    finally:
        conversation.close()
    if ending is Ending.INTERRUPTED:
        console.print(Text(f"\nInterrupted; the conversation is kept in {kept_in}."))
        return True
    return False


def prompt_history() -> Path | None:
    """The file of the questions typed at the chat's prompt, in the per-user data folder; None without one."""
    try:
        return data_home() / "chat" / "prompt-history"
    except NoUserFolder:
        return None


def _open_chat(
    contender: str,
    thread: str,
    session_db: Path | str,
    policy: HistoryPolicy,
    model: BaseChatModel,
    store: BookStore,
    customer: str,
    events: list[TraceEvent],
    live: LiveTurn,
    human: ChatHuman,
) -> Conversation:
    """The chat's conversation, resumed, on an agent that shows each turn live and asks the customer at the
    prompt before a risky write (a contender that asks, during its run; one that pauses, in `converse`)."""

    def on_event(event: TraceEvent) -> None:
        events.append(event)
        live.on_event(event)

    options = AgentOptions(on_event=on_event, on_token=live.on_token)
    # Awaited by a contender that asks in its run; one without a gate runs every write (said by `chat`).
    spec = spec_of(contender)
    asks = human.decide if spec.awaits_approve else human.decide_now
    gate = AskingHuman(store, customer, asks) if spec.has(Capability.APPROVAL) else None
    agent = build_contender(contender, model, make_tools(store, customer), options, gate)
    return open_conversation(
        contender, agent, INSTRUCTIONS, thread, session_db, resume=True, customer_id=customer, policy=policy
    )


def say_what_is_kept(
    console: Console,
    contender: str,
    thread: str,
    facts: dict[str, Any],
    policy: HistoryPolicy,
    session_db: Path | str,
    cart_in: str,
) -> None:
    """The chat's first line: the thread, where it is kept, its turns and what the model sees of them; and,
    when the conversation has a file of its own beside --session-db, which file and where the cart is."""
    kept_in = clean_line(str(facts["kept_in"]))
    window = "the whole history" if policy.keep_turns is None else f"the last {policy.keep_turns} turn(s)"
    if policy.summarize:
        window += ", older ones summarized"
    console.print(
        Text(contender, "bold")
        + Text(f" · thread {thread} · kept in {kept_in} · {facts['turns']} turn(s) so far · the model sees ")
        + Text(f"{window}. /help lists the commands; Ctrl-C stops a turn; /bye or Ctrl-D ends.")
    )
    if facts["kept_in"] != shown_target(session_db):
        beside = clean_line(shown_target(session_db))
        saved = f"{contender} saves this conversation in {kept_in}, a file beside --session-db {beside}"
        console.print(Text(f"{saved}; the cart is in {clean_line(cart_in)}."), soft_wrap=True)


def cart_text_of(store: BookStore, customer: str) -> str:
    """The customer's cart as the store holds it now, in a few words."""
    cart = store.cart(customer)
    if not cart.lines:
        return "empty"
    return ", ".join(f"{line.book.title} x{line.quantity}" for line in cart.lines) + f" ({cart.total:.2f})"

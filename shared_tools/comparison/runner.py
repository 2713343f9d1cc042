"""The scenario runner: every variant × every contender of a scenario, each run on a fresh store, each a `RunRecord`.

A single-turn scenario runs each goal once per contender (`run_single`); a multi-turn one asks its goals as
turns of one conversation (`run_session`), changes the cart behind the agent between turns where the
scenario says so, and, for a persisted variant, reopens the conversation afterwards as a restart would.
Every contender gets a fresh store (or a customer of its own in a `--store-db` file), the scenario's
instructions, limits, faults and scripted persona, and the same `AgentOptions`. A contender that raises is a
record to show, not a crash (`attempt`); an unreachable model or an exhausted script ends the whole command.
A contender whose framework has no way to run a variant (`contenders.not_available`: no approval gate, no
sequential tools) gets a record too, `not_available_record`, that says why in words, so no combination of
scenario and contender prints nothing.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.tools import BaseTool

from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.comparison.contenders import (
    CONTENDERS,
    Contender,
    DemoHuman,
    build_contender,
    contenders_for,
    run_gated_graph,
)
from shared_tools.comparison.conversations import HistoryPolicy, open_conversation
from shared_tools.comparison.records import RunKey, RunRecord, error_text, raised_record, result_record
from shared_tools.comparison.render import Progress
from shared_tools.comparison.scenarios import Scenario, Variant
from shared_tools.models import ModelUnavailable, make_model
from shared_tools.models.personas import ScriptExhausted
from shared_tools.results import AgentResult, TraceEvent

# Named after the command, not this module, so `-v` output and log filters stay what they were.
log = logging.getLogger("compare")

NOT_AVAILABLE = "not available"
"""The `stop_reason` of a record whose contender cannot run the variant; `facts["not_available"]` says why."""

CUSTOMER_ID = "c1"
"""The customer who shops in an in-memory store (`compare.py chat` gives every thread a customer of its own)."""


@dataclass
class RunOptions:
    """How to run the scenarios: which model and contenders, and where sessions and the store are kept."""

    model: str = "scripted"
    contenders: tuple[str, ...] = tuple(CONTENDERS)
    session_db: Path | None = None
    """The SQLite file of persisted session scenarios (the JSON files of the hand-written session go beside it);
    None means a temporary file."""
    store_db: Path | None = None
    """Keep the bookstore in this SQLite file; None means a fresh in-memory store for every run."""
    progress: Progress | None = None
    model_seed: int | None = None
    """The model's own seed, passed to `make_model` (the noisy persona's dice, Ollama's sampling seed); an eval
    gives each trial its own. None: the model's default."""


def model_spec_for(spec: str, persona: str) -> str:
    """Plain "scripted" plays `persona` (a scenario's); any other spec (a persona, a real model) is used as is."""
    return f"scripted:{persona}" if spec == "scripted" else spec


@contextmanager
def open_store(options: RunOptions, scenario: Scenario) -> Iterator[tuple[BookStore, str]]:
    """A store for one run and the customer who shops in it, with the scenario's injected description.

    In memory: a fresh store, customer `CUSTOMER_ID`. With `--store-db`: the file, and a customer of its own
    for every run, so runs never share a cart (nor the request ids that make adds idempotent) and the file
    keeps every run's cart to look at afterwards. An injected description is put back when the run ends.
    """
    if options.store_db is None:
        store, customer = BookStore(), CUSTOMER_ID
    else:
        store, customer = BookStore(options.store_db), f"run-{uuid.uuid4().hex[:8]}"
    restore: tuple[int, str] | None = None
    """(book id, its original description) once an injection is in place."""
    try:
        if scenario.injection is not None:
            book_id, text = scenario.injection
            restore = (book_id, store.set_description(book_id, f"{store.get_book(book_id).description} {text}"))
        yield store, customer
    finally:
        if restore is not None:
            store.set_description(*restore)
        store.close()


def scenario_tools(store: BookStore, customer: str, scenario: Scenario, variant: Variant) -> list[BaseTool]:
    """The tools of one run: the customer's, with the variant's faults and search size."""
    return make_tools(store, customer, scenario.faults_for(variant), search_max_results=variant.search_max_results)


def attempt(run: Callable[[], AgentResult], what: str) -> AgentResult | Exception:
    """`run()`, or what it raised: a contender that raises is a result to show.

    An unreachable model or an exhausted script is not a contender's result: it ends the whole command.
    """
    try:
        return run()
    except (ModelUnavailable, ScriptExhausted):
        raise
    except Exception as exc:
        log.info("%s raised: %s", what, error_text(exc))
        return exc


def collector(events: list[TraceEvent], progress: Progress | None) -> Callable[[TraceEvent], None]:
    """An `on_event` that keeps every trace event (a contender that raises returns none) and moves the spinner."""

    def on_event(event: TraceEvent) -> None:
        events.append(event)
        if progress is not None:
            progress.on_event(event)

    return on_event


def run_key(scenario: Scenario, variant: Variant, contender: str, goal: str, turn: int) -> RunKey:
    """The fields that name one run in its record."""
    return {
        "scenario": scenario.name,
        "variant": variant.name,
        "variant_label": variant.label,
        "contender": contender,
        "goal": goal,
        "turn": turn,
    }


def not_available_record(scenario: Scenario, variant: Variant, contender: str, reason: str) -> RunRecord:
    """The record of a combination the contender's framework cannot run: nothing ran, and `facts` says why.

    ``stop_reason`` is "not available" (not a `StopReason`: no run stopped), the counts are zero, and
    ``facts["not_available"]`` is the reason in words, for the tables.
    """
    key = run_key(scenario, variant, contender, scenario.goals[0], 1)
    return RunRecord(
        **key,
        stop_reason=NOT_AVAILABLE,
        error=None,
        answer=None,
        user_message=f"Not run: {reason}.",
        model_calls=0,
        tool_calls=0,
        tokens=0,
        tokens_per_step=[],
        wall_s=0.0,
        trace=[],
        cart=[],
        cart_total="0.00",
        facts={"not_available": reason},
    )


def run_single(scenario: Scenario, variant: Variant, contender: str, goal: str, options: RunOptions) -> RunRecord:
    """One contender, one goal, a fresh store (or a fresh customer in the --store-db file)."""
    with open_store(options, scenario) as (store, customer):
        tools = scenario_tools(store, customer, scenario, variant)
        model = make_model(model_spec_for(options.model, scenario.persona), seed=options.model_seed)
        events: list[TraceEvent] = []
        on_event = collector(events, options.progress)
        human = DemoHuman(store, customer) if variant.approval_gate else None
        agent = build_contender(contender, model, tools, scenario.options_for(variant, on_event), human)
        key = run_key(scenario, variant, contender, goal, 1)
        instructions = scenario.instructions_for(variant)
        what = f"{contender} in {scenario.name}/{variant.name}"
        started = time.perf_counter()
        if human is not None and contender != "handwritten":
            result = attempt(lambda: run_gated_graph(agent, instructions, goal, human), what)
        else:
            result = attempt(lambda: agent.run(instructions, goal), what)
        wall_s = time.perf_counter() - started
        if isinstance(result, Exception):
            return raised_record(key, store, customer, wall_s, events, result)
        record = result_record(key, store, customer, wall_s, result)
        if human is not None:
            record.facts.update(human.facts(contender))
        if scenario.injection is not None:
            record.facts["injected_into"] = store.get_book(scenario.injection[0]).title
        return record


def run_session(scenario: Scenario, variant: Variant, contender: str, options: RunOptions) -> list[RunRecord]:
    """The scenario's goals as turns of one conversation; with `persistent`, reopened afterwards as a restart."""
    with open_store(options, scenario) as (store, customer):
        return _run_session(scenario, variant, contender, options, store, customer)


def _run_session(
    scenario: Scenario, variant: Variant, contender: str, options: RunOptions, store: BookStore, customer: str
) -> list[RunRecord]:
    tools = scenario_tools(store, customer, scenario, variant)
    instructions = scenario.instructions_for(variant)
    events: list[TraceEvent] = []
    agent_options = scenario.options_for(variant, collector(events, options.progress))
    db = None
    if variant.persistent:
        if options.session_db is None:
            raise ValueError(f"{scenario.name}/{variant.name} keeps its session in a file: set RunOptions.session_db")
        db = options.session_db
    thread = f"{scenario.name}-{variant.name}"
    if contender not in ("handwritten", "langgraph"):
        # The frameworks' threads share the SQLite file with our graph's but not its state schema: one each.
        thread = f"{thread}-{contender}"

    def new_agent() -> Contender:
        model = make_model(model_spec_for(options.model, scenario.persona), seed=options.model_seed)
        return build_contender(contender, model, tools, agent_options)

    policy = HistoryPolicy(variant.keep_turns, variant.summarize)
    storage = storage_options(variant.storage)
    conversation = open_conversation(
        contender, new_agent(), instructions, thread, db, resume=False, customer_id=customer, policy=policy,
        storage=storage,
    )
    records: list[RunRecord] = []
    try:
        for turn, goal in enumerate(scenario.goals, start=1):
            changed = None
            if turn > 1 and scenario.change_between_turns is not None:
                removed = store.remove_from_cart(customer, scenario.change_between_turns)
                changed = f"removed {removed} cop(ies) of book {scenario.change_between_turns} from the cart"
            events.clear()
            key = run_key(scenario, variant, contender, goal, turn)
            started = time.perf_counter()
            result = attempt(
                lambda goal=goal: conversation.ask(goal), f"{contender} in {scenario.name}/{variant.name} turn {turn}"
            )
            wall_s = time.perf_counter() - started
            if isinstance(result, Exception):
                records.append(raised_record(key, store, customer, wall_s, events, result))
                break
            record = result_record(key, store, customer, wall_s, result)
            if not scenario.growth or turn == len(scenario.goals):
                # A long conversation is measured once, at its end: reading the thread costs a turn's time again.
                record.facts.update(conversation.facts())
            if changed:
                record.facts["changed_behind_the_agent"] = changed
            records.append(record)
    finally:
        conversation.close()
    if db is not None and records:
        # A restart: a new agent and a new session object read the same file; the conversation must be there.
        reopened = open_conversation(
            contender, new_agent(), instructions, thread, db, resume=True, customer_id=customer, policy=policy,
            storage=storage,
        )
        try:
            after = reopened.facts()
        finally:
            reopened.close()
        records[-1].facts["messages_after_restart"] = after["messages"]
        records[-1].facts["survived_restart"] = after["messages"] == records[-1].facts.get("messages")
    return records


def storage_options(name: str | None) -> dict[str, Any] | None:
    """The `GraphSession.sqlite` keyword arguments of a variant's storage option (`scenarios.STORAGE_OPTIONS`)."""
    if name is None:
        return None
    from shared_tools.comparison.scenarios import STORAGE_OPTIONS

    return dict(STORAGE_OPTIONS[name])


def run_variant(scenario: Scenario, variant: Variant, contender: str, options: RunOptions) -> list[RunRecord]:
    """The records of one contender on one variant, by the kind of scenario it is."""
    if scenario.experiment == "streaming":
        from shared_tools.comparison.experiments import run_streaming

        return run_streaming(scenario, variant, contender, options)
    if scenario.experiment == "time-travel":
        from shared_tools.comparison.experiments import run_time_travel

        return run_time_travel(scenario, variant, contender, options)
    if scenario.multi_turn:
        return run_session(scenario, variant, contender, options)
    return [run_single(scenario, variant, contender, g, options) for g in scenario.goals]


def run_scenario(scenario: Scenario, options: RunOptions, on_record: Callable[[RunRecord], None]) -> None:
    """Every variant x every contender of one scenario; each record is handed over as soon as it exists."""
    for variant in scenario.variants:
        running, why_not = contenders_for(scenario, variant, options.contenders)
        settings = scenario.settings_for(variant).as_dict()  # what the run was given, for the lessons to read
        for contender in (c for c in CONTENDERS if c in running or c in why_not):
            if contender in why_not:
                # Said in words, not skipped: the framework has no way to run this variant.
                unavailable = not_available_record(scenario, variant, contender, why_not[contender])
                unavailable.settings = settings
                on_record(unavailable)
                continue
            label = f"{scenario.name} · {variant.name} · {contender}"
            if options.progress is not None:
                options.progress.start_run(label)
            spin = options.progress.spinning() if options.progress is not None else nullcontext()
            with spin:
                records = run_variant(scenario, variant, contender, options)
            for record in records:
                record.settings = settings
                on_record(record)

"""What every run of a scenario is given: the options, a fresh store and its customer, the tools, the model.

`RunOptions` says which model and contenders and where things are kept; `open_store`, `scenario_tools` and
`model_spec_for` set up one run; `run_key` names it in its record, `collector` keeps its trace events, and
`attempt` turns what a contender raised into a result to show. The runner and the experiments share these.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from langchain_core.tools import BaseTool

from comparison.contenders import CONTENDERS
from comparison.records import RunKey, error_text
from comparison.render import Progress
from comparison.scenarios import Scenario, Variant
from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.models import ModelCallFailed, ModelUnavailable
from shared_tools.models.personas import ScriptExhausted
from shared_tools.results import AgentResult, TraceEvent

# Named after the command, not this module, so `-v` output and log filters stay what they were.
log = logging.getLogger("compare")

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
    model_temperature: float | None = None
    """A real model's sampling temperature, passed to `make_model` (`--temperature`); None: its default, 0."""


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

    A model call that fails mid-run (`ModelCallFailed`: a timeout, a server gone) is that run's failure, shown
    in its record, and the other contenders still run. A model that is unusable from the start
    (`ModelUnavailable`) or an exhausted script is not a contender's result: it ends the whole command.
    """
    try:
        return run()
    except ModelCallFailed as exc:
        log.warning("%s: the model call failed: %s", what, error_text(exc))
        return exc
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

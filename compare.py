"""The front door: run the same bookstore goals through every contender and show, side by side, what each did.

`python compare.py` runs the eleven scenarios of `shared_tools.comparison.scenarios` on the embedded scripted model and
prints, per scenario, each contender's trace in the seed's format, a side-by-side table (stop reason, calls,
tokens per step, wall time, cart, answer) and what to notice in those numbers; at the end a guard matrix built
from the runs and the seed's "who owns what" table. Every contender gets a fresh store and the same
instructions, goal, limits, faults and model. A contender that raises (LangGraph's defaults re-raise a tool's
exception) is a result to show, not a crash. `--json` writes every run's full record, `--report` a
self-contained HTML page (`shared_tools.comparison.report`), `--store-db` keeps the bookstore in a SQLite file
instead of memory, and `python compare.py chat` is a multi-turn conversation.
Output: compare.py decides where it goes (stdout, or stderr when `--json -` takes stdout);
`shared_tools.comparison.render` draws on the console it is given; library code (agents, tools, store) only logs.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console
from rich.text import Text

from shared_tools.bookstore.approval import RiskyWritePolicy
from shared_tools.bookstore.store import BookStore, money
from shared_tools.bookstore.tools import make_tools
from shared_tools.comparison.render import (
    RunRecord,
    guard_matrix,
    make_console,
    notice,
    pick,
    render_guard_matrix,
    render_list,
    render_scenario,
    render_turn,
    render_who_owns_what,
)
from shared_tools.comparison.report import render_report
from shared_tools.comparison.scenarios import (
    APPROVAL_CONTENDERS,
    CONTENDERS,
    INSTRUCTIONS,
    OWNERS,
    SCENARIOS,
    SCENARIOS_BY_NAME,
    WHO_OWNS_WHAT,
    Scenario,
    Variant,
)
from shared_tools.guards import mask_pii
from shared_tools.models import ModelSpecError, ModelUnavailable, make_model
from shared_tools.models.personas import KNOWN_GOALS, ScriptExhausted, parse_goal
from shared_tools.results import AgentLimits, AgentResult, StopReason, TraceEvent

log = logging.getLogger("compare")

CUSTOMER_ID = "c1"
EXIT_OK, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_INTERRUPTED = 0, 2, 3, 130


def _cart_lines(store: BookStore, customer: str) -> tuple[list[dict[str, Any]], str]:
    cart = store.cart(customer)
    lines = [
        {"id": line.book.id, "title": line.book.title, "quantity": line.quantity, "lineTotal": money(line.line_total)}
        for line in cart.lines
    ]
    return lines, money(cart.total)


_URL_PASSWORD = re.compile(r"(://[^/\s:@]+:)[^/\s@]+@")


def error_text(exc: BaseException | None) -> str:
    """What a contender raised, on one line, with passwords in URLs and personal data masked.

    LangGraph's defaults re-raise a tool's exception at the caller, and its message can hold a connection string
    ("postgres://shop:<password>@host"); this is the only form in which compare.py shows, logs or writes it.
    """
    message = _URL_PASSWORD.sub(r"\1***@", " ".join(str(exc).split()))
    return f"{type(exc).__name__}: {mask_pii(message)}"


def _record(
    base: dict[str, Any],
    store: BookStore,
    customer: str,
    events: list[TraceEvent],
    wall_s: float,
    result: AgentResult | None = None,
    exc: BaseException | None = None,
) -> RunRecord:
    """A record from a returned result, or (when the contender raised) from the events seen before it raised."""
    cart, total = _cart_lines(store, customer)
    trace = [asdict(e) for e in (result.trace if result is not None else events)]
    model_events = [e for e in trace if e["name"] == "model"]
    if result is not None:
        return RunRecord(
            **base,
            stop_reason=str(result.stop_reason),
            error=None,
            answer=result.answer,
            user_message=result.user_message(),
            model_calls=result.model_calls,
            tool_calls=result.tool_calls,
            tokens=result.tokens,
            tokens_per_step=result.tokens_per_step,
            wall_s=wall_s,
            trace=trace,
            cart=cart,
            cart_total=total,
        )
    error = error_text(exc)
    return RunRecord(
        **base,
        stop_reason=None,
        error=error,
        answer=None,
        user_message="Something went wrong; the request stopped with an error.",
        model_calls=len(model_events),
        tool_calls=len(trace) - len(model_events),
        tokens=sum(e["tokens"] for e in model_events),
        tokens_per_step=[e["tokens"] for e in model_events],
        wall_s=wall_s,
        trace=trace,
        cart=cart,
        cart_total=total,
    )


# --- contenders --------------------------------------------------------------------------------------------


class Contender(Protocol):
    def run(self, instructions: str, goal: str) -> AgentResult: ...


def build_contender(
    name: str,
    model: Any,
    tools: list[Any],
    limits: AgentLimits,
    variant: Variant,
    on_event: Callable[[TraceEvent], None],
    human: DemoHuman | None = None,
) -> Contender:
    """One of the four contenders, configured identically from the scenario's variant.

    With a `human`, risky writes need approval: the hand-written loop asks `human.approve`; the graph pauses
    instead (run it with `run_gated_graph`).
    """
    options: dict[str, Any] = {
        "detailed_errors": variant.detailed_errors,
        "parallel_tools": variant.parallel_tools,
        "max_tool_result_chars": variant.max_tool_result_chars,
        "on_event": on_event,
    }
    if human is not None and name not in APPROVAL_CONTENDERS:
        raise ValueError(f"{name} has no approval gate in this demo")
    if name == "handwritten":
        from handwritten import AgentLoop

        if human is not None:
            options |= {"needs_approval": human.policy, "approve": human.approve}
        return AgentLoop(model, tools, limits, **options)
    if name in ("langgraph", "langgraph-defaults"):
        from langgraph_version import GraphAgent

        if human is not None:
            options["needs_approval"] = human.policy
        return GraphAgent(model, tools, limits, guards=name == "langgraph", **options)
    if name == "create-agent":
        from langgraph_version import create_agent_contender

        # create_agent has no switch for parallel tools or for truncating results: that gap is part of the lesson.
        return create_agent_contender(model, tools, limits, detailed_errors=variant.detailed_errors, on_event=on_event)
    raise ValueError(f"unknown contender {name!r}")


class DemoHuman:
    """The cautious customer of the approval demo: asked about a risky write, says no, and remembers the question."""

    def __init__(self, store: BookStore) -> None:
        self.policy = RiskyWritePolicy(store)
        self.asked: list[str] = []
        self.pauses = 0
        """How often the graph stopped with AWAITING_APPROVAL before it was resumed."""

    def approve(self, call: Any, reason: str) -> bool:
        self.asked.append(reason)
        return False

    def facts(self, contender: str) -> dict[str, Any]:
        how = (
            "approve callback"
            if contender == "handwritten"
            else "interrupt(): the run stopped 'awaiting approval', then Command(resume=False)"
        )
        return {"approval_asked": list(self.asked), "approval_answer": "no", "asked_through": how,
                "pauses": self.pauses}


def run_gated_graph(agent: Any, instructions: str, goal: str, human: DemoHuman) -> AgentResult:
    """Run the graph in a session; whenever it pauses for approval, the human answers and the run resumes.

    Each resume is a new stretch of the same run, so the record's trace is the stretches put together.
    """
    from langgraph_version import GraphSession

    session = GraphSession(agent, instructions, thread_id=f"approval-{uuid.uuid4().hex[:8]}")
    result = session.ask(goal)
    trace = list(result.trace)
    while result.stop_reason is StopReason.AWAITING_APPROVAL:
        human.pauses += 1
        for request in result.pending or []:
            human.approve(request["tool_call"], request["reason"])
        result = session.resume(False)
        trace += result.trace
    return replace(result, trace=trace)


def model_spec_for(spec: str, persona: str) -> str:
    """Plain "scripted" plays `persona` (a scenario's); any other spec (a persona, a real model) is used as is."""
    return f"scripted:{persona}" if spec == "scripted" else spec


def is_scripted(spec: str) -> bool:
    """The embedded scripted model: instant replies, so no progress spinner and only the goals it knows."""
    return spec.startswith("scripted")


# --- running scenarios -------------------------------------------------------------------------------------


@dataclass
class RunOptions:
    model: str = "scripted"
    contenders: tuple[str, ...] = tuple(CONTENDERS)
    session_db: Path | None = None
    """The SQLite file of persisted session scenarios (the JSON files of the hand-written session go beside it);
    None means a temporary file."""
    store_db: Path | None = None
    """Keep the bookstore in this SQLite file; None means a fresh in-memory store for every run."""
    progress: Progress | None = None


class Progress:
    """The live spinner of a real-model run: which run, which step, and how long it has been waiting."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.start_run("")

    def start_run(self, label: str) -> None:
        self.label, self.phase = label, "step 1: waiting for the model"
        self.started = self.since = time.monotonic()

    def on_event(self, event: TraceEvent) -> None:
        """Called from the agent's `on_event`: a model reply means tools run next, a tool result means the model."""
        if event.is_model:
            self.phase = f"step {event.step}: running tools"
        else:
            self.phase = f"step {event.step + 1}: waiting for the model"
        self.since = time.monotonic()

    def __rich__(self) -> Text:
        # Rendered again on every refresh, so the seconds tick while the model thinks.
        now = time.monotonic()
        return Text(f"{self.label}  {self.phase}  {now - self.since:4.1f}s  (run {now - self.started:.0f}s)")

    @contextmanager
    def spinning(self) -> Iterator[None]:
        with self.console.status(self):
            yield


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


def scenario_tools(store: BookStore, customer: str, scenario: Scenario, variant: Variant) -> list[Any]:
    """The tools of one run: the customer's, with the variant's faults and search size."""
    return make_tools(store, customer, scenario.faults_for(variant), search_max_results=variant.search_max_results)


def attempt(run: Callable[[], AgentResult], what: str) -> AgentResult | Exception:
    """`run()`, or what it raised: a contender that raises is a result to show (see the module docstring).

    An unreachable model or an exhausted script is not a contender's result: it ends the whole command.
    """
    try:
        return run()
    except (ModelUnavailable, ScriptExhausted):
        raise
    except Exception as exc:
        log.info("%s raised: %s", what, error_text(exc))
        return exc


def run_single(scenario: Scenario, variant: Variant, contender: str, goal: str, options: RunOptions) -> RunRecord:
    """One contender, one goal, a fresh store (or a fresh customer in the --store-db file)."""
    with open_store(options, scenario) as (store, customer):
        tools = scenario_tools(store, customer, scenario, variant)
        model = make_model(model_spec_for(options.model, scenario.persona))
        events: list[TraceEvent] = []
        on_event = _collector(events, options.progress)
        human = DemoHuman(store) if variant.approval_gate else None
        agent = build_contender(contender, model, tools, scenario.limits_for(variant), variant, on_event, human)
        base = _base(scenario, variant, contender, goal, 1)
        instructions = scenario.instructions_for(variant)
        what = f"{contender} in {scenario.name}/{variant.name}"
        started = time.perf_counter()
        if human is not None and contender != "handwritten":
            result = attempt(lambda: run_gated_graph(agent, instructions, goal, human), what)
        else:
            result = attempt(lambda: agent.run(instructions, goal), what)
        wall_s = time.perf_counter() - started
        if isinstance(result, Exception):
            return _record(base, store, customer, events, wall_s, exc=result)
        record = _record(base, store, customer, events, wall_s, result=result)
        if human is not None:
            record.facts.update(human.facts(contender))
        if scenario.injection is not None:
            record.facts["injected_into"] = store.get_book(scenario.injection[0]).title
        return record


def _base(scenario: Scenario, variant: Variant, contender: str, goal: str, turn: int) -> dict[str, Any]:
    return {
        "scenario": scenario.name,
        "variant": variant.name,
        "variant_label": variant.label,
        "contender": contender,
        "goal": goal,
        "turn": turn,
    }


def _collector(events: list[TraceEvent], progress: Progress | None) -> Callable[[TraceEvent], None]:
    def on_event(event: TraceEvent) -> None:
        events.append(event)
        if progress is not None:
            progress.on_event(event)

    return on_event


class Conversation(Protocol):
    """A multi-turn session of one contender, as `run_session` and `chat` use it."""

    def ask(self, question: str) -> AgentResult: ...
    def finish_unfinished(self) -> AgentResult | None: ...
    def facts(self) -> dict[str, Any]: ...
    def close(self) -> None: ...


class HandwrittenConversation:
    """`handwritten.Session`, kept in memory or saved to a JSON file after every turn."""

    def __init__(self, loop: Any, instructions: str, path: Path | None = None, *, resume: bool = False) -> None:
        from handwritten import Session

        self.path = path
        if path is not None and resume and path.exists():
            self.session = Session.load(path, loop)
        else:
            self.session = Session(loop, instructions)

    def ask(self, question: str) -> AgentResult:
        result = self.session.ask(question)
        if self.path is not None:
            self.session.save(self.path)
        return result

    def finish_unfinished(self) -> AgentResult | None:
        return None  # the JSON file is written after a turn completes, so it never holds half a turn

    def facts(self) -> dict[str, Any]:
        return {"messages": len(self.session.messages), "kept_in": str(self.path) if self.path else "memory"}

    def close(self) -> None:
        pass


class GraphConversation:
    """`langgraph_version.GraphSession`: a checkpointer thread, in memory or in a SQLite file."""

    def __init__(
        self, agent: Any, instructions: str, thread_id: str, path: Path | None = None, *, resume: bool = False
    ) -> None:
        from langgraph_version import GraphSession

        self.path = path
        if path is None:
            self.session = GraphSession(agent, instructions, thread_id=thread_id)
        else:
            self.session = GraphSession.sqlite(agent, instructions, path=str(path), thread_id=thread_id)
            if not resume:
                self.session.delete()  # a demo re-run with the same --session-db starts its thread from scratch

    def ask(self, question: str) -> AgentResult:
        return self.session.ask(question)

    def finish_unfinished(self) -> AgentResult | None:
        return self.session.continue_unfinished()

    def facts(self) -> dict[str, Any]:
        return {
            "messages": len(self.session.messages),
            "checkpoints": len(self.session.history()),
            "kept_in": str(self.path) if self.path else "memory",
        }

    def close(self) -> None:
        self.session.close()


def open_conversation(
    contender: str, agent: Any, instructions: str, thread_id: str, db: Path | None, *, resume: bool
) -> Conversation:
    """The contender's session; `db` set means persisted (SQLite for the graph, a JSON file beside it otherwise)."""
    if contender == "handwritten":
        json_path = None if db is None else db.with_name(f"{db.stem}.{thread_id}.json")
        return HandwrittenConversation(agent, instructions, json_path, resume=resume)
    return GraphConversation(agent, instructions, thread_id, db, resume=resume)


def run_session(scenario: Scenario, variant: Variant, contender: str, options: RunOptions) -> list[RunRecord]:
    """The scenario's goals as turns of one conversation; with `persistent`, reopened afterwards as a restart."""
    with open_store(options, scenario) as (store, customer):
        return _run_session(scenario, variant, contender, options, store, customer)


def _run_session(
    scenario: Scenario, variant: Variant, contender: str, options: RunOptions, store: BookStore, customer: str
) -> list[RunRecord]:
    tools = scenario_tools(store, customer, scenario, variant)
    instructions = scenario.instructions_for(variant)
    limits = scenario.limits_for(variant)
    events: list[TraceEvent] = []
    on_event = _collector(events, options.progress)
    db = None
    if variant.persistent:
        if options.session_db is None:
            raise ValueError(f"{scenario.name}/{variant.name} keeps its session in a file: set RunOptions.session_db")
        db = options.session_db
    thread = f"{scenario.name}-{variant.name}"

    def new_agent() -> Any:
        model = make_model(model_spec_for(options.model, scenario.persona))
        return build_contender(contender, model, tools, limits, variant, on_event)

    conversation = open_conversation(contender, new_agent(), instructions, thread, db, resume=False)
    records: list[RunRecord] = []
    try:
        for turn, goal in enumerate(scenario.goals, start=1):
            changed = None
            if turn > 1 and scenario.change_between_turns is not None:
                removed = store.remove_from_cart(customer, scenario.change_between_turns)
                changed = f"removed {removed} cop(ies) of book {scenario.change_between_turns} from the cart"
            events.clear()
            base = _base(scenario, variant, contender, goal, turn)
            started = time.perf_counter()
            result = attempt(
                lambda goal=goal: conversation.ask(goal), f"{contender} in {scenario.name}/{variant.name} turn {turn}"
            )
            wall_s = time.perf_counter() - started
            if isinstance(result, Exception):
                records.append(_record(base, store, customer, events, wall_s, exc=result))
                break
            record = _record(base, store, customer, events, wall_s, result=result)
            record.facts.update(conversation.facts())
            if changed:
                record.facts["changed_behind_the_agent"] = changed
            records.append(record)
    finally:
        conversation.close()
    if db is not None and records:
        # A restart: a new agent and a new session object read the same file; the conversation must be there.
        reopened = open_conversation(contender, new_agent(), instructions, thread, db, resume=True)
        try:
            after = reopened.facts()
        finally:
            reopened.close()
        records[-1].facts["messages_after_restart"] = after["messages"]
        records[-1].facts["survived_restart"] = after["messages"] == records[-1].facts.get("messages")
    return records


def run_scenario(scenario: Scenario, options: RunOptions, on_record: Callable[[RunRecord], None]) -> None:
    """Every variant x every contender of one scenario; each record is handed over as soon as it exists."""
    for variant in scenario.variants:
        allowed = variant.contenders or scenario.contenders
        for contender in (c for c in scenario.contenders if c in allowed and c in options.contenders):
            label = f"{scenario.name} · {variant.name} · {contender}"
            if options.progress is not None:
                options.progress.start_run(label)
            spin = options.progress.spinning() if options.progress is not None else nullcontext()
            with spin:
                if scenario.multi_turn:
                    records = run_session(scenario, variant, contender, options)
                else:
                    records = [run_single(scenario, variant, contender, g, options) for g in scenario.goals]
            for record in records:
                on_record(record)


# --- the JSON document and the diagram ---------------------------------------------------------------------


def mermaid_diagram() -> str:
    """Our guarded graph, drawn by LangGraph itself."""
    from langgraph_version import GraphAgent

    agent = GraphAgent(make_model("scripted"), make_tools(BookStore()), AgentLimits())
    return agent.graph.get_graph().draw_mermaid()


def build_document(
    model: str,
    contenders: Sequence[str],
    scenarios: Sequence[Scenario],
    records: list[RunRecord],
    *,
    interrupted: bool = False,
    matrix: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Everything `--json` writes and `--report` renders; `matrix` is the records' guard matrix if already built."""
    return {
        "model": model,
        "interrupted": interrupted,
        "contenders": [{"name": c, "description": CONTENDERS[c]} for c in contenders],
        "scenarios": [
            {
                "name": s.name,
                "description": s.description,
                "lesson": s.lesson,
                "goals": list(s.goals),
                "multi_turn": s.multi_turn,
                "variants": [{"name": v.name, "label": v.label} for v in s.variants],
                "notice": notice(s, pick(records, scenario=s.name)),
            }
            for s in scenarios
        ],
        "runs": [{**asdict(r), "outcome": r.outcome} for r in records],
        "guard_matrix": guard_matrix(records, contenders) if matrix is None else matrix,
        "who_owns_what": {"columns": ["", *OWNERS], "rows": [list(row) for row in WHO_OWNS_WHAT]},
        "mermaid": mermaid_diagram(),
    }


# --- command line ------------------------------------------------------------------------------------------


class UsageError(Exception):
    """A bad command line: one line on stderr, exit code 2."""


def _csv(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    scenario_lines = "\n".join(f"  {s.name:<18} {s.description}" for s in SCENARIOS)
    parser = argparse.ArgumentParser(
        prog="compare.py",
        description="Run the same bookstore goals through a hand-written agent loop and LangGraph, side by side.",
        epilog=f"scenarios (default: all):\n{scenario_lines}\n\n"
        "chat: python compare.py chat [--contender handwritten|langgraph] [--thread NAME] [--session-db PATH] "
        "[--store-db PATH]",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="scenarios to run (see below)")
    parser.add_argument(
        "--model",
        default="scripted",
        help="'scripted' (each scenario's persona), 'scripted:<persona>', or 'ollama:<model>' e.g. ollama:qwen3:4b",
    )
    parser.add_argument(
        "--contenders",
        type=_csv,
        action="extend",
        metavar="NAME[,NAME]",
        help=f"which contenders run (default: all): {', '.join(CONTENDERS)}",
    )
    parser.add_argument("--max-steps", type=int, metavar="N", help="replace every scenario's step limit")
    parser.add_argument("--json", metavar="PATH|-", help="write every run's full record as JSON ('-': stdout)")
    parser.add_argument("--report", metavar="PATH", help="write a self-contained HTML report")
    parser.add_argument(
        "--session-db", type=Path, metavar="PATH", help="SQLite file of the persisted session scenario (default: temp)"
    )
    parser.add_argument(
        "--store-db",
        type=Path,
        metavar="PATH",
        help="keep the bookstore in this SQLite file, each run as its own customer (default: in memory)",
    )
    parser.add_argument("--list", action="store_true", help="describe every scenario and persona, then exit")
    parser.add_argument("--graph", action="store_true", help="print the LangGraph agent's mermaid diagram, then exit")
    parser.add_argument("--no-trace", action="store_true", help="tables and notes only, no per-step traces")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log the agents' steps (-vv: debug)")
    return parser


def _select(args: argparse.Namespace) -> tuple[list[Scenario], tuple[str, ...]]:
    unknown = [name for name in args.scenarios if name not in SCENARIOS_BY_NAME]
    if unknown:
        raise UsageError(f"unknown scenario {unknown[0]!r}; choose from: {', '.join(SCENARIOS_BY_NAME)}")
    contenders = tuple(args.contenders or CONTENDERS)
    bad = [c for c in contenders if c not in CONTENDERS]
    if bad:
        raise UsageError(f"unknown contender {bad[0]!r}; choose from: {', '.join(CONTENDERS)}")
    if args.max_steps is not None and args.max_steps < 1:
        raise UsageError(f"--max-steps must be at least 1, got {args.max_steps}")
    scenarios = [SCENARIOS_BY_NAME[name] for name in dict.fromkeys(args.scenarios)] or list(SCENARIOS)
    if args.max_steps is not None:
        scenarios = [s.with_max_steps(args.max_steps) for s in scenarios]
    return scenarios, contenders


def _check_model(spec: str) -> None:
    """Fail before any run: a bad spec raises ModelSpecError, an unreachable Ollama ModelUnavailable."""
    make_model(spec)


def _configure_logging(verbose: int) -> None:
    # The agents log every tool failure as a warning; in this demo those failures are the point and are shown
    # in the traces, so the default shows only errors.
    level = logging.ERROR if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")


def main(argv: Sequence[str] | None = None) -> int:
    """`python compare.py ...`; returns the exit code (0 ok, 2 usage, 3 model unavailable, 130 interrupted)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["chat"]:
        return chat_main(argv[1:])
    args = build_parser().parse_args(argv)
    _configure_logging(args.verbose)
    console = make_console(sys.stderr if args.json == "-" else sys.stdout)
    if args.list:
        render_list(console)
        return EXIT_OK
    if args.graph:
        # Plain print: the diagram must stay byte-exact (tabs included) so it can be piped into a .mmd file.
        print(mermaid_diagram(), end="")
        return EXIT_OK
    try:
        scenarios, contenders = _select(args)
        _check_model(args.model)
    except (UsageError, ModelSpecError) as exc:
        print(f"compare.py: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ModelUnavailable as exc:
        print(f"compare.py: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE

    with tempfile.TemporaryDirectory(prefix="agent-loop-compare-") as scratch:
        options = RunOptions(
            model=args.model,
            contenders=contenders,
            session_db=args.session_db or Path(scratch) / "sessions.db",
            store_db=args.store_db,
            progress=None if is_scripted(args.model) else Progress(console),
        )
        try:
            records, done, interrupted = run_and_render(console, scenarios, options, trace=not args.no_trace)
        except ModelUnavailable as exc:  # the server went away in the middle of a run
            print(f"compare.py: {exc}", file=sys.stderr)
            return EXIT_UNAVAILABLE
        except ScriptExhausted as exc:  # --model scripted:<persona> on a goal that persona has no script for
            print(f"compare.py: {' '.join(str(exc).split())}", file=sys.stderr)
            return EXIT_USAGE

    rows = guard_matrix(records, contenders)
    if rows:
        render_guard_matrix(console, rows, contenders)
    render_who_owns_what(console)
    if args.json or args.report:
        document = build_document(args.model, contenders, done, records, interrupted=interrupted, matrix=rows)
        if args.json:
            _write_json(document, args.json)
        if args.report:
            Path(args.report).write_text(render_report(document), encoding="utf-8")
            console.print(Text(f"Report written to {args.report}"))
    return EXIT_INTERRUPTED if interrupted else EXIT_OK


def run_and_render(
    console: Console, scenarios: Sequence[Scenario], options: RunOptions, *, trace: bool
) -> tuple[list[RunRecord], list[Scenario], bool]:
    """Run the scenarios one by one, rendering each when it ends; Ctrl-C stops and keeps what ran so far.

    Returns every record, the scenarios that produced at least one, and whether the user interrupted.
    """
    records: list[RunRecord] = []
    done: list[Scenario] = []
    try:
        for number, scenario in enumerate(scenarios, start=1):
            current: list[RunRecord] = []
            try:
                run_scenario(scenario, options, current.append)
            finally:
                # Also on Ctrl-C: the runs of the interrupted scenario that did finish are shown.
                records.extend(current)
                if current:
                    done.append(scenario)
                    render_scenario(console, number, scenario, current, trace=trace)
    except KeyboardInterrupt:
        console.print(Text(f"\nInterrupted after {len(records)} run(s); the tables below cover what ran.", "bold"))
        return records, done, True
    return records, done, False


def _write_json(document: dict[str, Any], target: str) -> None:
    text = json.dumps(document, indent=1, ensure_ascii=False, default=str)
    if target == "-":
        sys.stdout.write(text + "\n")
    else:
        Path(target).write_text(text + "\n", encoding="utf-8")


# --- chat: a multi-turn conversation -----------------------------------------------------------------------


def build_chat_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="compare.py chat",
        description="Talk to the bookstore assistant; the conversation and the cart are kept for the next time.",
    )
    parser.add_argument("--contender", choices=("handwritten", "langgraph"), default="handwritten")
    parser.add_argument("--thread", default="default", help="conversation name (resume it later with the same name)")
    parser.add_argument(
        "--session-db",
        type=Path,
        default=Path("agent-sessions.db"),
        help="SQLite file of the graph's threads; the hand-written session and the store are kept beside it",
    )
    parser.add_argument(
        "--store-db", type=Path, help="SQLite file of the bookstore (default: <session-db stem>.store.db beside it)"
    )
    parser.add_argument("--model", default="scripted", help="'scripted' or 'ollama:<model>'")
    parser.add_argument("-v", "--verbose", action="count", default=0)
    return parser


def chat_main(argv: Sequence[str]) -> int:
    """`python compare.py chat`: ask, see the trace, ask again; `quit` or an empty line ends it."""
    args = build_chat_parser().parse_args(argv)
    _configure_logging(args.verbose)
    console = make_console(sys.stdout)
    spec = model_spec_for(args.model, "shopper")
    scripted = is_scripted(spec)
    try:
        model = make_model(spec)
    except ModelSpecError as exc:
        print(f"compare.py chat: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ModelUnavailable as exc:
        print(f"compare.py chat: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE

    db: Path = args.session_db
    # The cart lives in a store file beside the sessions, so a resumed conversation and the cart agree.
    store = BookStore(args.store_db or db.with_name(f"{db.stem}.store.db"))
    events: list[TraceEvent] = []
    progress = None if scripted else Progress(console)
    agent = build_contender(
        args.contender, model, make_tools(store, CUSTOMER_ID), AgentLimits(), Variant(), _collector(events, progress)
    )
    conversation = open_conversation(args.contender, agent, INSTRUCTIONS, args.thread, db, resume=True)
    facts = conversation.facts()
    console.print(
        Text(args.contender, "bold")
        + Text(
            f" · thread {args.thread} · kept in {facts['kept_in']} · "
            f"{facts['messages']} message(s) so far. Empty line or 'quit' ends."
        )
    )
    if scripted:
        console.print(Text("The scripted model knows these goals: " + " | ".join(KNOWN_GOALS)))

    def show(result: AgentResult) -> None:
        render_turn(console, [asdict(e) for e in result.trace], result.user_message(), result.stop_reason)

    try:
        # A turn a crash or an outage cut short is finished from its last checkpoint before anything new.
        events.clear()
        try:
            finished = conversation.finish_unfinished()
        except ModelUnavailable as exc:
            print(f"compare.py chat: {exc}", file=sys.stderr)
            return EXIT_UNAVAILABLE
        if finished is not None:
            console.print(Text("The last turn was cut short; finishing it from its last checkpoint:"))
            show(finished)
        while True:
            try:
                question = input("you> ").strip()
            except EOFError:
                break
            if question.lower() in ("", "quit", "exit"):
                break
            if scripted and parse_goal(question) is None:
                # Refused before asking, so an unknown goal never lands in the stored conversation.
                console.print(Text("The scripted model has no script for that. It knows: " + " | ".join(KNOWN_GOALS)))
                continue
            events.clear()
            spin = progress.spinning() if progress is not None else nullcontext()
            try:
                with spin:
                    result = conversation.ask(question)
            except ScriptExhausted as exc:
                console.print(Text(f"(scripted model) {exc}", style="yellow"))
                continue
            except ModelUnavailable as exc:  # the server went away mid-conversation: one line, not a traceback
                print(f"compare.py chat: {exc}", file=sys.stderr)
                return EXIT_UNAVAILABLE
            show(result)
    except KeyboardInterrupt:
        console.print(Text(f"\nInterrupted; the conversation is kept in {facts['kept_in']}."))
        return EXIT_INTERRUPTED
    finally:
        conversation.close()
        store.close()
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())

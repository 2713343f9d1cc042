"""The front door: run the same bookstore goals through every contender and show, side by side, what each did.

`python compare.py` runs the eleven scenarios of `shared_tools.comparison.scenarios` on the embedded scripted model and
prints, per scenario, each contender's trace in the seed's format, a side-by-side table (stop reason, calls,
tokens per step, wall time, cart, answer) and what to notice in those numbers; at the end a guard matrix built
from the runs and the seed's "who owns what" table. `--json` writes every run's full record, `--report` a
self-contained HTML page, `--store-db` keeps the bookstore in a SQLite file instead of memory, and
`python compare.py chat` is a multi-turn conversation. This file is only the command line: argument parsing,
exit codes, and where output goes (stdout, or stderr when `--json -` takes stdout); the running, recording
and rendering live in the `shared_tools.comparison` package, and library code (agents, tools, store) only logs.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.text import Text

from shared_tools.bookstore.store import BookStore
from shared_tools.bookstore.tools import make_tools
from shared_tools.comparison.closing import guard_matrix
from shared_tools.comparison.contenders import CONTENDERS, build_contender
from shared_tools.comparison.conversations import open_conversation
from shared_tools.comparison.document import build_document, mermaid_diagram, write_document
from shared_tools.comparison.records import RunRecord
from shared_tools.comparison.render import (
    Progress,
    make_console,
    render_guard_matrix,
    render_list,
    render_scenario,
    render_turn,
    render_who_owns_what,
)
from shared_tools.comparison.report import render_report
from shared_tools.comparison.runner import CUSTOMER_ID, RunOptions, collector, model_spec_for, run_scenario
from shared_tools.comparison.scenarios import INSTRUCTIONS, SCENARIOS, SCENARIOS_BY_NAME, Scenario
from shared_tools.models import ModelSpecError, ModelUnavailable, make_model
from shared_tools.models.personas import KNOWN_GOALS, ScriptExhausted, parse_goal
from shared_tools.results import AgentOptions, AgentResult, TraceEvent

EXIT_OK, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_INTERRUPTED = 0, 2, 3, 130


# --- command line ------------------------------------------------------------------------------------------


def is_scripted(spec: str) -> bool:
    """The embedded scripted model: instant replies, so no progress spinner and only the goals it knows."""
    return spec.startswith("scripted")


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
            write_document(document, args.json)
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
    options = AgentOptions(on_event=collector(events, progress))
    agent = build_contender(args.contender, model, make_tools(store, CUSTOMER_ID), options)
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

"""The front door: argument parsing, the checks made before any work starts, exit codes, and dispatch.

`python compare.py` runs the scenarios of `comparison.scenarios` on every contender and prints an overview (a named
scenario or `--full`: traces, tables and notes; `comparison.command`); `chat`, `eval` and `serve` are the other
commands. Every failure that is not a bug ends with one line on stderr and one of the exit codes below, never a
traceback: a bad command line, an unusable model or file (checked before the first run), and Ctrl-C at any moment."""

from __future__ import annotations

import atexit
import gc
import os
import sys

EXIT_OK = 0
"""Done; also when the reader of stdout closed the pipe early (`compare.py | head -1`): the rest of the output is
not wanted, so it goes to /dev/null and nothing is said (see `main`)."""
EXIT_USAGE = 2
"""A bad command line or setting: unknown scenario or contender, bad model spec, bad --thread, bad OLLAMA_HOST."""
EXIT_UNAVAILABLE = 3
"""The model cannot be used: its server not running or not serving it, the `local` extra not installed, an engine
that crashes on this CPU, or the server went away mid-run."""
EXIT_FILE = 4
"""A file cannot be used as asked: an output path, a store or session database, a saved conversation."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (128 + SIGINT, what a shell reports for a process a Ctrl-C ended)."""

MAX_TURNS = 10_000
"""The most turns --turns accepts: a typo of a few digits more must not start a run of hours."""
# At exit, move every object into the collector's permanent generation: the final collections of interpreter
# shutdown would otherwise walk the whole heap the libraries built (LangChain, LangGraph, pydantic, rich), about
# half a second after the last line was printed. Registered first, so it runs after every other exit handler;
# what must be closed or written is closed and written explicitly before then (stores, sessions, output files).
atexit.register(gc.freeze)

INSTALLED_NAME = "agent-loop-compare"
"""The command `pip install` puts on the PATH (pyproject.toml's [project.scripts]); it calls `main`."""


def program_name(argv0: str | None = None) -> str:
    """``agent-loop-compare`` when started as the installed command (``sys.argv[0]`` is ``.../bin/agent-loop-compare``,
    ``agent-loop-compare.exe`` or ``-script.py`` on Windows), ``compare.py`` otherwise: the name help and errors use."""
    name = (sys.argv[0] if argv0 is None else argv0).replace("\\", "/").rsplit("/", 1)[-1].lower()
    return INSTALLED_NAME if name.startswith(INSTALLED_NAME) else "compare.py"


try:
    import argparse
    import tempfile
    from collections.abc import Sequence
    from pathlib import Path

    from rich.console import Console

    from comparison.chat import ThreadBusy, chat_customer
    from comparison.command import chat, check_chat, check_model, default_session_db, finish, run_and_render
    from comparison.command_line import (
        UsageError,
        UsageParser,
        add_temperature_argument,
        build_chat_parser,
        check_chat_window,
        configure_logging,
        parse_contenders,
        split_command,
        version_line,
    )
    from comparison.contenders import CONTENDERS
    from comparison.conversations import ConversationNotSaved, HistoryPolicy
    from comparison.document import mermaid_diagram
    from comparison.files import UnusableFile, check_outputs
    from comparison.records import RunRecord
    from comparison.render import Progress, make_console, paged, pages, render_list
    from comparison.run_setup import RunOptions, model_spec_for
    from comparison.runner import parallel_workers
    from comparison.sanitize import clean_line
    from comparison.scenarios import (
        SCENARIOS,
        SCENARIOS_BY_NAME,
        Scenario,
        contenders_running,
        nothing_to_run,
    )
    from comparison.scenarios.s13_long_session import LONG_SESSION_TURNS
    from shared_tools.bookstore.store import BookStore, StoreError
    from shared_tools.models import ModelSpecError, ModelUnavailable, apply_base_url
    from shared_tools.models.factory import BASE_URL_ENV, BASE_URL_HELP, DEFAULT_TEMPERATURE
    from shared_tools.models.personas import ScriptExhausted
    from shared_tools.telemetry_setup import EXPORT_KINDS, OTEL_HELP, TracingUnavailable, setup_tracing
except KeyboardInterrupt:
    # Ctrl-C while the libraries load (about a second): nothing has started, so there is nothing to show or keep.
    print(f"{program_name()}: interrupted while starting; nothing was run", file=sys.stderr)
    raise SystemExit(EXIT_INTERRUPTED) from None


# --- command line ------------------------------------------------------------------------------------------


def is_scripted(spec: str) -> bool:
    """The embedded scripted model: instant replies, so no progress spinner and only the goals it knows."""
    return spec.startswith("scripted")


def exit_code_for(exc: BaseException) -> int:
    """The documented exit code of a failure that is not a bug (see the constants at the top)."""
    if isinstance(exc, ModelUnavailable):
        return EXIT_UNAVAILABLE
    if isinstance(exc, UnusableFile | StoreError | ConversationNotSaved | ThreadBusy):
        return EXIT_FILE
    return EXIT_USAGE


def say(prog: str, text: str) -> None:
    """One line on stderr, made safe for the terminal: messages quote paths, hosts and what the user typed."""
    print(f"{prog}: {clean_line(' '.join(text.split()))}", file=sys.stderr)


def fail(prog: str, exc: BaseException) -> int:
    """Say what went wrong in one line on stderr and return its exit code."""
    say(prog, str(exc))
    return exit_code_for(exc)


def _epilog(prog: str) -> str:
    """The help's closing text: the scenarios, the other commands, and the exit codes."""
    scenario_lines = "\n".join(f"  {s.name:<18} {s.description}" for s in SCENARIOS)
    return (
        f"scenarios (default: all):\n{scenario_lines}\n\n"
        f"chat: {prog} chat [--contender NAME] [--thread NAME] [--session-db PATH] "
        "[--store-db PATH] [--keep-turns N|none] [--summarize]\n"
        f"eval: {prog} eval [SCENARIO ...] [--runs N] [--seed S] [--model SPEC] [--json PATH|-] [--report PATH]\n"
        f"serve: {prog} serve [--host HOST] [--port PORT] [--data DIR] [--model SPEC]: the live side-by-side page\n"
        "on any command, before or after it: -v (-vv), --otel console|otlp (spans); --version\n"
        "every command takes --model local (the strongest bundled model installed: local:qwen2.5-1.5b with the "
        "'local-qwen' extra, else local:smollm2-135m; 'local' extra) and --model openai:<model> "
        "--base-url URL (any OpenAI-compatible server)\n\n"
        "exit codes: 0 ok, 2 bad usage, 3 model unavailable, 4 a file cannot be used, 130 interrupted"
    )


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """What runs: the scenarios, the model, the contenders and the limits that replace the scenarios' own."""
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help="scenarios to run (see below)")
    parser.add_argument(
        "--model",
        default="scripted",
        help="'scripted' (each scenario's persona), 'scripted:<persona>', 'local' (the strongest bundled model "
        "installed), 'local:qwen2.5-1.5b', 'local:smollm2-135m', 'openai:<model>' (with --base-url) or "
        "'ollama:<model>' e.g. ollama:qwen3:4b",
    )
    parser.add_argument("--base-url", metavar="URL", help=BASE_URL_HELP)
    add_temperature_argument(parser, default=DEFAULT_TEMPERATURE, what="so a run repeats itself")
    parser.add_argument(
        "--contenders",
        action="append",
        metavar="NAME[,NAME]",
        help=f"which contenders run (default: all): {', '.join(CONTENDERS)}",
    )
    parser.add_argument("--max-steps", type=int, metavar="N", help="replace every scenario's step limit")
    parser.add_argument(
        "--turns", type=int, metavar="N", help=f"turns of the long-session scenario (default {LONG_SESSION_TURNS})"
    )


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the runs go (files, databases, spans) and what is shown of them."""
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
    parser.add_argument(
        "--full",
        action="store_true",
        help="every scenario's traces, tables and notes, the guard matrix's details and who owns what (the default "
        "is an overview; naming a scenario shows it in full)",
    )
    parser.add_argument(
        "--no-trace", action="store_true", help="each scenario's tables and notes in full, without per-step traces"
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log the agents' steps (-vv: debug)")
    parser.add_argument("--otel", choices=EXPORT_KINDS, help=OTEL_HELP)


def build_parser(prog: str = "compare.py") -> argparse.ArgumentParser:
    parser = UsageParser(
        prog=prog,
        description=f"Run the same bookstore goals through {len(CONTENDERS)} agent loops, side by side:\n"
        f"  {', '.join(CONTENDERS)}.",
        epilog=_epilog(prog),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_run_arguments(parser)
    _add_output_arguments(parser)
    parser.set_defaults(prog=prog)
    return parser


def _select(args: argparse.Namespace) -> tuple[list[Scenario], tuple[str, ...]]:
    unknown = [name for name in args.scenarios if name not in SCENARIOS_BY_NAME]
    if unknown:
        if unknown[0] in ("chat", "eval", "serve"):
            raise UsageError(f"'{unknown[0]}' must come first: {args.prog} {unknown[0]} [options]")
        raise UsageError(f"unknown scenario {unknown[0]!r}; choose from: {', '.join(SCENARIOS_BY_NAME)}")
    contenders = parse_contenders(args.contenders)  # a `UsageError` for a bad choice
    if args.max_steps is not None and args.max_steps < 1:
        raise UsageError(f"--max-steps must be at least 1, got {args.max_steps}")
    if args.turns is not None and not 2 <= args.turns <= MAX_TURNS:
        raise UsageError(f"--turns must be 2 to {MAX_TURNS:,}, got {args.turns}")
    scenarios = [SCENARIOS_BY_NAME[name] for name in dict.fromkeys(args.scenarios)] or list(SCENARIOS)
    if not any(contenders_running(s, contenders) for s in scenarios):
        raise UsageError(nothing_to_run(scenarios, contenders))
    if args.max_steps is not None:
        scenarios = [s.with_max_steps(args.max_steps) for s in scenarios]
    if args.turns is not None:
        scenarios = [s.with_turns(args.turns) for s in scenarios]
    return scenarios, contenders


def main(argv: Sequence[str] | None = None, *, prog: str | None = None) -> int:
    """`python compare.py ...` (and the installed `agent-loop-compare`); returns the exit code (0 ok, 2 usage,
    3 model unavailable, 4 unusable file, 130 interrupted). `prog` is the name used in help and errors
    (default: `program_name()`)."""
    prog = program_name() if prog is None else prog
    try:
        command, argv, version = split_command(sys.argv[1:] if argv is None else argv, prog)
    except UsageError as exc:
        return fail(prog, exc)
    if version:
        print(version_line(prog))
        return EXIT_OK
    # --base-url is set as OPENAI_BASE_URL for the command (worker processes inherit it), and only for it.
    saved_base_url = os.environ.get(BASE_URL_ENV)
    try:
        if command == "chat":
            code = chat_main(argv, prog=f"{prog} chat")
        elif command == "serve":
            from webdemo.cli import serve_main  # the web stack is imported only when the page is served

            code = serve_main(argv, prog=f"{prog} serve")
        elif command == "eval":
            from comparison.eval.trials import eval_main

            code = eval_main(argv, prog=f"{prog} eval")
        else:
            code = compare_main(argv, prog=prog)
        sys.stdout.flush()  # now, so that a reader who closed the pipe is met here, not at interpreter exit
        return code
    except BrokenPipeError:
        # The reader closed the pipe (`| head`): what it did not read is not wanted. The rest goes to /dev/null,
        # so the interpreter's last flush cannot fail too (the standard way, Python's `signal` documentation).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_OK
    except KeyboardInterrupt:
        # Ctrl-C anywhere the stages below do not handle it themselves: parsing, the checks, opening the files.
        say(f"{prog} {command}" if command else prog, "interrupted")
        return EXIT_INTERRUPTED
    finally:
        if saved_base_url is None:
            os.environ.pop(BASE_URL_ENV, None)
        else:
            os.environ[BASE_URL_ENV] = saved_base_url


def _check_before_running(args: argparse.Namespace) -> None:
    """The output files, the model, and the tracing asked for: each refused here, before the first run."""
    check_outputs(args.json, args.report, args.store_db, args.session_db)
    apply_base_url(args.model, args.base_url)
    check_model(args.model)
    setup_tracing(args.otel)


def _run(
    console: Console,
    args: argparse.Namespace,
    scenarios: list[Scenario],
    contenders: tuple[str, ...],
    *,
    overview: bool,
    spinner: Console,
) -> tuple[list[RunRecord], list[Scenario], bool] | int:
    """Every selected scenario on every selected contender, rendered as they come in unless `overview`: the
    records, the scenarios done and whether the user interrupted; or the exit code of what ended the runs. A real
    model's progress spins on `spinner` (stderr's console while stdout's output waits for the pager)."""
    prog = args.prog
    with tempfile.TemporaryDirectory(prefix="agent-loop-compare-") as scratch:
        options = RunOptions(
            model=args.model,
            contenders=contenders,
            session_db=args.session_db or Path(scratch) / "sessions.db",
            store_db=args.store_db,
            progress=None if is_scripted(args.model) else Progress(spinner),
            model_temperature=args.temperature,
        )
        # Scripted runs on in-memory stores share nothing, so they run side by side; a real model's server, a
        # store file other processes may use, and -v's log lines are better one run at a time.
        parallel = is_scripted(args.model) and args.store_db is None and not args.verbose
        try:
            return run_and_render(
                console,
                scenarios,
                options,
                trace=not args.no_trace,
                workers=parallel_workers() if parallel else 1,
                detailed=not overview,
            )
        except (ModelUnavailable, StoreError) as exc:  # the server went away, or the store file was swapped
            return fail(prog, exc)
        except ScriptExhausted as exc:  # --model scripted:<persona> on a goal that persona has no script for
            return fail(prog, UsageError(exc))


def _finished(
    console: Console,
    args: argparse.Namespace,
    contenders: tuple[str, ...],
    ran: tuple[list[RunRecord], list[Scenario], bool],
    overview: Sequence[Scenario] | None,
) -> int | None:
    """The closing tables and the files asked for (`comparison.command.finish`); the exit code if that failed."""
    prog = args.prog
    records, done, interrupted = ran
    try:
        finish(
            console,
            args.model,
            contenders,
            records,
            done,
            interrupted=interrupted,
            json=args.json,
            report=args.report,
            overview=overview,
            owners=args.full,
            prog=prog,
        )
    except KeyboardInterrupt:
        # The runs are over and shown; what was being written is written whole or not at all (files.write_output).
        say(prog, "interrupted while the final tables and files were written; no file is half-written")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        raise  # the reader of stdout went away: `main` ends quietly
    except OSError as exc:  # the disk filled up, or the folder went away, during the run
        return fail(prog, UnusableFile(f"could not write the results: {exc}"))
    return None


def compare_main(argv: Sequence[str], *, prog: str = "compare.py") -> int:
    """Every selected scenario on every selected contender, then the closing tables and the files asked for."""
    try:
        # Intermixed: `compare.py bookstore --no-trace orders` names two scenarios, as a user would expect.
        args = build_parser(prog).parse_intermixed_args(argv)
    except UsageError as exc:
        return fail(prog, exc)
    configure_logging(args.verbose)
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
        _check_before_running(args)
    except (UsageError, ModelSpecError, ModelUnavailable, UnusableFile, TracingUnavailable) as exc:
        return fail(prog, exc)

    # No scenario named, no --full, no --no-trace: the overview (comparison.overview) instead of every trace.
    overview = not (args.scenarios or args.full or args.no_trace)
    spinner = make_console(sys.stderr) if pages(console, args.full) else console
    with paged(console, args.full):  # --full on a terminal: thousands of lines, through a pager
        ran = _run(console, args, scenarios, contenders, overview=overview, spinner=spinner)
        if isinstance(ran, int):
            return ran
        failed = _finished(console, args, contenders, ran, scenarios if overview else None)
    if failed is not None:
        return failed
    records, _, interrupted = ran
    if interrupted:
        return EXIT_INTERRUPTED
    ran_records = [r for r in records if "not_available" not in r.facts]
    if ran_records and all(r.model_failed for r in ran_records):  # shown and written, but nothing was compared
        say(prog, f"every model call failed, so nothing was compared; the first: {ran_records[0].error}")
        return EXIT_UNAVAILABLE
    return EXIT_OK


# --- chat: a multi-turn conversation -----------------------------------------------------------------------


def chat_main(argv: Sequence[str], *, prog: str = "compare.py chat") -> int:
    """`python compare.py chat`: ask, see the trace, ask again; `quit` or an empty line ends it."""
    try:
        args = build_chat_parser(prog).parse_args(argv)
        check_chat_window(args)
    except UsageError as exc:
        return fail(prog, exc)
    configure_logging(args.verbose)
    console = make_console(sys.stdout)
    spec = model_spec_for(args.model, "shopper")
    scripted = is_scripted(spec)
    customer = chat_customer(args.contender, args.thread)
    try:
        if args.session_db is None:
            args.session_db = default_session_db()
        store_db = check_chat(args.contender, args.thread, args.session_db, args.store_db, customer)
        apply_base_url(spec, args.base_url)
        model = check_model(spec)
        setup_tracing(args.otel)
    except (UsageError, ModelSpecError, ModelUnavailable, UnusableFile, TracingUnavailable) as exc:
        return fail(args.prog, exc)

    # The cart lives in a store file beside the sessions, so a resumed conversation and the cart agree.
    try:
        store = BookStore(store_db)
    except StoreError as exc:  # replaced since the check above
        return fail(args.prog, exc)
    policy = HistoryPolicy(args.keep_turns, args.summarize)
    try:
        interrupted = chat(
            console, args.contender, args.thread, args.session_db, policy, model, store, customer, scripted=scripted
        )
    except (UnusableFile, ConversationNotSaved, ThreadBusy, ModelUnavailable) as exc:
        return fail(args.prog, exc)
    finally:
        store.close()
    return EXIT_INTERRUPTED if interrupted else EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())

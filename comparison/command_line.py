"""What every command line of the project shares: `UsageError`, the argparse parser that raises it, the global
options (`-v`, `--otel`, `--version`: before or after the command), the options more than one command takes
(`add_temperature_argument`), the logging set-up each command makes once its arguments are checked, and `chat`'s
options."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import NoReturn

from comparison.sanitize import SafeLogFormatter
from shared_tools.bookstore.store import is_postgres_url
from shared_tools.models.factory import BASE_URL_HELP, MAX_TEMPERATURE
from shared_tools.telemetry_setup import EXPORT_KINDS, OTEL_HELP

COMMANDS = ("chat", "eval", "serve")
"""The subcommands; anything else is the comparison itself (`compare.py [SCENARIO ...] [options]`)."""
DISTRIBUTION = "agent-loop-compare"
CHAT_KEEP_TURNS = 20
"""chat's default history window: the model is sent the last 20 turns, so a long chat never meets the token
budget's cliff (`--keep-turns 0` or `none` sends the whole history)."""


class UsageError(Exception):
    """A bad command line or setting: one line on stderr, exit code 2."""


class UsageParser(argparse.ArgumentParser):
    """argparse, but a bad command line is a `UsageError` (one line on stderr, exit 2, like every other usage
    mistake) instead of the usage block and a `SystemExit` that would escape `main`."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def temperature(text: str) -> float:
    """`--temperature`'s value: a number from 0 to `MAX_TEMPERATURE` (argparse turns the ValueError into a usage
    error naming the option)."""
    value = float(text)
    if not 0 <= value <= MAX_TEMPERATURE:  # NaN fails both comparisons
        raise ValueError(text)
    return value


temperature.__name__ = f"temperature (0 to {MAX_TEMPERATURE:g})"  # how argparse names the type in its error


def add_temperature_argument(parser: argparse.ArgumentParser, *, default: float, what: str) -> None:
    """`--temperature T`: a real model's sampling temperature, the same option on `eval` and the run commands."""
    parser.add_argument(
        "--temperature",
        type=temperature,
        default=default,
        metavar="T",
        help=f"a real model's sampling temperature, 0 to {MAX_TEMPERATURE:g} (default: {default:g}, {what}); the "
        "scripted model takes none: its slips are seeded dice",
    )


def configure_logging(verbose: int, *, quiet_level: int = logging.ERROR) -> None:
    """Log to stderr through `SafeLogFormatter`: `quiet_level` and above by default, -v info, -vv debug.

    The default is errors only because the agents log every tool failure as a warning, and in this demo those
    failures are the point, shown in the traces. basicConfig leaves logging someone already set up (a test's, an
    embedding program's) alone."""
    level = quiet_level if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(SafeLogFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    if verbose == 0:
        # MAF logs every failed tool call at ERROR ("Function check_stock failed"): here that is a shown result.
        logging.getLogger("agent_framework").setLevel(logging.CRITICAL)


def _global_parser() -> UsageParser:
    """The options every command takes, wherever they stand: `compare.py -v eval` as `compare.py eval -v`."""
    parser = UsageParser(add_help=False, allow_abbrev=False)
    parser.add_argument("-v", "--verbose", action="count", default=0)
    parser.add_argument("--otel")  # its value is checked by the command's parser, which names the command
    parser.add_argument("--version", action="store_true")
    return parser


def split_command(argv: Sequence[str], prog: str) -> tuple[str | None, list[str], bool]:
    """(the subcommand or None, its arguments with the global options given anywhere, whether --version was
    asked for). The global options are parsed here and handed to the command's own parser, which documents them;
    a bad one is a `UsageError`."""
    parser = _global_parser()
    parser.prog = prog
    found, rest = parser.parse_known_args(list(argv))
    command = rest[0] if rest[:1] and rest[0] in COMMANDS else None
    own = rest[1:] if command else rest
    passed = ["-v"] * found.verbose + ([f"--otel={found.otel}"] if found.otel is not None else [])
    return command, [*own, *passed], found.version


def parse_contenders(values: Sequence[str] | None) -> tuple[str, ...]:
    """The `--contenders` options as contender names (`comparison.contenders.parse_contenders`); `UsageError`."""
    from comparison.contenders import parse_contenders as parse

    try:
        return parse(values)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def version_line(prog: str) -> str:
    """`--version`: the installed distribution's version (`importlib.metadata`), or why there is none."""
    try:
        return f"{prog} {metadata.version(DISTRIBUTION)}"
    except metadata.PackageNotFoundError:
        return f"{prog}: version unknown ({DISTRIBUTION} is not installed: pip install -e .)"


def build_chat_parser(prog: str = "compare.py chat") -> argparse.ArgumentParser:
    parser = UsageParser(
        prog=prog,
        description="Talk to the bookstore assistant; the conversation and the cart are kept for the next time.",
        epilog="exit codes: 0 ok, 2 bad usage, 3 model unavailable, 4 a file cannot be used, 130 interrupted",
    )
    talking = chat_contenders()
    parser.add_argument(
        "--contender",
        type=chat_contender,
        choices=talking,
        default=talking[0] if talking else None,
        metavar="NAME",
        help=f"whose conversation (default: {talking[0] if talking else 'none'}): {', '.join(talking)}",
    )
    parser.add_argument(
        "--thread",
        default="default",
        help="conversation name (resume it later with the same name); letters, digits, '.', '_', '-'",
    )
    parser.add_argument(
        "--session-db",
        type=path_or_url,
        metavar="PATH|URL",
        help="SQLite file of the graph's threads (the hand-written session and the store are kept beside it), "
        "or a postgresql:// URL that keeps all three (default: agent-sessions.db in the per-user data folder, "
        "$XDG_DATA_HOME/agent-loop-compare/chat)",
    )
    parser.add_argument(
        "--store-db",
        type=path_or_url,
        metavar="PATH|URL",
        help="the bookstore: a SQLite file or a postgresql:// URL (default: <session-db stem>.store.db beside it, "
        "or the --session-db database)",
    )
    parser.add_argument(
        "--model",
        default="scripted",
        help="'scripted', 'local', 'openai:<model>' (with --base-url) or 'ollama:<model>'",
    )
    parser.add_argument("--base-url", metavar="URL", help=BASE_URL_HELP)
    parser.add_argument(
        "--keep-turns",
        type=keep_turns_value,
        default=argparse.SUPPRESS,  # not given: `check_chat_window` picks the contender's default
        metavar="N",
        help=f"send the model only the last N turns (default {CHAT_KEEP_TURNS} where the contender has a history "
        "window, else the whole history); 0 or 'none': the whole history",
    )
    parser.add_argument(
        "--summarize", action="store_true", help="fold the turns that fall out of --keep-turns into one summary"
    )
    parser.add_argument("-v", "--verbose", action="count", default=0)
    parser.add_argument("--otel", choices=EXPORT_KINDS, help=OTEL_HELP)
    parser.set_defaults(prog=prog)
    return parser


def chat_contenders() -> tuple[str, ...]:
    """The contenders chat can talk to: each one whose spec declares a conversation, in table order."""
    from comparison.contenders import with_capability
    from shared_tools.contender import Capability

    return with_capability(Capability.CONVERSATIONS)


def chat_contender(text: str) -> str:
    """`--contender`'s value: a contender with a conversation; one without is refused in its own words."""
    from comparison.contenders import SPECS
    from shared_tools.contender import Capability

    spec = SPECS.get(text)
    if spec is not None and not spec.has(Capability.CONVERSATIONS):
        raise argparse.ArgumentTypeError(
            f"{text} has no conversation to chat in: {spec.why_not(Capability.CONVERSATIONS)}"
        )
    return text  # an unknown name is refused by `choices`, which lists the ones there are


def check_chat_window(args: argparse.Namespace) -> None:
    """Set `args.keep_turns` when it was not given (`CHAT_KEEP_TURNS` for a contender with a history window, else
    the whole history); a window or summary asked of a contender without one is a `UsageError` in its words."""
    from comparison.contenders import spec_of
    from shared_tools.contender import Capability

    spec = spec_of(args.contender)
    given = hasattr(args, "keep_turns")
    if not given:
        args.keep_turns = CHAT_KEEP_TURNS if spec.has(Capability.HISTORY_WINDOW) else None
    if args.summarize and args.keep_turns is None:
        raise UsageError("--summarize folds the turns that fall out of --keep-turns: give --keep-turns N too")
    for option, capability, asked in (
        ("--keep-turns", Capability.HISTORY_WINDOW, given and args.keep_turns is not None),
        ("--summarize", Capability.SUMMARY, args.summarize),
    ):
        if asked and not spec.has(capability):
            raise UsageError(f"{option}: {spec.name}: {spec.why_not(capability)}")


def path_or_url(text: str) -> Path | str:
    """A SQLite file's path, or a Postgres URL kept as text (a `Path` would fold its '//')."""
    return text if is_postgres_url(text) else Path(text)


def keep_turns_value(text: str) -> int | None:
    """`--keep-turns`: a number of turns, or 0 / ``none`` for the whole history (None)."""
    if text.strip().lower() in ("0", "none"):
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of turns: {text!r} (0 or 'none' for all)") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value

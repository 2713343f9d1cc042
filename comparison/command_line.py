"""What every command line of the project shares: `UsageError`, the argparse parser that raises it, the options more
than one command takes (`add_temperature_argument`), and the logging set-up each command makes once its arguments
are checked."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import NoReturn

from comparison.sanitize import SafeLogFormatter
from shared_tools.models.factory import MAX_TEMPERATURE


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

"""What every command line of the project shares: `UsageError`, the argparse parser that raises it, and the logging
set-up each command makes once its arguments are checked."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import NoReturn

from comparison.sanitize import SafeLogFormatter


class UsageError(Exception):
    """A bad command line or setting: one line on stderr, exit code 2."""


class UsageParser(argparse.ArgumentParser):
    """argparse, but a bad command line is a `UsageError` (one line on stderr, exit 2, like every other usage
    mistake) instead of the usage block and a `SystemExit` that would escape `main`."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


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

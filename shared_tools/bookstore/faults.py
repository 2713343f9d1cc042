"""Opt-in faults for the bookstore tools, each one the setup of an experiment from the article.

`Faults` says what should go wrong (all off by default); `FaultInjector` is the live state of one tool set
(made by `make_tools`), so the "first N calls time out" counter starts at zero for every agent run that builds
its own tools. The tools call `FaultInjector.before_call` (sync) or `abefore_call` (async) before touching the
store, so an injected failure never leaves a half-done change behind.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

FAKE_SECRET = "hunter2"
"""The password inside the `failing_tool` error text; tests assert it never reaches the model by default."""

FAILURE_MESSAGE = f"orders db refused connection: postgres://shop:{FAKE_SECRET}@10.0.0.12/orders"
TIMEOUT_MESSAGE = "warehouse service timed out"


@dataclass(frozen=True)
class Faults:
    """What should go wrong. The defaults inject nothing."""

    check_stock_timeouts: int = 0
    """check_stock raises builtin ``TimeoutError("warehouse service timed out")`` on its first N calls, then works.
    This is the article's timeout experiment: does the loop hand the error to the model, and does the model retry?"""

    latency_s: float = 0.0
    """Every tool waits this long first (``time.sleep`` / ``asyncio.sleep``), for the time-budget stop condition,
    parallel async tool calls and cancellation while a tool is running."""

    failing_tool: str | None = None
    """This tool always raises a `RuntimeError` whose message holds a connection string with `FAKE_SECRET`,
    for the article's warning about handing ``ex.Message`` to the model: by default the model should see only
    a generic failure line (see `shared_tools.guards.tool_failure_text`)."""

    def __post_init__(self) -> None:
        if self.check_stock_timeouts < 0:
            raise ValueError(f"Faults.check_stock_timeouts must be >= 0, got {self.check_stock_timeouts}")
        if self.latency_s < 0:
            raise ValueError(f"Faults.latency_s must be >= 0, got {self.latency_s}")

    @property
    def any(self) -> bool:
        """True when at least one fault is switched on."""
        return self.check_stock_timeouts > 0 or self.latency_s > 0 or self.failing_tool is not None


class FaultInjector:
    """The faults of one tool set, with the call counter that makes only the first N check_stock calls fail."""

    def __init__(self, faults: Faults | None = None) -> None:
        self.faults = faults or Faults()
        self._lock = threading.Lock()
        self._check_stock_calls = 0

    def before_call(self, tool_name: str) -> None:
        """Run the faults for one sync tool call: wait, then raise if this call should fail."""
        if self.faults.latency_s:
            time.sleep(self.faults.latency_s)
        self._raise_if_due(tool_name)

    async def abefore_call(self, tool_name: str) -> None:
        """Run the faults for one async tool call; the wait is an `asyncio.sleep`, so it can be cancelled."""
        if self.faults.latency_s:
            await asyncio.sleep(self.faults.latency_s)
        self._raise_if_due(tool_name)

    def _raise_if_due(self, tool_name: str) -> None:
        if tool_name == self.faults.failing_tool:
            log.debug("fault: %s fails with a secret in its message", tool_name)
            raise RuntimeError(FAILURE_MESSAGE)
        if tool_name == "check_stock" and self.faults.check_stock_timeouts:
            # Count under a lock: parallel tool calls must not both think they are call number 1.
            with self._lock:
                self._check_stock_calls += 1
                call_number = self._check_stock_calls
            if call_number <= self.faults.check_stock_timeouts:
                log.debug("fault: check_stock call %d times out", call_number)
                raise TimeoutError(TIMEOUT_MESSAGE)

"""The page's scenario and eval jobs: each runs in a child process of its own, at most `max_jobs` at once.

A job is minutes of CPU, so it must neither take the turns' threads nor outlive a cancel: `JobSlots` bounds how
many run (one more is refused, in words) and `run_in_child` runs one in a spawned process that a cancel terminates.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any


class JobFailed(Exception):
    """The job's function raised in the child process (its error, as one line), or the child died."""


class JobSlots:
    """How many jobs the server runs at once; taking a slot past that is refused (the caller says so: 503)."""

    def __init__(self, max_jobs: int) -> None:
        self.max_jobs = max_jobs
        self.running = 0

    def take(self) -> bool:
        """A slot, if one is free (on the server's loop: no await between the check and the count)."""
        if self.running >= self.max_jobs:
            return False
        self.running += 1
        return True

    def give_back(self) -> None:
        self.running -= 1


def _child(connection: Connection, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        outcome: tuple[bool, Any] = (True, function(*args))
    except BaseException as exc:  # everything goes back to the parent, which says it on the page
        outcome = (False, f"{type(exc).__name__}: {exc}")
    connection.send(outcome)
    connection.close()


async def run_in_child(function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)` in a spawned child process (so it is picklable: a module-level function); cancelling
    the awaiting task terminates the child."""
    context = multiprocessing.get_context("spawn")
    receiving, sending = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(sending, function, args), name="webdemo-job", daemon=True)
    process.start()
    sending.close()

    def receive() -> tuple[bool, Any]:
        try:
            outcome: tuple[bool, Any] = receiving.recv()
            return outcome
        except (EOFError, OSError):
            return False, f"the job's process ended without a result (exit code {process.exitcode})"

    try:
        ok, value = await asyncio.to_thread(receive)
    except asyncio.CancelledError:
        process.terminate()
        await asyncio.to_thread(process.join, 5.0)
        if process.is_alive():
            process.kill()
        raise
    finally:
        await asyncio.to_thread(process.join, 5.0)
        receiving.close()
    if not ok:
        raise JobFailed(str(value))
    return value

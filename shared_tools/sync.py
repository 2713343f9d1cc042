"""`run_blocking`: drive one of the agents' async methods to completion from sync code.

Both agents are written once, async (`arun`, `aask`, `aresume`); their sync methods (`run`, `ask`, `resume`)
are thin drivers over this, as PydanticAI's `run_sync` is over `run`. It exists, instead of a bare
`asyncio.run`, for three small reasons: a clear error naming the async method to await when it is called
from inside a running event loop, a Ctrl-C that lands while the event loop is being built, and keeping the
finished result out of asyncio's task repr.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_blocking(make: Callable[[], Coroutine[Any, Any, T]], *, instead: str) -> T:
    """Run the coroutine `make()` to completion from sync code, or say clearly which async method to await."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        box: list[T] = []

        async def main() -> None:
            # The main task's own result stays None on purpose: asyncio.run reprs the finished task while it
            # restores the SIGINT handler, and the repr of a whole result with its messages is not free.
            box.append(await make())

        loop = _new_event_loop()
        with asyncio.Runner(loop_factory=lambda: loop) as runner:  # the Runner closes the loop
            runner.run(main())
        return box[0]
    # asyncio.run would fail here anyway, with a message that doesn't say what to do.
    raise RuntimeError(f"called from inside a running event loop; use `await {instead}` instead")


def _new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop, built with Ctrl-C held back for the moment it takes.

    A KeyboardInterrupt that lands while an event loop is being constructed leaves a half-made loop whose
    `__del__` prints a traceback at exit; held back, the Ctrl-C arrives right after, as an ordinary
    KeyboardInterrupt (found by sending SIGINT to `python compare.py` at random moments).
    """
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        return asyncio.new_event_loop()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        return asyncio.new_event_loop()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)

"""`run_blocking`: drive one of the agents' async methods to completion from sync code.

The sync drivers (`run`, `ask`, `resume`, ...) are thin wrappers over this, as a framework's `run_sync` often is.
Unlike a bare `asyncio.run` it names the async method to await when called inside a running loop, handles a Ctrl-C
while the loop is built, and does not wait for a hung sync-only model after the time budget ended the run.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import signal
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)


def run_blocking(make: Callable[[], Coroutine[Any, Any, T]], *, instead: str) -> T:
    """Run the coroutine `make()` to completion from sync code, or say clearly which async method to await."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        box: list[T] = []
        run = _Run()

        async def main() -> None:
            # The main task's own result stays None on purpose: asyncio.run reprs the finished task while it
            # restores the SIGINT handler, and the repr of a whole result with its messages is not free.
            run.task = asyncio.current_task()
            if not run.interrupted:
                box.append(await make())

        outer, _running.run = _running.run, run
        runner: asyncio.Runner | None = None
        try:
            loop: _EventLoop | None = _new_event_loop()
            run.loop = loop
            try:
                with asyncio.Runner(loop_factory=lambda: loop) as runner:  # the Runner closes the loop
                    runner.run(main())
            except asyncio.CancelledError:
                if not run.interrupted:
                    raise
            finally:
                loop.shutdown_daemon_threads()  # type: ignore[union-attr]
                # The loop is freed here, while a Ctrl-C still finds this run: its __del__ is no place for one.
                run.loop = run.task = loop = runner = None
        finally:
            _running.run = outer
        if run.interrupted:
            raise KeyboardInterrupt from None  # the Ctrl-C, not the cancellation it was carried by
        return box[0]
    # asyncio.run would fail here anyway, with a message that doesn't say what to do.
    raise RuntimeError(f"called from inside a running event loop; use `await {instead}` instead")


class _Run:
    """A `run_blocking` call going on in the main thread: its loop, its main task once started, and whether
    `interrupt_run` stopped it."""

    loop: asyncio.AbstractEventLoop | None = None
    task: asyncio.Task[Any] | None = None
    interrupted = False


class _Running(threading.local):
    run: _Run | None = None


_running = _Running()


def interrupt_run() -> bool:
    """Stop the `run_blocking` call going on in this thread, for a SIGINT handler of one's own: its main task is
    cancelled, so the Ctrl-C lands at an await, as `asyncio.run` makes it land when the handler is Python's own,
    and the call raises KeyboardInterrupt once its loop is closed. False (nothing done) when none is going on.

    A KeyboardInterrupt raised from a handler at any bytecode can land inside asyncio or langchain-core: a
    coroutine made but never awaited (a RuntimeWarning at exit), a loop left half-closed, a task that never ends.
    """
    run = _running.run
    if run is None:
        return False
    run.interrupted = True
    if run.loop is not None and run.task is not None and not run.task.done():
        run.task.cancel()
        run.loop.call_soon_threadsafe(lambda: None)  # wake the loop if it waits in select()
    return True


def _new_event_loop() -> _EventLoop:
    """A new event loop, built with Ctrl-C held back for the moment it takes.

    A KeyboardInterrupt that lands while an event loop is being constructed leaves a half-made loop whose
    `__del__` prints a traceback at exit (found by sending SIGINT to `python compare.py` at random moments). The
    handler is swapped, not the signal blocked: a blocked SIGINT goes to any other thread of the process, and
    Python runs the handler in the main thread all the same. A Ctrl-C held back is raised again once it is whole.
    """
    if threading.current_thread() is not threading.main_thread():
        return _EventLoop()
    held: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        loop = _EventLoop()
    finally:
        # None: a handler set from C, which Python cannot put back; Python's own is the nearest.
        signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)
    if held:
        try:
            signal.raise_signal(signal.SIGINT)  # through the handler in place, which runs before this returns
        except BaseException:
            loop.close()
            raise
    return loop


class _EventLoop(asyncio.SelectorEventLoop):
    """The default event loop, except that sync work handed to it runs on daemon threads (`_DaemonThreads`).

    Done here rather than with `set_default_executor`, which asyncio would then shut down through a thread of
    its own on every close: a tenth of a millisecond per run, for runs that mostly never use an executor.
    """

    _daemon_threads: _DaemonThreads | None = None

    def run_in_executor(self, executor: Any, func: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        if executor is None:
            if self._daemon_threads is None:
                self._daemon_threads = _DaemonThreads()
            executor = self._daemon_threads
        return super().run_in_executor(executor, func, *args)

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        """As asyncio's, except for a result that arrives from a thread after Ctrl-C cancelled the run: asyncio's
        own chaining of the two futures then fails with InvalidStateError and logs a traceback, for a result that
        nobody is left to take."""
        run = _running.run
        cancelled = run is not None and (run.interrupted or (run.task is not None and run.task.cancelling() > 0))
        if cancelled and isinstance(context.get("exception"), asyncio.InvalidStateError):
            log.debug("after the Ctrl-C: %s", context.get("message"))
            return
        super().call_exception_handler(context)

    def shutdown_daemon_threads(self) -> None:
        if self._daemon_threads is not None:
            self._daemon_threads.shutdown(wait=False)


class _DaemonThreads(ThreadPoolExecutor):
    """The executor for sync work (sync models, sync tools, store files): a small pool of daemon threads.

    asyncio's own pool joins its threads when the loop closes and again at interpreter exit, so one sync call
    that never returns would hold `run` (and the process) forever, although the agent's time budget has
    already stopped the run. A daemon thread still stuck then is left behind instead.
    """

    def __init__(self, max_workers: int = 8) -> None:
        # A ThreadPoolExecutor only because asyncio's run_in_executor checks for one; none of the base class's
        # threads are ever started, since submit and shutdown are this class's own.
        super().__init__(max_workers)
        self._jobs: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._waiting = 0  # threads blocked on the queue
        self._queued = 0  # jobs no thread has taken yet
        self._started = 0

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            self._queued += 1
            # One thread per job not yet taken, so a stuck job never holds up the jobs queued behind it.
            if self._queued > self._waiting and self._started < self._max_workers:
                self._started += 1
                threading.Thread(target=self._work, daemon=True, name="agent-sync-call").start()
        self._jobs.put((future, lambda: fn(*args, **kwargs)))
        return future

    def _work(self) -> None:
        while True:
            with self._lock:
                self._waiting += 1
            job = self._jobs.get()
            with self._lock:
                self._waiting -= 1
                self._queued -= job is not None
            if job is None:
                return
            future, call = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(call())
            except BaseException as exc:  # handed to whoever awaits the future, as ThreadPoolExecutor does
                future.set_exception(exc)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Let idle threads end; never wait for a busy one (that is the point of this executor)."""
        with self._lock:
            started = self._started
        for _ in range(started):
            self._jobs.put(None)

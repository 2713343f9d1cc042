"""Tests for `shared_tools.sync.run_blocking`, the one sync driver over both agents' async methods."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

import pytest

from shared_tools.sync import run_blocking


async def answer() -> int:
    await asyncio.sleep(0)
    return 42


def test_run_blocking_returns_the_coroutines_result() -> None:
    assert run_blocking(answer, instead="answer()") == 42


async def test_inside_a_running_loop_it_names_the_method_to_await() -> None:
    with pytest.raises(RuntimeError, match=r"use `await answer\(\)` instead"):
        run_blocking(answer, instead="answer()")


@pytest.mark.parametrize("other_thread", [False, True], ids=["alone", "beside-another-thread"])
def test_ctrl_c_while_the_event_loop_is_built_arrives_after_it_is_whole(
    other_thread: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGINT while an event loop was being built left a half-made loop whose __del__ printed a traceback. With
    another thread alive (a server's, an exporter's), a SIGINT the main thread blocks is taken by that thread, and
    Python still raises it in the main thread, so holding it back must not rely on blocking it."""
    if other_thread:
        release = threading.Event()
        waiter = threading.Thread(target=release.wait, daemon=True)
        waiter.start()
    built: list[asyncio.AbstractEventLoop] = []
    real_init = asyncio.SelectorEventLoop.__init__

    def interrupted_while_building(self: asyncio.SelectorEventLoop, *args: Any) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # lands inside construction, as a user's Ctrl-C can
        real_init(self, *args)
        built.append(self)

    gc.collect()  # earlier tests' garbage is theirs: collect it before listening for this test's
    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    monkeypatch.setattr(asyncio.SelectorEventLoop, "__init__", interrupted_while_building)
    with pytest.raises(KeyboardInterrupt):  # the Ctrl-C is delivered, not swallowed
        run_blocking(answer, instead="answer()")
    if other_thread:
        release.set()
    assert len(built) == 1, "the loop was finished before the interrupt arrived"
    built[0].close()
    gc.collect()
    assert [(u.exc_value, u.object) for u in unraisable] == []


def test_a_blocking_call_that_never_returns_does_not_hold_the_caller() -> None:
    """asyncio.run waits for its executor's threads on the way out: a hung sync model held `run` forever."""
    release = threading.Event()

    async def give_up_on_a_stuck_call() -> str:
        stuck = asyncio.get_running_loop().run_in_executor(None, release.wait)
        try:
            await asyncio.wait_for(stuck, 0.1)
        except TimeoutError:
            return "gave up"
        return "returned"

    backstop = threading.Timer(3, release.set)  # so a regression fails this test instead of hanging it
    backstop.start()
    started = time.monotonic()
    try:
        assert run_blocking(give_up_on_a_stuck_call, instead="x") == "gave up"
        assert time.monotonic() - started < 2
    finally:
        release.set()
        backstop.cancel()


def test_a_stuck_call_does_not_hold_up_the_next_one() -> None:
    release = threading.Event()

    async def one_stuck_one_quick() -> int:
        loop = asyncio.get_running_loop()
        loop.run_in_executor(None, release.wait)
        return await asyncio.wait_for(loop.run_in_executor(None, lambda: 7), 2)

    try:
        assert run_blocking(one_stuck_one_quick, instead="x") == 7
    finally:
        release.set()


@pytest.mark.parametrize("interrupted", [False, True], ids=["running", "after-ctrl-c"])
def test_a_late_result_after_ctrl_c_is_no_traceback_but_one_before_is(
    interrupted: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A thread's result that reaches a future the Ctrl-C already cancelled makes asyncio's future chaining raise
    InvalidStateError, which asyncio logs with a traceback (seen once in 20 interrupted runs of compare.py). After
    the Ctrl-C it is dropped; while the run goes on, the same error is still logged as asyncio logs it."""
    from shared_tools.sync import interrupt_run

    async def late_result() -> None:
        if interrupted:
            assert interrupt_run()
        asyncio.get_running_loop().call_exception_handler(
            {"message": "Exception in callback _set_state", "exception": asyncio.InvalidStateError("invalid state")}
        )
        await asyncio.sleep(0)

    with caplog.at_level(logging.DEBUG, logger="asyncio"):
        if interrupted:
            with pytest.raises(KeyboardInterrupt):
                run_blocking(late_result, instead="late_result()")
        else:
            run_blocking(late_result, instead="late_result()")
    logged = [r for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.ERROR]
    assert len(logged) == (0 if interrupted else 1)

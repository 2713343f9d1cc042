"""Tests for `shared_tools.sync.run_blocking`, the one sync driver over both agents' async methods."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
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


def test_ctrl_c_while_the_event_loop_is_built_arrives_after_it_is_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGINT during `new_event_loop` used to leave a half-made loop whose __del__ printed a traceback."""
    built: list[asyncio.AbstractEventLoop] = []
    real = asyncio.new_event_loop

    def interrupted_while_building() -> asyncio.AbstractEventLoop:
        os.kill(os.getpid(), signal.SIGINT)  # lands inside construction, as a user's Ctrl-C can
        built.append(real())
        return built[-1]

    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    monkeypatch.setattr(asyncio, "new_event_loop", interrupted_while_building)
    with pytest.raises(KeyboardInterrupt):  # the Ctrl-C is delivered, not swallowed
        run_blocking(answer, instead="answer()")
    assert len(built) == 1, "the loop was finished before the interrupt arrived"
    built[0].close()
    gc.collect()
    assert unraisable == []

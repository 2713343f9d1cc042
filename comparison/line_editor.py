"""What the chat reads from its person: a line editor with history on a terminal, plain lines from a pipe.

On a terminal, prompt_toolkit's `PromptSession`, awaited inside the chat's event loop: arrow keys, editing, the
questions of earlier chats (a history file); Ctrl-C clears a line, or at an empty one is `CtrlC`;
Ctrl-D is the end of input. Otherwise lines are read from stdin on a worker thread, so the loop goes on meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

from shared_tools.replies import whole_text

log = logging.getLogger(__name__)


class CtrlC(Exception):
    """Ctrl-C at the prompt. Not KeyboardInterrupt, which asyncio raises out of the event loop from any task."""


class LineReader:
    """`read` the next line (None at the end of input); `on_terminal` says which of the two ways it reads."""

    def __init__(self, history: Path | None = None, *, terminal: bool | None = None) -> None:
        """`history`: the file of earlier questions on a terminal (None, or a file that cannot be made: this
        chat's only). `terminal`: None asks whether stdin and stdout are one."""
        self.on_terminal = is_terminal() if terminal is None else terminal
        self._questions: Any = None
        self._answers: Any = None
        self._line: asyncio.Future[str] | None = None
        """The pipe's line being read, by a thread that a cancelled read leaves running."""
        if self.on_terminal:
            self._questions, self._answers = _prompt_sessions(history)

    async def read(self, prompt: str, *, question: bool = True) -> str | None:
        """The next line typed after `prompt` (lone surrogates made U+FFFD), None at the end of input.

        `question`: a question, kept in the history; else an answer (y/N), which is not. On a terminal a Ctrl-C
        at an empty line (any line, for an answer) raises `CtrlC`; from a pipe, a Ctrl-C is the caller's SIGINT
        handler's, which cancels this read.
        """
        if self.on_terminal:
            session = self._questions if question else self._answers
            try:
                # Not prompt_toolkit's SIGINT handler: it would replace the chat's in the loop and then remove it.
                line: str = await session.prompt_async(prompt, handle_sigint=False)
            except EOFError:
                return None
            except KeyboardInterrupt:
                raise CtrlC from None
            return whole_text(line)
        sys.stdout.write(prompt)
        sys.stdout.flush()
        if self._line is None:
            self._line = asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        # Shielded: a read cancelled by a Ctrl-C leaves its thread blocked in readline, and the next read takes
        # the line that thread gets, so no line typed is lost to a read nobody waits for any more.
        typed: str = await asyncio.shield(self._line)
        self._line = None
        return whole_text(typed.removesuffix("\n")) if typed else None

    def read_now(self, prompt: str) -> str | None:
        """An answer read with the event loop blocked (None at the end of input; `CtrlC` for a Ctrl-C on a
        terminal): for a framework that asks its `approve` synchronously inside the chat's own loop. From a pipe
        a Ctrl-C waits for the line, as the loop that acts on it is blocked meanwhile."""
        if self.on_terminal:
            try:
                # In a thread of its own with its own loop: prompt_toolkit's way to ask inside a running loop.
                answer: str = self._answers.prompt(prompt, in_thread=True, handle_sigint=False)
            except EOFError:
                return None
            except KeyboardInterrupt:
                raise CtrlC from None
            return whole_text(answer)
        sys.stdout.write(prompt)
        sys.stdout.flush()
        # No read of the prompt's is pending during a turn: the line that started it was taken (`read`).
        typed = sys.stdin.readline()
        return whole_text(typed.removesuffix("\n")) if typed else None


def is_terminal() -> bool:
    try:
        return sys.stdin.isatty() and sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced by an object without isatty, or closed
        return False


def _prompt_sessions(history: Path | None) -> tuple[Any, Any]:
    """The questions' `PromptSession` (with the history file) and the answers' (no history, plain Ctrl-C)."""
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory, History, InMemoryHistory
    from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

    keys = KeyBindings()

    @keys.add("c-c")
    def _clear_or_interrupt(event: KeyPressEvent) -> None:
        # As a shell does: a Ctrl-C drops what was typed; at an empty line it is the chat's to act on.
        if event.current_buffer.text:
            event.current_buffer.reset()
        else:
            event.app.exit(exception=KeyboardInterrupt, style="class:aborting")

    kept: History = InMemoryHistory()
    if history is not None:
        try:
            history.parent.mkdir(parents=True, exist_ok=True)
            history.touch(mode=0o600, exist_ok=True)
            kept = FileHistory(str(history))
        except OSError as exc:
            log.warning("the questions typed are kept for this chat only: %s cannot be used (%s)", history, exc)
    return PromptSession(history=kept, key_bindings=keys), PromptSession()

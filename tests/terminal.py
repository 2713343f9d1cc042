"""`Terminal`: `compare.py` run on a pseudo-terminal of its own, typed at and read as a person would.

The process is the session leader of the pty, so Ctrl-C (byte 0x03) is the terminal's own: the line discipline
sends SIGINT in cooked mode, and a line editor in raw mode reads it as a key. POSIX only.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import sys
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ESCAPES = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>78]|\x1b\][^\x07]*\x07|\r")
"""Cursor moves, colours, modes and carriage returns: what a terminal acts on but does not show as text."""


class Terminal:
    """`python compare.py ARGS` on a pty 120 columns wide, in `cwd`; `type`, `expect`, `ctrl_c`, `wait`."""

    def __init__(self, *args: str, cwd: Path, env: dict[str, str] | None = None) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: the pty is its controlling terminal
            try:
                os.chdir(cwd)
                os.execve(sys.executable, [sys.executable, str(ROOT / "compare.py"), *args], env or os.environ.copy())
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 120, 0, 0))
        self.seen = b""
        self.returncode: int | None = None

    @property
    def text(self) -> str:
        """Everything shown so far, without the escape sequences."""
        return ESCAPES.sub(b"", self.seen).decode(errors="replace")

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            return False
        self.seen += chunk
        return bool(chunk)

    def expect(self, shown: str, timeout: float = 60.0, *, after: int = 0) -> int:
        """Wait until `shown` appears in the text after position `after`; its end position."""
        deadline = time.monotonic() + timeout
        while (at := self.text.find(shown, after)) < 0:
            if time.monotonic() > deadline or not self._read(min(0.2, max(0.0, deadline - time.monotonic()))):
                if (at := self.text.find(shown, after)) >= 0:
                    break
                raise AssertionError(f"never shown: {shown!r}; the terminal shows:\n{self.text[-3000:]}")
        return at + len(shown)

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def ctrl_c(self) -> None:
        os.write(self.fd, b"\x03")

    def ctrl_d(self) -> None:
        os.write(self.fd, b"\x04")

    def wait(self, timeout: float = 60.0) -> int:
        """The exit code, once the process ended (reading what it still shows meanwhile)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                while self._read(0.05):
                    pass
                os.close(self.fd)
                self.returncode = os.waitstatus_to_exitcode(status)
                return self.returncode
            self._read(0.1)
        self.kill()
        raise AssertionError(f"still running after {timeout} s; the terminal shows:\n{self.text[-3000:]}")

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.returncode = -9

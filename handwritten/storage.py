"""The hand-written `Session` kept in a JSON Lines file: a header line, then one line of new messages per save.

`write` appends only the messages added since the last save (or writes the file whole, atomically) under a
folder lock, after checking the revision it read; `read` gives the conversation back. `SessionConflict` and
`Stored` are the seam both stores share (`handwritten.postgres` is the other one).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from langchain_core.messages import BaseMessage, messages_to_dict

from shared_tools.atomic import write_atomically

log = logging.getLogger(__name__)

FORMAT = "agent-loop-compare/session/3"
"""The only format read or written. Versions 1 and 2 (one JSON document) were never released, so no reader is
kept for them: such a file is refused with the version it holds and the one this code reads."""


class SessionConflict(RuntimeError):
    """The stored conversation was saved by someone else since this session read it; saving would lose their turns."""


@dataclass(frozen=True)
class Stored:
    """A conversation as a store holds it."""

    instructions: str
    customer: str | None
    revision: int
    messages: list[dict[str, Any]]
    """`messages_to_dict` of each message, in order."""


def read(path: Path) -> Stored:
    """The conversation saved at `path`. A torn last line (a crash mid-save) is ignored; any other damage is a
    `ValueError`, and a missing file a `FileNotFoundError`."""
    data = path.read_bytes()
    header, records, complete = _read_lines(path, data)
    try:
        instructions = str(header["instructions"])
        messages = [message for record in records for message in record["messages"]]
        revision = _revision_of(records[-1] if records else header)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path} is a damaged saved session ({type(exc).__name__}: {exc})") from None
    if not complete:
        log.warning("%s ends with a torn line (a save cut short); it is ignored", path)
    return Stored(instructions, header.get("customer"), revision, messages)


def write(
    path: Path,
    *,
    read_revision: int,
    customer: str | None,
    instructions: str,
    messages: Sequence[BaseMessage],
    start: int,
) -> int:
    """Append `messages` from position `start` on, or (`start` 0) write the file whole, if it is still at
    `read_revision` (0: no file); the new revision. `SessionConflict` otherwise, with nothing written."""
    with _file_lock(path):
        on_disk = _read_revision(path)
        if on_disk != read_revision:
            raise SessionConflict(
                f"{path} was saved by another session since this one read it (revision {on_disk}, this "
                f"session has {read_revision}); load it again to continue the conversation"
            )
        revision = read_revision + 1
        if start:
            _append_line(path, _record(revision, messages[start:]))
        else:
            header = {"format": FORMAT, "revision": revision, "customer": customer, "instructions": instructions}
            write_atomically(path, _line(header) + _record(revision, messages))
    return revision


def _line(data: dict[str, Any]) -> bytes:
    # ensure_ascii: a reply cut off mid-emoji holds a lone surrogate, which UTF-8 cannot encode but a JSON escape
    # can, so such a conversation still saves (and loads back unchanged). It also keeps every line one line.
    return json.dumps(data, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"


def _record(revision: int, messages: Sequence[BaseMessage]) -> bytes:
    return _line({"revision": revision, "messages": messages_to_dict(list(messages))})


def _read_lines(path: Path, data: bytes) -> tuple[dict[str, Any], list[dict[str, Any]], bool]:
    """The file's header, its records, and whether its last line was whole; `ValueError` for a file of
    another format (`_refuse_format`) or a damaged line."""
    first, newline, rest = data.partition(b"\n")
    header = _json_or_none(first) if newline else None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise _refuse_format(path, header, data)
    *lines, torn = rest.split(b"\n")
    records: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=2):
        record = _json_or_none(line)
        if not isinstance(record, dict):
            raise ValueError(f"{path} is a damaged saved session (line {number} is not a JSON object)")
        records.append(record)
    return header, records, not torn


def _refuse_format(path: Path, header: Any, data: bytes) -> ValueError:
    """The error for a file that is not of `FORMAT`: the format it holds, if it names one, and the one read here."""
    if not isinstance(header, dict):
        header = _json_or_none(data)  # versions 1 and 2 were one JSON document, perhaps over several lines
    if not isinstance(header, dict):
        what = "not JSON" if header is None else f"format {type(header).__name__!r}, expected {FORMAT!r}"
        return ValueError(f"{path} is not a saved session ({what})")
    found = header.get("format")
    if isinstance(found, str) and found.startswith(FORMAT.rpartition("/")[0] + "/"):
        return ValueError(f"{path} is a saved session of format {found!r}; this version reads only {FORMAT!r}")
    return ValueError(f"{path} is not a saved session (format {found!r}, expected {FORMAT!r})")


def _json_or_none(line: bytes) -> Any:
    try:
        return json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):  # nested deeper than Python recurses
        return None


def _read_revision(path: Path) -> int:
    """The revision of the file at `path` (0: no file), read from its last whole line, without reading it all."""
    try:
        file = path.open("rb")
    except FileNotFoundError:
        return 0
    with file:
        header = _json_or_none(file.readline())
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            file.seek(0)
            data = file.read()
            if not data.strip():
                return 0  # an empty file holds no conversation to lose
            raise _refuse_format(path, header, data)  # another format's file is never saved over
        last = _json_or_none(_last_whole_line(file)[0])
        try:
            return _revision_of(last) if isinstance(last, dict) else 0
        except ValueError as exc:
            raise ValueError(f"{path} is a damaged saved session ({exc})") from None


def _revision_of(record: dict[str, Any]) -> int:
    """A line's revision: a whole number, not a float (``1e999`` is infinity, which no int holds) or a bool."""
    revision = record.get("revision", 0)
    if isinstance(revision, bool) or not isinstance(revision, int) or revision < 0:
        raise ValueError(f"revision {str(revision)[:40]!r} is not a whole number of saves")
    return revision


def _last_whole_line(file: BinaryIO) -> tuple[bytes, int]:
    """The last line that ends with a newline, and the offset just after it: read backwards, in blocks."""
    end = file.seek(0, os.SEEK_END)
    tail, position, block = b"", end, 1 << 12
    while True:
        block *= 2  # doubling, so a long last line (a file written whole) is still read in linear time
        step = min(block, position)
        position -= step
        file.seek(position)
        tail = file.read(step) + tail
        last_newline = tail.rfind(b"\n")
        if last_newline >= 0:
            start = tail.rfind(b"\n", 0, last_newline) + 1
            if start > 0 or position == 0:
                return tail[start:last_newline], position + last_newline + 1
        if position == 0:
            return b"", 0


def _append_line(path: Path, line: bytes) -> None:
    with path.open("r+b") as file:
        _, whole = _last_whole_line(file)
        file.truncate(whole)  # a torn line left by a crash mid-append, which load ignores anyway
        file.seek(whole)
        file.write(line)
        file.flush()
        os.fsync(file.fileno())


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock for one read-check-write, so two processes cannot both pass the revision check.

    The folder is locked, not the file: `os.replace` gives the file a new inode, which a lock on the old one
    would not cover, and a lock file of its own would be left lying next to every session.
    """
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        yield
    finally:
        os.close(folder)  # which releases the lock

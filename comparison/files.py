"""The files the command line is given: checked before any work starts, and written whole or not at all.

Each check raises `UnusableFile` with one line naming the option, the path and what is wrong, and leaves
nothing behind (an output folder is probed with a temporary file, a database opened read-only, a
``postgresql://`` URL connected to once, its password masked). `write_output` writes a temporary file in the
same folder and renames it over the target, so a cut write leaves the old file, never half a document.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import tempfile
from contextlib import closing
from pathlib import Path

from shared_tools.bookstore.store import NotABookstore, check_store_file, is_postgres_url

SESSION_TABLES = frozenset({"checkpoints", "writes", "turn_locks"})
"""The tables of a session database: LangGraph's SQLite checkpointer's, and `GraphSession`'s turn locks. A SQLite
file with tables but none of these is someone else's database."""


class UnusableFile(Exception):
    """A path given on the command line cannot be used as asked; the message is one line saying why."""


def check_outputs(json: str | None, report: str | None, store_db: Path | None, session_db: Path | None) -> None:
    """`--json`, `--report`, `--store-db` and `--session-db`, before the first run: a bad one is refused now,
    not found after every run has been paid for."""
    if json and json != "-":
        check_output_file(json, "--json")
    if report:
        check_output_file(report, "--report")
    if store_db is not None:
        check_store_db(store_db)
    if session_db is not None:
        check_session_db(session_db)


def check_output_file(path: str | Path, option: str) -> None:
    """Raise `UnusableFile` unless a document can be written at `path` (a new or existing file, or a device)."""
    path = Path(path)
    if path.is_dir():
        raise UnusableFile(f"{option}: {path} is a directory; give a file name")
    if _is_special(path):
        return  # /dev/null, a named pipe: written in place, nothing to probe
    _check_folder(path, option)
    try:
        descriptor, probe = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".probe")
    except OSError as exc:
        problem = f"{path.parent} refuses new files ({exc.strerror})"
        raise UnusableFile(f"{option}: {path} cannot be written: {problem}") from None
    os.close(descriptor)
    os.unlink(probe)


def write_output(path: str | Path, text: str) -> None:
    """Write `text` to `path` whole or not at all: a temporary file beside it, then renamed over it."""
    path = Path(path)
    if _is_special(path):
        path.write_text(text, encoding="utf-8")
        return
    mode = _mode_for(path)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(temporary, mode)  # mkstemp makes the file private (0600); a report is meant to be shared
        os.replace(temporary, path)
    except BaseException:  # a Ctrl-C too: the temporary file must not be left behind
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def check_postgres_url(url: str, option: str, *, timeout_s: float = 5.0) -> None:
    """Raise `UnusableFile` unless a connection to `url` can be opened within `timeout_s` seconds."""
    import psycopg

    from shared_tools.guards import mask_pii

    try:
        with psycopg.connect(url, connect_timeout=max(1, round(timeout_s)), autocommit=True) as db:
            db.execute("SELECT 1")
    except psycopg.Error as exc:
        why = " ".join(str(exc).split()) or type(exc).__name__
        raise UnusableFile(f"{option}: the database {mask_pii(url)} cannot be used: {mask_pii(why)}") from None


def check_store_db(path: str | Path, option: str = "--store-db") -> None:
    """Raise `UnusableFile` unless `path` is a bookstore database, or a new file in an existing folder, or a
    Postgres URL that answers."""
    if is_postgres_url(path):
        check_postgres_url(str(path), option)
        return
    path = Path(path)
    try:
        check_store_file(path)
    except NotABookstore as exc:
        raise UnusableFile(f"{option}: {exc}") from None
    if not path.exists():
        _check_folder(path, option)


def check_session_db(path: str | Path, option: str = "--session-db") -> None:
    """Raise `UnusableFile` unless `path` is a session database (SQLite, LangGraph's checkpoint tables or no
    tables yet), or a new file in an existing folder, or a Postgres URL that answers. Opened read-only: a wrong
    file is never written to."""
    if is_postgres_url(path):
        check_postgres_url(str(path), option)
        return
    path = Path(path)
    if path.is_dir():
        raise UnusableFile(f"{option}: {path} is a directory; give a file name")
    if not path.exists():
        _check_folder(path, option)
        return
    if path.stat().st_size == 0:
        return
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        raise UnusableFile(f"{option}: {path} cannot be read as a SQLite database ({exc})") from None
    if tables and not tables & SESSION_TABLES:
        others = ", ".join(sorted(tables)[:5])
        raise UnusableFile(f"{option}: {path} is a SQLite database of something else (tables: {others})")


def _check_folder(path: Path, option: str) -> None:
    if path.parent.exists() and not path.parent.is_dir():
        raise UnusableFile(f"{option}: {path} cannot be created: {path.parent} is a file, not a folder")
    if not path.parent.is_dir():
        raise UnusableFile(f"{option}: {path} cannot be created: the folder {path.parent} does not exist")


def _mode_for(path: Path) -> int:
    """The permissions `path` has, or those a plain `open` would give a new file (0666 less the umask)."""
    with contextlib.suppress(OSError):
        return stat.S_IMODE(path.stat().st_mode)
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _is_special(path: Path) -> bool:
    """An existing character device or named pipe (``/dev/null``), which is written in place, never replaced."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)

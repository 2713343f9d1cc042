"""Weights shipped in pieces: `joined_weights` joins the parts, in order, into one file of a cache folder, once, and
checks its sha256 before it is used.

The join streams (a 1.1 GB model never sits in memory), writes a temp file renamed into place, and leaves a stamp
(size, mtime, sha256) beside it, so a later start trusts an unchanged file without rehashing it; a changed file is
hashed again, and joined again from the parts if it no longer matches.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

from shared_tools.models.errors import ModelUnavailable
from shared_tools.places import NoUserFolder, cache_home

log = logging.getLogger(__name__)

CACHE_ENV = "AGENT_LOOP_COMPARE_CACHE"
"""A folder to keep joined weights in, instead of `$XDG_CACHE_HOME/agent-loop-compare` (~/.cache/...)."""
CHUNK = 8 * 1024 * 1024


class CacheUnusable(ModelUnavailable):
    """The cache folder cannot hold the joined weights (a file in its place, read-only, no home folder): the
    model cannot be used, said in one line naming the folder (exit 3, as for any model that cannot start)."""


def cache_dir() -> Path:
    """`$AGENT_LOOP_COMPARE_CACHE`, else `$XDG_CACHE_HOME/agent-loop-compare`, else ~/.cache/agent-loop-compare;
    `CacheUnusable` when there is no home folder to put it in."""
    if given := os.environ.get(CACHE_ENV, "").strip():
        return Path(given).expanduser()
    try:
        return cache_home()
    except NoUserFolder as exc:
        raise CacheUnusable(f"no folder for the model's weights: {exc}, or {CACHE_ENV}") from None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _stamp_path(target: Path) -> Path:
    return target.with_name(target.name + ".verified")


def _stamp_of(target: Path, sha256: str) -> dict[str, object]:
    stat = target.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256}


def _stamped(target: Path, sha256: str) -> bool:
    """Whether `target` is the file that was hashed to `sha256` (same size and mtime as when it was)."""
    try:
        stamp = json.loads(_stamp_path(target).read_text(encoding="utf-8"))
        return bool(stamp == _stamp_of(target, sha256))
    except (OSError, ValueError):
        return False


def _write_stamp(target: Path, sha256: str) -> None:
    stamp = _stamp_path(target)
    fd, tmp = tempfile.mkstemp(dir=stamp.parent, prefix=f".{stamp.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(_stamp_of(target, sha256), out)
    os.replace(tmp, stamp)


def _join(parts: Sequence[Path], target: Path, sha256: str, reinstall: str) -> None:
    """Concatenate `parts` into a temp file beside `target`, hashing as it goes; renamed to `target` only if its
    sha256 is `sha256`, else deleted (`ModelUnavailable`)."""
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as source:
                    while chunk := source.read(CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
            os.fchmod(out.fileno(), 0o644)  # mkstemp makes it private; the weights are not secret
        if (got := digest.hexdigest()) != sha256:
            raise ModelUnavailable(
                f"the model's weights joined from {len(parts)} parts have sha256 {got}, not {sha256}: {reinstall}"
            )
        os.replace(tmp, target)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def joined_weights(parts: Sequence[Path], target: Path, sha256: str, *, reinstall: str) -> Path:
    """`target`, the concatenation of `parts` whose sha256 is `sha256`: joined the first time, hashed again only if
    it changed since it was last checked. `ModelUnavailable` (one line ending in `reinstall`) for a missing part or
    a hash that does not match; a file that does not match is never left at `target`."""
    missing = [str(part) for part in parts if not part.is_file()]
    if missing:
        raise ModelUnavailable(f"the model's weights are incomplete ({', '.join(missing)} missing): {reinstall}")
    try:
        return _joined_under_lock(parts, target, sha256, reinstall)
    except OSError as exc:  # the folder, the lock, the temp file or the rename: the cache folder is unusable
        what = exc.strerror or type(exc).__name__
        where = f" ({exc.filename})" if exc.filename and Path(exc.filename) != target.parent else ""
        raise CacheUnusable(
            f"the model's weights cannot be kept in the folder {target.parent}: {what}{where}; "
            f"set {CACHE_ENV} to a folder this user can write"
        ) from None


def _joined_under_lock(parts: Sequence[Path], target: Path, sha256: str, reinstall: str) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    # Opened without following a symbolic link and without truncating: a link planted at the lock's name must
    # not make this process empty the file it points to.
    lock_fd = os.open(target.parent / f".{target.name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    with os.fdopen(lock_fd, "r+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process joining the same file: wait for it, then use its file
        # Held alone now: a temp file left here was left by a join that died (SIGKILL, SIGTERM, a power cut).
        for left in target.parent.glob(f".{target.name}.*.part"):
            log.info("removing %s, left by a join that did not finish", left)
            left.unlink(missing_ok=True)
        if target.is_file():
            if _stamped(target, sha256):
                return target
            if sha256_of(target) == sha256:
                _write_stamp(target, sha256)
                return target
            log.warning("%s does not match its sha256; joining it again from its parts", target)
            target.unlink()
        _stamp_path(target).unlink(missing_ok=True)
        log.info("joining %d parts into %s", len(parts), target)
        _join(parts, target, sha256, reinstall)
        _write_stamp(target, sha256)
        return target

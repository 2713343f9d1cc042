"""The per-user folders, XDG style: `data_home` (chat's sessions, the page's tabs) and `cache_home` (weights).

`$XDG_DATA_HOME` / `$XDG_CACHE_HOME` when set to an absolute path (the XDG spec ignores a relative one), else
under the home folder; `NoUserFolder` (an OSError) when there is no home folder to be found either.
"""

from __future__ import annotations

import os
from pathlib import Path

APP = "agent-loop-compare"


class NoUserFolder(OSError):
    """Neither the XDG variable nor a home folder says where this user's files go."""


def data_home() -> Path:
    """``$XDG_DATA_HOME/agent-loop-compare``, else ``~/.local/share/agent-loop-compare``."""
    return _user_folder("XDG_DATA_HOME", ".local/share") / APP


def cache_home() -> Path:
    """``$XDG_CACHE_HOME/agent-loop-compare``, else ``~/.cache/agent-loop-compare``."""
    return _user_folder("XDG_CACHE_HOME", ".cache") / APP


def _user_folder(variable: str, under_home: str) -> Path:
    given = os.environ.get(variable, "").strip()
    if given and Path(given).is_absolute():
        return Path(given)
    try:
        # With HOME unset, the password database's entry; a user without one makes this a RuntimeError.
        home = Path.home()
    except (RuntimeError, KeyError) as exc:
        raise NoUserFolder(
            f"cannot tell where this user's files go: HOME is not set ({exc}); set HOME or {variable}"
        ) from None
    return home / under_home

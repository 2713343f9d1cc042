"""Where a tab lives and keeps what another worker must read: settings, snapshots, reports (`TabStore`).

`FolderStore` is the one-worker kind (a data folder: the settings in a file; this worker's memory holds the rest);
`webdemo.shared.SharedState` is the Postgres kind, which several workers share. A tab uses either, unbranched.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class TabPlace:
    """Where an opened tab keeps its things: its folder (None in Postgres), its sessions, its bookstore."""

    folder: Path | None
    sessions: Path | str
    """A SQLite file, or the Postgres URL every tab's threads share."""
    bookstore: Path | str
    seq: int
    """The tab's last event so far (Postgres), where its event stream starts."""


class TabStore(Protocol):
    """What a tab keeps beyond this worker's memory (blocking calls: from a worker thread)."""

    def place(self, key: str) -> TabPlace:
        """Open the tab's place (made when missing) and say where its things are."""
        ...

    def settings(self, key: str) -> tuple[int, dict[str, Any] | None]:
        """(revision, settings JSON or None when never saved); a damaged copy raises ValueError."""
        ...

    def save_settings(self, key: str, settings: dict[str, Any]) -> int:
        """Keep `settings`; the new revision."""
        ...

    def put_pane(self, key: str, pane: str, snapshot: dict[str, Any]) -> None:
        """A pane's state as other workers show it while a turn runs here."""
        ...

    def put_report(self, key: str, kind: str, html: str) -> None: ...

    def report(self, key: str, kind: str) -> str | None:
        """A report kept for other workers (None: none kept beyond the tab in memory)."""
        ...


class FolderStore:
    """One worker over a data folder: a tab's settings in ``tabs/<key>/settings.json``; snapshots and reports
    need no copy (the worker's own tabs hold them), so they are not written."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    def place(self, key: str) -> TabPlace:
        folder = self.data_dir / "tabs" / key
        folder.mkdir(parents=True, exist_ok=True)
        return TabPlace(folder, folder / "sessions.db", folder / "store.db", 0)

    def _settings_path(self, key: str) -> Path:
        return self.data_dir / "tabs" / key / "settings.json"

    def settings(self, key: str) -> tuple[int, dict[str, Any] | None]:
        try:
            return 0, json.loads(self._settings_path(key).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return 0, None

    def save_settings(self, key: str, settings: dict[str, Any]) -> int:
        path = self._settings_path(key)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(settings), encoding="utf-8")
        os.replace(tmp, path)
        return 0

    def put_pane(self, key: str, pane: str, snapshot: dict[str, Any]) -> None:
        return None

    def put_report(self, key: str, kind: str, html: str) -> None:
        return None

    def report(self, key: str, kind: str) -> str | None:
        return None
